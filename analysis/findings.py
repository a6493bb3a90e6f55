"""Findings: generated sentences, each with its test, statistic, uncertainty and n.

A report opens with these. Every sentence is produced by one test on the trial table, and none is
stated without it: where the test cannot decide, the sentence says "inconclusive at this n" and how
far the data are from deciding. Pure functions on the trial DataFrame (like the rest of
`analysis`); the estimators are the ones the tables use (`hpstudy.analysis.stats`, `hpstudy.analysis.gaps`).

Rows: failed trials and rows without a finite error under the metric are left out and counted
(`hpstudy.analysis.metric.usable`); diverged trials count at their (chance) error, as everywhere else.

Kinds (one `Finding` each; `models` in catalogue order, `verdict` relative to that order):

- `edf_pair` (the paper's Figs 5-6, lr/wd stability): for every pair of models within an
  (optimizer, epochs) cell, their Δ-EDFs (Δ = error - the model's own best in the cell). Test: the
  two one-sided two-sample KS tests (`stats.ks_compare`, H1 "this model's Δ is stochastically
  smaller", i.e. its Δ-EDF lies above), each at ALPHA / 2 so the pair's two directions together
  keep the error rate at ALPHA. At this level the asymptotic critical distance is exactly the
  two-sided `stats.min_detectable_d(n, m, ALPHA)`, which the "inconclusive" sentence quotes, with
  the trials per model that would make the observed D significant (`stats.trials_for_ks`). Both
  directions significant: the EDFs cross. Effect size: the area between the Δ-EDFs in points with a
  bootstrap 95% CI (`stats.effect_sizes`, the references held fixed) and each model's share of
  trials within 2 points of its own best. A cell where every model ran a single (lr, wd) (a length
  or optimizer study: seeds only) is not tested: its Δ-EDF measures seed noise, not lr/wd robustness.
- `optimizer_gap` (Fig 3), per (model, epochs): best SGD - best AdamW with the bootstrap 95% CI of
  `gaps.optimizer_gap`; decided when the CI excludes 0 (a two-sided bootstrap test at 5%), else
  inconclusive. `p` is None: the CI is the test.
- `optimizer_gap_pair`, per pair of models and epochs: the difference of their optimizer gaps, CI
  from the same bootstrap of the minimum (`gaps.bootstrap_min`, N_BOOT draws per sample, seed SEED);
  decided when the CI excludes 0.
- `length_gap` (Fig 2), per (model, optimizer): error(E_min) - error(E_ref) from `gaps.length_gap`
  (E_ref = the longest schedule, or the paper's fallback), CI by the same bootstrap of the minimum,
  with the gap at every length in the sentence; decided when the CI excludes 0.
- `length_gap_pair`, per pair of models and optimizer: the difference of their gaps at the
  shortest schedule; decided when the CI excludes 0.
- `peak` (Fig 7, Table 2), per pair of models: the difference of their best errors
  (`gaps.peak_table`, over all cells) against the noise floor, the seed-to-seed standard deviation
  of one configuration (pooled; for a difference of two runs sigma = sqrt(s_a^2 + s_b^2), one
  model's floor standing for both where the other has none). Test: z = difference / sigma, two-sided
  normal p (`scipy.stats.norm`) against ALPHA, i.e. |z| >= 1.96. Without any repeated seed there is
  no floor and the finding is inconclusive. Caveat, stated in the sentence's test name: a best over
  many trials is optimistic (selection), and the floor is estimated from few seeds.
- `scope`: how many tests were made at ALPHA each (no multiple-comparison correction: about
  ALPHA x tests false positives are expected if nothing differed), trials left out and diverged.
"""

import itertools
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
from scipy import stats as sps

from hpstudy.analysis.gaps import bootstrap_min, length_gap, optimizer_gap, peak_table
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, LeftOutWarning, usable
from hpstudy.analysis.stats import effect_sizes, ks_compare, min_detectable_d, trials_for_ks
from hpstudy.trainers.schema import DIVERGED, FAILED
from hpstudy.trainers.zoo import list_models

