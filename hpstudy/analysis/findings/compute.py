"""The findings of a trial table: every kind's tests per cell, the family and Holm's adjustment.

Groups are (model, optimizer, epochs) cells. A cell that ran one configuration over seeds (one lr
and wd, and configs that differ only in the seed) has the `seeds` design, else `samples`
(`inference.design_of`); comparisons of seed cells use Welch t on seed means, comparisons involving
sample cells the calibrated exact bootstrap of the best (`inference.best_contrast`). Kinds
(`models` in catalogue order):

- `edf_pair` (Figs 5-6, lr/wd stability), per model pair within a `samples` (optimizer, epochs)
  cell: whether one model's trials lie nearer their own best than the other's (`inference.delta_test`).
- `optimizer_gap` (Fig 3), per (model, epochs): SGD - AdamW.
- `optimizer_gap_pair`, per model pair and epochs: gap of a - gap of b.
- `length_gap` (Fig 2), per (model, optimizer): error(E_min) - error(E_ref), E_ref the longest
  schedule (or, if all its runs diverged, the paper's fallback: the best shorter one).
- `length_gap_pair`, per model pair and optimizer (same E_min and E_ref): gap of a - gap of b.
- `peak` (Fig 7), per optimizer and model pair: the two models at the longest schedule both ran
  (fixed by the design, not chosen on the errors).
- `scope`: the family: every finding whose design can reach alpha, Holm-adjusted (`inference.holm`).

Rows: failed trials and rows without a finite error under the metric are left out and counted
(`hpstudy.analysis.metric.usable`); diverged trials count at their (chance) error.
"""

import functools
import itertools
import warnings
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import scipy

from hpstudy.analysis.catalogue import catalogue_order, model_label
from hpstudy.analysis.findings.aggregate import MIN_SOURCES, aggregate_findings
from hpstudy.analysis.findings.details import DELTA_APPROXIMATE_FROM, DeltaDetail, GapDetail, Level, ScopeDetail
from hpstudy.analysis.findings.model import Finding
from hpstudy.analysis.findings.text import WITHIN
from hpstudy.analysis.inference import (
    ALPHA,
    CALIBRATION_SEED,
    PERMUTATION_SEED,
    Test,
    area_interval,
    best_contrast,
    delta_detectable,
    delta_test,
    design_of,
    holm,
    holm_interval,
    trials_for_delta,
    welch,
    welch_detectable,
)
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, LeftOutWarning, usable
from hpstudy.analysis.stats import StatsError
from hpstudy.trainers.schema import DIVERGED, FAILED

SEED = 0  # mixed with the data into the area's bootstrap (inference.data_rng)
PAIR, SINGLE = (1.0, -1.0, -1.0, 1.0), (1.0, -1.0)
SD_RANGE = 0.8  # the central share of a seed sd's chi-square interval a detectable difference is shown over


class Seeds(NamedTuple):
    """Every seed a report's random draws take (each mixed with the data): the signed area's bootstrap, the
    Δ-EDF test's random splits and the best rule's null studies. Verdicts must not depend on them
    (montecarlo.sequential); tests vary them all."""

    area: int = SEED
    permutation: int = PERMUTATION_SEED
    calibration: int = CALIBRATION_SEED


class Group(NamedTuple):
    """One (model, optimizer, epochs) cell's counted errors."""

    errors: np.ndarray
    design: str  # seeds / samples
    diverged: int
    left_out: int


def image_grid(errors: np.ndarray) -> Optional[int]:
    """N where every error (in points) is k of N images, 100 k / N, for the smallest such N from 10 to
    10^6; None where the errors do not lie on one (fewer than 8 distinct values say too little). Errors
    a millionth of their range apart are one value (float32 storage, a metric computed two ways)."""
    values = np.asarray(errors, float)
    values = values[np.isfinite(values)]
    span = float(values.max() - values.min()) if len(values) else 0.0
    values = np.unique(np.round(values / (span * 1e-6)) * (span * 1e-6)) if span > 0 else np.unique(values)
    if len(values) < 8:
        return None
    step = float(np.diff(values).min())
    for n in sorted({round(100 * k / step) for k in range(1, 65)}):
        if 10 <= n <= 1_000_000 and np.all(np.abs(values * n / 100 - np.round(values * n / 100)) < 1e-3):
            return int(n)
    return None


