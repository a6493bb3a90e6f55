"""Findings: the report's verdicts, each one `Finding` holding its test (`inference.Test`).

A finding's sentence, verdict and table row are all rendered from the object (`Finding.sentence`,
`Finding.verdict`, `findings_table`), so a table and a sentence cannot disagree. Where a test
cannot decide, the sentence says "inconclusive at this n" and what 80% power would need; where
the design cannot reach alpha at all (3 vs 3 without a distributional assumption), it says so.

Rows: failed trials and rows without a finite error under the metric are left out and counted
(`hpstudy.analysis.metric.usable`); diverged trials count at their (chance) error, and every
sentence on a group says how many of its trials diverged.

Groups are (model, optimizer, epochs) cells. A cell that ran one configuration over seeds (one lr
and wd, and configs that differ only in the seed) has the `seeds` design, else `samples`
(`inference.design_of`); comparisons of seed cells use Welch t on
seed means (best of seeds quoted beside it), comparisons involving sample cells the calibrated
exact bootstrap of the best (`inference.best_contrast`). Kinds (`models` in catalogue order):

- `edf_pair` (Figs 5-6, lr/wd stability), per model pair within a `samples` (optimizer, epochs)
  cell: the Δ-EDFs (Δ = error - the model's own best) by two one-sided KS tests at alpha / 2
  (`inference.ks_pair`); effect: the signed area between the Δ-EDFs, mean Δ of b - mean Δ of a
  (positive: a's trials nearer its best), with a bootstrap 95% CI seeded by the data.
- `optimizer_gap` (Fig 3), per (model, epochs): SGD - AdamW.
- `optimizer_gap_pair`, per model pair and epochs: gap of a - gap of b.
- `length_gap` (Fig 2), per (model, optimizer): error(E_min) - error(E_ref), E_ref the longest
  schedule (or, if all its runs diverged, the paper's fallback: the best shorter one).
- `length_gap_pair`, per model pair and optimizer (same E_min and E_ref): gap of a - gap of b.
- `peak` (Fig 7), per optimizer and model pair: the two models at the longest schedule both ran
  (fixed by the design, not chosen on the errors), compared as the gaps are.
- `scope`: the family: every finding with a p, Holm-adjusted (`inference.holm`); `verdict_holm`.
"""

import itertools
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from hpstudy.analysis.catalogue import catalogue_order, model_family, model_label
from hpstudy.analysis.inference import (
    ALPHA,
    CALIBRATION_STUDIES,
    MAX_PLANNED,
    N_PERM,
    POWER,
    RULES,
    Test,
    area_interval,
    best_contrast,
    design_of,
    holm,
    ks_detectable,
    ks_pair,
    trials_for_ks,
    welch,
    welch_detectable,
)
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, LeftOutWarning, usable
from hpstudy.trainers.schema import DIVERGED, FAILED

SEED = 0  # mixed with the data into the effect sizes' bootstrap (inference.data_rng)
WITHIN = 2  # points: "share of trials within 2 points of the model's own best"
CALIBRATION_DOC = "docs/calibration.md"
KINDS = ("scope", "edf_pair", "optimizer_gap", "optimizer_gap_pair", "length_gap", "length_gap_pair", "peak")
PAIR, SINGLE = (1.0, -1.0, -1.0, 1.0), (1.0, -1.0)


class Group(NamedTuple):
    """One (model, optimizer, epochs) cell's counted errors."""

    errors: np.ndarray
    design: str  # seeds / samples
    diverged: int
    left_out: int