ALPHA = 0.05  # the error rate of every test (per finding; see `scope`)
CI_LEVEL = 0.95  # every interval: bootstrap percentiles 2.5 / 97.5
N_BOOT = 1000  # bootstrap draws per interval
SEED = 0  # the bootstraps' seed: the same table gives the same sentences
WITHIN = 2  # points: "share of trials within 2 points of the model's own best"
MIN_PER_MODEL = 2  # a KS comparison needs at least this many counted trials per model
KINDS = ("scope", "edf_pair", "optimizer_gap", "optimizer_gap_pair", "length_gap", "length_gap_pair", "peak")


@dataclass
class Finding:
    """One generated sentence and the test behind it (see the module docstring for each kind)."""

    kind: str
    models: Tuple[str, ...]  # catalogue order; `verdict` a_better / b_better refers to it
    cell: Dict  # optimizer and/or epochs the finding is about ({} = whole study)
    statistic_name: str
    statistic: Optional[float]
    ci: Optional[Tuple[float, float]]  # 95% interval of the statistic, where it has one
    p: Optional[float]  # None where the CI is the test
    n: Tuple[int, ...]  # counted trials per model (per sample) behind the statistic
    n_left_out: Tuple[int, ...]  # failed / no finite error, per model
    verdict: str  # a_better, b_better, crossing, adamw_better, sgd_better,
    # shorter_worse, shorter_better, inconclusive, info
    better: Optional[str]  # the model (or optimizer) the verdict favours, else None
    sentence: str
    detail: Dict = field(default_factory=dict)

    def as_dict(self) -> Dict:
        out = asdict(self)
        out["models"], out["n"], out["n_left_out"] = list(self.models), list(self.n), list(self.n_left_out)
        out["ci"] = list(self.ci) if self.ci is not None else None
        return _plain(out)


