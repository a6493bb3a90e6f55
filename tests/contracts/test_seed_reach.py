"""The seed-reach plugin (tests/seed_reach.py) names a test whose varied seed changes no result, in one process
and under xdist, and passes one whose seed reaches its function; its probes compare results by content."""

import dataclasses
import subprocess
import sys
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import REPO
from tests.seed_reach import another, fingerprint

SYNTHETIC = """
import numpy as np
import pytest
from hpstudy.analysis.edf import bootstrap_band


def test_a_band_its_seed_moves():
    assert len({bootstrap_band(np.arange(20.0), seed=s) for s in range(3)}) > 1


def test_a_band_no_seed_can_move():
    assert len({bootstrap_band(np.zeros(20), seed=s) for s in range(3)}) == 1


@pytest.mark.parametrize("seed", [0, 1])
def test_a_parametrized_band_no_seed_can_move(seed):
    assert bootstrap_band(np.ones(9), seed=seed) == 0


def test_a_default_seed_is_not_varied_by_the_test():
    assert bootstrap_band(np.zeros(20)) == bootstrap_band(np.zeros(20))
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_test_whose_seeds_reach_no_result_fails_the_session_and_is_named(tmp_path, workers):
    (tmp_path / "test_synthetic.py").write_text(SYNTHETIC)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.seed_reach", "-n", workers]
        + ["-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    named = {
        line.split()[3].split("::")[1].rstrip(":")
        for line in done.stdout.splitlines()
        if line.startswith("SEED REACHES")
    }
    assert named == {"test_a_band_no_seed_can_move", "test_a_parametrized_band_no_seed_can_move"}, done.stdout
    assert "5 passed" in done.stdout and "3 tests vary a seed; 2 reach nothing" in done.stdout, done.stdout
    assert done.returncode == 1, done.stdout


class _Pair(NamedTuple):
    area: int
    draws: int


@dataclasses.dataclass(frozen=True)
class _Mixed:
    seed: int
    label: str


@given(st.integers(-(2**70), 2**70), st.integers(0, 2**63))
def test_another_seed_raises_every_integer_in_it_and_keeps_its_kind(a, b):
    assert another(a) == a + 1 and another(np.int64(b % 2**62)) == b % 2**62 + 1
    assert another(_Pair(a, b)) == _Pair(a + 1, b + 1) and type(another(_Pair(a, b))) is _Pair
    assert another((a, "x")) == (a + 1, "x")
    assert another(_Mixed(a, "x")) == _Mixed(a + 1, "x")
    for unprobed in (True, 1.5, "7", None, np.random.default_rng(a % 2**32), ("x", None)):
        assert another(unprobed) is None


@given(st.lists(st.floats(allow_nan=True), min_size=1, max_size=30), st.integers(0, 29))
def test_a_fingerprint_is_the_content_of_arrays_frames_and_containers(values, at):
    array = np.array(values)
    changed = array.copy()
    changed[at % len(values)] = 1e300 if array[at % len(values)] != 1e300 else -1.0
    frame = pd.DataFrame({"e": array})
    assert fingerprint(array) == fingerprint(array.copy()) != fingerprint(changed)
    assert fingerprint(frame) == fingerprint(frame.copy()) != fingerprint(pd.DataFrame({"e": changed}))
    assert fingerprint([frame, {"k": array}]) == fingerprint([frame.copy(), {"k": array.copy()}])
    assert fingerprint([frame, {"k": array}]) != fingerprint([frame, {"k": changed}])
    assert fingerprint(_Mixed(1, "a")) != fingerprint(_Mixed(1, "b"))