@dataclass
class Finding:
    """One verdict: its test, the numbers its sentence quotes, and its place in the family."""

    kind: str
    models: Tuple[str, ...]  # catalogue order; a_better / b_better refer to it
    cell: Dict  # optimizer and/or epochs ({} = whole study)
    test: Optional[Test]  # None: the scope line
    n_left_out: Tuple[int, ...]
    detail: Dict = field(default_factory=dict)
    p_holm: Optional[float] = None
    family: int = 0  # tests in the Holm family

    @property
    def statistic(self) -> float:
        """The test's estimate (for scope: the number of tests)."""
        return self.test.estimate if self.test else float(self.family)

    @property
    def ci(self) -> Optional[Tuple[float, float]]:
        """The test's interval, where it has one."""
        return self.test.ci if self.test else None

    @property
    def p(self) -> Optional[float]:
        """The test's p, before Holm's adjustment."""
        return self.test.p if self.test else None

    @property
    def n(self) -> Tuple[int, ...]:
        """Counted trials per group behind the test."""
        return self.test.n if self.test else tuple(self.detail.get("n", ()))

    @property
    def statistic_name(self) -> str:
        """What the estimate is, in words."""
        return _statistic_name(self)

    @property
    def verdict(self) -> str:
        """a_better, b_better, crossing, adamw_better, sgd_better, shorter_worse, shorter_better,
        inconclusive, or info (scope)."""
        return _verdict(self, per_test=True)

    @property
    def verdict_holm(self) -> str:
        """The verdict after Holm's adjustment over the report's family."""
        return _verdict(self, per_test=False)

    @property
    def better(self) -> Optional[str]:
        """The model or optimizer the verdict favours."""
        return {
            "a_better": self.models[0],
            "b_better": self.models[-1],
            "adamw_better": "adamw",
            "sgd_better": "sgd",
        }.get(self.verdict)

    @property
    def sentence(self) -> str:
        """The finding in words, with its test, numbers and n."""
        return RENDER[self.kind](self)

    def as_dict(self) -> Dict:
        """Plain JSON: the fields, the test flattened, and the rendered verdicts and sentence."""
        out = {k: v for k, v in asdict(self).items() if k != "test"}
        out.update(
            models=list(self.models),
            n=list(self.n),
            n_left_out=list(self.n_left_out),
            statistic=self.statistic,
            statistic_name=self.statistic_name,
            ci=list(self.ci) if self.ci is not None else None,
            p=self.p,
            verdict=self.verdict,
            verdict_holm=self.verdict_holm,
            better=self.better,
            sentence=self.sentence,
            test=None if self.test is None else {**asdict(self.test), "decidable": self.test.decidable},
        )
        return _plain(out)


def _plain(value):
    """numpy scalars to Python, NaN and inf to None (JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# ---- verdicts -------------------------------------------------------------------------------------


def _verdict(f: Finding, per_test: bool) -> str:
    if f.test is None:
        return "info" if f.kind == "scope" else "inconclusive"
    significant = (
        f.test.significant if per_test else f.test.significant and f.p_holm is not None and f.p_holm <= f.test.alpha
    )
    if not significant:
        return "inconclusive"
    if f.kind == "edf_pair":
        scale = 1.0 if per_test or not f.p else (f.p_holm or 1.0) / f.p  # Holm's step applies to each direction
        a, b = (f.detail[k] * scale <= f.test.alpha / 2 for k in ("p_a_better", "p_b_better"))
        return "crossing" if a and b else "a_better" if a else "b_better"
    positive = {
        "optimizer_gap": "adamw_better",
        "length_gap": "shorter_worse",
        "optimizer_gap_pair": "b_better",  # a's gap is larger: a less stable
        "length_gap_pair": "b_better",  # a further from its long-schedule error
        "peak": "b_better",  # a's error higher
    }[f.kind]
    negative = {"adamw_better": "sgd_better", "shorter_worse": "shorter_better", "b_better": "a_better"}[positive]
    return positive if f.test.estimate > 0 else negative


def _statistic_name(f: Finding) -> str:
    if f.test is None:
        return "tests"
    of = "mean" if f.test.rule == "welch" else "best"
    return {
        "edf_pair": "one-sided KS D (the larger)",
        "optimizer_gap": f"{of} SGD - {of} AdamW (points)",
        "optimizer_gap_pair": f"optimizer gap of a - of b, {of} errors (points)",
        "length_gap": f"{of} error(E_min) - {of} error(E_ref) (points)",
        "length_gap_pair": f"length gap of a - of b, {of} errors (points)",
        "peak": f"{of} error of a - of b at the longest schedule (points)",
    }[f.kind]


# ---- formatting -----------------------------------------------------------------------------------


def fmt_p(p: float) -> str:
    """p = 0.012, p = 0.43, p < 0.001."""
    if p < 1e-3:
        return "p < 0.001"
    return f"p = {p:.2g}" if p < 0.1 else f"p = {p:.2f}"


def sig3(value: float) -> str:
    """A number to 3 significant figures, never in e-notation: 57.2, 0.0123, 1230; – if not finite."""
    if not np.isfinite(value):
        return "–"
    return np.format_float_positional(value, precision=3, unique=False, fractional=False, trim="-")


def _floor(test: Test) -> Optional[float]:
    """The resolution of a Monte-Carlo p (calibration studies, permutations) where `test`'s p is at it."""
    resolution = {"best": 1 / (CALIBRATION_STUDIES + 1), "ks": 2 / (N_PERM + 1)}.get(test.rule)
    at_floor = resolution and test.p is not None and test.p <= 1.5 * resolution  # the smallest Monte-Carlo p
    return resolution if at_floor else None


def _p(test: Test) -> str:
    """The test's p; at the resolution of a Monte-Carlo p: p ≤ it."""
    floor = _floor(test)
    if floor is not None:
        return f"p ≤ {floor:.2g}"
    return fmt_p(test.p) if test.p is not None else "no p"


