"""Command lines: `run_edf.py` (run a study) and the `hpstudy` console script (run/status/report/compact)."""

import argparse
import contextlib
import json
import math
import os
import socket
import sys
import tempfile
import traceback
from collections import Counter
from typing import Callable, Dict, List, Optional

from hpstudy.analysis.metric import DEFAULT_METRIC, METRIC_DOCS, METRICS, usable
from hpstudy.analysis.report import build_report, check_report_dir
from hpstudy.analysis.report_folder import owned, publish
from hpstudy.study.gpu_plan import memory_plan
from hpstudy.study.sampling import cells, check_samples, expand_for_store, first_trials
from hpstudy.study.spec import SpecError, StudySpec, load_spec, resolve_config
from hpstudy.study.store import (StoreFault, compact, load_spec_record, load_study, load_trials, report_location,
                         split_by_spec, store_io, stored_keys)
from hpstudy.trainers.errors import HpstudyError, exits_on_user_error
from hpstudy.trainers.schema import DIVERGED, FAILED, FINISHED, OK

DEFAULT_CONFIG = "demo_digits"
EXIT_STORE_FAULT = 3        # the store is full, unwritable or unreachable: fix it and rerun to resume
# Nominal training-set sizes for the dry-run estimate (image folders: ImageNet-1k is assumed).
TRAIN_SIZES = {"digits": 1437, "cifar10": 50000, "cifar100": 50000, "imagefolder": 1281167, "prepared": 1281167}


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Flags of `run_edf.py` / `hpstudy run`."""
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help="study spec: a YAML path or a bundled name (default: demo_digits)")
    p.add_argument("--store", default="./results", help="store root: a path or s3://, gs:// URI")
    p.add_argument("--address", default=None,
                   help="Ray address ('auto' inside a cluster); default: start a local Ray on loopback")
    p.add_argument("--max-concurrent", type=int, default=None,
                   help="cap on trials running at once (default: on a local Ray, as many as its CPUs and GPUs hold)")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", dest="fresh", action="store_false", default=False,
                      help="skip trials already stored as ok/diverged (default)")
    mode.add_argument("--fresh", dest="fresh", action="store_true",
                      help="delete this study's stored rows first and run every trial")
    p.add_argument("--report", default=None,
                   help="report folder (default: <store>/reports/<study>/, in the store); 'none' to skip")
    p.add_argument("--assume-tflops", type=float, default=None,
                   help="effective TFLOP/s per trial for the dry-run time estimate "
                        "(default: 100 with a GPU per trial, 0.02 on CPU)")
    p.add_argument("--progress-interval", type=float, default=10.0, help="seconds between status lines")
    p.add_argument("--compact-every", type=int, default=1000,
                   help="merge the study's per-trial files into one every N stored trials during the run "
                        "(it is also done before and after the run); 0: only before and after (default 1000)")
    p.add_argument("--gpu-memory-gb", type=float, default=None,
                   help="GPU memory for the dry run's memory plan (default: 40, the A100s of cluster.yaml)")
    add_debug_arg(p)


def add_debug_arg(p: argparse.ArgumentParser) -> None:
    """--debug: print the traceback of an error too (by default: one `error:` line)."""
    p.add_argument("--debug", action="store_true", help="print the traceback of an error too")


def add_store_args(p: argparse.ArgumentParser, study_required: bool = False,
                   out: bool = False) -> argparse.ArgumentParser:
    """--store and --study (and --out) of the commands that read a store."""
    p.add_argument("--store", default="./results", help="store root: a path or a URI")
    p.add_argument("--study", required=study_required, default=None)
    if out:
        p.add_argument("--out", default=None, help="report folder (default: <store>/reports/<study>/, in the store)")
        p.add_argument("--metric", choices=METRICS, default=DEFAULT_METRIC,
                       help="the error every number is built on: "
                            + "; ".join(f"{m}: {doc}" for m, doc in METRIC_DOCS.items())
                            + f" (default: {DEFAULT_METRIC})")
    return p


def check_local_resources(spec: StudySpec, num_cpus: Optional[int]) -> None:
    """A local Ray can never give a trial more CPUs or GPUs than this machine has."""
    import torch
    cpus = num_cpus or os.cpu_count()
    gpus = torch.cuda.device_count()
    if spec.resources.cpu > cpus:
        raise SpecError(f"resources.cpu: bad value {spec.resources.cpu}; allowed: <= {cpus} "
                        f"(CPUs of the local Ray; pass --address to use a cluster)")
    if spec.resources.gpu > gpus:
        raise SpecError(f"resources.gpu: bad value {spec.resources.gpu}; allowed: <= {gpus} "
                        f"(GPUs on this machine; pass --address to use a cluster)")


def check_run_args(args: argparse.Namespace) -> None:
    """Validate CLI flags before anything runs."""
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise SpecError(f"--max-concurrent: bad value {args.max_concurrent}; allowed: an integer >= 1")
    if args.num_cpus is not None and args.num_cpus < 1:
        raise SpecError(f"--num-cpus: bad value {args.num_cpus}; allowed: an integer >= 1")
    if not (math.isfinite(args.progress_interval) and args.progress_interval > 0):
        raise SpecError(f"--progress-interval: bad value {args.progress_interval}; allowed: a number of seconds > 0")
    if args.compact_every < 0:
        raise SpecError(f"--compact-every: bad value {args.compact_every}; allowed: an integer >= 0 (0: never "
                        f"during the run)")
    if "://" not in args.store and os.path.exists(args.store) and not os.path.isdir(args.store):
        raise SpecError(f"--store: {args.store!r} is a file; allowed: a folder or a URI")


def dry_run_warnings(path: str, spec: StudySpec, args: argparse.Namespace) -> List[str]:
    """What a run would refuse that a dry run does not need: the spec's paths (its dataset, its init
    checkpoint) and, for a local Ray, this machine's CPUs and GPUs. `spec` was read without path
    checks, so reading `path` again with them can fail only on a path."""
    checks = [lambda: load_spec(path)]
    if not args.address:
        checks.append(lambda: check_local_resources(spec, args.num_cpus))
    warnings = []
    for check in checks:
        try:
            check()
        except SpecError as exc:
            warnings.append(str(exc))
    return warnings


def print_plan(spec: StudySpec, store: str, assume_tflops: Optional[float]) -> None:
    """The dry-run plan: trials per cell, boxes, resources and estimated trial-hours. Trials are
    counted, not expanded, unless some of the study is stored (then expanded, to match keys)."""
    from hpstudy.trainers.flops import model_profile
    n_train = spec.dataset.n_train if spec.dataset.name == "synthetic" else TRAIN_SIZES[spec.dataset.name]
    tflops = assume_tflops or (100.0 if spec.resources.gpu else 0.02)
    per_cell = spec.samples * len(spec.seeds)
    done = stored_keys(store, spec.name)
    to_run = Counter((t.model, t.optimizer, t.epochs) for t in expand_for_store(spec, store)
                     if t.key not in done) if done else None
    plan = [(cell, to_run[cell] if done else per_cell) for cell in cells(spec)]
    total, pending = per_cell * len(plan), sum(todo for _, todo in plan)
    print(f"study {spec.name}: {total} trials, {pending} to run "
          f"({total - pending} already stored); sampler {spec.sampler}, "
          f"{'paired' if spec.paired else 'unpaired'} samples; resources per trial {spec.resources}; "
          f"fuse {spec.fuse}")
    print(f"{'model':<14} {'optimizer':<9} {'epochs':>6} {'trials':>6} {'to run':>6}  "
          f"{'lr box':<22} {'wd box':<22} {'GFLOPs':>7} {'trial-h':>8}")
    total_hours = 0.0
    for (model, opt, epochs), todo in plan:
        box = spec.box(model, opt)
        flops = model_profile(model, 10, spec.dataset.size)[0]  # class count barely moves FLOPs
        hours = todo * 3 * 2 * flops * n_train * epochs / (tflops * 1e12) / 3600
        total_hours += hours
        lr_box, wd_box = (f"[{lo:.3g}, {hi:.3g}]" for lo, hi in (box.lr, box.wd))
        print(f"{model:<14} {opt:<9} {epochs:>6} {per_cell:>6} {todo:>6}  {lr_box:<22} {wd_box:<22} "
              f"{flops / 1e9:>7.3f} {hours:>8.2f}")
    print(f"estimated compute to run: {total_hours:.2f} trial-hours (3 x forward FLOPs x "
          f"{n_train} images x epochs at {tflops:g} effective TFLOP/s per trial)")


def print_summary(trials_frame) -> None:
    """Per model: n, ok/diverged/failed, best and median top-1 error."""
    if trials_frame.empty:
        print("no trials stored")
        return
    print(f"{'model':<14} {'n':>5} {'ok':>5} {'div':>5} {'fail':>5} {'best':>8} {'median':>8}")
    for model, group in trials_frame.groupby("model", sort=True):
        counts = group["status"].value_counts()
        errs = group.loc[group["status"] != FAILED, "top1_err"]
        best = f"{errs.min():.2f}" if len(errs) else "-"
        median = f"{errs.median():.2f}" if len(errs) else "-"
        print(f"{model:<14} {len(group):>5} {counts.get(OK, 0):>5} {counts.get(DIVERGED, 0):>5} "
              f"{counts.get(FAILED, 0):>5} {best:>8} {median:>8}")


def spec_change_note(store: str, spec: StudySpec) -> Optional[str]:
    """A note when the study already has a recorded spec whose trials differ from this spec's: how
    many stored rows belong to the earlier spec (they stay, but status and the report leave them out).
    None too when the store cannot be read: the store probe (or the plan) that follows reports that."""
    try:
        record = load_spec_record(store, spec.name)
    except StoreFault:
        return None
    if record is None or record["spec"] == json.loads(json.dumps(spec.source)):
        return None
    keys = {t.key for t in expand_for_store(spec, store)}
    if set(record.get("trial_keys", ())) == keys:
        return None
    earlier = len(set(load_trials(store, spec.name)["trial_key"]) - keys)
    return (f"note: study {spec.name!r} in {store} was run with a different spec; {earlier} stored rows "
            f"come from that earlier spec: they stay in the store, but this run's summary, `hpstudy status` "
            f"and the report leave them out (--fresh deletes them; a new name keeps the studies apart)")


def run(args: argparse.Namespace) -> int:
    """Run (or plan) a study; 0 when every trial is stored ok/diverged, 1 if some failed or were not
    stored, 128 + the signal's number when SIGINT (130) or SIGTERM (143) stopped it."""
    if not args.address:
        # A local Ray binds to loopback only (read when ray is first imported).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    check_run_args(args)
    path = resolve_config(args.config)
    spec = load_spec(path, check_paths=not args.dry_run)
    check_samples(spec)
    if args.dry_run:
        for warning in dry_run_warnings(path, spec, args):
            print(f"warning: {warning} (a run stops here; the dry run's plan does not need it)", flush=True)
    else:
        if not args.address:
            check_local_resources(spec, args.num_cpus)
        # a report that cannot be written fails now, not after the study
        if args.report is None:
            check_store_report_dir(args.store, spec.name)
        elif args.report != "none":
            check_report_dir(args.report, "--report")
    note = spec_change_note(args.store, spec)
    if note:
        print(note, flush=True)
    if args.dry_run:
        print_plan(spec, args.store, args.assume_tflops)
        if spec.resources.gpu:
            print("\n".join(memory_plan(spec, first_trials(spec), args.gpu_memory_gb)))
        return 0
    from hpstudy.study.runner import RunStopped, run_study
    try:
        stored = run_study(spec, args.store, fresh=args.fresh, address=args.address,
                           max_concurrent=args.max_concurrent, num_cpus=args.num_cpus,
                           progress_interval=args.progress_interval, compact_every=args.compact_every)
    except RunStopped as stop:
        print(stop, file=sys.stderr, flush=True)
        return stop.exit_code
    print_summary(stored)
    if args.report != "none":
        location = write_report(args.store, spec.name, args.report)
        if args.address:
            print(fetch_hint(location), flush=True)
    return run_exit_code(stored, len(cells(spec)) * spec.samples * len(spec.seeds))