def _groups(rows) -> Dict[Tuple, Group]:
    """Every (model, optimizer, epochs) cell's counted errors, design and counts."""
    left = rows.left_out.groupby(["model", "optimizer", "epochs"], observed=True).size()
    out = {}
    for key, cell in rows.kept.groupby(["model", "optimizer", "epochs"], sort=True, observed=True):
        out[key] = Group(
            errors=cell[ERR].to_numpy(float),
            design=design_of(cell["lr"].to_numpy(), cell["wd"].to_numpy(), cell.get("config_json")),
            diverged=int((cell["status"] == DIVERGED).sum()),
            left_out=int(left.get(key, 0)),
        )
    return out


def _level(label: str, g: Group, images: Optional[int]) -> Level:
    """A group as sentences quote it."""
    errors = g.errors
    best = float(errors.min())
    return Level(
        label=label,
        n=len(errors),
        diverged=g.diverged,
        best=best,
        mean=float(errors.mean()),
        sd=float(errors.std(ddof=1)) if len(errors) > 1 else float("nan"),
        best_images=None if images is None else int(round(best * images / 100)),
    )


def _contrast(groups: Sequence[Group], weights, seeds: Seeds) -> Callable[[Sequence[float]], Test]:
    """The test of a contrast at given thresholds: Welch on seed means when every group repeats one
    configuration, else the calibrated best."""
    errors = [g.errors for g in groups]
    if all(g.design == "seeds" for g in groups):
        return lambda thresholds: welch(errors, weights)
    return lambda thresholds: best_contrast(errors, weights, thresholds=thresholds, seed=seeds.calibration)


def _detectable(test: Test, groups: Sequence[Group]) -> Optional[Tuple[float, float, float]]:
    """Welch: the |difference| found at 80% power at the seeds' sds, and over their sds' central SD_RANGE
    chi-square interval (a sd of 3 seeds is known within a factor of about 3)."""
    if test.rule != "welch" or test.p is None:
        return None
    sds = np.array([g.errors.std(ddof=1) for g in groups])
    n = [len(g.errors) for g in groups]
    df = min(n) - 1
    low, high = (np.sqrt(df / scipy.stats.chi2.ppf(q, df)) for q in ((1 + SD_RANGE) / 2, (1 - SD_RANGE) / 2))
    return tuple(welch_detectable(list(sds * f), n, test.alpha) for f in (1.0, low, high))  # type: ignore[return-value]


def _finding(kind, models, cell, retest, groups, labels, quantity, images, **extra) -> Finding:
    """A gap-like finding (GapDetail) from its test's function."""
    test = retest((ALPHA,))
    return Finding(
        kind=kind,
        models=tuple(models),
        cell=cell,
        test=test,
        n_left_out=tuple(extra.pop("left_out")),
        detail=GapDetail(
            quantity=quantity,
            groups=tuple(_level(label, g, images) for label, g in zip(labels, groups)),
            images=images,
            detectable=_detectable(test, groups),
            **extra,
        ),
        retest=retest,
    )


def _of(test_rule_is_welch: bool, plural: bool = False) -> str:
    return ("means" if plural else "mean") if test_rule_is_welch else ("bests" if plural else "best")


def _delta_retest(ea: np.ndarray, eb: np.ndarray, seed: int, thresholds: Sequence[float]) -> Test:
    """The Δ-EDF test again, drawn until settled at `thresholds`."""
    return delta_test(ea, eb, thresholds=thresholds, seed=seed).test