def _plain(value):
    """numpy scalars to Python, NaN to None (JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# ---- formatting --------------------------------------------------------------------------------


def fmt_p(p: float) -> str:
    """p = 0.012, p = 8e-5, p < 1e-16."""
    if p < 1e-16:
        return "p < 1e-16"
    if p < 1e-3:
        mantissa, exponent = f"{p:.0e}".split("e")
        return f"p = {mantissa}e{int(exponent)}"
    return f"p = {p:.2g}" if p < 0.1 else f"p = {p:.2f}"


def _pts(value: float, signed: bool = False) -> str:
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def _ci(lo: float, hi: float) -> str:
    return f"[{lo:.1f}, {hi:.1f}]"


def _cell(optimizer=None, epochs=None) -> str:
    parts = ([_opt(optimizer)] if optimizer is not None else []) + ([f"{int(epochs)} ep"] if epochs is not None else [])
    return ", ".join(parts)


def _opt(optimizer: str) -> str:
    return {"adamw": "AdamW", "sgd": "SGD"}.get(optimizer, optimizer)


def _left(n_left_out: Sequence[int]) -> str:
    total = int(sum(n_left_out))
    return f"; {total} left out (failed / no finite error)" if total else ""


def _order(models) -> List[str]:
    catalogue = list_models()
    return sorted(models, key=lambda m: (catalogue.index(m) if m in catalogue else len(catalogue), m))


def _ci_of(draws: np.ndarray) -> Tuple[float, float]:
    lo, hi = np.quantile(draws, [(1 - CI_LEVEL) / 2, 1 - (1 - CI_LEVEL) / 2])
    return float(lo), float(hi)


def _left_out(rows, **keys) -> int:
    frame = rows.left_out
    for column, value in keys.items():
        frame = frame[frame[column] == value]
    return len(frame)


# ---- the kinds ---------------------------------------------------------------------------------


def edf_pair_findings(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, alpha: float = ALPHA, n_boot: int = N_BOOT, seed: int = SEED
) -> List[Finding]:
    """Δ-EDF comparisons for every model pair within each (optimizer, epochs) cell."""
    rows = usable(trials, metric)
    out = []
    for (opt, epochs), cell in rows.kept.groupby(["optimizer", "epochs"], sort=True, observed=True):
        if cell.groupby("model", observed=True)[["lr", "wd"]].nunique().max().max() < 2:
            continue  # one (lr, wd) per model: nothing about lr/wd robustness to test
        where = _cell(opt, epochs)
        for a, b in itertools.combinations(_order(cell["model"].unique()), 2):
            ea = cell.loc[cell["model"] == a, ERR].to_numpy(float)
            eb = cell.loc[cell["model"] == b, ERR].to_numpy(float)
            left = (
                _left_out(rows, model=a, optimizer=opt, epochs=epochs),
                _left_out(rows, model=b, optimizer=opt, epochs=epochs),
            )
            out.append(
                _edf_pair(a, b, ea, eb, left, {"optimizer": opt, "epochs": int(epochs)}, where, alpha, n_boot, seed)
            )
    return out


def _edf_pair(a, b, ea, eb, left, cell, where, alpha, n_boot, seed) -> Finding:
    n = (len(ea), len(eb))
    base = dict(kind="edf_pair", models=(a, b), cell=cell, n=n, n_left_out=left)
    if min(n) < MIN_PER_MODEL:
        return Finding(
            **base,
            statistic_name="one-sided KS D",
            statistic=None,
            ci=None,
            p=None,
            verdict="inconclusive",
            better=None,
            sentence=f"{a} vs {b} Δ-EDFs ({where}): inconclusive, fewer than {MIN_PER_MODEL} "
            f"counted trials (n = {n[0]}/{n[1]}){_left(left)}",
        )
    da, db = ea - ea.min(), eb - eb.min()
    ab, ba = ks_compare(da, db), ks_compare(db, da)
    d_min = min_detectable_d(n[0], n[1], alpha)
    effects = effect_sizes(da, db, n_boot=n_boot, seed=seed)
    area = (effects["area"], effects["area_lo"], effects["area_hi"])
    within = (effects[f"within{WITHIN}_a"], effects[f"within{WITHIN}_b"])
    detail = {
        "ks_d_a_better": ab["ks_d_a_better"],
        "p_a_better": ab["ks_p_a_better"],
        "ks_d_b_better": ba["ks_d_a_better"],
        "p_b_better": ba["ks_p_a_better"],
        "ks_d_two_sided": ab["ks_d"],
        "p_two_sided": ab["ks_p"],
        "min_detectable_d": d_min,
        "area": area[0],
        "area_lo": area[1],
        "area_hi": area[2],
        f"within{WITHIN}_a": within[0],
        f"within{WITHIN}_b": within[1],
        "alpha_per_direction": alpha / 2,
    }
    a_sig, b_sig = ab["ks_p_a_better"] < alpha / 2, ba["ks_p_a_better"] < alpha / 2
    effect = (
        f"area between Δ-EDFs {area[0]:.1f} points {_ci(area[1], area[2])}; within {WITHIN} points of "
        f"own best: {a} {within[0]:.0%}, {b} {within[1]:.0%}"
    )
    if a_sig != b_sig:
        win, lose = (a, b) if a_sig else (b, a)
        test = ab if a_sig else ba
        d_rev = (ba if a_sig else ab)["ks_d_a_better"]
        relation = "dominates" if d_rev == 0 else "lies above"
        n_w, n_l = n if a_sig else n[::-1]
        return Finding(
            **base,
            statistic_name="one-sided KS D",
            statistic=test["ks_d_a_better"],
            ci=None,
            p=test["ks_p_a_better"],
            verdict="a_better" if a_sig else "b_better",
            better=win,
            detail=detail,
            sentence=f"{win}'s Δ-EDF {relation} {lose}'s ({where}): one-sided KS D = "
            f"{test['ks_d_a_better']:.2f}, {fmt_p(test['ks_p_a_better'])}, n = {n_w}/{n_l}; "
            f"{effect}{_left(left)}",
        )
    if a_sig and b_sig:
        return Finding(
            **base,
            statistic_name="two-sided KS D",
            statistic=ab["ks_d"],
            ci=None,
            p=ab["ks_p"],
            verdict="crossing",
            better=None,
            detail=detail,
            sentence=f"{a}'s and {b}'s Δ-EDFs cross ({where}): each lies above the other somewhere "
            f"(one-sided KS D = {ab['ks_d_a_better']:.2f}, {fmt_p(ab['ks_p_a_better'])} and "
            f"D = {ba['ks_d_a_better']:.2f}, {fmt_p(ba['ks_p_a_better'])}), n = {n[0]}/{n[1]}; "
            f"{effect}{_left(left)}",
        )
    d_obs = ab["ks_d"]
    need = (
        f"; about {trials_for_ks(d_obs, alpha)} trials per model would make D = {d_obs:.2f} significant"
        if 0 < d_obs < 1
        else ""
    )
    reach = " > 1: no result could decide" if d_min > 1 else ""
    return Finding(
        **base,
        statistic_name="two-sided KS D",
        statistic=d_obs,
        ci=None,
        p=ab["ks_p"],
        verdict="inconclusive",
        better=None,
        detail=detail,
        sentence=f"{a} vs {b} Δ-EDFs ({where}): inconclusive at this n (minimum detectable D = "
        f"{d_min:.2f}{reach}): KS D = {d_obs:.2f}, {fmt_p(ab['ks_p'])}, n = {n[0]}/{n[1]}; "
        f"{effect}{need}{_left(left)}",
    )


def _decide(lo: float, hi: float, positive: str, negative: str) -> str:
    return positive if lo > 0 else negative if hi < 0 else "inconclusive"


def _pair_gap_numbers(
    a: str, b: str, diff: float, ci: Tuple[float, float], n: Tuple[int, ...], left: Tuple[int, ...]
) -> str:
    """The numbers of a finding on the difference of two models' gaps (optimizer or length)."""
    return (
        f"gap {a} − gap {b} = {_pts(diff, True)} points {_ci(*ci)} (bootstrap 95% CI), n = {n[0]}/{n[1]}{_left(left)}"
    )


