"""Installs that fit the user's machines: trainers and analysis without Ray, the code version of a
shipped copy, the node image's torch kept by the cluster setup, and no silent CPU training on a
GPU node."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata

import pytest
import yaml

from hpstudy.study.store.read import load_trials
from tests.helpers import REPO, small_spec, write_spec

# Run before the code under test: every `import ray` fails as on a machine without Ray.
WITHOUT_RAY = """
import sys

class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoRay())
"""

TRAINER_CHECK = """
import json
try:
    import ray
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("ray is importable: the check would prove nothing")
from hpstudy.analysis.edf import edf_table
from tests.helpers import make_trials
from hpstudy.trainers.provenance import cuda_unusable_reason
from hpstudy.trainers.trial import train_trial

row = train_trial({"model": "cnn_tiny", "optimizer": "adamw", "epochs": 1, "lr": 1e-3, "wd": 0.05,
                   "batch_size": 16, "device": "auto",
                   "dataset": {"name": "synthetic", "image_size": 16, "num_classes": 2, "n_train": 32,
                               "n_val": 16, "seed": 0}})
edfs = edf_table(make_trials(n=4))
print(json.dumps({"status": row["status"], "device": row["device"], "epochs": len(row["epoch_log"]),
                  "edf_models": sorted(edfs["model"].unique()), "cuda": cuda_unusable_reason(),
                  "ray_loaded": any(m == "ray" or m.startswith("ray.") for m in sys.modules)}))
"""


@pytest.mark.slow  # a fresh interpreter imports torch, timm and pandas (~5 s); .ci/run's floor leg runs it
def test_trainers_and_analysis_work_without_ray():
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_RAY + TRAINER_CHECK], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["epochs"] == 1 and result["device"] == "cpu"
    assert result["edf_models"] == ["cnn_tiny", "vit_c_tiny", "vit_p_tiny"] and not result["ray_loaded"]
    assert result["cuda"].startswith("torch cannot use CUDA: torch ")  # the trainer-level CUDA check


def _provenance_of(trainers_dir):
    """trainers/provenance.py loaded from `trainers_dir` (a copy of the package), freshly."""
    spec = importlib.util.spec_from_file_location(
        f"provenance_{abs(hash(str(trainers_dir)))}", os.path.join(trainers_dir, "provenance.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return json.loads(module.versions())["git_sha"]


def _git(*args, cwd):
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_a_copy_without_git_carries_the_recorded_code_version(tmp_path, monkeypatch):
    monkeypatch.delenv("HPSTUDY_GIT_SHA", raising=False)
    assert _provenance_of(os.path.join(REPO, "trainers")) == _git("rev-parse", "HEAD", cwd=REPO)
    # a shipped copy inside some other repository: that repository's HEAD is not hpstudy's version
    _git("init", "-q", cwd=tmp_path)
    (tmp_path / "other.txt").write_text("x")
    _git("add", "other.txt", cwd=tmp_path)
    _git("commit", "-q", "-m", "other", cwd=tmp_path)
    copy = tmp_path / "hpstudy" / "trainers"
    shutil.copytree(os.path.join(REPO, "trainers"), copy, ignore=shutil.ignore_patterns("__pycache__", "GIT_SHA"))
    assert _provenance_of(copy) is None
    (copy / "GIT_SHA").write_text("0123456789abcdef0123456789abcdef01234567\n")  # what the setup writes
    assert _provenance_of(copy) == "0123456789abcdef0123456789abcdef01234567"


def test_the_cluster_setup_pins_the_torch_the_node_already_has(tmp_path):
    with open(os.path.join(REPO, "cluster.yaml")) as f:
        keep = next(c for c in yaml.safe_load(f)["setup_commands"] if "hpstudy-keep.txt" in c and "pip list" in c)
    env = dict(os.environ, HOME=str(tmp_path), PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    subprocess.run(["bash", "-c", keep], env=env, check=True, timeout=60)
    pins = (tmp_path / "hpstudy-keep.txt").read_text().split()
    assert pins == [f"torch=={metadata.version('torch')}", f"torchvision=={metadata.version('torchvision')}"]


@pytest.fixture
def ray_with_a_gpu_cuda_cannot_use(monkeypatch):
    """A local Ray whose node advertises one GPU that torch cannot use (no driver here)."""
    import ray

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # as on a GPU node (the tests hide GPUs otherwise)
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.mark.slow
def test_a_trial_holding_a_gpu_cuda_cannot_use_stops_the_study(ray_with_a_gpu_cuda_cannot_use, tmp_path, capsys):
    from hpstudy.cli import run_edf_main

    spec = small_spec(
        name="nogpu",
        models=["cnn_tiny"],
        optimizers=["adamw"],
        samples=4,
        recipe={"batch_size": 64, "device": "auto"},
        resources={"cpu": 1, "gpu": 1},
        space={"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]}},
    )
    store = str(tmp_path / "store")
    code = run_edf_main(
        [
            "--config",
            write_spec(tmp_path, spec),
            "--store",
            store,
            "--address",
            "auto",
            "--report",
            "none",
            "--progress-interval",
            "1",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("error: a trial holds 1 GPU on ") and "but torch cannot use CUDA: torch " in err[-1]
    assert "CUDA_VISIBLE_DEVICES is '0'" in err[-1] and "no NVIDIA driver is installed" in err[-1]
    assert err[-1].endswith("; the study stopped: 0/4 stored; fix that and rerun the same command to resume")
    rows = load_trials(store, "nogpu")
    assert len(rows) == 1 and rows["status"].tolist() == ["failed"]  # one GPU: the other 3 never started
    assert "torch cannot use CUDA" in rows["error"].iloc[0] and rows["top1_err"].isna().all()
