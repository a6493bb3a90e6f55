"""Effect sizes beside the verdicts: the probability of improvement and the interquartile mean, each with a
bootstrap interval, per pair within a cell (never pooled across the cells the design separates).

- Probability of improvement of a over b: the chance that a random trial of a ends with a lower error than a
  random trial of b, ties counted half: the Mann-Whitney U of the two samples over n_a n_b, as rliable's
  `probability_of_improvement` computes it (on scores, higher better; here on errors, lower better).
- IQM: the mean of the middle half of a cell's errors (`scipy.stats.trim_mean` at 25%, rliable's `iqm`).

Both count every trial that ended (diverged ones at their chance error: a random trial may diverge) and leave
out failed ones. Their intervals are stratified percentile bootstraps (each group resampled on its own, as
rliable's StratifiedBootstrap does per task), RESAMPLES resamples drawn as multinomial counts over the sorted
values, so that one resample costs O(n) (no sort) and the same seed draws the same resamples; their
coverage is measured by simulation (`python -m bench.effects`, docs/analysis.md).
"""

import hashlib
import itertools
from typing import Any, Dict, Iterable, Iterator, List, Sequence, Tuple

import numpy as np
import pandas as pd

from hpstudy.analysis.catalogue import catalogue_order
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, usable

CONFIDENCE = 0.95
RESAMPLES = 2_000
SEED = 0
CHUNK_VALUES = 1 << 20  # resampled values held at once
# the fewest trials per group whose intervals are given: their coverage is measured from 8 (bench.effects); a
# bootstrap of 3 seeds has 10 distinct resamples and no useful coverage
INTERVAL_FROM = 8
TRIM = 0.25  # IQM: a quarter cut at each end, as scipy.stats.trim_mean(x, 0.25)
NUMBERS = [f"{name}{end}" for name in ("p_a_better", "iqm_a", "iqm_b") for end in ("", "_low", "_high")]
# what each compared field holds fixed: a pair of models within an (optimizer, epochs) cell, and so on
COMPARED = {"models": "model", "optimizers": "optimizer", "lengths": "epochs"}


def probability_of_improvement(ea: np.ndarray, eb: np.ndarray) -> float:
    """P(a random trial of a has a lower error than one of b), ties counted half: U / (n_a n_b)."""
    a, b = np.sort(np.asarray(ea, float)), np.sort(np.asarray(eb, float))
    below, above = (np.searchsorted(b, a, side=s) for s in ("left", "right"))
    return float(np.sum((len(b) - above) + (above - below) / 2) / (len(a) * len(b)))


def iqm(errors: np.ndarray) -> float:
    """The interquartile mean: the mean of the sorted errors less int(n / 4) at each end (trim_mean(x, 0.25))."""
    return float(_trimmed(np.sort(np.asarray(errors, float)), np.ones((1, len(errors))))[0])


