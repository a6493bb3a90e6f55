"""Findings as tables, from the same objects the sentences are rendered from: the paper's claims
against this study (`claims_table`) and the findings of one kind (`findings_table`)."""

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from hpstudy.analysis.catalogue import model_family, model_label
from hpstudy.analysis.findings.details import AggregateDetail, DeltaDetail, GapDetail
from hpstudy.analysis.findings.model import Finding
from hpstudy.analysis.findings.text import WITHIN, cell_text, p_holm_text
from hpstudy.analysis.inference import RULES

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
NOT_TESTED = {
    # claim 4 is about the error a model reaches; the best rule's null (one distribution) tests the lower tails
    (
        "peak",
        "best",
    ): "not tested: bests of random samples compare lowest errors (seed means of one configuration test it)",
}


def _two(value: float) -> str:
    """Points or a probability to two decimals (0.00, never 0.000000795)."""
    return f"{value:.2f}".replace("-0.00", "0.00")


def _interval(ci: Optional[Tuple[float, float]], sign: float = 1.0) -> str:
    """' [lo, hi]' of sign x the interval, low end first."""
    if ci is None:
        return ""
    low, high = sorted((sign * ci[0], sign * ci[1]))
    return f" [{_two(low)}, {_two(high)}]"


def claim_number(f: Finding) -> str:
    """The finding's number as the claims table states it, named by the quantity it is (a - b as the
    finding's own quantity names it, so a sign can only mean what its name says)."""
    assert f.test is not None
    d = f.detail
    if isinstance(d, DeltaDetail):
        a, b = (g.label for g in d.groups)
        return (
            f"P({a} trial nearer its best than {b}'s) = {_two(f.test.estimate)}; mean Δ {a} − {b} = "
            f"{_two(-d.area)} pts{_interval(d.area_ci, -1.0)}"
        )
    assert isinstance(d, GapDetail)
    return f"{d.quantity} = {_two(f.test.estimate)} pts{_interval(f.test.ci)}"


def _claim_verdict(f: Finding) -> str:
    """reproduced (ViT-C better after Holm), contradicted (ViT-P better), not decided, borderline, or not tested."""
    assert f.test is not None
    untested = NOT_TESTED.get((f.kind, f.test.rule))
    if untested:
        return untested
    better = {"a_better": f.models[0], "b_better": f.models[1]}.get(f.verdict_holm)
    if better is None:
        return "borderline" if f.verdict_holm == "borderline" else "not decided"
    return "reproduced" if model_family(better) == "vit_c" else "contradicted"


def claims_table(found: Sequence[Finding]) -> pd.DataFrame:
    """The paper's claims against this study: per ViT-P / ViT-C pair finding of a claim's kind, the claim,
    the paper's statement, the cell, this study's number with its interval, p after Holm and the verdict
    after Holm (reproduced: ViT-C better; contradicted: ViT-P better; a claim its test does not test:
    not tested)."""
    rows = []
    for f in found:
        if f.kind not in CLAIMS or f.test is None or {model_family(m) for m in f.models} != {"vit_p", "vit_c"}:
            continue
        claim, statement = CLAIMS[f.kind]
        rows.append(
            {
                **({"studies": " + ".join(f.studies)} if f.studies else {}),
                "claim": claim,
                "paper": statement,
                "models": " vs ".join(model_label(m) for m in f.models),
                "cell": cell_text(f.cell.get("optimizer"), f.cell.get("epochs")),
                "this study": claim_number(f),
                "p, Holm": p_holm_text(f) if f.p_holm is not None else "–",
                "n": "/".join(map(str, f.n)),
                "verdict": _claim_verdict(f),
            }
        )
    return pd.DataFrame(rows)