def edf_pair_findings(groups: Dict[Tuple, Group], images: Optional[int], seeds: Seeds) -> List[Finding]:
    """Δ-EDF comparisons for every model pair within each `samples` (optimizer, epochs) cell."""
    out = []
    for opt, epochs in sorted({(o, e) for (_, o, e) in groups}):
        here = {m: g for (m, o, e), g in groups.items() if (o, e) == (opt, epochs) and g.design == "samples"}
        for a, b in itertools.combinations(catalogue_order(here), 2):
            ga, gb = here[a], here[b]
            if any(len(g.errors) < 2 or len(g.errors) == g.diverged for g in (ga, gb)):
                continue  # every trial diverged: its "best" is chance, and its Δ-EDF a step at 0
            result = delta_test(ga.errors, gb.errors, seed=seeds.permutation)
            da, db = ga.errors - ga.errors.min(), gb.errors - gb.errors.min()
            effect = result.test.estimate
            needed = None
            if not result.test.significant and effect != 0.5:
                planned = max(trials_for_delta(effect), DELTA_APPROXIMATE_FROM)
                needed = planned if planned > max(result.test.n) else None  # never fewer than already ran
            detail = DeltaDetail(
                groups=(_level(model_label(a), ga, images), _level(model_label(b), gb, images)),
                images=images,
                d_a_above=result.d_a_above,
                d_b_above=result.d_b_above,
                mean_delta=(float(da.mean()), float(db.mean())),
                area=float(db.mean() - da.mean()),
                area_ci=area_interval(ga.errors, gb.errors, seeds.area),
                within=(float(np.mean(da <= WITHIN)), float(np.mean(db <= WITHIN))),
                detectable=delta_detectable(result.test.n) if min(result.test.n) >= DELTA_APPROXIMATE_FROM else None,
                trials_needed=needed,
            )
            out.append(
                Finding(
                    kind="edf_pair",
                    models=(a, b),
                    cell={"optimizer": opt, "epochs": int(epochs)},
                    test=result.test,
                    n_left_out=(ga.left_out, gb.left_out),
                    detail=detail,
                    retest=functools.partial(_delta_retest, ga.errors, gb.errors, seeds.permutation),
                )
            )
    return out


def optimizer_gap_findings(groups: Dict[Tuple, Group], images: Optional[int], seeds: Seeds) -> List[Finding]:
    """Per (model, epochs): SGD - AdamW; per model pair and epochs: the difference of their gaps."""
    out, have = [], {}
    for model, epochs in sorted({(m, e) for (m, _, e) in groups}):
        sgd, adamw = groups.get((model, "sgd", epochs)), groups.get((model, "adamw", epochs))
        if sgd is None or adamw is None:
            continue
        have[(model, epochs)] = (sgd, adamw)
        of = _of(sgd.design == adamw.design == "seeds")
        out.append(
            _finding(
                "optimizer_gap",
                (model,),
                {"epochs": int(epochs)},
                _contrast([sgd, adamw], SINGLE, seeds),
                [sgd, adamw],
                ["SGD", "AdamW"],
                f"{of} SGD − {of} AdamW",
                images,
                left_out=(sgd.left_out + adamw.left_out,),
            )
        )
    for epochs in sorted({e for _, e in have}):
        for a, b in itertools.combinations(catalogue_order([m for m, e in have if e == epochs]), 2):
            four = [*have[(a, epochs)], *have[(b, epochs)]]
            of = _of(all(g.design == "seeds" for g in four), plural=True)
            out.append(
                _finding(
                    "optimizer_gap_pair",
                    (a, b),
                    {"epochs": int(epochs)},
                    _contrast(four, PAIR, seeds),
                    four,
                    [f"{model_label(m)} {o}" for m in (a, b) for o in ("SGD", "AdamW")],
                    f"gap {model_label(a)} − gap {model_label(b)} (of {of})",
                    images,
                    left_out=tuple(sum(g.left_out for g in have[(m, epochs)]) for m in (a, b)),
                )
            )
    return out