def _p_holm(f: Finding) -> str:
    """The finding's Holm-adjusted p; an upper bound (p ≤) where its test's p is a Monte-Carlo floor."""
    assert f.p_holm is not None and f.test is not None
    bound = _floor(f.test) is not None and f.p_holm >= 1e-3
    return f"p ≤ {f.p_holm:.2g}" if bound else fmt_p(f.p_holm)


def _pts(value: float, signed: bool = False) -> str:
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def _bound(value: float) -> str:
    """One decimal, or two significant digits where one decimal would print a nonzero bound as 0.0."""
    return f"{value:.2g}" if 0 < abs(value) < 0.05 else f"{value:.1f}"


def _ci(ci: Tuple[float, float]) -> str:
    return f"[{_bound(ci[0])}, {_bound(ci[1])}]"


def _slash(values: Sequence) -> str:
    return "/".join(str(v) for v in values)


def _cell(optimizer=None, epochs=None) -> str:
    parts = ([_opt(optimizer)] if optimizer is not None else []) + ([f"{int(epochs)} ep"] if epochs is not None else [])
    return ", ".join(parts)


def _opt(optimizer: str) -> str:
    return {"adamw": "AdamW", "sgd": "SGD"}.get(optimizer, optimizer)


def _left(n_left_out: Sequence[int]) -> str:
    total = int(sum(n_left_out))
    return f"; {total} left out (failed / no finite error)" if total else ""


def _diverged(names: Sequence[str], diverged: Sequence[int], n: Sequence[int], always: bool = False) -> str:
    """Diverged trials per group ('none diverged' where none did, unless `always`)."""
    if not always and not any(diverged):
        return "none diverged"
    return "diverged " + ", ".join(f"{name} {d}/{k}" for name, d, k in zip(names, diverged, n))


def _n(n: Sequence[int], labels: Sequence[str]) -> str:
    """n = 3 per group, or n = 24/23 (SGD/AdamW)."""
    return f"n = {n[0]} per group" if len(set(n)) == 1 else f"n = {_slash(n)} ({_slash(labels)})"


def _test_words(test: Test) -> str:
    """'Welch t, 95% CI, p = 0.004, df 3.1' and the like."""
    if test.rule == "welch":
        return f"Welch t, 95% CI, {_p(test)}, df {test.df:.1f}"
    if test.rule == "best":
        level = (
            f", {test.level:.1%} interval (the level at which it matches the test)" if test.level is not None else ""
        )
        return f"exact bootstrap of the best, calibrated{level}, {_p(test)}"
    return RULES[test.rule]


def _holm(f: Finding) -> str:
    """The finding's standing after Holm's adjustment, where it was decided per test."""
    if f.verdict in ("inconclusive", "info") or f.p_holm is None:
        return ""
    kept = "holds" if f.verdict_holm != "inconclusive" else "does not hold"
    return f" [{kept} after Holm's adjustment over the report's {f.family} tests: {_p_holm(f)}]"


def _undecided(f: Finding) -> str:
    """Why a test did not decide: untestable, the design cannot reach alpha, or not at this n."""
    t = f.test
    assert t is not None
    if t.p is None:
        return f"not testable ({t.why_untestable})"
    if not t.decidable:
        return (
            f"cannot be decided at n = {_slash(t.n)} (the smallest p this design can give is {t.floor:.2g} "
            f"> α = {t.alpha:g})"
        )
    return "inconclusive at this n"


def _power(f: Finding) -> str:
    """What 80% power needs, for an undecided Welch or KS test."""
    detectable = f.detail.get("detectable")
    if f.verdict != "inconclusive" or detectable is None:
        return ""
    if not np.isfinite(detectable):
        return f"; no effect is detectable at {POWER:.0%} power at this n"
    unit = "D" if f.kind == "edf_pair" else "|difference|"
    tail = " points at these seeds' spread" if unit != "D" else ""
    return f"; detectable at {POWER:.0%} power: {unit} ≥ {detectable:.2f}{tail}"


def _order(models) -> List[str]:
    return catalogue_order(models)


# ---- sentences ------------------------------------------------------------------------------------


def _oriented(ci: Tuple[float, float], keep: bool) -> Tuple[float, float]:
    """An interval as it is (keep) or of the negated quantity."""
    return (ci[0], ci[1]) if keep else (-ci[1], -ci[0])


def _against(f: Finding, nearer: str) -> str:
    """A warning where the mean Δ favours the other model than the decided Δ-EDF test."""
    if f.better is None or model_label(f.better) == nearer or f.verdict == "crossing":
        return ""
    return f" (the mean goes against the Δ-EDF test: {nearer}'s tail, including diverged trials, is shorter)"


