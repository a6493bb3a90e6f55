import json
import subprocess
import sys

import pytest

from bench.scale import COMMANDS, STUDY, build, design
from hpstudy.analysis.report_jobs import worker_wanted
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.read import load_study
from hpstudy.trainers.schema import STATUSES
from tests.helpers import REPO


@pytest.mark.parametrize("trials", [12, 100, 250])
def test_the_bench_stores_one_row_per_planned_trial_of_its_spec(trials, tmp_path):
    root = str(tmp_path / "store")
    planned = expand(parse_spec(design(trials)))
    assert build(root, trials) == len(planned) and trials - 12 < len(planned) <= trials
    rows = load_study(root, STUDY)[0]  # the rows of the spec recorded: every planned key, once
    assert sorted(rows["trial_key"]) == sorted(t.key for t in planned)
    assert set(rows["status"]) <= set(STATUSES) and rows.groupby(["model", "optimizer", "epochs"]).ngroups == 12
    finished = rows[rows["status"] != "failed"]
    assert finished["top1_err"].notna().all() and rows.loc[rows["status"] == "failed", "top1_err"].isna().all()


@pytest.mark.slow
def test_the_bench_at_its_smallest_size_prints_each_commands_figures():
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--sizes", "2000", "--expand", "1000", "--timeout", "500"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    size = result["sizes"]["2000"]
    assert size["rows"] == 1992  # 12 cells x 166 samples
    for name in COMMANDS:
        assert "failed" not in size[name], (name, size[name])
        assert size[name]["wall_s"] >= size[name]["call_s"] >= 0 and size[name]["peak_rss_mb"] > 0
    assert size["load_study"]["rows"] == 1992 and result["expand_s"] > 0
    # 1,992 rows: the report shares its jobs with a worker (a thousand rows on, where two CPUs are there)
    shared = worker_wanted(size["rows"])
    assert (size["report"]["worker_cpu_s"] > 0) is shared and (size["report"]["worker_peak_rss_mb"] > 0) is shared
    assert size["status"]["worker_cpu_s"] == 0 == size["status"]["worker_peak_rss_mb"]
