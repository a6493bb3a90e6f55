"""Helpers shared by the tests: generated trial tables, complete store rows, hand-written Parquet
files, small study specs, a subprocess runner for run_edf.py and a terminal to start one in.
Imported as `tests.helpers` (tests/ is a package); test modules import helpers from here only."""

import copy
import fcntl
import json
import logging
import os
import pty
import re
import shutil
import socket
import subprocess
import sys
import termios
import threading
import zlib
from datetime import datetime
from typing import Tuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from hpstudy.trainers.schema import EPOCH_FIELDS, TRIAL_FIELDS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("trainers", "study", "analysis")  # hpstudy/<package>/, the layers of docs/architecture.md
FINISHED_AT = "2026-11-29T10:00:00+00:00"


# Set by CI (.ci/run installs the programs): a test that needs a missing one fails instead of skipping.
REQUIRE_PROGRAMS = "HPSTUDY_REQUIRE_SYSTEM_PROGRAMS"


def logged(caplog, level: int = logging.INFO) -> list:
    """The messages hpstudy's loggers logged at `level`, in order (INFO: the lines a terminal shows on stdout,
    WARNING: its warnings on stderr); the test captures them with caplog.at_level(..., logger="hpstudy")."""
    return [r.getMessage() for r in caplog.records if r.name.split(".")[0] == "hpstudy" and r.levelno == level]