def run_exit_code(stored, total: int) -> int:
    """0 when every one of the spec's `total` trials is stored ok/diverged; 1 when some are stored
    failed, or were not stored at all (the run ended early: says so, last)."""
    missing = total - len(stored)
    if missing:
        finished = int(stored["status"].isin(FINISHED).sum())
        print(f"incomplete: {finished}/{total} stored, {missing} not run to the end; rerun the same command "
              f"to resume", file=sys.stderr, flush=True)
        return 1
    return 1 if (stored["status"] == FAILED).any() else 0


STORE_REPORT = "report folder in the store"     # how errors name <store>/reports/<study>/


def write_report(store: str, study: str, out: Optional[str], metric: str = DEFAULT_METRIC) -> str:
    """Load a study from the store and write its analysis report (figures, tables, HTML) on the
    `metric` error into the folder `out`, or by default into the store (<store>/reports/<study>/,
    through its filesystem, so the report lives as long as the rows); prints the full location of
    its index.html, and which metric was used (naming any fallback). Returns that location. Either
    folder is written only if it is new, empty or an earlier report (hpstudy.analysis.report_folder)."""
    if out:
        check_report_dir(out, "--out")
    else:
        check_store_report_dir(store, study)
    trials, epochs, record = load_study(store, study)
    if out:
        page = os.path.abspath(build_report(trials, epochs, record, out, metric))
    else:
        fs, base, folder, location = report_location(store, study)
        with tempfile.TemporaryDirectory(prefix="hpstudy-report-") as made:
            name = os.path.basename(build_report(trials, epochs, record, made, metric))
            with store_io(f"write the report into {location}"):
                publish(fs, folder, made, STORE_REPORT, root=base)
        page = f"{location}/{name}"
    print(f"report: {page}\nmetric: {usable(trials, metric).metric}")
    return page