def _edf_sentence(f: Finding) -> str:
    a, b = map(model_label, f.models)
    where = _cell(f.cell["optimizer"], f.cell["epochs"])
    t, d = f.test, f.detail
    assert t is not None
    n = f.n
    nearer, farther = (a, b) if d["area"] >= 0 else (b, a)
    effect = (
        f"mean Δ {a} {d['mean_delta_a']:.1f}, {b} {d['mean_delta_b']:.1f} points: {nearer}'s trials are nearer "
        f"their best than {farther}'s by {_pts(abs(d['area']))} points on average "
        f"{_ci(_oriented(d['area_ci'], d['area'] >= 0))} (signed area between the Δ-EDFs, "
        f"bootstrap 95% CI, references recomputed){_against(f, nearer)}; within {WITHIN} points of own best: "
        f"{a} {d['within_a']:.0%}, {b} {d['within_b']:.0%}; "
        f"{_diverged((a, b), d['diverged'], n, always=True)}{_left(f.n_left_out)}"
    )
    verdict = f.verdict
    if verdict in ("a_better", "b_better"):
        win, lose = (a, b) if verdict == "a_better" else (b, a)
        d_win = d["ks_d_a_better"] if verdict == "a_better" else d["ks_d_b_better"]
        d_rev = d["ks_d_b_better"] if verdict == "a_better" else d["ks_d_a_better"]
        relation = "dominates" if d_rev == 0 else "lies above"
        return (
            f"{win}'s Δ-EDF {relation} {lose}'s ({where}): one-sided KS D = {d_win:.2f}, {_p(t)} "
            f"(two one-sided tests at α/2), n = {_slash(n)}{_holm(f)}; {effect}"
        )
    if verdict == "crossing":
        return (
            f"{a}'s and {b}'s Δ-EDFs cross ({where}): each lies above the other somewhere (one-sided KS "
            f"D = {d['ks_d_a_better']:.2f} and {d['ks_d_b_better']:.2f}, {_p(t)}), n = {_slash(n)}{_holm(f)}; {effect}"
        )
    need = ""
    if d.get("trials_needed"):
        many = d["trials_needed"] > MAX_PLANNED
        count = f"more than {MAX_PLANNED}" if many else f"about {d['trials_needed']}"
        need = f" ({count} trials per model would find D = {t.estimate:.2f})"
    return (
        f"{a} vs {b} Δ-EDFs ({where}): {_undecided(f)}: KS D = {t.estimate:.2f}, {_p(t)}, n = {_slash(n)}"
        f"{_power(f)}{need}; {effect}"
    )


def _gap_numbers(f: Finding) -> str:
    """The numbers of a gap (or gap-pair) finding: estimate, interval, test, per-group levels."""
    t, d = f.test, f.detail
    assert t is not None
    ci = f" {_ci(t.ci)}" if t.ci else ""
    test = _test_words(t) if t.p is not None else RULES[t.rule]
    return (
        f"{d['what']} = {_pts(t.estimate, True)} points{ci} ({test}); {d['levels']}; {_n(t.n, d['names'])}; "
        f"{_diverged(d['names'], d['diverged'], t.n)}{_left(f.n_left_out)}"
    )


def _optimizer_gap_sentence(f: Finding) -> str:
    model, where = model_label(f.models[0]), _cell(epochs=f.cell["epochs"])
    if f.verdict == "inconclusive":
        return f"{model}'s optimizer gap ({where}): {_undecided(f)}: {_gap_numbers(f)}{_power(f)}"
    verb = "loses" if f.verdict == "adamw_better" else "gains"
    loss = f"{model} {verb} {abs(f.statistic):.1f} points when SGD replaces AdamW ({where})"
    return f"{loss}{_holm(f)}: {_gap_numbers(f)}"


def _optimizer_pair_sentence(f: Finding) -> str:
    a, b = map(model_label, f.models)
    where = _cell(epochs=f.cell["epochs"])
    if f.verdict == "inconclusive":
        return f"{a} vs {b}, loss from SGD instead of AdamW ({where}): {_undecided(f)}: {_gap_numbers(f)}{_power(f)}"
    more, less = (a, b) if f.verdict == "b_better" else (b, a)
    return (
        f"{more} loses {abs(f.statistic):.1f} points more than {less} when SGD replaces AdamW ({where})"
        f"{_holm(f)}: {_gap_numbers(f)}"
    )


def _length_gap_sentence(f: Finding) -> str:
    model, opt = model_label(f.models[0]), _opt(f.cell["optimizer"])
    e_min, e_ref = f.cell["epochs"], f.detail["reference_epochs"]
    fallback = " (the longest schedule diverged: the reference is the best shorter one)" if f.detail["fallback"] else ""
    tail = f"{fallback}; per length: {f.detail['per_length']}"
    if f.verdict == "inconclusive":
        return f"{model}'s length gap ({opt}): {_undecided(f)}: {_gap_numbers(f)}{_power(f)}{tail}"
    word = "above" if f.verdict == "shorter_worse" else "below"
    return (
        f"{model} at {e_min} epochs is {abs(f.statistic):.1f} points {word} its {e_ref}-epoch error ({opt})"
        f"{_holm(f)}: {_gap_numbers(f)}{tail}"
    )