def findings_table(found: Sequence[Finding], kind: str) -> pd.DataFrame:
    """The findings of one kind as a table: the same objects the sentences are rendered from."""
    rows = []
    for f in found:
        if f.kind != kind or f.test is None:
            continue
        t, d = f.test, f.detail
        groups = getattr(d, "groups", ())  # an aggregate has none: its n is the trials over its cells
        rows.append(
            {
                **{f"model {'ab'[i]}" if len(f.models) > 1 else "model": m for i, m in enumerate(f.models)},
                **f.cell,
                "rule": RULES[t.rule],
                "estimate": f.statistic,
                "estimate_lo": t.ci[0] if t.ci else np.nan,
                "estimate_hi": t.ci[1] if t.ci else np.nan,
                "p": f.p if f.p is not None else np.nan,
                "p_mc_lo": t.mc[0] if t.mc else np.nan,
                "p_mc_hi": t.mc[1] if t.mc else np.nan,
                "p_holm": f.p_holm if f.p_holm is not None else np.nan,
                "verdict": f.verdict,
                "verdict_holm": f.verdict_holm,
                "n": "/".join(str(n) for n in ([g.n for g in groups] if groups else f.n)),
                "diverged": "/".join(str(n) for n in _diverged(d)),
                "n_left_out": int(sum(f.n_left_out)),
                **_effect_columns(d),
            }
        )
    return pd.DataFrame(rows)


def _diverged(d) -> Tuple[int, ...]:
    """Diverged trials per group (an aggregate's summed over its cells)."""
    if isinstance(d, AggregateDetail):
        return tuple(sum(c.diverged[i] for c in d.cells) for i in (0, 1))
    return tuple(g.diverged for g in getattr(d, "groups", ()))


def _effect_columns(d) -> Dict:
    """A Δ-EDF finding's effect sizes, an aggregate's cells, as their sentences quote them."""
    if isinstance(d, AggregateDetail):
        return {"cells": len(d.cells), "sources": len({c.studies for c in d.cells})}
    if not isinstance(d, DeltaDetail):
        return {}
    return {
        "area": d.area,
        "area_lo": d.area_ci[0],
        "area_hi": d.area_ci[1],
        f"within{WITHIN}_a": d.within[0],
        f"within{WITHIN}_b": d.within[1],
        "d_a_above": d.d_a_above,
        "d_b_above": d.d_b_above,
        "detectable": d.detectable,
    }


AGGREGATE_ROW = "all cells"  # an aggregate_table row of the mean over cells (the others: one cell each)


def aggregate_table(found: Sequence[Finding]) -> pd.DataFrame:
    """Every aggregate finding as rows for its interval figure: per pair of models, one row per cell (its
    source's studies, optimizer and epochs, n, a's probability of improvement and the cell's own 95% bootstrap
    interval) and a last row, `AGGREGATE_ROW`, of the mean over the cells with its stratified interval, p after
    Holm and verdict after Holm."""
    rows = []
    for f in found:
        d = f.detail
        if f.kind != "aggregate" or f.test is None or not isinstance(d, AggregateDetail) or f.test.ci is None:
            continue
        pair = {"a": f.models[0], "b": f.models[1]}
        for c in d.cells:
            low, high = c.p_a_better_ci
            rows.append(
                {
                    **pair,
                    "row": " + ".join(c.studies),
                    "optimizer": c.optimizer,
                    "epochs": c.epochs,
                    "n_a": c.n[0],
                    "n_b": c.n[1],
                    "p_a_better": c.p_a_better,
                    "low": low,
                    "high": high,
                }
            )
        rows.append(
            {
                **pair,
                "row": AGGREGATE_ROW,
                "n_a": f.n[0],
                "n_b": f.n[1],
                "p_a_better": f.statistic,
                "low": f.test.ci[0],
                "high": f.test.ci[1],
                "p_holm": f.p_holm,
                "verdict_holm": f.verdict_holm,
            }
        )
    columns = ["a", "b", "row", "optimizer", "epochs", "n_a", "n_b", "p_a_better", "low", "high", "p_holm"]
    return pd.DataFrame(rows, columns=columns + ["verdict_holm"]).astype({"epochs": "Int64"})
