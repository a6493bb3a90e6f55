"""The bundled layout study on digits, shrunk to one epoch and two samples, end to end with its report."""

import json

import pytest
import yaml

from hpstudy.study.spec import resolve_config
from tests.helpers import run_edf, write_spec

pytestmark = pytest.mark.slow

LAYOUT_MODELS = ["coatnet_tiny_cccc", "coatnet_tiny_ccct", "coatnet_tiny_cctt", "coatnet_tiny_cttt", "vit_rel_tiny"]


def test_the_digits_layout_study_reports_the_five_layouts(tmp_path):
    with open(resolve_config("coatnet_layouts_digits")) as f:
        spec = yaml.safe_load(f)
    assert spec["models"] == LAYOUT_MODELS
    spec.update(name="layouts_small", epochs=[1], samples=2, recipe=dict(spec["recipe"], warmup_epochs=0.5))
    store, report = tmp_path / "store", tmp_path / "report"
    done = run_edf(write_spec(tmp_path, spec), str(store), "--report", str(report), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    edf = json.loads((report / "delta_edf_adamw_1ep.json").read_text())
    assert sorted({row["model"] for row in edf["data"]}) == sorted(LAYOUT_MODELS)
    points = json.loads((report / "generalization.json").read_text())
    assert sorted({row["model"] for row in points["data"]}) == sorted(LAYOUT_MODELS)
    assert {row["family"] for row in points["data"]} == {"coatnet", "vit_rel"}
    assert all(row["train_loss"] > 0 and 0 <= row["error"] <= 100 for row in points["data"])
    page = (report / "index.html").read_text()
    assert 'id="delta_edf_adamw_1ep"' in page and 'id="generalization"' in page