def _length_pair_sentence(f: Finding) -> str:
    a, b = map(model_label, f.models)
    opt, e_min = _opt(f.cell["optimizer"]), f.cell["epochs"]
    if f.verdict == "inconclusive":
        return (
            f"{a} vs {b}, distance from the long-schedule error at {e_min} epochs ({opt}): {_undecided(f)}: "
            f"{_gap_numbers(f)}{_power(f)}"
        )
    closer, farther = (b, a) if f.verdict == "b_better" else (a, b)
    return (
        f"{closer} is closer to its long-schedule error than {farther} at {e_min} epochs ({opt}), by "
        f"{abs(f.statistic):.1f} points{_holm(f)}: {_gap_numbers(f)}"
    )


def _peak_sentence(f: Finding) -> str:
    a, b = map(model_label, f.models)
    where = _cell(f.cell["optimizer"], f.cell["epochs"])
    if f.verdict == "inconclusive":
        return f"{a} vs {b} peak error ({where}): {_undecided(f)}: {_gap_numbers(f)}{_power(f)}"
    low, high = (a, b) if f.verdict == "a_better" else (b, a)
    return f"{low} reaches a lower error than {high} ({where}){_holm(f)}: {_gap_numbers(f)}"


def _scope_sentence(f: Finding) -> str:
    d = f.detail
    rules = ", ".join(f"{RULES[r]} ({k})" for r, k in d["rules"].items())
    no_value = d["n_no_finite_error"]
    return (
        f"{f.family} test{'' if f.family == 1 else 's'} at α = {d['alpha']:g} each ({rules or 'none'}): "
        f"{d['decided']} decided, {d['decided_holm']} still decided after Holm's adjustment over all {f.family} "
        f"(the family: every finding below with a p); each rule's error rate at these n is measured "
        f"({CALIBRATION_DOC}). {d['n'][0]} trials counted on the {d['metric']} error, {d['n_diverged']} of them "
        f"diverged (counted at chance error); {d['n_failed']} failed"
        + (f" and {no_value} without a finite error" if no_value else "")
        + " left out."
    )


RENDER: Dict[str, Callable[[Finding], str]] = {
    "scope": _scope_sentence,
    "edf_pair": _edf_sentence,
    "optimizer_gap": _optimizer_gap_sentence,
    "optimizer_gap_pair": _optimizer_pair_sentence,
    "length_gap": _length_gap_sentence,
    "length_gap_pair": _length_pair_sentence,
    "peak": _peak_sentence,
}


# ---- the kinds ------------------------------------------------------------------------------------


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


def _contrast(groups: Sequence[Group], weights, alpha: float) -> Test:
    """Welch on seed means when every group repeats one configuration, else the calibrated best."""
    errors = [g.errors for g in groups]
    if all(g.design == "seeds" for g in groups):
        return welch(errors, weights, alpha)
    return best_contrast(errors, weights, alpha)


def _level(g: Group, rule: str, with_best: bool) -> str:
    """A group's level as the sentence quotes it: mean ± sd (and best) over seeds, or the best."""
    if rule == "welch":
        sd = g.errors.std(ddof=1) if len(g.errors) > 1 else float("nan")
        return f"{g.errors.mean():.2f} ± {sd:.2f}%" + (f" (best {g.errors.min():.2f}%)" if with_best else "")
    return f"{g.errors.min():.2f}%"


def _gap_detail(test: Test, groups: Sequence[Group], what: str, labels: Sequence[str], **extra) -> Dict:
    """The numbers a gap finding quotes beside its test."""
    detectable = None
    if test.rule == "welch" and test.p is not None:
        detectable = welch_detectable(
            [g.errors.std(ddof=1) for g in groups], [len(g.errors) for g in groups], test.alpha
        )
    levels = ", ".join(f"{label} {_level(g, test.rule, len(groups) == 2)}" for label, g in zip(labels, groups))
    return dict(
        what=what,
        levels=levels,
        names=list(labels),
        diverged=[g.diverged for g in groups],
        detectable=detectable,
        **extra,
    )


