"""Reading a partition of many one-row files against the same rows compacted; prints one JSON object.

    python -m bench.store_files [--files 100000] [--epochs 2] [--readers load_trials,status,...]
                                [--limit-gb 8] [--store DIR]

Writes `files` trial rows, one file each (and each trial's `epochs` epoch rows, one file per trial),
into one study's partitions, as a run with `--compact-every 0` (or one killed before its compaction)
leaves them; then runs each reader in a fresh process, on the files and again after `compact` (itself
run and measured in a fresh process): `load_trials`, `load_epochs`, `load_study` and `stored_keys`
(hpstudy.study.store.read), and the commands `hpstudy status` and `hpstudy query` (their output
captured; `--readers ""`: the compaction alone). Per reader and case, and for the compaction: `call_s`
(the call alone, in its process), `wall_s` (the process, start to exit: what a user waits for),
`cpu_s` (the process' user and system time), `peak_rss_mb` (the process' peak resident memory, VmHWM:
the kernel's rusage of a child counts the memory of the process it was started from) and `rows` (for
the compaction, the trial rows it merged). Each process runs under an address-space limit of
`limit_gb`: a reader that outgrows it fails and says so instead of taking the machine down.
Targets: peak RSS <= 1 GB on the files, the compaction's too; time on the files <= 2x the compacted case's.
"""

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Dict, List

import pyarrow.parquet as pq

from hpstudy.study.store.layout import _to_table
from hpstudy.trainers.schema import EPOCH_FIELDS, EPOCH_SCHEMA, TRIAL_FIELDS, TRIAL_SCHEMA

STUDY = "bench_files"
TARGET_PEAK_MB = 1024
TARGET_RATIO = 2.0
CHUNK = 10_000  # rows built at a time when writing the files
COMMANDS = {
    "status": ["status", "--study", STUDY],
    "query": ["query", "--study", STUDY, "--columns", "trial_key,top1_err", "top1_err < 5.5"],
}


def _reader(name: str, root: str) -> Callable[[], object]:
    """The reader `name` on the study, imported: a function of no arguments returning its rows (or count)."""
    if name == "compact":
        from hpstudy.study.store.compaction import compact

        return lambda: compact(root, STUDY)["trials"]["merged_rows"]
    if name in COMMANDS:
        from hpstudy.cli import hpstudy_main

        return lambda: _command(hpstudy_main, [COMMANDS[name][0], "--store", root, *COMMANDS[name][1:]], name)
    from hpstudy.study.store.read import load_epochs, load_study, load_trials, stored_keys

    return {
        "load_trials": lambda: len(load_trials(root, STUDY)),
        "load_epochs": lambda: len(load_epochs(root, STUDY)),
        "load_study": lambda: len(load_study(root, STUDY)[0]),
        "stored_keys": lambda: len(stored_keys(root, STUDY)),
    }[name]


def _command(main: Callable, argv: List[str], name: str) -> object:
    """Run the command line `argv` (its output captured); the rows `query` printed."""
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(argv)
    if code:
        sys.exit(code)
    return len(out.getvalue().splitlines()) - 1 if name == "query" else None


LIBRARY = ["load_trials", "load_epochs", "load_study", "stored_keys"]


def _key(i: int) -> str:
    """The i-th trial's key (and file name)."""
    return f"vit_c_tiny-adamw-10-{i:07d}"


def trial_row(i: int) -> Dict:
    """A complete trial row, as a trainer stores it (every column of the schema has a value)."""
    config = {"model": "vit_c_tiny", "optimizer": "adamw", "epochs": 10, "lr": 1e-3 * (1 + i % 7), "seed": i}
    return {
        **dict.fromkeys(TRIAL_FIELDS),
        **dict(
            trial_key=_key(i),
            model="vit_c_tiny",
            family="vit_c",
            flops=10**9,
            params=10**6,
            optimizer="adamw",
            epochs=10,
            lr=config["lr"],
            wd=0.05,
            seed=i,
            dataset="cifar10",
            batch_size=128,
            status="ok",
            top1_err=5.0 + (i % 100) / 10,
            top5_err=1.0,
            best_top1_err=4.9,
            train_loss=0.3,
            epochs_done=10,
            wall_s=30.0,
            device="cpu",
            hostname="bench-host",
            node="0" * 56,
            versions=json.dumps({"torch": "2.9", "timm": "1.0", "ray": "2.50", "hpstudy": "0.2.0"}),
            config_json=json.dumps(config, sort_keys=True),
            finished_at=datetime(2026, 12, 1, tzinfo=timezone.utc) + timedelta(seconds=i),
        ),
    }


def epoch_rows(i: int, epochs: int) -> List[Dict]:
    """A trial's epoch rows, as the driver stores them."""
    return [
        {
            **dict.fromkeys(EPOCH_FIELDS),
            **dict(trial_key=_key(i), model="vit_c_tiny", optimizer="adamw", epoch=e),
            **dict(train_loss=1.0 / e, top1_err=10.0 / e, lr=1e-3, seconds=3.0),
        }
        for e in range(1, epochs + 1)
    ]