def _resample_counts(n: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """rows x n counts: how often each of n values is drawn in each of `rows` resamples of n with replacement."""
    drawn = rng.integers(0, n, size=(rows, n)) + n * np.arange(rows)[:, None]
    return np.bincount(drawn.ravel(), minlength=rows * n).reshape(rows, n).astype(float)


def _trimmed(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The trimmed mean of each resample (rows of counts over the sorted `values`): every copy weighs one,
    less the int(TRIM n) lowest and highest copies."""
    n = int(round(counts[0].sum()))
    cut = int(TRIM * n)
    upto = np.cumsum(counts, axis=1)
    kept = np.clip(np.minimum(upto, n - cut) - np.maximum(upto - counts, cut), 0, None)
    return kept @ values / (n - 2 * cut)


def _improvements(a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """The probability of improvement of each resample (counts ca over sorted a, cb over sorted b)."""
    below, above = (np.searchsorted(b, a, side=s) for s in ("left", "right"))
    upto = np.concatenate([np.zeros((len(cb), 1)), np.cumsum(cb, axis=1)], axis=1)  # copies of b[:j]
    total = upto[:, -1:]
    per_a = (total - upto[:, above]) + (upto[:, above] - upto[:, below]) / 2  # b above each a, ties half
    return np.sum(ca * per_a, axis=1) / (ca.sum(axis=1) * cb.sum(axis=1))


def _interval(estimates: np.ndarray) -> Tuple[float, float]:
    """The central CONFIDENCE percentile interval of bootstrap estimates."""
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return float(low), float(high)


def _stream(values: np.ndarray, label: str, seed: int) -> np.random.Generator:
    """A group's resampling stream, seeded by its sorted values and its label: a group's IQM interval is the same
    in every pair it is part of, and two groups never share a stream."""
    digest = hashlib.blake2b(values.tobytes() + label.encode(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def _resamples(
    a: np.ndarray, b: np.ndarray, labels: Tuple[str, str], seed: int
) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """RESAMPLES stratified resamples of the sorted groups a and b, as chunks of (a's counts, b's counts) rows,
    each group from its own stream (its values and label), memory bounded whatever n."""
    draws = [_stream(values, label, seed) for values, label in zip((a, b), labels)]
    rows = max(1, CHUNK_VALUES // max(len(a), len(b)))
    for start in range(0, RESAMPLES, rows):
        k = min(rows, RESAMPLES - start)
        ca, cb = (_resample_counts(len(v), k, rng) for v, rng in zip((a, b), draws))
        yield ca, cb


def pair_effects(
    ea: np.ndarray, eb: np.ndarray, seed: int = SEED, labels: Tuple[str, str] = ("a", "b")
) -> Dict[str, float]:
    """The probability that a improves on b and both IQMs, each with its stratified bootstrap interval (NaN
    below INTERVAL_FROM trials a group); `labels` name the groups (their streams)."""
    a, b = np.sort(np.asarray(ea, float)), np.sort(np.asarray(eb, float))
    out = {
        "n_a": len(a),
        "n_b": len(b),
        "p_a_better": probability_of_improvement(a, b),
        "iqm_a": iqm(a),
        "iqm_b": iqm(b),
    }
    if min(len(a), len(b)) < INTERVAL_FROM:
        return {**out, **{name: np.nan for name in NUMBERS if name.endswith(("_low", "_high"))}}
    estimates: Dict[str, List[np.ndarray]] = {"p_a_better": [], "iqm_a": [], "iqm_b": []}
    for ca, cb in _resamples(a, b, labels, seed):
        estimates["p_a_better"].append(_improvements(a, b, ca, cb))
        estimates["iqm_a"].append(_trimmed(a, ca))
        estimates["iqm_b"].append(_trimmed(b, cb))
    for name, parts in estimates.items():
        out[f"{name}_low"], out[f"{name}_high"] = _interval(np.concatenate(parts))
    return out


def mean_improvement(cells: Sequence[Tuple[np.ndarray, np.ndarray]]) -> float:
    """The probability of improvement of a over b averaged over cells (each an (a's errors, b's errors) pair),
    every cell weighing the same: rliable's `probability_of_improvement` over tasks."""
    return float(np.mean([probability_of_improvement(ea, eb) for ea, eb in cells]))


def mean_improvement_interval(
    cells: Sequence[Tuple[np.ndarray, np.ndarray]], labels: Sequence[Tuple[str, str]], seed: int = SEED
) -> Tuple[float, float]:
    """The stratified bootstrap interval of `mean_improvement`: every group of every cell resampled on its own
    (its stream named by `labels`, a pair per cell), the mean over cells recomputed per resample (rliable's
    StratifiedBootstrap, tasks as strata)."""
    total = np.zeros(RESAMPLES)
    for (ea, eb), names in zip(cells, labels):
        a, b = np.sort(np.asarray(ea, float)), np.sort(np.asarray(eb, float))
        total += np.concatenate([_improvements(a, b, ca, cb) for ca, cb in _resamples(a, b, names, seed)])
    return _interval(total / len(cells))


def _levels(field: str, values: Iterable) -> List:
    """A field's levels in the report's order: models as the catalogue lists them, the rest sorted."""
    return catalogue_order(values) if field == "model" else sorted(set(values))


def group_label(cell: Dict) -> str:
    """A group's label: its model, optimizer and epochs, whichever comparison it is part of."""
    return "/".join(str(cell[f]) for f in ("model", "optimizer", "epochs"))


def compared_pairs(kept: pd.DataFrame) -> Iterator[Tuple[str, Dict, Any, Any, np.ndarray, np.ndarray]]:
    """Every pair the design compares among counted rows (an ERR column): two models per (optimizer, epochs),
    two optimizers per (model, epochs), two lengths per (model, optimizer), never pooled across cells; each as
    (compared, the cell it holds fixed with the compared field None, a, b, a's errors, b's errors)."""
    for compared, field in COMPARED.items():
        fixed = [f for f in COMPARED.values() if f != field]
        for values, group in kept.groupby(fixed, sort=True, observed=True):
            cell = {**dict(zip(fixed, values)), field: None}
            errors = {level: g[ERR].to_numpy(float) for level, g in group.groupby(field, observed=True)}
            for a, b in itertools.combinations(_levels(field, errors), 2):
                yield compared, cell, a, b, errors[a], errors[b]


def effects_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC, seed: int = SEED) -> pd.DataFrame:
    """Every pair of models (per optimizer and epochs), of optimizers (per model and epochs) and of lengths (per
    model and optimizer): pair_effects on the trials that ended, with the cell it holds fixed."""
    kept = usable(trials, metric, "effects_table").kept
    rows = []
    for compared, cell, a, b, ea, eb in compared_pairs(kept):
        field = COMPARED[compared]
        labels = (group_label({**cell, field: a}), group_label({**cell, field: b}))
        rows.append({"compared": compared, **cell, "a": a, "b": b, **pair_effects(ea, eb, seed, labels)})
    columns = ["compared", "model", "optimizer", "epochs", "a", "b", "n_a", "n_b"]
    table = pd.DataFrame(rows, columns=columns + NUMBERS)
    return table.astype({"epochs": "Int64", "n_a": int, "n_b": int})