def edf_pair_findings(groups: Dict[Tuple, Group], alpha: float = ALPHA, seed: int = SEED) -> List[Finding]:
    """Δ-EDF comparisons for every model pair within each `samples` (optimizer, epochs) cell."""
    out = []
    cells = sorted({(opt, e) for (_, opt, e) in groups})
    for opt, epochs in cells:
        here = {m: g for (m, o, e), g in groups.items() if (o, e) == (opt, epochs) and g.design == "samples"}
        for a, b in itertools.combinations(_order(here), 2):
            ga, gb = here[a], here[b]
            if (
                min(len(ga.errors), len(gb.errors)) < 2
                or ga.diverged == len(ga.errors)
                or gb.diverged == len(gb.errors)
            ):
                continue  # every trial diverged: its "best" is chance, and its Δ-EDF a step at 0
            da, db = ga.errors - ga.errors.min(), gb.errors - gb.errors.min()
            result = ks_pair(ga.errors, gb.errors, alpha)
            test = result.test
            detectable = ks_detectable(test.n, alpha)
            detail = dict(
                ks_d_a_better=result.d_a_better,
                ks_d_b_better=result.d_b_better,
                p_a_better=result.p_a_better,
                p_b_better=result.p_b_better,
                mean_delta_a=float(da.mean()),
                mean_delta_b=float(db.mean()),
                area=float(db.mean() - da.mean()),
                area_ci=area_interval(ga.errors, gb.errors, seed),
                within_a=float(np.mean(da <= WITHIN)),
                within_b=float(np.mean(db <= WITHIN)),
                diverged=[ga.diverged, gb.diverged],
                detectable=detectable,
                trials_needed=trials_for_ks(test.estimate, alpha)
                if 0 < test.estimate < 1 and not test.significant
                else None,
            )
            out.append(
                Finding(
                    kind="edf_pair",
                    models=(a, b),
                    cell={"optimizer": opt, "epochs": int(epochs)},
                    test=test,
                    n_left_out=(ga.left_out, gb.left_out),
                    detail=detail,
                )
            )
    return out


def optimizer_gap_findings(groups: Dict[Tuple, Group], alpha: float = ALPHA) -> List[Finding]:
    """Per (model, epochs): SGD - AdamW; per model pair and epochs: the difference of their gaps."""
    out, have = [], {}
    for model, epochs in sorted({(m, e) for (m, _, e) in groups}):
        sgd, adamw = groups.get((model, "sgd", epochs)), groups.get((model, "adamw", epochs))
        if sgd is None or adamw is None:
            continue
        have[(model, epochs)] = (sgd, adamw)
        test = _contrast([sgd, adamw], SINGLE, alpha)
        of = "mean" if test.rule == "welch" else "best"
        out.append(
            Finding(
                kind="optimizer_gap",
                models=(model,),
                cell={"epochs": int(epochs)},
                test=test,
                n_left_out=(sgd.left_out + adamw.left_out,),
                detail=_gap_detail(test, [sgd, adamw], f"{of} SGD − {of} AdamW", ["SGD", "AdamW"]),
            )
        )
    for epochs in sorted({e for _, e in have}):
        models = _order([m for m, e in have if e == epochs])
        for a, b in itertools.combinations(models, 2):
            four = [*have[(a, epochs)], *have[(b, epochs)]]
            test = _contrast(four, PAIR, alpha)
            of = "means" if test.rule == "welch" else "bests"
            labels = [f"{model_label(m)} {o}" for m in (a, b) for o in ("SGD", "AdamW")]
            out.append(
                Finding(
                    kind="optimizer_gap_pair",
                    models=(a, b),
                    cell={"epochs": int(epochs)},
                    test=test,
                    n_left_out=tuple(sum(g.left_out for g in have[(m, epochs)]) for m in (a, b)),
                    detail=_gap_detail(test, four, f"gap {model_label(a)} − gap {model_label(b)} (of {of})", labels),
                )
            )
    return out


def _reference(groups: Dict[Tuple, Group], model: str, opt: str) -> Optional[Tuple[int, int, bool]]:
    """(E_min, E_ref, fallback) for one model and optimizer, or None with a single length."""
    lengths = sorted(e for (m, o, e) in groups if (m, o) == (model, opt))
    if len(lengths) < 2:
        return None
    e_max = lengths[-1]
    all_diverged = {e: groups[(model, opt, e)].diverged == len(groups[(model, opt, e)].errors) for e in lengths}
    fallback = all_diverged[e_max] and not all(all_diverged.values())
    e_ref = (
        min((e for e in lengths if not all_diverged[e]), key=lambda e: groups[(model, opt, e)].errors.min())
        if fallback
        else e_max
    )
    return (lengths[0], e_ref, fallback) if lengths[0] != e_ref else None