def optimizer_gap_findings(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, n_boot: int = N_BOOT, seed: int = SEED
) -> List[Finding]:
    """Per (model, epochs): best SGD - best AdamW; per model pair: the difference of their gaps."""
    rows = usable(trials, metric)
    if not {"adamw", "sgd"} <= set(rows.kept["optimizer"]):
        return []
    table = optimizer_gap(trials, metric=metric, n_boot=n_boot, seed=seed)
    out = []
    for rec in table.itertuples(index=False):
        left: Tuple[int, ...] = (_left_out(rows, model=rec.model, epochs=rec.epochs),)
        verdict = _decide(rec.gap_lo, rec.gap_hi, "adamw_better", "sgd_better")
        where = _cell(epochs=rec.epochs)
        numbers = (
            f"best SGD − best AdamW = {_pts(rec.gap, True)} points {_ci(rec.gap_lo, rec.gap_hi)} "
            f"(bootstrap 95% CI; {rec.best_sgd:.2f}% vs {rec.best_adamw:.2f}%), n = {rec.n_sgd}/{rec.n_adamw} "
            f"(SGD/AdamW){_left(left)}"
        )
        if verdict == "inconclusive":
            sentence = f"{rec.model}'s optimizer gap ({where}): inconclusive at this n (the CI includes 0): {numbers}"
        else:
            verb = "loses" if verdict == "adamw_better" else "gains"
            sentence = f"{rec.model} {verb} {abs(rec.gap):.1f} points when SGD replaces AdamW ({where}): {numbers}"
        out.append(
            Finding(
                kind="optimizer_gap",
                models=(rec.model,),
                cell={"epochs": int(rec.epochs)},
                statistic_name="best SGD - best AdamW (points)",
                statistic=rec.gap,
                ci=(rec.gap_lo, rec.gap_hi),
                p=None,
                n=(rec.n_sgd, rec.n_adamw),
                n_left_out=left,
                verdict=verdict,
                better={"adamw_better": "adamw", "sgd_better": "sgd"}.get(verdict),
                sentence=sentence,
            )
        )
    rng = np.random.default_rng(seed)
    kept = rows.kept
    for epochs, cell in table.groupby("epochs", sort=True):
        for a, b in itertools.combinations(_order(cell["model"]), 2):
            ga, gb = (cell.set_index("model").loc[m, "gap"] for m in (a, b))
            draws = []
            for m in (a, b):
                sel = kept[(kept["model"] == m) & (kept["epochs"] == epochs)]
                draws.append(
                    bootstrap_min(sel.loc[sel["optimizer"] == "sgd", ERR].to_numpy(float), rng, n_boot)
                    - bootstrap_min(sel.loc[sel["optimizer"] == "adamw", ERR].to_numpy(float), rng, n_boot)
                )
            lo, hi = _ci_of(draws[0] - draws[1])
            diff = ga - gb
            verdict = _decide(lo, hi, "b_better", "a_better")  # a larger gap = a less stable
            n = tuple(
                int(cell.set_index("model").loc[m, "n_sgd"] + cell.set_index("model").loc[m, "n_adamw"]) for m in (a, b)
            )
            left = tuple(_left_out(rows, model=m, epochs=epochs) for m in (a, b))
            numbers = _pair_gap_numbers(a, b, diff, (lo, hi), n, left)
            if verdict == "inconclusive":
                sentence = (
                    f"{a} vs {b}, loss from SGD instead of AdamW ({_cell(epochs=epochs)}): inconclusive at "
                    f"this n (the CI includes 0): {numbers}"
                )
            else:
                more, less = (a, b) if verdict == "b_better" else (b, a)
                sentence = (
                    f"{more} loses {abs(diff):.1f} points more than {less} when SGD replaces AdamW "
                    f"({_cell(epochs=epochs)}): {numbers}"
                )
            out.append(
                Finding(
                    kind="optimizer_gap_pair",
                    models=(a, b),
                    cell={"epochs": int(epochs)},
                    statistic_name="optimizer gap of a - of b (points)",
                    statistic=diff,
                    ci=(lo, hi),
                    p=None,
                    n=n,
                    n_left_out=left,
                    verdict=verdict,
                    better={"a_better": a, "b_better": b}.get(verdict),
                    sentence=sentence,
                )
            )
    return out


