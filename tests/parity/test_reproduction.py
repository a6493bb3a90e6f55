"""The committed reproduction (docs/reproduction.md, issue 13): its compacted trial table loads as a
store, holds every trial of the three bundled specs, and the findings the document quotes are
the ones the analysis generates from that table today."""

import os
import re

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.findings import findings
from hpstudy.study.sampling import expand_for_store
from hpstudy.study.spec import load_spec, resolve_config
from hpstudy.study.store_read import load_study
from tests.helpers import REPO

STORE = os.path.join(REPO, "docs", "reproduction", "store")
DOC = os.path.join(REPO, "docs", "reproduction.md")
STUDIES = ["repro_digits_lr_wd", "repro_digits_length", "repro_digits_optimizer"]


def quoted_findings(study: str) -> list:
    """The sentences the document lists between <!-- findings:STUDY --> and <!-- /findings -->."""
    text = open(DOC).read()
    block = re.search(rf"<!-- findings:{study} -->\n(.*?)<!-- /findings -->", text, re.S)
    assert block, f"docs/reproduction.md quotes no findings of {study}"
    return [line[2:].strip() for line in block.group(1).splitlines() if line.startswith("- ")]


def _points(frame) -> list:
    """Each trial as (model, optimizer, epochs, seed, lr, wd), sorted."""
    return sorted(frame[["model", "optimizer", "epochs", "seed", "lr", "wd"]].itertuples(index=False, name=None))


@pytest.mark.parametrize("study", STUDIES)
def test_the_committed_table_holds_every_trial_of_the_bundled_spec(study):
    """The table was made before sampled values were rounded to 6 significant digits (its lr/wd are
    exp/log values of numpy 2, keyed as such): every planned trial is found under its stored key, so a
    rerun trains nothing again, and its stored values round to the planned ones."""
    trials, epochs, record = load_study(STORE, study)
    planned = expand_for_store(load_spec(resolve_config(study)), STORE)
    assert {t.key for t in planned} == set(trials["trial_key"]) == set(record["trial_keys"])
    stored, wanted = _points(trials), _points(pd.DataFrame([t.config for t in planned]))
    assert [p[:4] for p in stored] == [p[:4] for p in wanted]
    assert np.allclose([p[4:] for p in stored], [p[4:] for p in wanted], rtol=5e-6, atol=0)
    assert trials["trial_key"].is_unique
    assert set(trials["status"]) <= {"ok", "diverged"}  # nothing failed
    assert set(epochs["trial_key"]) <= set(trials["trial_key"]) and len(epochs) > 0


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES)
def test_the_documents_findings_are_what_the_table_gives(study):
    trials, _, _ = load_study(STORE, study)
    generated = [f.sentence for f in findings(trials)]
    quoted = quoted_findings(study)
    assert quoted and all(sentence in generated for sentence in quoted), [s for s in quoted if s not in generated]


@pytest.mark.slow
def test_the_verdicts_are_the_same_under_twenty_bootstrap_seeds():
    for study in STUDIES:
        trials, _, _ = load_study(STORE, study)
        verdicts = {tuple((f.verdict, f.verdict_holm, f.p, f.ci) for f in findings(trials, seed=s)) for s in range(20)}
        assert len(verdicts) == 1, study