def length_gap_findings(groups: Dict[Tuple, Group], alpha: float = ALPHA) -> List[Finding]:
    """Per (model, optimizer): error(E_min) - error(E_ref); per model pair: the difference of gaps."""
    out, have = [], {}
    for model, opt in sorted({(m, o) for (m, o, _) in groups}):
        ref = _reference(groups, model, opt)
        if ref is None:
            continue
        e_min, e_ref, fallback = ref
        short, reference = groups[(model, opt, e_min)], groups[(model, opt, e_ref)]
        have[(model, opt)] = (ref, short, reference)
        test = _contrast([short, reference], SINGLE, alpha)
        of = "mean" if test.rule == "welch" else "best"
        level = (lambda g: g.errors.mean()) if test.rule == "welch" else (lambda g: g.errors.min())
        per_length = ", ".join(
            f"{int(e)} ep {_pts(level(g) - level(reference), True)}"
            for (m, o, e), g in sorted(groups.items())
            if (m, o) == (model, opt) and e != e_ref
        )
        out.append(
            Finding(
                kind="length_gap",
                models=(model,),
                cell={"optimizer": opt, "epochs": int(e_min)},
                test=test,
                n_left_out=(short.left_out + reference.left_out,),
                detail=_gap_detail(
                    test,
                    [short, reference],
                    f"{of} error({e_min} ep) − {of} error({e_ref} ep)",
                    [f"{e_min} ep", f"{e_ref} ep"],
                    reference_epochs=int(e_ref),
                    fallback=bool(fallback),
                    per_length=per_length,
                ),
            )
        )
    for opt in sorted({o for _, o in have}):
        models = _order([m for m, o in have if o == opt])
        for a, b in itertools.combinations(models, 2):
            (ref_a, *ga), (ref_b, *gb) = have[(a, opt)], have[(b, opt)]
            if ref_a[:2] != ref_b[:2]:
                continue
            four = [*ga, *gb]
            test = _contrast(four, PAIR, alpha)
            of = "means" if test.rule == "welch" else "bests"
            labels = [f"{model_label(m)} {e} ep" for m in (a, b) for e in ref_a[:2]]
            out.append(
                Finding(
                    kind="length_gap_pair",
                    models=(a, b),
                    cell={"optimizer": opt, "epochs": int(ref_a[0])},
                    test=test,
                    n_left_out=(sum(g.left_out for g in ga), sum(g.left_out for g in gb)),
                    detail=_gap_detail(test, four, f"gap {model_label(a)} − gap {model_label(b)} (of {of})", labels),
                )
            )
    return out


def peak_findings(groups: Dict[Tuple, Group], alpha: float = ALPHA) -> List[Finding]:
    """Per optimizer and model pair: the two models at the longest schedule both ran, seed means by
    Welch t (or bests of samples by the calibrated bootstrap). The cell is fixed by the design, not
    chosen on the errors: picking each model's lowest mean would test it on the seeds that chose it."""
    out = []
    for opt in sorted({o for (_, o, _) in groups}):
        models = _order({m for (m, o, _) in groups if o == opt})
        for a, b in itertools.combinations(models, 2):
            common = {e for (m, o, e) in groups if (m, o) == (a, opt)} & {
                e for (m, o, e) in groups if (m, o) == (b, opt)
            }
            if not common:
                continue
            epochs = max(common)
            ga, gb = groups[(a, opt, epochs)], groups[(b, opt, epochs)]
            test = _contrast([ga, gb], SINGLE, alpha)
            of = "mean" if test.rule == "welch" else "best"
            out.append(
                Finding(
                    kind="peak",
                    models=(a, b),
                    cell={"optimizer": opt, "epochs": int(epochs)},
                    test=test,
                    n_left_out=(ga.left_out, gb.left_out),
                    detail=_gap_detail(
                        test,
                        [ga, gb],
                        f"{of} {model_label(a)} − {of} {model_label(b)}",
                        [model_label(m) for m in (a, b)],
                    ),
                )
            )
    return out


def findings(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, alpha: float = ALPHA, seed: int = SEED
) -> List[Finding]:
    """Every finding the table supports, the `scope` line first, Holm-adjusted over the family."""
    with warnings.catch_warnings():  # what is left out is counted in every sentence instead
        warnings.simplefilter("ignore", LeftOutWarning)
        rows = usable(trials, metric)
    if rows.kept.empty:
        tested: List[Finding] = []
    else:
        groups = _groups(rows)
        tested = (
            edf_pair_findings(groups, alpha, seed)
            + optimizer_gap_findings(groups, alpha)
            + length_gap_findings(groups, alpha)
            + peak_findings(groups, alpha)
        )
    # tests whose design cannot reach alpha can never be decided: left out of the family (Tarone 1990)
    family = [(f, f.test) for f in tested if f.test is not None and f.test.p is not None and f.test.decidable]
    for (f, test), p_holm in zip(family, holm([test.p for _, test in family if test.p is not None])):
        f.p_holm, f.family = float(p_holm), len(family)
    n_failed = int((trials["status"] == FAILED).sum())
    rules: Dict[str, int] = {}
    for _, test in family:
        rules[test.rule] = rules.get(test.rule, 0) + 1
    scope = Finding(
        kind="scope",
        models=tuple(_order(rows.kept["model"].unique())),
        cell={},
        test=None,
        n_left_out=(len(rows.left_out),),
        family=len(family),
        detail=dict(
            alpha=alpha,
            rules=rules,
            decided=sum(f.verdict != "inconclusive" for f, _ in family),
            decided_holm=sum(f.verdict_holm != "inconclusive" for f, _ in family),
            n=[len(rows.kept)],
            metric=rows.metric,
            n_failed=n_failed,
            n_diverged=int((rows.kept["status"] == DIVERGED).sum()),
            n_no_finite_error=len(rows.left_out) - n_failed,
        ),
    )
    return [scope] + tested