def check_store_report_dir(store: str, study: str) -> None:
    """ReportError (exit 2) now, not after a study, when the study's report folder in the store is not
    hpstudy's to write (a user's files in it, or a symbolic link out of the store). A store that cannot
    be read is left to the store probe that follows (it says what to fix)."""
    fs, base, folder, _ = report_location(store, study)
    with contextlib.suppress(OSError):
        owned(fs, folder, STORE_REPORT, root=base)


def fetch_hint(page: str) -> str:
    """For a cluster run: how to get the report (whose path is on the head node) onto your machine."""
    folder = page.rsplit("/", 1)[0]
    if "://" in folder:
        return f"the report is in the store: {folder}/ (copy it with your storage's own tools)"
    return (f"the report is on the head node ({socket.gethostname()}); fetch it with: ray rsync-down "
            f"cluster.yaml {folder}/ ./{os.path.basename(folder)}-report/  (your cluster file for cluster.yaml)")


@exits_on_user_error
def run_edf_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of study/run_edf.py and `python -m hpstudy.study.run_edf`."""
    parser = argparse.ArgumentParser(prog="run_edf.py", description="Run an hpstudy study on Ray Tune.")
    add_run_args(parser)
    return guarded(run, parser.parse_args(argv))


def guarded(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command: a store fault prints one `error:` line and returns EXIT_STORE_FAULT (3); a
    user's error goes on to exits_on_user_error (2); with --debug both print their traceback first."""
    try:
        return command(args)
    except HpstudyError as exc:
        if args.debug:
            traceback.print_exc()
        if not isinstance(exc, StoreFault):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STORE_FAULT


