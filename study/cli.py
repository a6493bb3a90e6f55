"""Command lines: `run_edf.py` (run a study) and the `hpstudy` console script (run/status/report/compact)."""

import argparse
import os
from collections import Counter
from typing import List, Optional

from analysis.metric import DEFAULT_METRIC, METRIC_DOCS, METRICS, usable
from analysis.report import build_report
from study.sampling import expand
from study.spec import SpecError, StudySpec, load_spec, resolve_config
from study.store import compact, load_study, load_trials, stored_keys
from trainers.errors import exits_on_user_error
from trainers.schema import FAILED, FINISHED

DEFAULT_CONFIG = "demo_digits"
# Nominal training-set sizes for the dry-run estimate (imagefolder: ImageNet-1k is assumed).
TRAIN_SIZES = {"digits": 1437, "cifar10": 50000, "cifar100": 50000, "imagefolder": 1281167}


def add_run_args(p: argparse.ArgumentParser) -> None:
    """Flags of `run_edf.py` / `hpstudy run`."""
    p.add_argument("--config", default=DEFAULT_CONFIG,
                   help="study spec: a YAML path or a bundled name (default: demo_digits)")
    p.add_argument("--store", default="./results", help="store root: a path or s3://, gs:// URI")
    p.add_argument("--address", default=None,
                   help="Ray address ('auto' inside a cluster); default: start a local Ray on loopback")
    p.add_argument("--max-concurrent", type=int, default=None, help="cap on trials running at once")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", dest="fresh", action="store_false", default=False,
                      help="skip trials already stored as ok/diverged (default)")
    mode.add_argument("--fresh", dest="fresh", action="store_true",
                      help="delete this study's stored rows first and run every trial")
    p.add_argument("--report", default=None,
                   help="report folder (default: <store>/report/<study>); 'none' to skip")
    p.add_argument("--assume-tflops", type=float, default=None,
                   help="effective TFLOP/s per trial for the dry-run time estimate "
                        "(default: 100 with a GPU per trial, 0.02 on CPU)")
    p.add_argument("--progress-interval", type=float, default=10.0, help="seconds between status lines")


def add_store_args(p: argparse.ArgumentParser, study_required: bool = False,
                   out: bool = False) -> argparse.ArgumentParser:
    """--store and --study (and --out) of the commands that read a store."""
    p.add_argument("--store", default="./results", help="store root: a path or a URI")
    p.add_argument("--study", required=study_required, default=None)
    if out:
        p.add_argument("--out", default=None, help="report folder (default: <store>/report/<study>)")
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
    if "://" not in args.store and os.path.exists(args.store) and not os.path.isdir(args.store):
        raise SpecError(f"--store: {args.store!r} is a file; allowed: a folder or a URI")