def _reference(groups: Dict[Tuple, Group], model: str, opt: str) -> Optional[Tuple[int, int, bool]]:
    """(E_min, E_ref, fallback) for one model and optimizer, or None with a single length."""
    lengths = sorted(e for (m, o, e) in groups if (m, o) == (model, opt))
    if len(lengths) < 2:
        return None
    all_diverged = {e: groups[(model, opt, e)].diverged == len(groups[(model, opt, e)].errors) for e in lengths}
    fallback = all_diverged[lengths[-1]] and not all(all_diverged.values())
    e_ref = (
        min((e for e in lengths if not all_diverged[e]), key=lambda e: groups[(model, opt, e)].errors.min())
        if fallback
        else lengths[-1]
    )
    return (lengths[0], e_ref, fallback) if lengths[0] != e_ref else None


def length_gap_findings(groups: Dict[Tuple, Group], images: Optional[int], seeds: Seeds) -> List[Finding]:
    """Per (model, optimizer): error(E_min) - error(E_ref); per model pair: the difference of gaps."""
    out, have = [], {}
    for model, opt in sorted({(m, o) for (m, o, _) in groups}):
        ref = _reference(groups, model, opt)
        if ref is None:
            continue
        e_min, e_ref, fallback = ref
        short, reference = groups[(model, opt, e_min)], groups[(model, opt, e_ref)]
        have[(model, opt)] = (ref, short, reference)
        welch_rule = short.design == reference.design == "seeds"
        level = (lambda g: g.errors.mean()) if welch_rule else (lambda g: g.errors.min())
        of = _of(welch_rule)
        out.append(
            _finding(
                "length_gap",
                (model,),
                {"optimizer": opt, "epochs": int(e_min)},
                _contrast([short, reference], SINGLE, seeds),
                [short, reference],
                [f"{e_min} ep", f"{e_ref} ep"],
                f"{of} error({e_min} ep) − {of} error({e_ref} ep)",
                images,
                left_out=(short.left_out + reference.left_out,),
                reference_epochs=int(e_ref),
                fallback=bool(fallback),
                per_length=tuple(
                    (int(e), float(level(g) - level(reference)))
                    for (m, o, e), g in sorted(groups.items())
                    if (m, o) == (model, opt) and e != e_ref
                ),
            )
        )
    for opt in sorted({o for _, o in have}):
        for a, b in itertools.combinations(catalogue_order([m for m, o in have if o == opt]), 2):
            (ref_a, *ga), (ref_b, *gb) = have[(a, opt)], have[(b, opt)]
            if ref_a[:2] != ref_b[:2]:
                continue
            four = [*ga, *gb]
            of = _of(all(g.design == "seeds" for g in four), plural=True)
            out.append(
                _finding(
                    "length_gap_pair",
                    (a, b),
                    {"optimizer": opt, "epochs": int(ref_a[0])},
                    _contrast(four, PAIR, seeds),
                    four,
                    [f"{model_label(m)} {e} ep" for m in (a, b) for e in ref_a[:2]],
                    f"gap {model_label(a)} − gap {model_label(b)} (of {of})",
                    images,
                    left_out=(sum(g.left_out for g in ga), sum(g.left_out for g in gb)),
                )
            )
    return out


