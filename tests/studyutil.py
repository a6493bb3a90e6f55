"""Small study specs and a subprocess runner shared by the study tests."""

import copy
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = {
    "name": "e2e",
    "dataset": {"name": "digits", "image_size": 16},
    "recipe": {"batch_size": 64, "warmup_epochs": 0.5, "device": "cpu"},
    "models": ["vit_c_tiny", "cnn_tiny"],
    "optimizers": ["adamw", "sgd"],
    "epochs": [1],
    "samples": 3,
    "sampler": "sobol",
    "space": {"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]},
              "sgd": {"lr": [0.01, 0.1], "wd": [1e-5, 1e-4]}},
    "resources": {"cpu": 1},
    "max_retries": 2,
    "fuse": "off",
}


def small_spec(**changes) -> dict:
    """SMALL with top-level keys replaced."""
    spec = copy.deepcopy(SMALL)
    spec.update(changes)
    return spec


def write_spec(tmp_path, spec: dict) -> str:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def run_edf_command(config: str, store: str, *extra: str, module: bool = False):
    """The argv of run_edf.py (as a script, or with -m) for a local 2-CPU Ray."""
    entry = ["-m", "study.run_edf"] if module else [os.path.join(REPO, "study", "run_edf.py")]
    return [sys.executable, *entry, "--config", config, "--store", store, "--num-cpus", "2",
            "--report", "none", "--progress-interval", "1", *extra]


def run_edf(config: str, store: str, *extra: str, env=None, module: bool = False, timeout=300):
    """Run run_edf.py to completion in a fresh process; returns the CompletedProcess."""
    return subprocess.run(run_edf_command(config, store, *extra, module=module), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))
