"""A finding in words: one renderer per kind, each saying which quantity its test showed (the mean over
seeds, the cells' lowest errors, the nearness of trials to their own best), with its n, its p (and a
Monte-Carlo p's interval where the verdict would depend on the seed) and, where the errors lie on a
grid of validation images, how many images the bests are."""

from typing import TYPE_CHECKING, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from hpstudy.analysis.catalogue import model_label
from hpstudy.analysis.findings.details import (
    DELTA_APPROXIMATE_FROM,
    AggregateDetail,
    DeltaDetail,
    GapDetail,
    Level,
    ScopeDetail,
)
from hpstudy.analysis.inference import POWER, RULES, Test
from hpstudy.analysis.montecarlo import RISK

if TYPE_CHECKING:  # a Finding's `sentence` is rendered here: the type only, no import when run
    from hpstudy.analysis.findings.model import Finding

CALIBRATION_DOC = "docs/calibration.md"
WITHIN = 2  # points: "share of trials within 2 points of the model's own best" (findings.compute)


# ---- numbers ---------------------------------------------------------------------------------------


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


def p_text(test: Test) -> str:
    """The test's p: `p ≤ x` where a Monte-Carlo p found no draw as extreme (x is then its resolution)."""
    if test.p is None:
        return "no p"
    if test.mc is not None and test.mc[0] == 0.0:
        return f"p ≤ {test.p:.2g}"
    return fmt_p(test.p)


def p_holm_text(f: "Finding") -> str:
    """The finding's Holm-adjusted p (an upper bound where its test's p is a Monte-Carlo floor)."""
    assert f.p_holm is not None and f.test is not None
    bound = f.test.mc is not None and f.test.mc[0] == 0.0 and f.p_holm >= 1e-3
    return f"p ≤ {f.p_holm:.2g}" if bound else fmt_p(f.p_holm)


def p_interval_text(interval: Tuple[float, float]) -> str:
    """A Monte-Carlo p's interval, to two significant digits."""
    return f"[{interval[0]:.2g}, {interval[1]:.2g}]"


def _pts(value: float, signed: bool = False) -> str:
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def _bound(value: float) -> str:
    """One decimal, or two significant digits where one decimal would print a nonzero bound as 0.0."""
    return f"{value:.2g}" if 0 < abs(value) < 0.05 else f"{value:.1f}"


def ci_text(ci: Tuple[float, float]) -> str:
    """An interval, low end first."""
    low, high = sorted(ci)
    return f"[{_bound(low)}, {_bound(high)}]"


def _slash(values: Sequence) -> str:
    return "/".join(str(v) for v in values)


def cell_text(optimizer=None, epochs=None) -> str:
    """'AdamW, 6 ep', 'SGD', '16 ep'."""
    parts = ([_opt(optimizer)] if optimizer is not None else []) + ([f"{int(epochs)} ep"] if epochs is not None else [])
    return ", ".join(parts)


def _opt(optimizer: str) -> str:
    return {"adamw": "AdamW", "sgd": "SGD"}.get(optimizer, optimizer)


def _left(n_left_out: Sequence[int]) -> str:
    total = int(sum(n_left_out))
    return f"; {total} left out (failed / no finite error)" if total else ""


def _diverged(groups: Sequence[Level], always: bool = False) -> str:
    """Diverged trials per group ('none diverged' where none did, unless `always`)."""
    if not always and not any(g.diverged for g in groups):
        return "none diverged"
    return "diverged " + ", ".join(f"{g.label} {g.diverged}/{g.n}" for g in groups)


def _n(groups: Sequence[Level]) -> str:
    """n = 3 per group, or n = 24/23 (SGD/AdamW)."""
    counts = [g.n for g in groups]
    return (
        f"n = {counts[0]} per group"
        if len(set(counts)) == 1
        else f"n = {_slash(counts)} ({_slash([g.label for g in groups])})"
    )


def images_text(groups: Sequence[Level], images: Optional[int]) -> str:
    """' (2 vs 5 of 360 images)' for the groups' bests, where the errors lie on a grid of images."""
    if images is None or any(g.best_images is None for g in groups):
        return ""
    return f" ({' vs '.join(str(g.best_images) for g in groups)} of {images} images)"