def length_gap_findings(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, n_boot: int = N_BOOT, seed: int = SEED
) -> List[Finding]:
    """Per (model, optimizer): error(E_min) - error(E_ref); per model pair: the difference at E_min."""
    rows = usable(trials, metric)
    if rows.kept["epochs"].nunique() < 2:
        return []
    table = length_gap(trials, metric=metric)
    kept = rows.kept
    rng = np.random.default_rng(seed)
    out, draws_of = [], {}
    for (model, opt), group in table.groupby(["model", "optimizer"], sort=True):
        if len(group) < 2:
            continue
        group = group.sort_values("epochs")
        first = group.iloc[0]
        e_min, e_ref = int(first["epochs"]), int(first["reference_epochs"])
        if e_min == e_ref:
            continue
        sel = kept[(kept["model"] == model) & (kept["optimizer"] == opt)]
        short, ref = (sel.loc[sel["epochs"] == e, ERR].to_numpy(float) for e in (e_min, e_ref))
        draws = bootstrap_min(short, rng, n_boot) - bootstrap_min(ref, rng, n_boot)
        draws_of[(model, opt)] = (e_min, draws, len(short) + len(ref))
        lo, hi = _ci_of(draws)
        verdict = _decide(lo, hi, "shorter_worse", "shorter_better")
        left: Tuple[int, ...] = (_left_out(rows, model=model, optimizer=opt),)
        all_gaps = ", ".join(f"{int(r.epochs)} ep {_pts(r.gap, True)}" for r in group.itertuples() if r.epochs != e_ref)
        fallback = (
            " (the longest schedule diverged: reference is the best shorter one)" if first["reference_fallback"] else ""
        )
        numbers = (
            f"error({e_min} ep) − error({e_ref} ep) = {_pts(first['gap'], True)} points {_ci(lo, hi)} "
            f"(bootstrap 95% CI; {first['error']:.2f}% vs {first['reference']:.2f}%){fallback}; gaps: {all_gaps}; "
            f"n = {len(short)}/{len(ref)}{_left(left)}"
        )
        if verdict == "inconclusive":
            sentence = f"{model}'s length gap ({_opt(opt)}): inconclusive at this n (the CI includes 0): {numbers}"
        else:
            word = "above" if verdict == "shorter_worse" else "below"
            sentence = (
                f"{model} at {e_min} epochs is {abs(first['gap']):.1f} points {word} its {e_ref}-epoch "
                f"error ({_opt(opt)}): {numbers}"
            )
        out.append(
            Finding(
                kind="length_gap",
                models=(model,),
                cell={"optimizer": opt, "epochs": e_min},
                statistic_name=f"error({e_min} ep) - error({e_ref} ep) (points)",
                statistic=first["gap"],
                ci=(lo, hi),
                p=None,
                n=(len(short), len(ref)),
                n_left_out=left,
                verdict=verdict,
                better=None,
                sentence=sentence,
                detail={"reference_epochs": e_ref, "reference_fallback": bool(first["reference_fallback"])},
            )
        )
    gaps = {(f.models[0], f.cell["optimizer"]): f for f in out}
    for opt in sorted({o for _, o in draws_of}):
        models = _order([m for m, o in draws_of if o == opt])
        for a, b in itertools.combinations(models, 2):
            (ea, da, na), (eb, db, nb) = draws_of[(a, opt)], draws_of[(b, opt)]
            if ea != eb:
                continue
            gap_a, gap_b = gaps[(a, opt)].statistic, gaps[(b, opt)].statistic
            assert gap_a is not None and gap_b is not None  # every length_gap finding carries its gap
            diff = gap_a - gap_b
            lo, hi = _ci_of(da - db)
            verdict = _decide(lo, hi, "b_better", "a_better")  # a larger gap: further from converged
            left = (gaps[(a, opt)].n_left_out[0], gaps[(b, opt)].n_left_out[0])
            numbers = _pair_gap_numbers(a, b, diff, (lo, hi), (na, nb), left)
            if verdict == "inconclusive":
                sentence = (
                    f"{a} vs {b}, distance from the long-schedule error at {ea} epochs ({_opt(opt)}): "
                    f"inconclusive at this n (the CI includes 0): {numbers}"
                )
            else:
                closer, farther = (b, a) if verdict == "b_better" else (a, b)
                sentence = (
                    f"{closer} is closer to its long-schedule error than {farther} at {ea} epochs "
                    f"({_opt(opt)}), by {abs(diff):.1f} points: {numbers}"
                )
            out.append(
                Finding(
                    kind="length_gap_pair",
                    models=(a, b),
                    cell={"optimizer": opt, "epochs": ea},
                    statistic_name="length gap of a - of b (points)",
                    statistic=diff,
                    ci=(lo, hi),
                    p=None,
                    n=(na, nb),
                    n_left_out=left,
                    verdict=verdict,
                    better={"a_better": a, "b_better": b}.get(verdict),
                    sentence=sentence,
                )
            )
    return out