def require_programs(**packages: str) -> None:
    """Skip the calling test, in one line naming the Debian package, when a program it runs is absent
    ({program or absolute path: package}); fail instead where CI sets HPSTUDY_REQUIRE_SYSTEM_PROGRAMS=1."""
    import pytest

    missing = sorted({package for program, package in packages.items() if shutil.which(program) is None})
    if not missing:
        return
    reason = f"needs {', '.join(missing)} (apt-get install {' '.join(missing)})"
    if os.environ.get(REQUIRE_PROGRAMS) == "1":
        pytest.fail(f"{reason}; {REQUIRE_PROGRAMS}=1 makes this a failure", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stored_row(**values) -> dict:
    """A complete trial row (every schema column; those not given are null)."""
    return {**dict.fromkeys(TRIAL_FIELDS), "finished_at": FINISHED_AT, **values}


def planned_row(trial, **values) -> dict:
    """stored_row of a planned trial (its key, design and sampled lr, wd) with `values`."""
    design = dict(model=trial.model, optimizer=trial.optimizer, epochs=trial.epochs, seed=trial.seed)
    return stored_row(trial_key=trial.key, lr=trial.config["lr"], wd=trial.config["wd"], **design, **values)


def row(key, status="ok", err=10.0, model="vit_p_tiny", when=FINISHED_AT) -> dict:
    """A stored adamw trial row keyed `key`; a failed one has no FLOPs and the error 'boom'."""
    return stored_row(
        **{
            "trial_key": key,
            "model": model,
            "family": "vit_p",
            "optimizer": "adamw",
            "epochs": 2,
            "lr": 1e-3,
            "wd": 0.05,
            "seed": 0,
            "status": status,
            "top1_err": err,
            "flops": None if status == "failed" else 1000,
            "error": "boom" if status == "failed" else None,
            "finished_at": when,
        }
    )


def write_file(path, rows, schema) -> None:
    """A Parquet file of `rows` as an older hpstudy (or a crash) might have left it."""
    rows = [dict(r, finished_at=datetime.fromisoformat(r["finished_at"])) if "finished_at" in r else r for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def epoch_row(**values) -> dict:
    """A complete epoch record (every EPOCH_COLUMNS key; those not given are null)."""
    return {**dict.fromkeys(EPOCH_FIELDS), **values}


TINY_DATA = {"name": "synthetic", "image_size": 8, "n_train": 16, "n_val": 8, "num_classes": 4}
TINY_TRIAL = dict(
    model="cnn_tiny", optimizer="sgd", epochs=1, lr=0.05, wd=0.0, batch_size=8, dataset=TINY_DATA, device="cpu", seed=3
)


def tiny_trainer(**changes):
    """A Trainer of TINY_TRIAL (cnn_tiny on 4-class 8 px synthetic data, 2 steps an epoch) with `changes`."""
    from hpstudy.trainers.config import TrialConfig
    from hpstudy.trainers.trial import Trainer

    return Trainer(TrialConfig.from_dict(dict(TINY_TRIAL, **changes)))


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


def make_trials(
    models=("vit_p_tiny", "vit_c_tiny", "cnn_tiny"),
    optimizers=("adamw", "sgd"),
    epochs=(10,),
    n=24,
    seed=0,
    diverge_share=0.1,
    fail_share=0.0,
    ema=False,
) -> pd.DataFrame:
    """Trials whose error is a bowl in log lr / log wd, plus noise; some diverged at chance (90%).

    `top1_err` is the final error; `best_top1_err` lies up to 2 points below it, and with `ema`
    `best_ema_top1_err` up to 1 point below that (diverged at chance, failed null, as stored).
    """
    rng = np.random.default_rng(seed)
    gains = np.random.default_rng(seed + 1)  # its own stream: top1_err does not depend on `ema`
    rows = []
    for m_index, model in enumerate(models):
        for opt in optimizers:
            for e in epochs:
                log_lr = rng.uniform(-4, -2, n)
                log_wd = rng.uniform(-2, 0, n)
                err = 10 + 3 * m_index + 8 * (log_lr + 3) ** 2 + 2 * (log_wd + 1) ** 2 + 20 / e + rng.normal(0, 0.5, n)
                status = np.where(rng.random(n) < diverge_share, "diverged", "ok").astype(object)
                err = np.where(status == "diverged", 90.0, err)
                failed = rng.random(n) < fail_share
                status[failed] = "failed"
                err = np.where(failed, np.nan, err)
                best = np.where(status == "ok", err - gains.uniform(0, 2, n), err)
                best_ema = np.where(status == "ok", best - gains.uniform(0, 1, n), best)
                for i in range(n):
                    rows.append(
                        {
                            "study": "gen",
                            "trial_key": f"{model}-{opt}-{e}-{i}",
                            "model": model,
                            "optimizer": opt,
                            "epochs": e,
                            "lr": 10 ** log_lr[i],
                            "wd": 10 ** log_wd[i],
                            "seed": 0,
                            "status": status[i],
                            "top1_err": err[i],
                            "best_top1_err": best[i],
                            **({"best_ema_top1_err": best_ema[i]} if ema else {}),
                            "wall_s": 30.0,
                        }
                    )
    return pd.DataFrame(rows)


def epochs_of(trials: pd.DataFrame) -> pd.DataFrame:
    """Epoch rows for `trials` (make_trials' or any with top1_err and epochs): each trial that ran falls by 2.5
    points an epoch to its final top1_err (a diverged one stays at its error), and where it has a
    best_ema_top1_err its EMA error falls to that; the lowest raw error over the epochs is then the final one."""
    rows = []
    for trial in trials[trials["status"] != "failed"].itertuples(index=False):
        last = int(trial.epochs)
        ema = getattr(trial, "best_ema_top1_err", np.nan)
        for epoch in range(1, last + 1):
            fall = 0.0 if trial.status == "diverged" else 2.5 * (last - epoch)
            rows.append(
                epoch_row(
                    trial_key=trial.trial_key,
                    model=trial.model,
                    optimizer=trial.optimizer,
                    epoch=epoch,
                    top1_err=trial.top1_err + fall,
                    ema_top1_err=ema + fall if np.isfinite(ema) else np.nan,
                )
            )
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
    "space": {"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]}, "sgd": {"lr": [0.01, 0.1], "wd": [1e-5, 1e-4]}},
    "resources": {"cpu": 1},
    "max_retries": 2,
    "fuse": "off",
}


# A spec as YAML text, one value per top-level key, so each case can use YAML's own spellings
# (.nan, .inf, 1e-4, quoted numbers).
YAML_SPEC = {
    "name": "h",
    "dataset": "{name: digits, image_size: 16}",
    "recipe": "{batch_size: 64, device: cpu}",
    "models": "[vit_c_tiny, cnn_tiny]",
    "optimizers": "[adamw]",
    "epochs": "[1]",
    "samples": "3",
    "space": "{adamw: {lr: [1.0e-4, 1.0e-2], wd: [0.01, 0.1]}}",
    "fuse": '"off"',
}


def spec_text(**changes) -> str:
    """YAML_SPEC with some keys' YAML text replaced, as the text of a spec file."""
    return "\n".join(f"{key}: {value}" for key, value in dict(YAML_SPEC, **changes).items()) + "\n"


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
    entry = ["-m", "hpstudy.study.run_edf"] if module else [os.path.join(REPO, "study", "run_edf.py")]
    return [
        sys.executable,
        *entry,
        "--config",
        config,
        "--store",
        store,
        "--num-cpus",
        "2",
        "--report",
        "none",
        "--progress-interval",
        "1",
        *extra,
    ]


def run_edf(config: str, store: str, *extra: str, env=None, module: bool = False, timeout=300):
    """Run run_edf.py to completion in a fresh process; returns the CompletedProcess."""
    return subprocess.run(
        run_edf_command(config, store, *extra, module=module),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def in_terminal(argv):
    """Start argv as the foreground job of a new terminal (a pty); returns (process, output list)."""
    master, slave = pty.openpty()

    def controlling_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(argv, cwd=REPO, stdin=slave, stdout=slave, stderr=slave, preexec_fn=controlling_terminal)
    os.close(slave)
    output = []

    def read():
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal's last user closed it
                break
            if not chunk:
                break
            output.append(chunk.decode(errors="replace"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    proc.master, proc.reader = master, reader
    return proc, output


def hostile_values():
    """Hypothesis strategies of values of every wrong type and size (and some right ones: a call may succeed),
    for the hostile tests of the API: (TEXT: any code point, NUMBERS: huge, exact, non-finite, numpy, complex,
    decimal, ODD: None, bools, bytes, containers, frames, odd text)."""
    import decimal
    import fractions

    from hypothesis import strategies as st

    text = st.text(st.characters(codec=None), max_size=12)  # any code point: surrogates, line breaks, NUL
    numbers = st.one_of(
        st.integers(min_value=-(10**400), max_value=10**400),
        st.sampled_from([0, 1, 2, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, 10**400, -(10**400)]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([np.int64(3), np.uint64(2**64 - 1), np.float32(0.5), np.float64("nan"), np.complex128(1 + 0j)]),
        st.complex_numbers(max_magnitude=1e3),
        st.sampled_from(
            [decimal.Decimal("1e400"), decimal.Decimal("2.5"), decimal.Decimal("NaN"), fractions.Fraction(1, 3)]
        ),
    )
    odd = st.sampled_from(
        [
            None,
            True,
            False,
            np.bool_(True),
            b"\xff",
            b"lr",
            bytearray(b"x"),
            [],
            [1, 2],
            ("lr",),
            {"a": 1},
            {1, 2},
            object(),
            pd.NA,
            pd.NaT,
            pd.Timestamp("2024-01-01"),
            np.array([1.0, 2.0]),
            pd.Series([1.0]),
            pd.DataFrame({"a": [1]}),
            "\udcff",
            "a\nb",
            "",
            "\x00",
            "e",
            "lr",
            "model",
            "x" * 10_000,
        ]
    )
    return text, numbers, odd


def module_files():
    """{module name (hpstudy.<package>[.<subpackage>].<module>, hpstudy.<module>): source path} of every
    module of the three packages, their subpackages (hpstudy.study.store, ...) and the command line above
    them (hpstudy/)."""
    files = {}
    root = os.path.join(REPO, "hpstudy")
    for folder, _, names in sorted(os.walk(root)):
        if not os.path.isfile(os.path.join(folder, "__init__.py")):
            continue  # data folders (the bundled specs)
        relative = os.path.relpath(folder, root)
        prefix = ".".join(["hpstudy", *([] if relative == os.curdir else relative.split(os.sep))])
        for name in sorted(names):
            if name.endswith(".py"):
                files[prefix if name == "__init__.py" else f"{prefix}.{name[:-3]}"] = os.path.join(folder, name)
    return files


def svg_only(plot, out, name, data, meta):
    """save_figure as the page needs it (the SVG it inlines, the JSON it states), without the PDF and
    300 dpi PNG (test_figures checks those)."""
    paths = {"svg": os.path.join(out, f"{name}.svg"), "json": os.path.join(out, f"{name}.json")}
    plot.fig.savefig(paths["svg"])
    with open(paths["json"], "w") as f:
        json.dump({**meta, "models": sorted(set(data["model"]))}, f)
    return paths


def pdf_text(pdf: bytes) -> Tuple[float, float]:
    """(smallest font size in pt, page width in inches) of a PDF matplotlib wrote (its compressed streams)."""
    streams = [zlib.decompress(s) for s in re.findall(rb"stream\r?\n(.*?)endstream", pdf, re.S) if s[:1] == b"x"]
    sizes = [float(v) for s in streams for v in re.findall(rb"/F\d+ ([\d.]+) Tf", s)]
    width = float(re.search(rb"/MediaBox \[\s*0 0 ([\d.]+)", pdf).group(1)) / 72
    return min(sizes), width