def status(args: argparse.Namespace) -> int:
    """Counts per model and status of the rows of a study's spec (--config's, else the recorded one)
    and how much of it is done; rows of earlier versions of the spec are counted apart."""
    record = None
    if args.config:
        spec = load_spec(resolve_config(args.config), check_paths=False)
        args.study = args.study or spec.name
        record = {"trial_keys": [t.key for t in expand_for_store(spec, args.store)]}
    elif args.study:
        record = load_spec_record(args.store, args.study)
    current, earlier = split_by_spec(load_trials(args.store, args.study), record)
    if record and "trial_keys" in record:
        finished = int(current["status"].isin(FINISHED).sum())
        print(f"{finished}/{len(record['trial_keys'])} trials of the spec stored as ok/diverged")
    print_summary(current)
    if len(earlier):
        print(f"{len(earlier)} rows from an earlier spec of study {args.study!r} (not counted above, "
              f"not in the report):")
        print_summary(earlier)
    return 0


def print_compaction(store: str, counts: Dict[str, Dict[str, int]]) -> None:
    """One line per table: what compaction merged, kept apart, dropped and quarantined."""
    for table, c in counts.items():
        print(f"{table}: {c['files']} files read ({c['merged_files_kept']} merged by earlier compactions left as "
              f"they are); {c['merged_rows']} rows of finished trials merged "
              f"({c['deleted_files']} files deleted); {c['unfinished']} unfinished trials kept in their own "
              f"file (a rerun replaces it); {c['dropped_rows']} superseded rows dropped; "
              f"{c['quarantined']} unreadable files moved to {store}/quarantine/")