def write_files(root: str, files: int, epochs: int) -> None:
    """`files` one-row trial files and their epoch files, written as write_trial writes them (the same
    schema and writer; a table sliced instead of a temporary file and a rename per file, for speed)."""
    for table, rows in (("trials", 1), ("epochs", epochs)):
        folder = os.path.join(root, table, f"study={STUDY}")
        os.makedirs(folder, exist_ok=True)
        for first in range(0, files if rows else 0, CHUNK):
            block = range(first, min(first + CHUNK, files))
            source = (
                _to_table([trial_row(i) for i in block], TRIAL_SCHEMA, "trial row")
                if table == "trials"
                else _to_table([e for i in block for e in epoch_rows(i, epochs)], EPOCH_SCHEMA, "epoch row")
            )
            for n, i in enumerate(block):
                pq.write_table(source.slice(n * rows, rows), os.path.join(folder, f"{_key(i)}.parquet"))


def _peak_mb() -> int:
    """This process' peak resident memory in MiB (VmHWM: since its start, not its parent's)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return round(int(line.split()[1]) / 1024)


def child(name: str, root: str, limit_bytes: int) -> None:
    """In a fresh process: one reader (or the compaction) under the memory limit; prints its JSON."""
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    call = _reader(name, root)
    start = time.perf_counter()
    rows = call()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "call_s": round(time.perf_counter() - start, 2),
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),  # the whole process'
                "peak_rss_mb": _peak_mb(),
                "rows": rows,
            }
        )
    )


def run_child(name: str, root: str, limit_bytes: int) -> Dict:
    """`child` in a fresh process: its result and wall seconds (or why it failed)."""
    argv = [sys.executable, "-m", "bench.store_files", "--child", name, "--store", root]
    start = time.perf_counter()
    done = subprocess.run([*argv, "--limit-gb", repr(limit_bytes / 2**30)], capture_output=True, text=True)
    result = {"wall_s": round(time.perf_counter() - start, 2)}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1][:300]
        return {**result, "failed": f"exit {done.returncode}: {last}"}
    return {**result, **json.loads(done.stdout.strip().splitlines()[-1])}


def compare(on_files: Dict[str, Dict], compaction: Dict, compacted: Dict[str, Dict]) -> Dict[str, Dict]:
    """Per reader: its peak RSS on the files and its time there over the compacted case's, against the
    targets; the compaction's peak RSS against the same target."""
    out = {"compact": {"peak_met": "failed" not in compaction and compaction["peak_rss_mb"] <= TARGET_PEAK_MB}}
    for name, files in on_files.items():
        if "failed" in files or "failed" in compacted[name]:
            out[name] = {"peak_met": False, "time_met": False}
            continue
        call_ratio = files["call_s"] / max(compacted[name]["call_s"], 0.01)
        out[name] = {
            "call_s_ratio": round(call_ratio, 1),
            "wall_s_ratio": round(files["wall_s"] / compacted[name]["wall_s"], 1),
            "peak_met": files["peak_rss_mb"] <= TARGET_PEAK_MB,
            "time_met": call_ratio <= TARGET_RATIO,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=2, help="epoch rows per trial (0: no epoch files)")
    parser.add_argument("--readers", default=",".join([*LIBRARY, *COMMANDS]))
    parser.add_argument("--limit-gb", type=float, default=8.0, help="address-space limit of each reader's process")
    parser.add_argument("--store", default=None, help="an empty local folder (default: a temporary one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # run one reader here (see `child`)
    args = parser.parse_args()
    limit = int(args.limit_gb * 2**30)
    if args.child:
        return child(args.child, args.store, limit)
    readers = [name for name in args.readers.split(",") if name]
    unknown = [r for r in readers if r not in LIBRARY and r not in COMMANDS]
    if unknown:
        parser.error(f"--readers: unknown reader {unknown[0]!r}; allowed: {', '.join([*LIBRARY, *COMMANDS])}")
    with tempfile.TemporaryDirectory() as scratch:
        root = args.store or scratch
        start = time.perf_counter()
        write_files(root, args.files, args.epochs)
        write_s = time.perf_counter() - start
        on_files = {name: run_child(name, root, limit) for name in readers}
        compaction = run_child("compact", root, limit)
        compacted = {name: run_child(name, root, limit) for name in readers}
    print(
        json.dumps(
            {
                "bench": "store_files",
                "files": args.files,
                "epochs_per_trial": args.epochs,
                "columns": len(TRIAL_FIELDS) + 1,  # and the study, from the partition
                "write_s": round(write_s, 1),
                "on_files": on_files,
                "compact": compaction,
                "compacted": compacted,
                "targets": {"peak_rss_mb": TARGET_PEAK_MB, "time_ratio": TARGET_RATIO},
                "against_targets": compare(on_files, compaction, compacted),
                "limit_gb": args.limit_gb,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, local disk",
            }
        )
    )


if __name__ == "__main__":
    main()