def peak_findings(groups: Dict[Tuple, Group], images: Optional[int], seeds: Seeds) -> List[Finding]:
    """Per optimizer and model pair: the two models at the longest schedule both ran. The cell is fixed by
    the design, not chosen on the errors: picking each model's lowest mean would test it on the seeds
    that chose it."""
    out = []
    for opt in sorted({o for (_, o, _) in groups}):
        for a, b in itertools.combinations(catalogue_order({m for (m, o, _) in groups if o == opt}), 2):
            lengths = lambda model: {e for (m, o, e) in groups if (m, o) == (model, opt)}
            common = lengths(a) & lengths(b)
            if not common:
                continue
            epochs = max(common)
            ga, gb = groups[(a, opt, epochs)], groups[(b, opt, epochs)]
            of = _of(ga.design == gb.design == "seeds")
            out.append(
                _finding(
                    "peak",
                    (a, b),
                    {"optimizer": opt, "epochs": int(epochs)},
                    _contrast([ga, gb], SINGLE, seeds),
                    [ga, gb],
                    [model_label(m) for m in (a, b)],
                    f"{of} {model_label(a)} − {of} {model_label(b)}",
                    images,
                    left_out=(ga.left_out, gb.left_out),
                )
            )
    return out


def _adjust(family: List[Finding], alpha: float) -> None:
    """Holm's adjustment over the family. Holm compares the p of rank r (smallest first) with
    alpha / (m - r + 1): a Monte-Carlo p whose interval holds the threshold of its rank, or of a
    neighbouring rank (its rank may move with the draws), is drawn again until it does not (or is
    borderline); the bounds on each adjusted p then follow from the intervals (inference.holm_interval)."""
    m = len(family)
    ps = [f.test.p if f.test is not None and f.test.p is not None else 1.0 for f in family]
    order = np.argsort(ps, kind="stable")
    for rank, index in enumerate(order, start=1):
        f = family[index]
        assert f.test is not None
        near = tuple(alpha / (m - r + 1) for r in (rank - 1, rank, rank + 1) if 1 <= r <= m)
        mc = f.test.mc
        if mc is not None and f.retest is not None and any(mc[0] < t < mc[1] for t in near):
            f.test = f.retest(near)
    ps = [f.test.p for f in family if f.test is not None and f.test.p is not None]
    intervals = [f.test.mc or (f.test.p, f.test.p) for f in family if f.test is not None and f.test.p is not None]
    low, high = holm_interval(intervals)
    for f, p_holm, lo, hi in zip(family, holm(ps), low, high):
        f.p_holm, f.family = float(p_holm), m
        f.p_holm_mc = (float(lo), float(hi)) if lo != hi else None


def _tested(rows, seeds: Seeds, studies: Tuple[str, ...] = ()) -> List[Finding]:
    """Every tested finding of one table's counted rows (no family yet), each naming its `studies`."""
    if rows.kept.empty:
        return []
    images = image_grid(rows.kept[ERR].to_numpy(float))
    groups = _groups(rows)
    tested = (
        edf_pair_findings(groups, images, seeds)
        + optimizer_gap_findings(groups, images, seeds)
        + length_gap_findings(groups, images, seeds)
        + peak_findings(groups, images, seeds)
    )
    for f in tested:
        f.studies = studies
    return tested


def _usable(trials: pd.DataFrame, metric: str):
    with warnings.catch_warnings():  # what is left out is counted in every sentence instead
        warnings.simplefilter("ignore", LeftOutWarning)
        return usable(trials, metric)