# The paper's claims (Xiao et al. 2021) each pair kind tests, for a ViT-P / ViT-C pair: (claim, statement).
CLAIMS = {
    "edf_pair": (
        "1. lr/wd stability (Figs 5-6)",
        "ViT-C's Δ-EDF lies above ViT-P's: more of its random lr/wd trials are near its own best",
    ),
    "optimizer_gap_pair": (
        "2. optimizer stability (Fig 3)",
        "ViT-P loses much more than ViT-C when SGD replaces AdamW",
    ),
    "length_gap_pair": (
        "3. convergence (Fig 2)",
        "at a short schedule ViT-C is closer to its long-schedule error than ViT-P",
    ),
    "peak": ("4. peak performance (Fig 7)", "at matched FLOPs ViT-C reaches a lower error than ViT-P"),
}


def _claim_number(f: Finding) -> str:
    """The finding's number with its interval, as the claim table states it."""
    if f.kind == "edf_pair":
        d = f.detail
        return (
            f"KS D = {sig3(f.statistic)}; mean Δ {model_label(f.models[1])} − {model_label(f.models[0])} = "
            f"{sig3(-d['area'])} pts [{sig3(-d['area_ci'][1])}, {sig3(-d['area_ci'][0])}]"
        )
    ci = f" [{sig3(f.ci[0])}, {sig3(f.ci[1])}]" if f.ci else ""
    return f"{sig3(f.statistic)} pts{ci}"


def claims_table(found: Sequence[Finding]) -> pd.DataFrame:
    """The paper's claims against this study: per ViT-P / ViT-C pair finding of a claim's kind, the
    claim, the paper's statement, the cell, this study's number with its interval, p after Holm and
    the verdict after Holm (reproduced: ViT-C better; contradicted: ViT-P better; else not decided)."""
    rows = []
    for f in found:
        if f.kind not in CLAIMS or {model_family(m) for m in f.models} != {"vit_p", "vit_c"}:
            continue
        better = {"a_better": f.models[0], "b_better": f.models[1]}.get(f.verdict_holm)
        verdict = (
            "mixed (the Δ-EDFs cross)"
            if f.verdict_holm == "crossing"
            else "not decided"
            if better is None
            else "reproduced"
            if model_family(better) == "vit_c"
            else "contradicted"
        )
        claim, statement = CLAIMS[f.kind]
        rows.append(
            {
                "claim": claim,
                "paper": statement,
                "models": " vs ".join(model_label(m) for m in f.models),
                "cell": _cell(f.cell.get("optimizer"), f.cell.get("epochs")),
                "this study": _claim_number(f),
                "p, Holm": _p_holm(f) if f.p_holm is not None else "–",
                "n": _slash(f.n),
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)


def findings_table(found: Sequence[Finding], kind: str) -> pd.DataFrame:
    """The findings of one kind as a table: the same objects the sentences are rendered from."""
    rows = []
    for f in found:
        if f.kind != kind:
            continue
        t = f.test
        rows.append(
            {
                **{f"model {'ab'[i]}" if len(f.models) > 1 else "model": m for i, m in enumerate(f.models)},
                **f.cell,
                "rule": RULES[t.rule] if t else "not testable",
                "estimate": f.statistic,
                "estimate_lo": t.ci[0] if t and t.ci else np.nan,
                "estimate_hi": t.ci[1] if t and t.ci else np.nan,
                "ci_level": t.level if t and t.level is not None else np.nan,
                "p": f.p if f.p is not None else np.nan,
                "p_holm": f.p_holm if f.p_holm is not None else np.nan,
                "verdict": f.verdict,
                "verdict_holm": f.verdict_holm,
                "n": _slash(f.n),
                "diverged": _slash(f.detail.get("diverged", [])),
                "n_left_out": int(sum(f.n_left_out)),
                **_effect_columns(f),
            }
        )
    return pd.DataFrame(rows)


def _effect_columns(f: Finding) -> Dict:
    """A Δ-EDF finding's effect sizes, as its sentence quotes them."""
    d = f.detail
    if f.kind != "edf_pair":
        return {}
    return {
        "area": d["area"],
        "area_lo": d["area_ci"][0],
        "area_hi": d["area_ci"][1],
        f"within{WITHIN}_a": d["within_a"],
        f"within{WITHIN}_b": d["within_b"],
        "d_a_above": d["ks_d_a_better"],
        "d_b_above": d["ks_d_b_better"],
        "detectable_d": d["detectable"],
    }