def print_plan(spec: StudySpec, trials, pending, assume_tflops: Optional[float]) -> None:
    """The dry-run plan: trials per cell, boxes, resources and estimated trial-hours."""
    from trainers.flops import model_profile
    n_train = spec.dataset.n_train if spec.dataset.name == "synthetic" else TRAIN_SIZES[spec.dataset.name]
    tflops = assume_tflops or (100.0 if spec.resources.gpu else 0.02)
    pending_keys = {t.key for t in pending}
    print(f"study {spec.name}: {len(trials)} trials, {len(pending)} to run "
          f"({len(trials) - len(pending)} already stored); sampler {spec.sampler}, "
          f"{'paired' if spec.paired else 'unpaired'} samples; resources per trial {spec.resources}; "
          f"fuse {spec.fuse}")
    print(f"{'model':<14} {'optimizer':<9} {'epochs':>6} {'trials':>6} {'to run':>6}  "
          f"{'lr box':<22} {'wd box':<22} {'GFLOPs':>7} {'trial-h':>8}")
    total_hours = 0.0
    cells = Counter((t.model, t.optimizer, t.epochs) for t in trials)
    for (model, opt, epochs), n in cells.items():
        todo = sum(1 for t in trials if (t.model, t.optimizer, t.epochs) == (model, opt, epochs)
                   and t.key in pending_keys)
        box = spec.box(model, opt)
        flops = model_profile(model, 10, spec.dataset.size)[0]  # class count barely moves FLOPs
        hours = todo * 3 * 2 * flops * n_train * epochs / (tflops * 1e12) / 3600
        total_hours += hours
        lr_box, wd_box = (f"[{lo:.3g}, {hi:.3g}]" for lo, hi in (box.lr, box.wd))
        print(f"{model:<14} {opt:<9} {epochs:>6} {n:>6} {todo:>6}  {lr_box:<22} {wd_box:<22} "
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
        print(f"{model:<14} {len(group):>5} {counts.get('ok', 0):>5} {counts.get('diverged', 0):>5} "
              f"{counts.get('failed', 0):>5} {best:>8} {median:>8}")


def run(args: argparse.Namespace) -> int:
    """Run (or plan) a study; 0 when every trial is stored ok/diverged, 1 if some failed."""
    if not args.address:
        # A local Ray binds to loopback only (read when ray is first imported).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    check_run_args(args)
    spec = load_spec(resolve_config(args.config))
    if not args.address:
        check_local_resources(spec, args.num_cpus)
    if args.dry_run:
        trials = expand(spec)
        done = stored_keys(args.store, spec.name)
        print_plan(spec, trials, [t for t in trials if t.key not in done], args.assume_tflops)
        return 0
    from study.runner import run_study
    stored = run_study(spec, args.store, fresh=args.fresh, address=args.address,
                       max_concurrent=args.max_concurrent, num_cpus=args.num_cpus,
                       progress_interval=args.progress_interval)
    print_summary(stored)
    if args.report != "none":
        write_report(args.store, spec.name, args.report)
    return 1 if (stored["status"] == FAILED).any() else 0


def write_report(store: str, study: str, out: Optional[str], metric: str = DEFAULT_METRIC) -> None:
    """Load a study from the store and write its analysis report (figures, tables, HTML) on the
    `metric` error; prints where, and which metric was used (naming any fallback)."""
    trials, epochs, record = load_study(store, study)
    out = out or os.path.join(store if "://" not in store else ".", "report", study)
    page = build_report(trials, epochs, record, out, metric)
    print(f"report: {page}\nmetric: {usable(trials, metric).metric}")


@exits_on_user_error
def run_edf_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of study/run_edf.py and `python -m study.run_edf`."""
    parser = argparse.ArgumentParser(prog="run_edf.py", description="Run an hpstudy study on Ray Tune.")
    add_run_args(parser)
    return run(parser.parse_args(argv))


def status(args: argparse.Namespace) -> int:
    """Counts per model and status of a stored study (and how much of its spec is done)."""
    trials = load_trials(args.store, args.study)
    if args.config:
        spec = load_spec(resolve_config(args.config), check_paths=False)
        expected = {t.key for t in expand(spec)}
        finished = trials["trial_key"].isin(expected) & trials["status"].isin(FINISHED)
        print(f"{int(finished.sum())}/{len(expected)} trials of the spec stored as ok/diverged")
    print_summary(trials)
    return 0


@exits_on_user_error
def hpstudy_main(argv: Optional[List[str]] = None) -> int:
    """The `hpstudy` console script: run | status | report | compact."""
    parser = argparse.ArgumentParser(prog="hpstudy", description="Hyperparameter-robustness studies.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_args(sub.add_parser("run", help="run a study (same flags as run_edf.py)"))
    p_status = add_store_args(sub.add_parser("status", help="what a store holds for a study"))
    p_status.add_argument("--config", default=None, help="spec to compare against (how complete)")
    add_store_args(sub.add_parser("report", help="write a study's report (see python -m analysis)"),
                   study_required=True, out=True)
    add_store_args(sub.add_parser("compact", help="merge a study's per-trial files"), study_required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args)
    if args.command == "status":
        return status(args)
    if args.command == "report":
        write_report(args.store, args.study, args.out, args.metric)
        return 0
    print(compact(args.store, args.study))
    return 0