def _noise_at_best(kept: pd.DataFrame) -> pd.Series:
    """Per model: the std over seeds (ddof 1) of the configuration (optimizer, epochs, lr, wd) that
    gave its best trial; NaN where that configuration ran with one seed. Not the pooled floor of
    peak_table: a short schedule's seeds spread far more than the best one's, and would hide a
    difference the best configuration's own seeds settle (as the paper's mean ± std over seeds)."""
    config = ["optimizer", "epochs", "lr", "wd"]
    noise = {}
    for model, group in kept.groupby("model", observed=True):
        best = group.loc[group[ERR].idxmin(), config]
        same = (group[config] == best).all(axis=1)
        noise[model] = float(group.loc[same, ERR].std(ddof=1)) if same.sum() > 1 else np.nan
    return pd.Series(noise, dtype=float)


def peak_findings(trials: pd.DataFrame, metric: str = DEFAULT_METRIC, alpha: float = ALPHA) -> List[Finding]:
    """Per model pair: the difference of the best errors against the seed-to-seed noise of each
    model's best configuration (`_noise_at_best`)."""
    table = peak_table(trials, metric)
    if table.empty:
        return []
    table = table.set_index("model")
    table["noise_floor"] = _noise_at_best(usable(trials, metric).kept).reindex(table.index)
    z_crit = float(sps.norm.isf(alpha / 2))
    out = []
    for a, b in itertools.combinations(_order(table.index), 2):
        ra, rb = table.loc[a], table.loc[b]
        diff = float(ra["best_err"] - rb["best_err"])
        floors = [f for f in (ra["noise_floor"], rb["noise_floor"]) if np.isfinite(f)]
        sigma = float(np.sqrt(sum(f**2 for f in floors) * (2 / len(floors)))) if floors else np.nan
        n, left = (int(ra["n"]), int(rb["n"])), (int(ra["n_left_out"]), int(rb["n_left_out"]))
        bests = (
            f"best {a} {ra['best_err']:.2f}% ({_cell(ra['optimizer'], ra['epochs'])}), "
            f"{b} {rb['best_err']:.2f}% ({_cell(rb['optimizer'], rb['epochs'])})"
        )
        base: Dict[str, Any] = dict(
            kind="peak",
            models=(a, b),
            cell={},
            statistic_name="best a - best b (points)",
            statistic=diff,
            n=n,
            n_left_out=left,
        )
        if not floors or sigma == 0:
            why = (
                "neither model's best configuration ran with more than one seed"
                if not floors
                else "the repeated seeds gave identical errors"
            )
            out.append(
                Finding(
                    **base,
                    ci=None,
                    p=None,
                    verdict="inconclusive",
                    better=None,
                    detail={"noise_floor_a": ra["noise_floor"], "noise_floor_b": rb["noise_floor"]},
                    sentence=f"{a} vs {b} peak error: inconclusive, no noise floor ({why}): {bests}, "
                    f"difference {_pts(diff, True)} points; n = {n[0]}/{n[1]}{_left(left)}",
                )
            )
            continue
        z = diff / sigma
        p = float(2 * sps.norm.sf(abs(z)))
        ci = (diff - z_crit * sigma, diff + z_crit * sigma)
        verdict = "inconclusive" if p >= alpha else ("a_better" if diff < 0 else "b_better")
        numbers = (
            f"{bests}; difference {_pts(diff, True)} points = {abs(z):.1f} × the seed-to-seed noise "
            f"(σ of a difference = {sigma:.2f} points, z-test {fmt_p(p)}; 95% {_ci(*ci)}); "
            f"n = {n[0]}/{n[1]}, seeds {int(ra['seeds'])}/{int(rb['seeds'])}{_left(left)}"
        )
        if verdict == "inconclusive":
            sentence = f"{a} vs {b} peak error: inconclusive at this noise (|z| < {z_crit:.2f}): {numbers}"
        else:
            low, high = (a, b) if diff < 0 else (b, a)
            sentence = f"{low} reaches a lower best error than {high}, beyond the seed noise: {numbers}"
        out.append(
            Finding(
                **base,
                ci=ci,
                p=p,
                verdict=verdict,
                better={"a_better": a, "b_better": b}.get(verdict),
                sentence=sentence,
                detail={"z": z, "sigma": sigma, "noise_floor_a": ra["noise_floor"], "noise_floor_b": rb["noise_floor"]},
            )
        )
    return out