def _levels(test: Test, groups: Sequence[Level], images: Optional[int]) -> str:
    """Each group's level: mean ± sd over seeds (and best), or its best error (and image count)."""
    if test.rule == "welch":
        spread = lambda g: f" ± {g.sd:.2f}" if np.isfinite(g.sd) else ""  # one seed: no sd
        return ", ".join(f"{g.label} {g.mean:.2f}{spread(g)}% (best {g.best:.2f}%)" for g in groups)
    return "bests " + ", ".join(f"{g.label} {g.best:.2f}%" for g in groups) + images_text(groups, images)


# ---- tests and verdicts ----------------------------------------------------------------------------


def test_words(test: Test) -> str:
    """'Welch t, 95% CI, p = 0.004, df 3.1' and the like."""
    if test.rule == "welch":
        return f"Welch t, 95% CI, {p_text(test)}, df {test.df:.1f}"
    if test.rule == "best":
        return f"calibrated exact bootstrap of the best, null: the cells share one error distribution, {p_text(test)}"
    return f"{RULES[test.rule]}, {p_text(test)}"


def _holm(f: "Finding") -> str:
    """The finding's standing after Holm's adjustment, where it was decided per test."""
    if f.verdict in ("inconclusive", "info", "borderline") or f.p_holm is None:
        return ""
    standing = {"inconclusive": "does not hold", "borderline": "is borderline"}.get(f.verdict_holm, "holds")
    bounds = ""
    if f.verdict_holm == "borderline" and f.p_holm_mc:
        bounds = f" (Monte-Carlo bounds {p_interval_text(f.p_holm_mc)})"
    return f" [{standing} after Holm's adjustment over the family's {f.family} tests: {p_holm_text(f)}{bounds}]"


def undecided(f: "Finding") -> str:
    """Why a test did not decide: untestable, the design cannot reach alpha, borderline, or not at this n."""
    t = f.test
    assert t is not None
    if t.p is None:
        return f"not testable ({t.why_untestable})"
    if t.borderline and t.mc is not None:
        return (
            f"borderline: the exact p lies in {p_interval_text(t.mc)} (Monte-Carlo, {1 - RISK:.1%} interval) around "
            f"α = {t.alpha:g} even after every draw allowed, so the verdict would depend on the random seed"
        )
    if not t.decidable:
        return (
            f"cannot be decided at n = {_slash(t.n)} (the smallest p this design can give is {t.floor:.3g} > "
            f"α = {t.alpha:g})"
        )
    return "inconclusive at this n"


def _welch_power(f: "Finding") -> str:
    """What 80% power needs, for an undecided Welch test, with the range its sd estimates allow."""
    d = f.detail
    if f.verdict != "inconclusive" or not isinstance(d, GapDetail) or d.detectable is None:
        return ""
    value, low, high = d.detectable
    if not np.isfinite(value):
        return f"; no difference is detectable at {POWER:.0%} power with these n"
    span = f"{low:.2f}-{high:.2f}" if np.isfinite(high) else f"{low:.2f} to no bound"
    return (
        f"; detectable at {POWER:.0%} power: |difference| ≥ {value:.2f} points at these seeds' sds ({span} over "
        f"their 80% intervals)"
    )


# ---- sentences -------------------------------------------------------------------------------------


def _edf_effect(f: "Finding", d: DeltaDetail) -> str:
    """The Δ-EDFs' numbers read beside the test: mean Δ and the signed area, shares near the best, D."""
    a, b = d.groups
    nearer, farther = (a, b) if d.area >= 0 else (b, a)
    area_ci = d.area_ci if d.area >= 0 else (-d.area_ci[1], -d.area_ci[0])
    against = ""
    better = {"a_better": a.label, "b_better": b.label}.get(f.verdict)
    if better is not None and better != nearer.label:
        against = f" (the mean goes against the test: {nearer.label}'s tail, diverged trials included, is shorter)"
    return (
        f"mean Δ {a.label} {d.mean_delta[0]:.1f}, {b.label} {d.mean_delta[1]:.1f} points: {nearer.label}'s trials are "
        f"nearer their best than {farther.label}'s by {_pts(abs(d.area))} points on average {ci_text(area_ci)} (signed "
        f"area between the Δ-EDFs, bootstrap 95% CI, references recomputed){against}; within {WITHIN} points of own "
        f"best: {a.label} {d.within[0]:.0%}, {b.label} {d.within[1]:.0%}; largest gap between the Δ-EDFs "
        f"D = {max(d.d_a_above, d.d_b_above):.2f}; {_diverged(d.groups, always=True)}{_left(f.n_left_out)}"
    )