def prepare_data(args: argparse.Namespace) -> int:
    """`hpstudy prepare`: decode an image folder once (or find it already prepared) and say where."""
    from hpstudy.trainers.prepared import prepare
    for flag, value in (("--train-size", args.train_size), ("--image-size", args.image_size),
                        ("--workers", args.workers)):
        if value < 1:
            raise SpecError(f"{flag}: bad value {value}; allowed: an integer >= 1")
    meta = prepare(args.data, args.out, args.train_size, args.image_size, args.workers,
                   verify_content=args.verify_content)
    print(f"{'reused' if meta['reused'] else 'prepared'} {args.out}: {meta['n_train']} train images at "
          f"{meta['train_size']} px, {meta['n_val']} val images at {meta['image_size']} px, "
          f"{len(meta['classes'])} classes; use dataset: {{name: prepared, path: {os.path.abspath(args.out)}}}")
    return 0


@exits_on_user_error
def hpstudy_main(argv: Optional[List[str]] = None) -> int:
    """The `hpstudy` console script: run | status | report | compact | prepare | suggest."""
    parser = argparse.ArgumentParser(prog="hpstudy", description="Hyperparameter-robustness studies.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_args(sub.add_parser("run", help="run a study (same flags as run_edf.py)"))
    p_status = add_store_args(sub.add_parser("status", help="what a store holds for a study"))
    p_status.add_argument("--config", default=None, help="spec to compare against (how complete)")
    p_report = add_store_args(sub.add_parser("report", help="write a study's report (see python -m hpstudy.analysis)"),
                              study_required=True, out=True)
    p_compact = add_store_args(sub.add_parser("compact", help="merge a study's per-trial files"),
                               study_required=True)
    p_prepare = sub.add_parser("prepare", help="decode an image folder once into memory-mapped arrays "
                                               "(dataset `prepared`), on this node's local disk")
    p_prepare.add_argument("--data", required=True, help="image folder with train/<class>/ and val/<class>/")
    p_prepare.add_argument("--out", required=True, help="output folder (local disk of the node): missing, empty "
                                                        "or an earlier preparation (replaced)")
    p_prepare.add_argument("--train-size", type=int, default=256, help="side of the stored training squares")
    p_prepare.add_argument("--image-size", type=int, default=224, help="the trials' image size (validation "
                                                                       "images are stored at it)")
    p_prepare.add_argument("--workers", type=int, default=os.cpu_count(), help="decoding processes")
    p_prepare.add_argument("--verify-content", action="store_true",
                           help="reuse --out only after hashing every source image (by default: when their "
                                "names, labels, sizes and modification times match)")
    from hpstudy.analysis.stats import good_ranges      # for suggest: study/ does not import analysis, the CLI does
    from hpstudy.study.suggest import add_suggest_args, suggest_command
    p_suggest = add_suggest_args(add_store_args(sub.add_parser(
        "suggest", help="spec lines (YAML) of a fixed lr/wd per model, from a stored lr/wd study's good ranges"),
        study_required=True))
    add_debug_arg(p_suggest)
    for p in (p_status, p_report, p_compact, p_prepare):
        add_debug_arg(p)
    args = parser.parse_args(argv)
    commands = {
        "run": run, "status": status,
        "report": lambda a: write_report(a.store, a.study, a.out, a.metric) and 0,
        "compact": lambda a: print_compaction(a.store, compact(a.store, a.study)) or 0,
        "prepare": prepare_data,
        "suggest": lambda a: suggest_command(a, good_ranges),
    }
    return guarded(commands[args.command], args)
