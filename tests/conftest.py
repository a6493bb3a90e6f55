"""Shared test settings: CPU only, one thread, deterministic."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# One torch thread (read when torch is first imported, so no import here: collection stays light). The
# tiny models gain little from a second thread, and a second one spin-waits whenever the machine is
# busy: a 2-epoch CNN trial took 66-85 s with 2 threads on a loaded 2-core machine, 2.5-6.6 s with 1.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The tests' cache folder is never the user's: model counts and fusion measurements (hpstudy.trainers.model_counts,
# hpstudy.study.fusion_cache) go to a fresh folder for the session, set before anything is collected, so every
# test module and every subprocess a test starts sees it.
os.environ["HPSTUDY_CACHE_DIR"] = tempfile.mkdtemp(prefix="hpstudy-test-cache-")
atexit.register(shutil.rmtree, os.environ["HPSTUDY_CACHE_DIR"], ignore_errors=True)

# A local Ray started by the tests binds to loopback only, as run_edf.py's does (ray reads this
# when first imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# Property tests (Hypothesis): no per-example deadline (a loaded 2-core CI machine is slow, not wrong);
# a failure prints the example and the blob that replays it. Locally every run draws new examples (what
# finds new bugs); CI (`--hypothesis-profile=ci`, .ci/run) draws the same ones each run, so a CI result
# belongs to the commit, not to the draw.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("hpstudy", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", settings.get_profile("hpstudy"), derandomize=True)
settings.load_profile("hpstudy")

import subprocess  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402

from tests.helpers import free_port  # noqa: E402

# Fails a test that varies a seed no result depends on (tests/seed_reach.py; `-p no:tests.seed_reach` turns it off)
pytest_plugins = ["tests.seed_reach"]


@pytest.fixture
def s3_root(monkeypatch):
    """A real S3 API on loopback (moto's server mode) and a fresh bucket in it."""
    import boto3  # a declared test dependency: a missing install fails, never skips
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    # moto keeps one in-memory backend per process, shared by every server it starts: a bucket
    # name of its own keeps one test's objects out of another's listing
    bucket = f"hpstudy-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}").create_bucket(Bucket=bucket)
    yield f"s3://{bucket}/results?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    server.stop()


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size, *options) -> a fresh tmpfs folder (unmounted afterwards); skips the test where
    this process may not mount one (it needs root or CAP_SYS_ADMIN)."""
    mounted = []

    def mount(size: str, *options: str):
        path = tmp_path / f"tmpfs{len(mounted)}"
        path.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no mount command here: cannot make a small tmpfs")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}",) + options), "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", str(path)], check=True)


@pytest.fixture
def aot_eager(monkeypatch):
    """`compile: inductor` on torch.compile's aot_eager backend (the same graphs, no code generation), with
    Dynamo and its counters reset before and after."""
    import torch
    from torch._dynamo.utils import counters

    from hpstudy.trainers import trial

    monkeypatch.setattr(trial, "INDUCTOR_BACKEND", "aot_eager")
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def hpstudy_logger_as_found():
    """The `hpstudy` logger's handlers, level and propagation as before each test: a test that shows the API's
    output (hpstudy.show_output, examples/python_api.py) leaves no console handler to the next."""
    import logging

    hpstudy = logging.getLogger("hpstudy")
    before = (list(hpstudy.handlers), hpstudy.level, hpstudy.propagate)
    yield
    hpstudy.handlers[:], hpstudy.level, hpstudy.propagate = before[0], before[1], before[2]


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml's addopts, with --dist loadfile: a module's tests on one worker, in order): every core
    for the default tier (None: xdist's count); no worker, so one test at a time in this process, when the marker
    expression may select the slow tier (`-m slow`, `-m ""`): its Ray clusters, servers and interrupted studies
    assume the machine is theirs (a cluster's `ray stop` ends every Ray on it)."""
    return None if config.option.markexpr == "not slow" else 0