def _edf_sentence(f: "Finding") -> str:
    d, t = f.detail, f.test
    assert isinstance(d, DeltaDetail) and t is not None
    a, b = (g.label for g in d.groups)
    where = cell_text(f.cell["optimizer"], f.cell["epochs"])
    n = _slash(t.n)
    if f.verdict in ("a_better", "b_better"):
        win, lose = (a, b) if f.verdict == "a_better" else (b, a)
        prob = t.estimate if f.verdict == "a_better" else 1 - t.estimate
        return (
            f"{win}'s trials lie nearer their own best than {lose}'s ({where}): a random {win} trial is nearer its "
            f"best than a random {lose} trial with probability {prob:.2f} ({RULES['delta']}, {p_text(t)}, n = {n})"
            f"{_holm(f)}; {_edf_effect(f, d)}"
        )
    need = ""
    if d.trials_needed is not None:
        need = f" (about {d.trials_needed} trials per model would find {t.estimate:.2f} at {POWER:.0%} power)"
    if d.detectable is None:
        detectable = (
            f"; below {DELTA_APPROXIMATE_FROM} trials per model this test's power is far under its normal "
            "approximation (measured in docs/calibration.md), so no detectable difference is stated"
        )
    elif np.isfinite(d.detectable):
        low, high = 1 - d.detectable, d.detectable
        detectable = f"; detectable at {POWER:.0%} power: a probability ≥ {high:.2f} or ≤ {low:.2f}"
    else:
        detectable = f"; no difference is detectable at {POWER:.0%} power with these n"
    return (
        f"{a} vs {b} Δ-EDFs ({where}): {undecided(f)}: a random {a} trial is nearer its best than a random {b} "
        f"trial with probability {t.estimate:.2f} (1/2: no difference; {RULES['delta']}, {p_text(t)}, n = {n})"
        f"{detectable if f.verdict == 'inconclusive' else ''}{need}; {_edf_effect(f, d)}"
    )


def gap_numbers(f: "Finding", images: Optional[int]) -> str:
    """The numbers of a gap (or gap-pair, or peak) finding: estimate, interval, test, per-group levels."""
    t, d = f.test, f.detail
    assert t is not None and isinstance(d, GapDetail)
    ci = f" {ci_text(t.ci)}" if t.ci else ""
    test = test_words(t) if t.p is not None else RULES[t.rule]
    return (
        f"{d.quantity} = {_pts(t.estimate, True)} points{ci} ({test}); {_levels(t, d.groups, images)}; "
        f"{_n(d.groups)}; {_diverged(d.groups)}{_left(f.n_left_out)}"
    )


def _inconclusive(f: "Finding", title: str, images: Optional[int]) -> str:
    return f"{title}: {undecided(f)}: {gap_numbers(f, images)}{_welch_power(f)}"


def _optimizer_gap_sentence(f: "Finding", images: Optional[int]) -> str:
    model, where = model_label(f.models[0]), cell_text(epochs=f.cell["epochs"])
    if f.verdict not in ("adamw_better", "sgd_better"):
        return _inconclusive(f, f"{model}'s optimizer gap ({where})", images)
    worse, better = ("SGD", "AdamW") if f.verdict == "adamw_better" else ("AdamW", "SGD")
    size = abs(f.statistic)
    assert f.test is not None
    if f.test.rule == "welch":
        claim = f"{model}'s mean error over seeds is {size:.1f} points higher with {worse} than with {better} ({where})"
    else:
        claim = (
            f"{model}'s lowest errors lie lower with {better} than with {worse} ({where}), its bests {size:.1f} "
            f"points apart"
        )
    return f"{claim}{_holm(f)}: {gap_numbers(f, images)}"


