"""One family declared over several studies (`findings_across`, `hpstudy findings`): studies that share
trials are one source and each trial counts once; what different sources hold is never pooled into one
cell; every test of every source is in one Holm family."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.findings import findings, findings_across, sources_of
from hpstudy.analysis.stats import StatsError
from hpstudy.cli import hpstudy_main
from tests.helpers import REPO

STORE = os.path.join(REPO, "docs", "reproduction", "store")


def _table(prefix: str, keys, model="vit_c_tiny", opt="adamw", epochs=6, shift=0.0) -> pd.DataFrame:
    """Trials of one cell, lr/wd sampled (the `samples` design), errors rising with the key."""
    return pd.DataFrame(
        {
            "trial_key": [f"{prefix}{k}" for k in keys],
            "model": model,
            "optimizer": opt,
            "epochs": epochs,
            "lr": [1e-3 * 1.1**k for k in keys],
            "wd": [0.05 * 1.2**k for k in keys],
            "seed": 0,
            "status": "ok",
            "top1_err": [10.0 + shift + k for k in keys],
            "best_top1_err": [10.0 + shift + k for k in keys],
        }
    )


def test_studies_that_share_a_trial_are_one_source_through_any_chain():
    tables = {
        "a": _table("k", range(0, 5)),
        "b": _table("k", range(4, 9)),  # shares k4 with a
        "c": _table("k", range(8, 12)),  # shares k8 with b: a, b and c are one source
        "d": _table("other", range(3)),
        "e": _table("zz", range(2)),
    }
    assert sources_of(tables) == [("a", "b", "c"), ("d",), ("e",)]
    assert sources_of({"x": tables["d"]}) == [("x",)]


def test_shared_trials_count_once_and_sources_are_never_pooled():
    """Two studies sharing their first 4 trials of one cell: one source, the cell's 12 distinct trials once;
    a third study with the same cell but other trials stays its own cell (a finding of its own)."""
    a = pd.concat([_table("s", range(8)), _table("s", range(100, 108), model="vit_p_tiny", shift=5.0)])
    b = pd.concat([_table("s", range(4, 12)), _table("s", range(104, 112), model="vit_p_tiny", shift=5.0)])
    c = pd.concat([_table("c", range(8), shift=1.0), _table("c", range(100, 108), model="vit_p_tiny", shift=2.0)])
    found = findings_across({"a": a, "b": b, "c": c})
    scope, tested = found[0], found[1:]
    assert scope.detail.sources == (("a", "b"), ("c",)) and scope.detail.shared == 8
    assert scope.detail.n == 24 + 16  # 12 + 12 distinct trials of a and b, 16 of c
    pairs = [f for f in tested if f.kind == "edf_pair"]
    assert sorted(f.studies for f in pairs) == [("a", "b"), ("c",)]
    assert {f.n for f in pairs} == {(12, 12), (8, 8)}
    assert all(f.family == len([t for t in tested if t.test.decidable]) for f in tested)
    per_source = [f for f in tested if f.kind != "aggregate"]
    assert all(f.sentence.startswith(f"[{' + '.join(f.studies)}] ") for f in per_source)
    (aggregate,) = [f for f in tested if f.kind == "aggregate"]  # the pair's cell in each source: two cells
    assert [c.studies for c in aggregate.detail.cells] == [("a", "b"), ("c",)] and aggregate.n == (20, 20)
    assert (
        "(the family: every finding below whose design can reach α, declared over a + b and c; studies "
        in (scope.sentence)
        and "each counted once (8 rows))" in scope.sentence
    )
    with pytest.raises(StatsError, match="findings_across: tables: bad value"):
        findings_across({})


def test_studies_that_share_nothing_are_declared_without_a_count_of_shared_rows():
    found = findings_across({"a": _table("s", range(8)), "b": _table("t", range(8), model="vit_p_tiny", shift=3)})
    assert found[0].detail.shared == 0
    assert "(the family: every finding below whose design can reach α, declared over a and b); " in found[0].sentence


def test_one_study_is_the_same_family_as_findings():
    table = pd.concat([_table("s", range(10)), _table("t", range(10), model="vit_p_tiny", shift=3.0)])
    alone, across = findings(table), findings_across({"only": table})
    assert [f.p_holm for f in alone] == [f.p_holm for f in across]
    assert [f.verdict_holm for f in alone] == [f.verdict_holm for f in across]


@pytest.mark.slow
def test_hpstudy_findings_declares_one_family_over_the_studies_named(capsys):
    """The length study's trials are the optimizer study's AdamW trials: declared together they are one
    source whose tests (the optimizer study's 42) are counted once; with the lr/wd study (a second source), 84
    per-cell tests and one aggregate per pair of the three models across their 12 cells: 87 in one family."""
    assert hpstudy_main(["findings", "--store", STORE, "--study", "repro_digits_length", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)["findings"][0]["family"]
    argv = ["findings", "--store", STORE, "--study", "repro_digits_length", "--study", "repro_digits_optimizer"]
    assert hpstudy_main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    scope = out["findings"][0]
    assert alone == 9 and scope["family"] == 42 and scope["detail"]["shared"] == 36
    assert scope["detail"]["sources"] == [["repro_digits_length", "repro_digits_optimizer"]]
    assert all(row["studies"] == "repro_digits_length + repro_digits_optimizer" for row in out["claims"])
    assert hpstudy_main([*argv, "--study", "repro_digits_lr_wd"]) == 0
    text = capsys.readouterr().out
    assert (
        text.startswith("- 87 tests at α = 0.05 each") and "the paper's claims (verdicts after Holm over the 87" in text
    )
    assert np.sum([line.startswith("- [repro_digits_lr_wd] ") for line in text.splitlines()]) == 42
    assert np.sum([" across 12 cells of 2 sources" in line for line in text.splitlines()]) == 3


def test_studies_whose_trials_all_failed_give_the_scope_line_alone():
    """Nothing to test: the family is the scope line, which names no model and renders as JSON."""
    a = _table("a", range(4)).assign(status="failed", top1_err=np.nan, best_top1_err=np.nan)
    b = _table("b", range(4), model="vit_p_tiny").assign(status="failed", top1_err=np.nan, best_top1_err=np.nan)
    (scope,) = findings_across({"a": a, "b": b})
    assert scope.kind == "scope" and scope.models == () and scope.family == 0
    assert scope.as_dict()["better"] is None and "8 failed" in scope.sentence
