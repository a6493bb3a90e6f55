"""The two tiers as the README's `pytest` and `pytest -m slow` run them: the default tier on xdist workers, a
module's tests on one worker in order; any other marker expression in one process, one test at a time."""

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import pytest_xdist_auto_num_workers

SMALL = "tests/contracts/test_require_programs.py"  # a module of a few tests that imports little


@pytest.mark.parametrize("markexpr", ["slow", "", "slow or not slow", "not slow and slow", "not  slow", "e2e"])
def test_a_marker_expression_other_than_the_default_tiers_runs_without_workers(markexpr):
    assert pytest_xdist_auto_num_workers(SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))) == 0


def test_the_default_tier_leaves_the_worker_count_to_xdist():
    assert pytest_xdist_auto_num_workers(SimpleNamespace(option=SimpleNamespace(markexpr="not slow"))) is None


@pytest.mark.parametrize("args, workers", [([], True), (["-m", ""], False)])
def test_pytest_runs_a_modules_tests_on_one_worker_and_other_tiers_in_process(args, workers):
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--maxprocesses", "2", *args, SMALL],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    passed = re.findall(r"^(\[gw\d+\] )?.*PASSED", run.stdout, re.M)
    assert len(passed) >= 4
    used = {worker for worker in passed if worker}
    assert len(used) == (1 if workers else 0), run.stdout[-2000:]