def _pair_sentence(f: "Finding", images: Optional[int], what: str, title: str) -> str:
    """A difference of two models' gaps: which model's gap is larger, by how much, of which quantity."""
    a, b = map(model_label, f.models)
    where = cell_text(f.cell.get("optimizer") if f.kind == "length_gap_pair" else None, f.cell["epochs"])
    if f.verdict not in ("a_better", "b_better"):
        return _inconclusive(f, f"{a} vs {b}, {title} ({where})", images)
    larger, smaller = (a, b) if f.verdict == "b_better" else (b, a)
    assert f.test is not None
    of = "mean over seeds" if f.test.rule == "welch" else "best"
    return (
        f"{larger}'s {what} is {abs(f.statistic):.1f} points larger than {smaller}'s (of the {of}; {where})"
        f"{_holm(f)}: {gap_numbers(f, images)}"
    )


def _length_gap_sentence(f: "Finding", images: Optional[int]) -> str:
    d = f.detail
    assert isinstance(d, GapDetail) and f.test is not None
    model, opt = model_label(f.models[0]), _opt(f.cell["optimizer"])
    e_min, e_ref = f.cell["epochs"], d.reference_epochs
    fallback = " (the longest schedule diverged: the reference is the best shorter one)" if d.fallback else ""
    tail = f"{fallback}; per length: " + ", ".join(f"{e} ep {_pts(v, True)}" for e, v in d.per_length)
    if f.verdict not in ("shorter_worse", "shorter_better"):
        title = f"{model}'s length gap ({opt})"
        return f"{_inconclusive(f, title, images)}{tail}"
    word = "above" if f.verdict == "shorter_worse" else "below"
    size = abs(f.statistic)
    if f.test.rule == "welch":
        claim = f"{model}'s mean error at {e_min} epochs is {size:.1f} points {word} its {e_ref}-epoch one ({opt})"
    else:
        claim = (
            f"{model}'s lowest errors at {e_min} epochs lie {word} those at {e_ref} ({opt}), its bests {size:.1f} "
            f"points apart"
        )
    return f"{claim}{_holm(f)}: {gap_numbers(f, images)}{tail}"


def _peak_sentence(f: "Finding", images: Optional[int]) -> str:
    a, b = map(model_label, f.models)
    where = cell_text(f.cell["optimizer"], f.cell["epochs"])
    if f.verdict not in ("a_better", "b_better"):
        return _inconclusive(f, f"{a} vs {b} peak error ({where})", images)
    low, high = (a, b) if f.verdict == "a_better" else (b, a)
    assert f.test is not None
    if f.test.rule == "welch":
        return f"{low} reaches a lower mean error over seeds than {high} ({where}){_holm(f)}: {gap_numbers(f, images)}"
    return (
        f"{low}'s trials lie lower than {high}'s near their bests ({where}){_holm(f)}: {gap_numbers(f, images)}; the "
        f"test's null is one error distribution for both, so it shows that their lowest errors differ, not that "
        f"{low}'s expected best of {max(f.n)} trials is lower"
    )


def probability_interval(ci: Tuple[float, float]) -> str:
    """A probability's interval to two decimals, low end first."""
    low, high = sorted(ci)
    return f"[{low:.2f}, {high:.2f}]"