def _family(tested: List[Finding], all_rows: Sequence, sources: Tuple[Tuple[str, ...], ...], shared: int) -> Finding:
    """Holm's adjustment over every tested finding whose design can reach alpha (a test that cannot reach
    it adds no false decision, so it is left out); returns the scope line."""
    family = [f for f in tested if f.test is not None and f.test.p is not None and f.test.decidable]
    _adjust(family, ALPHA)
    rules: Dict[str, int] = {}
    for f in family:
        assert f.test is not None
        rules[f.test.rule] = rules.get(f.test.rule, 0) + 1
    kept = pd.concat([rows.kept for rows in all_rows])
    n_left_out = sum(len(rows.left_out) for rows in all_rows)
    n_failed = sum(int((rows.left_out["status"] == FAILED).sum()) for rows in all_rows)
    grids = {image_grid(rows.kept[ERR].to_numpy(float)) for rows in all_rows if len(rows.kept)}
    return Finding(
        kind="scope",
        models=tuple(catalogue_order(kept["model"].unique())) if len(kept) else (),
        cell={},
        test=None,
        n_left_out=(n_left_out,),
        family=len(family),
        detail=ScopeDetail(
            alpha=ALPHA,
            rules=rules,
            decided=sum(f.verdict not in ("inconclusive", "borderline") for f in family),
            decided_holm=sum(f.verdict_holm not in ("inconclusive", "borderline") for f in family),
            borderline=sum(f.verdict_holm == "borderline" for f in family),
            n=len(kept),
            metric=all_rows[0].metric,
            n_failed=n_failed,
            n_diverged=int((kept["status"] == DIVERGED).sum()) if len(kept) else 0,
            n_no_finite_error=n_left_out - n_failed,
            images=grids.pop() if len(grids) == 1 else None,
            sources=sources,
            shared=shared,
        ),
    )


def findings(trials: pd.DataFrame, metric: str = DEFAULT_METRIC, seeds: Seeds = Seeds()) -> List[Finding]:
    """Every finding the table supports, the `scope` line first, Holm-adjusted over the family."""
    rows = _usable(trials, metric)
    tested = _tested(rows, seeds)
    return [_family(tested, [rows], (), 0)] + tested


def sources_of(tables: Mapping[str, pd.DataFrame]) -> List[Tuple[str, ...]]:
    """The studies grouped by shared trials: two studies that hold a trial key in common are one source
    (their trials are the same trials), whatever chain of studies joins them; sorted by name."""
    keys = {name: set(table["trial_key"]) for name, table in tables.items()}
    groups: List[set] = []
    for name in sorted(keys):
        joined = [g for g in groups if any(keys[name] & keys[other] for other in g)]
        merged = {name}.union(*joined)
        groups = [g for g in groups if g not in joined] + [merged]
    return sorted(tuple(sorted(g)) for g in groups)


def findings_across(
    tables: Mapping[str, pd.DataFrame], metric: str = DEFAULT_METRIC, seeds: Seeds = Seeds()
) -> List[Finding]:
    """One family declared over several studies (a claim's studies): studies that share trials are one
    source, their rows merged with each trial once (`sources_of`); each source's findings are computed
    on its own cells (what the designs separate is never pooled), and all of them form one Holm family.
    Each finding names its source's studies; the scope line names the sources and the shared trials. Each pair
    of models held by two sources or more also gets one aggregate across their cells (findings.aggregate), in the
    same family. StatsError where the studies' rows give different errors under `metric` (EMA in some only)."""
    if not tables:
        raise StatsError("findings_across: tables: bad value {}; allowed: one or more studies' trial tables")
    sources = sources_of(tables)
    tested: List[Finding] = []
    all_rows = []
    shared = 0
    for source in sources:
        merged = pd.concat([tables[name] for name in source], ignore_index=True)
        once = merged.drop_duplicates("trial_key", keep="first")
        shared += len(merged) - len(once)
        rows = _usable(once, metric)
        all_rows.append(rows)
        tested += _tested(rows, seeds, source)
    metrics = {rows.metric for rows in all_rows if len(rows.kept)}
    if len(metrics) > 1:  # the family's sentences and its aggregates would mix two errors under one name
        raise StatsError(
            f"findings_across: metric: bad value, the studies' rows give {len(metrics)} errors ("
            + "; ".join(sorted(metrics))
            + "); allowed: studies whose rows give one error under the metric (e.g. --metric best or ema_best)"
        )
    if len(sources) >= MIN_SOURCES:
        order = catalogue_order(pd.concat([rows.kept["model"] for rows in all_rows]).unique())
        tested += aggregate_findings([(s, _groups(rows)) for s, rows in zip(sources, all_rows)], order, seeds)
    return [_family(tested, all_rows, tuple(sources), shared)] + tested
