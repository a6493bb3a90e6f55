"""Helpers shared by the tests: generated trial tables, complete store rows, small study specs and
a subprocess runner for run_edf.py. Imported as `tests.helpers` (tests/ is a package)."""

import copy
import os
import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import yaml

from trainers.schema import EPOCH_FIELDS, TRIAL_FIELDS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FINISHED_AT = "2026-11-29T10:00:00+00:00"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stored_row(**values) -> dict:
    """A complete trial row (every schema column; those not given are null)."""
    return {**dict.fromkeys(TRIAL_FIELDS), "finished_at": FINISHED_AT, **values}


def epoch_row(**values) -> dict:
    """A complete epoch record (every EPOCH_COLUMNS key; those not given are null)."""
    return {**dict.fromkeys(EPOCH_FIELDS), **values}


def image_folder(root, n=4, size=(40, 48)) -> str:
    """An image folder of random JPEGs (train/val, classes cat and dog, n each) under root; its path."""
    from PIL import Image
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for cls in ("cat", "dog"):
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / split / cls / f"{i}.JPEG")
    return str(root)


def make_trials(models=("vit_p_tiny", "vit_c_tiny", "cnn_tiny"), optimizers=("adamw", "sgd"),
                epochs=(10,), n=24, seed=0, diverge_share=0.1, fail_share=0.0, ema=False) -> pd.DataFrame:
    """Trials whose error is a bowl in log lr / log wd, plus noise; some diverged at chance (90%).

    `top1_err` is the final error; `best_top1_err` lies up to 2 points below it, and with `ema`
    `best_ema_top1_err` up to 1 point below that (diverged at chance, failed null, as stored).
    """
    rng = np.random.default_rng(seed)
    gains = np.random.default_rng(seed + 1)    # its own stream: top1_err does not depend on `ema`
    rows = []
    for m_index, model in enumerate(models):
        for opt in optimizers:
            for e in epochs:
                log_lr = rng.uniform(-4, -2, n)
                log_wd = rng.uniform(-2, 0, n)
                err = (10 + 3 * m_index + 8 * (log_lr + 3) ** 2 + 2 * (log_wd + 1) ** 2
                       + 20 / e + rng.normal(0, 0.5, n))
                status = np.where(rng.random(n) < diverge_share, "diverged", "ok").astype(object)
                err = np.where(status == "diverged", 90.0, err)
                failed = rng.random(n) < fail_share
                status[failed] = "failed"
                err = np.where(failed, np.nan, err)
                best = np.where(status == "ok", err - gains.uniform(0, 2, n), err)
                best_ema = np.where(status == "ok", best - gains.uniform(0, 1, n), best)
                for i in range(n):
                    rows.append({"study": "gen", "trial_key": f"{model}-{opt}-{e}-{i}", "model": model,
                                 "optimizer": opt, "epochs": e, "lr": 10 ** log_lr[i], "wd": 10 ** log_wd[i],
                                 "seed": 0, "status": status[i], "top1_err": err[i], "best_top1_err": best[i],
                                 **({"best_ema_top1_err": best_ema[i]} if ema else {}), "wall_s": 30.0})
    return pd.DataFrame(rows)


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
    """Write a spec dict as YAML under tmp_path; returns its path."""
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
