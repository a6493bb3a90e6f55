"""Reading a big study before and after compaction; prints one JSON object.

    python -m bench.store [--trials 20000] [--epochs 2] [--store DIR]

Writes `trials` complete rows (and `epochs` epoch rows each) one file per trial as a run does
(hpstudy.study.store.layout.write_trial), then times load_trials / load_epochs / pd.read_parquet on the
per-trial files, compacts (timed), and times the same reads on the compacted study. Local disk
(a temporary folder unless --store); each read is timed once, cold in this process.
"""

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import datetime, timedelta, timezone

import pandas as pd

from hpstudy.study.store.compaction import compact
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.trainers.schema import EPOCH_FIELDS, TRIAL_FIELDS

STUDY = "bench_store"


def _row(i: int) -> dict:
    row = dict.fromkeys(TRIAL_FIELDS)
    row.update(
        trial_key=f"vit_c_tiny-adamw-10-{i}",
        model="vit_c_tiny",
        family="vit_c",
        optimizer="adamw",
        epochs=10,
        lr=1e-3 * (1 + i % 7),
        wd=0.05,
        seed=i,
        status="ok",
        top1_err=5.0 + (i % 100) / 10,
        flops=1e9,
        params=1e6,
        wall_s=30.0,
        finished_at=datetime(2026, 11, 30, tzinfo=timezone.utc) + timedelta(seconds=i),
    )
    return row


def _epoch(epoch: int) -> dict:
    row = {name: None for name in EPOCH_FIELDS if name not in ("trial_key", "model", "optimizer")}
    row.update(epoch=epoch, train_loss=1.0 / epoch, top1_err=10.0 / epoch, lr=1e-3, seconds=3.0)
    return row


def _timed(read) -> tuple:
    start = time.perf_counter()
    rows = len(read())
    return round(time.perf_counter() - start, 3), rows


def _reads(root: str) -> dict:
    out = {}
    for name, read in {
        "load_trials": lambda: load_trials(root, STUDY),
        "load_epochs": lambda: load_epochs(root, STUDY),
        "pandas_read_parquet_trials": lambda: pd.read_parquet(os.path.join(root, "trials")),
    }.items():
        out[name + "_s"], out[name + "_rows"] = _timed(read)
    out["trial_files"] = len(os.listdir(os.path.join(root, "trials", f"study={STUDY}")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--store", default=None, help="an empty local folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.store or scratch
        start = time.perf_counter()
        epochs = [_epoch(e) for e in range(1, args.epochs + 1)]
        for i in range(args.trials):
            write_trial(root, STUDY, _row(i), epochs)
        write_s = time.perf_counter() - start
        before = _reads(root)
        start = time.perf_counter()
        compact(root, STUDY)
        compact_s = time.perf_counter() - start
        after = _reads(root)
    print(
        json.dumps(
            {
                "bench": "store",
                "trials": args.trials,
                "epochs_per_trial": args.epochs,
                "write_one_file_per_trial_s": round(write_s, 1),
                "before": before,
                "compact_s": round(compact_s, 2),
                "after": after,
                "load_trials_speedup": round(before["load_trials_s"] / after["load_trials_s"], 1),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, local disk",
            }
        )
    )


if __name__ == "__main__":
    main()