def _aggregate_sentence(f: "Finding", images: Optional[int]) -> str:
    """A pair of models across cells: the mean probability of improvement, its interval and test, per cell."""
    d, t = f.detail, f.test
    assert isinstance(d, AggregateDetail) and t is not None and t.ci is not None
    a, b = map(model_label, f.models)
    sources = len({c.studies for c in d.cells})
    where = f"{len(d.cells)} cells of {sources} source{'' if sources == 1 else 's'}"
    flipped = f.verdict == "b_better"  # the cells' probabilities are the sentence's first model's
    first = b if flipped else a
    per_cell = "; ".join(
        f"{cell_text(c.optimizer, c.epochs)} [{' + '.join(c.studies)}] "
        f"{(1 - c.p_a_better if flipped else c.p_a_better):.2f} (n = {_slash(c.n)})"
        for c in d.cells
    )
    diverged = [sum(c.diverged[i] for c in d.cells) for i in (0, 1)]
    tail = (
        f"; per cell, P({first} better): {per_cell}; diverged {a} {diverged[0]}/{t.n[0]}, {b} {diverged[1]}/{t.n[1]} "
        f"(counted at chance error){_left(f.n_left_out)}"
    )
    numbers = lambda ci: (
        f"stratified bootstrap 95% CI {probability_interval(ci)}, cells taken as independent; {RULES[t.rule]}, "
        f"{p_text(t)}, n = {_slash(t.n)} trials over the cells"
    )
    if f.verdict in ("a_better", "b_better"):
        win, lose = (a, b) if f.verdict == "a_better" else (b, a)
        prob, ci = (t.estimate, t.ci) if f.verdict == "a_better" else (1 - t.estimate, (1 - t.ci[1], 1 - t.ci[0]))
        return (
            f"{win}'s trials beat {lose}'s across {where}: a random {win} trial has a lower error than a random "
            f"{lose} trial of the same cell with probability {prob:.2f} averaged over the cells, each cell weighing "
            f"the same, ties half ({numbers(ci)}){_holm(f)}{tail}"
        )
    return (
        f"{a} vs {b} across {where}: {undecided(f)}: a random {a} trial has a lower error than a random {b} trial "
        f"of the same cell with probability {t.estimate:.2f} averaged over the cells, each cell weighing the same, "
        f"ties half (1/2: no difference; {numbers(t.ci)}){tail}"
    )


def _scope_sentence(f: "Finding", images: Optional[int]) -> str:
    d = f.detail
    assert isinstance(d, ScopeDetail)
    rules = ", ".join(f"{RULES[r]} ({k})" for r, k in d.rules.items())
    grid = (
        f" The errors lie on a grid of {d.images} validation images (one image = {100 / d.images:.2g} points)."
        if d.images
        else ""
    )
    borderline = f", {d.borderline} borderline (a Monte-Carlo p the draws could not settle)" if d.borderline else ""
    family = "every finding below whose design can reach α"
    if d.sources:
        merged = [" + ".join(source) for source in d.sources]
        shared = f"; studies joined by + share trials, each counted once ({d.shared} rows)" if d.shared else ""
        family += f", declared over {', '.join(merged[:-1]) + ' and ' if len(merged) > 1 else ''}{merged[-1]}{shared}"
    return (
        f"{f.family} test{'' if f.family == 1 else 's'} at α = {d.alpha:g} each ({rules or 'none'}): "
        f"{d.decided} decided, {d.decided_holm} still decided after Holm's adjustment over all {f.family}{borderline} "
        f"(the family: {family}); each rule's error rate at these n is measured "
        f"({CALIBRATION_DOC}). {d.n} trials counted on the {d.metric} error, {d.n_diverged} of them "
        f"diverged (counted at chance error); {d.n_failed} failed"
        + (f" and {d.n_no_finite_error} without a finite error" if d.n_no_finite_error else "")
        + f" left out.{grid}"
    )


RENDER: Dict[str, Callable[["Finding", Optional[int]], str]] = {
    "scope": _scope_sentence,
    "edf_pair": lambda f, images: _edf_sentence(f),
    "optimizer_gap": _optimizer_gap_sentence,
    "optimizer_gap_pair": lambda f, images: _pair_sentence(
        f, images, "loss from SGD instead of AdamW", "loss from SGD instead of AdamW"
    ),
    "length_gap": _length_gap_sentence,
    "length_gap_pair": lambda f, images: _pair_sentence(
        f, images, "distance from its long-schedule error", "distance from the long-schedule error"
    ),
    "peak": _peak_sentence,
    "aggregate": _aggregate_sentence,
}


def sentence(f: "Finding") -> str:
    """The finding in words (RENDER, by kind); in a family over several studies, its source first."""
    source = f"[{' + '.join(f.studies)}] " if f.studies else ""
    return source + RENDER[f.kind](f, f.detail.images)