def findings(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, alpha: float = ALPHA, n_boot: int = N_BOOT, seed: int = SEED
) -> List[Finding]:
    """Every finding the table supports, the `scope` sentence first."""
    rows = usable(trials, metric)
    with warnings.catch_warnings():  # what is left out is counted in every sentence instead
        warnings.simplefilter("ignore", LeftOutWarning)
        tested = (
            edf_pair_findings(trials, metric, alpha, n_boot, seed)
            + optimizer_gap_findings(trials, metric, n_boot, seed)
            + length_gap_findings(trials, metric, n_boot, seed)
            + peak_findings(trials, metric, alpha)
        )
    n_tests = sum(f.p is not None or f.ci is not None for f in tested)
    decided = sum(f.verdict != "inconclusive" for f in tested)
    n_failed = int((trials["status"] == FAILED).sum())
    n_diverged = int((rows.kept["status"] == DIVERGED).sum())
    no_value = len(rows.left_out) - n_failed
    scope = Finding(
        kind="scope",
        models=tuple(_order(rows.kept["model"].unique())),
        cell={},
        statistic_name="tests",
        statistic=float(n_tests),
        ci=None,
        p=None,
        n=(len(rows.kept),),
        n_left_out=(len(rows.left_out),),
        verdict="info",
        better=None,
        detail={
            "alpha": alpha,
            "n_failed": n_failed,
            "n_diverged": n_diverged,
            "n_no_finite_error": no_value,
            "decided": decided,
        },
        sentence=(
            f"{n_tests} test{'' if n_tests == 1 else 's'} at α = {alpha:g} each, {decided} decided "
            f"(no multiple-comparison correction: about {alpha * n_tests:.1f} false findings are expected if nothing "
            f"differed); {len(rows.kept)} trials counted on the {rows.metric} error, "
            f"{n_diverged} of them diverged (counted at chance error); {n_failed} failed"
            + (f" and {no_value} without a finite error" if no_value else "")
            + " left out."
        ),
    )
    return [scope] + tested
