"""What each `hpstudy` command does (hpstudy.cli parses the flags and calls these): run, status, report,
query, compact, prepare, suggest and train. This layer sits above study/ and analysis/: it reads the store
(hpstudy.study.store) and hands DataFrames to the analysis library, which never reads a store."""

import argparse
import contextlib
import functools
import json
import logging
import os
import socket
import sys
import time
from collections import Counter
from typing import Callable, Dict, List, Optional, Tuple

import pandas as pd
import pyarrow.fs as pafs

from hpstudy import service
from hpstudy.analysis.query import QueryError, filter_rows
from hpstudy.analysis.report_folder import build_into, check_report_path
from hpstudy.analysis.stats import IMPORTANCE_RESAMPLES, IMPORTANCE_SEEDS, StatsError, good_ranges
from hpstudy.service import (
    RunSettings,
    StudyPlan,
    check_before_trials,
    check_local_resources,
    check_settings,
    print_note,
    write_report,
)
from hpstudy.study.sampling import cells, check_samples, expand_for_store
from hpstudy.study.spec import SpecError, StudySpec, check_models, load_spec, parse_spec, resolve_config
from hpstudy.study.store.layout import StoreError, StoreFault, check_study_name, store_io
from hpstudy.study.store.lease import ForeignLease, Lease, describe
from hpstudy.study.store.read import (
    require_rows,
    require_store,
    split_by_spec,
    with_sampled_columns,
)
from hpstudy.study.store.store import Store
from hpstudy.study.suggest import suggest as suggest_lines
from hpstudy.study.trackers import check_trackers, trackers_of
from hpstudy.trainers.errors import ConfigError, shown
from hpstudy.trainers.schema import DIVERGED, FAILED, FINISHED, OK
from hpstudy.trainers.zoo import did_you_mean

logger = logging.getLogger(__name__)  # what the API's calls show too (print_note, write_report); the rest prints


def dry_run_warnings(path: str, spec: StudySpec, args: argparse.Namespace) -> List[str]:
    """What a run would refuse that a dry run does not need: the spec's paths (its dataset, its init
    checkpoint) and, for a local Ray, this machine's CPUs and GPUs. `spec` was read without path
    checks, so reading `path` again with them can fail only on a path."""
    checks: List[Callable[[], object]] = [lambda: load_spec(path)]
    if not args.address:
        checks.append(lambda: check_local_resources(spec, args.num_cpus))
    warnings = []
    for check in checks:
        try:
            check()
        except SpecError as exc:
            warnings.append(str(exc))
    return warnings


def print_plan(spec: StudySpec, plan: StudyPlan) -> None:
    """The dry-run plan (service.plan): trials per cell, boxes, resources and estimated trial-hours."""
    from hpstudy.study.fusion import fusion_notes  # torch and timm (its fused trainer)

    total, pending = int(plan.cells["trials"].sum()), int(plan.cells["to_run"].sum())
    print(
        f"study {spec.name}: {total} trials, {pending} to run "
        f"({total - pending} already stored); sampler {spec.sampler}, "
        f"{'paired' if spec.paired else 'unpaired'} samples; resources per trial {spec.resources}; "
        f"fuse {spec.fuse}"
    )
    w = max(14, *map(len, spec.models))  # the model column fits the longest name (timm:...)
    print(
        f"{'model':<{w}} {'optimizer':<9} {'epochs':>6} {'trials':>6} {'to run':>6}  "
        f"{'lr box':<22} {'wd box':<22} {'GMACs':>7} {'trial-h':>8}"
    )
    for row in plan.cells.itertuples(index=False):
        lr_box, wd_box = (f"[{lo:.3g}, {hi:.3g}]" for lo, hi in ((row.lr_low, row.lr_high), (row.wd_low, row.wd_high)))
        print(
            f"{row.model:<{w}} {row.optimizer:<9} {row.epochs:>6} {row.trials:>6} {row.to_run:>6}  {lr_box:<22} "
            f"{wd_box:<22} {row.gmacs:>7.3f} {row.trial_hours:>8.2f}"
        )
    for model, opt in dict.fromkeys(zip(plan.cells["model"], plan.cells["optimizer"])):
        extra = spec.box(model, opt).axes()[2:]  # after lr and wd: the recipe fields this box samples
        if extra:
            fields = ", ".join(f"{name} {dist.kind} {list(dist.values)}" for name, dist in extra)
            print(f"{model:<{w}} {opt:<9} also samples {fields}")
    for note in fusion_notes(spec):
        print(note)
    print(
        f"estimated compute to run: {plan.trial_hours:.2f} trial-hours (3 x forward FLOPs (2 per multiply-add) x "
        f"{plan.n_train} images x epochs at {plan.tflops:g} effective TFLOP/s per trial)"
    )


SUMMARY_COLUMNS = ["model", "optimizer", "epochs", "status", "top1_err"]  # what print_summary and print_cells read


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
        print(
            f"{model:<14} {len(group):>5} {counts.get(OK, 0):>5} {counts.get(DIVERGED, 0):>5} "
            f"{counts.get(FAILED, 0):>5} {best:>8} {median:>8}"
        )


def run(args: argparse.Namespace) -> int:
    """Run (or plan) a study; 0 when every trial is stored ok/diverged, 1 if some failed or were not
    stored, 128 + the signal's number when SIGINT (130) or SIGTERM (143) stopped it."""
    if not args.address:
        # A local Ray binds to loopback only (read when ray is first imported).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    settings = RunSettings(
        store=args.store,
        address=args.address,
        fresh=args.fresh,
        max_concurrent=args.max_concurrent,
        num_cpus=args.num_cpus,
        progress_interval=args.progress_interval,
        compact_every=args.compact_every,
        trackers=trackers_of(args.track or (), "--track"),
        report=args.report,
    )
    check_settings(settings)
    path = resolve_config(args.config)
    spec = load_spec(path, check_paths=not args.dry_run)
    check_models(spec)
    check_samples(spec)
    check_trackers(settings.trackers, keep=not args.dry_run)  # folders made and probed (a dry run's removed again)
    if args.dry_run:
        from hpstudy.study.gpu_plan import memory_plan, memory_trials  # torch and timm for a model not counted before

        for warning in dry_run_warnings(path, spec, args):
            print(f"warning: {warning} (a run stops here; the dry run's plan does not need it)", flush=True)
        store = Store.open(args.store)
        print_note(store, spec)
        print_plan(spec, service.plan(spec, store, args.assume_tflops))
        if spec.resources.gpu:
            print("\n".join(memory_plan(spec, memory_trials(spec), args.gpu_memory_gb)))
        return 0
    check_before_trials(spec, args.store, args.address, args.num_cpus, args.report)
    from hpstudy.study.interruption import RunStopped

    try:
        stored, location = service.run(spec, settings, "hpstudy run", args.wait, on_stored=print_summary)
    except RunStopped as stop:
        print(stop, file=sys.stderr, flush=True)
        return stop.exit_code
    if location and args.address:
        print(fetch_hint(location), flush=True)
    return run_exit_code(stored, len(cells(spec)) * spec.samples * len(spec.seeds))


def run_exit_code(stored, total: int) -> int:
    """0 when every one of the spec's `total` trials is stored ok/diverged; 1 when some are stored
    failed, or were not stored at all (the run ended early: says so, last)."""
    missing = total - len(stored)
    if missing:
        finished = int(stored["status"].isin(FINISHED).sum())
        print(
            f"incomplete: {finished}/{total} stored, {missing} not run to the end; rerun the same command to resume",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 1 if (stored["status"] == FAILED).any() else 0


def report(args: argparse.Namespace) -> int:
    """`hpstudy report`: write_report with the flags."""
    write_report(args.store, args.study, args.out, args.metric)
    return 0


def fetch_hint(page: str) -> str:
    """For a cluster run: how to get the report (whose path is on the head node) onto your machine."""
    folder = page.rsplit("/", 1)[0]
    if "://" in folder:
        return f"the report is in the store: {folder}/ (copy it with your storage's own tools)"
    return (
        f"the report is on the head node ({socket.gethostname()}); fetch it with: ray rsync-down "
        f"cluster.yaml {folder}/ ./{os.path.basename(folder)}-report/  (your cluster file for cluster.yaml)"
    )


def status(args: argparse.Namespace) -> int:
    """Whether a driver is running the study (its lease), counts per model and status of the rows of the study's
    spec (--config's, else the recorded one), how much of it is done and, per cell, its trials stored, running
    and pending; rows of earlier versions of the spec are counted apart. Reads the store only (no Ray)."""
    record, spec = None, None
    if args.config:
        spec = load_spec(resolve_config(args.config), check_paths=False)
        args.study = args.study or spec.name
    if args.study:
        check_study_name(args.study)  # a bad name is named before the store
    store = Store.open(args.store)
    if spec is not None:
        record = {"trial_keys": [t.key for t in expand_for_store(spec, store)]}
    require_store(store)
    if args.study and not args.config:
        record = store.spec_record(args.study)
        # the recorded keys say which rows are the spec's, its cells what each cell plans: no expansion
        spec = _recorded_spec(record) if record and "trial_keys" in record else None
    current, earlier = split_by_spec(store.load_trials(args.study, columns=SUMMARY_COLUMNS), record)
    if args.study and not record and current.empty and earlier.empty:
        store.require_study(args.study)  # a study neither run nor stored: its name is mistyped
    holder = None
    if args.study:
        holder, line = read_lease(store, args.study)
        print(line)
    if record and "trial_keys" in record:
        finished = int(current["status"].isin(FINISHED).sum())
        print(f"{finished}/{len(record['trial_keys'])} trials of the spec stored as ok/diverged")
    print_summary(current)
    if spec:
        running = store.running(args.study, holder["host"], holder["pid"]) if holder else {}
        print_cells(spec, current, running)
    if len(earlier):
        print(
            f"{len(earlier)} rows from an earlier spec of study {args.study!r} (not counted above, not in the report):"
        )
        print_summary(earlier)
    return 0


def _recorded_spec(record: Optional[Dict]) -> Optional[StudySpec]:
    """The spec a study's record holds, or None when there is none or it is no longer a valid spec here (a
    model since removed, an older spec format): status then counts per model only."""
    with contextlib.suppress(SpecError, TypeError, KeyError):
        return parse_spec(record["spec"], check_paths=False) if record else None
    return None


def read_lease(store: Store, study: str) -> Tuple[Optional[Dict], str]:
    """The lease of the driver running `study` now (hpstudy.study.store.lease) or None when there is none or it is
    stale (its driver died), and one line saying which."""
    try:
        lease = Lease(store, study, "hpstudy status")._read()
    except ForeignLease as exc:
        return None, f"driver: unknown ({exc})"
    if not lease:
        return None, "driver: none (no run of this study holds its lease)"
    ago = time.time() - lease["heartbeat_at"]
    if ago > lease["stale_after_s"]:
        return None, (
            f"driver: none live; the lease of {describe(lease)} is stale (no heartbeat for {ago:.0f} s): "
            f"its driver died, and the next run takes the lease over"
        )
    return lease, f"driver: live, {describe(lease)}, heartbeat {max(0.0, ago):.0f} s ago"


def print_cells(spec: StudySpec, current: pd.DataFrame, running: Dict) -> None:
    """Per (model, optimizer, epochs) cell of the spec: its trials, stored per status, running and pending
    (`current`: the stored rows of the spec's trials; every cell plans samples x seeds of them)."""
    keys = list(zip(current["model"], current["optimizer"], current["epochs"].astype(int)))
    stored, by_status = Counter(keys), Counter(zip(keys, current["status"]))
    rows: Dict = {}
    for cell in cells(spec):
        row = rows[cell] = Counter({status: by_status[(cell, status)] for status in (OK, DIVERGED, FAILED)})
        row["trials"] = spec.samples * len(spec.seeds)
        row["not stored"] = row["trials"] - stored[cell]
    w = max(14, *(len(m) for m, _, _ in rows))
    print(
        f"{'model':<{w}} {'optimizer':<9} {'epochs':>6} {'trials':>6} {'ok':>5} {'div':>5} {'fail':>5} "
        f"{'running':>7} {'pending':>7}"
    )
    for (model, optimizer, epochs), row in rows.items():
        now = min(running.get((model, optimizer, epochs), 0), row["not stored"])
        print(
            f"{model:<{w}} {optimizer:<9} {epochs:>6} {row['trials']:>6} {row[OK]:>5} {row[DIVERGED]:>5} "
            f"{row[FAILED]:>5} {now:>7} {row['not stored'] - now:>7}"
        )


def compact_study(args: argparse.Namespace) -> int:
    """`hpstudy compact`: merge a study's files holding its lease, so no other driver of the study writes
    or compacts meanwhile; while one does, refused (exit 2, naming it) or, with --wait, after it."""
    from hpstudy.study.interruption import RunStopped

    check_study_name(args.study)
    store = Store.open(args.store)
    check_store_exists(store, "")  # no lease written into a mistyped --store (a run may have no trials yet)
    try:
        with store.lease(args.study, "hpstudy compact", args.wait):
            print_compaction(store, store.compact(args.study))
    except RunStopped as stop:
        print(stop, file=sys.stderr, flush=True)
        return stop.exit_code
    return 0


def print_compaction(store: Store, counts: Dict[str, Dict[str, int]]) -> None:
    """One line per table: what compaction merged, kept apart, dropped and quarantined."""
    for table, c in counts.items():
        print(
            f"{table}: {c['files']} files read ({c['merged_files_kept']} merged by earlier compactions left as "
            f"they are); {c['merged_rows']} rows of finished trials merged "
            f"({c['deleted_files']} files deleted); {c['unfinished']} unfinished trials kept in their own "
            f"file (a rerun replaces it); {c['dropped_rows']} superseded rows dropped; "
            f"{c['quarantined']} unreadable files moved to {store}/quarantine/"
        )


def prepare_data(args: argparse.Namespace) -> int:
    """`hpstudy prepare`: decode an image folder once (or find it already prepared) and say where."""
    from hpstudy.trainers.prepared import prepare

    for flag, value in (
        ("--train-size", args.train_size),
        ("--image-size", args.image_size),
        ("--workers", args.workers),
    ):
        if value < 1:
            raise SpecError(f"{flag}: bad value {value}; allowed: an integer >= 1")
    meta = prepare(
        args.data, args.out, args.train_size, args.image_size, args.workers, verify_content=args.verify_content
    )
    print(
        f"{'reused' if meta['reused'] else 'prepared'} {args.out}: {meta['n_train']} train images at "
        f"{meta['train_size']} px, {meta['n_val']} val images at {meta['image_size']} px, "
        f"{len(meta['classes'])} classes; use dataset: {{name: prepared, path: {os.path.abspath(args.out)}}}"
    )
    return 0


def check_store_exists(store: Store, folder: str = "trials") -> None:
    """StoreError (exit 2) if `store`, or its `folder`, does not exist: a mistyped --store, not a store."""
    path = f"{store.base}/{folder}" if folder else store.base
    with store_io(f"read {store}"):
        if store.fs.get_file_info(path).type == pafs.FileType.NotFound:
            raise StoreError(f"--store: no store at {shown(store.uri)} ({path} does not exist)")


def stored_trials(store: Store, study: Optional[str]) -> pd.DataFrame:
    """The store's trials (of `study` when given); StoreError if there is no store, or no row of the study."""
    if study is not None:
        check_study_name(study)  # a bad name is named before the store
    require_store(store)
    trials = store.load_trials(study)
    return trials if study is None else require_rows(trials, store, study)


def _sampled_fields(store: Store, study: str) -> List[str]:
    """The recipe fields the study's spec record says it samples; none when it has no readable record
    (the rows are still queried: a damaged record is named by `hpstudy status` and rewritten by a run)."""
    try:
        return list(((store.spec_record(study) or {}).get("sampled")) or ())
    except StoreFault:
        return []


def query(store: str, study: Optional[str], expr: str, columns: str) -> str:
    """The `columns` of the stored trials that match the filter `expr` (hpstudy.analysis.query), as text."""
    if study is not None:
        check_study_name(study)  # a bad name is named before the store
    opened = Store.open(store)
    trials = stored_trials(opened, study)
    if study is not None:  # the recipe fields the study samples are columns too (label_smoothing, ...)
        trials = with_sampled_columns(trials, _sampled_fields(opened, study))
    wanted = columns.split(",")
    unknown = [name for name in wanted if name not in trials.columns]
    if unknown:
        raise QueryError(f"--columns: unknown column {shown(unknown[0])}; columns: {', '.join(trials.columns)}")
    rows = filter_rows(trials, expr)[wanted]
    if rows.empty:
        return f"no rows match {shown(expr)} (of {len(trials)} trials)"
    with pd.option_context("display.max_rows", 200, "display.width", 200):
        return rows.to_string(index=False)


def suggest(args: argparse.Namespace) -> int:
    """`hpstudy suggest`: the spec lines of a fixed lr/wd per model (hpstudy.study.suggest, on
    hpstudy.analysis.stats.good_ranges, which study/ does not import)."""
    print(suggest_lines(args.store, args.study, good_ranges, args.metric, args.model, args.optimizer))
    return 0


def importance(args: argparse.Namespace) -> int:
    """`hpstudy importance`: fANOVA importance per cell with bootstrap intervals and the forest seed's range
    (hpstudy.analysis.figures.importance_table), printed as a table or JSON; with --out, its interval figure."""
    resamples = IMPORTANCE_RESAMPLES if args.resamples is None else args.resamples
    seeds = IMPORTANCE_SEEDS if args.seeds is None else args.seeds
    for flag, value in (("--resamples", resamples), ("--seeds", seeds)):
        if value < 1:
            raise StatsError(f"{flag}: bad value {value}; allowed: a whole number >= 1")
    if args.out:
        check_report_path(args.out, "--out")
    check_study_name(args.study)
    store = Store.open(args.store)
    store.require_study(args.study)
    from hpstudy.analysis.figures import importance_table, write_importance  # matplotlib: only for this command
    from hpstudy.analysis.report import hp_keys

    trials, _, record = store.load_study(args.study)
    progress = lambda done, cells: logger.info("importance: %d of %d cells", done, cells)
    keys = hp_keys(trials, record)
    table = importance_table(trials, args.metric, keys, resamples, seeds, None if args.json else progress)
    if args.json:
        print(table.to_json(orient="records"))
    elif table.empty:
        print(
            f"no cell of {args.study} varies a sampled hyperparameter over trials of different errors: nothing to "
            "attribute (a study of seeds of one configuration has no importance)"
        )
    else:
        with pd.option_context("display.max_rows", 500, "display.width", 200):
            print(table.drop(columns=["metric"]).round(3).to_string(index=False))
    if args.out and not table.empty:
        build_into(args.out, functools.partial(write_importance, table))
        if not args.json:  # stdout holds the JSON alone
            logger.info("figure: %s", os.path.join(os.path.abspath(args.out), "importance.pdf"))
    return 0


def family_findings(args: argparse.Namespace) -> int:
    """`hpstudy findings`: the findings of the studies named, one Holm family over all of them
    (hpstudy.analysis.findings.findings_across), as sentences and the paper's claims table, or as JSON."""
    from hpstudy.analysis.findings import claims_table, findings_across  # scipy and the model catalogue

    studies, store = list(dict.fromkeys(args.study)), Store.open(args.store)
    found = findings_across({study: store.load_study(study)[0] for study in studies}, args.metric)
    claims = claims_table(found)
    if args.json:
        print(json.dumps({"findings": [f.as_dict() for f in found], "claims": claims.to_dict(orient="records")}))
        return 0
    print("\n".join(f"- {f.sentence}" for f in found))
    if len(claims):
        with pd.option_context("display.max_rows", 200, "display.width", 250, "display.max_colwidth", 90):
            print(f"\nthe paper's claims (verdicts after Holm over the {found[0].family} tests):")
            print(claims.drop(columns="paper").to_string(index=False))
    return 0


SPEC_FLAGS = ("config", "model", "optimizer", "epochs", "lr", "wd", "seed")  # `hpstudy train` of a spec's trial
STORED_COLUMNS = ["config_json", "status", "top1_err", "best_top1_err", "top5_err", "wall_s", "device"]


def train(args: argparse.Namespace) -> int:
    """`hpstudy train`: one trial without Ray, a stored one again (--store, --key: its row's config_json) or one of
    a spec (--config: its recipe and dataset, and its first model, optimizer, length, sample and seed for each
    flag not given); --device trains it elsewhere. Prints the epochs and the result (and the stored row's)."""
    from hpstudy.trainers.train import result_line, result_text, train_and_show  # torch

    given = [f"--{name}" for name in SPEC_FLAGS if getattr(args, name) is not None]
    if args.key is not None:
        if given:
            raise SpecError(
                f"{given[0]}: not allowed with --key (a stored trial is replayed with its whole stored config); "
                f"allowed with --key: --store, --study, --device, --json"
            )
        config, stored = stored_trial(args.store or "./results", args.study, args.key)
        if not args.json:
            print(f"replaying trial {stored['trial_key']} of study {stored['study']!r}; stored {result_line(stored)}")
    else:
        for flag, value in (("--store", args.store), ("--study", args.study)):
            if value is not None:
                raise SpecError(f"{flag}: given without --key; allowed: --key KEY with it (the stored trial to replay)")
        config = spec_trial(args)
    row = train_and_show(dict(config, device=args.device) if args.device else config, args.json)
    print(result_text(row, args.json), flush=True)
    return 0


def stored_trial(store: str, study: Optional[str], key: str) -> tuple:
    """(the config, the row) of the stored trial whose key is `key` or starts with it (in `study`, or any study
    of the store); SpecError naming --key for no such trial (with the nearest key) or several."""
    if study is not None:
        check_study_name(study)
    opened = Store.open(store)
    require_store(opened)
    rows = opened.load_trials(study, columns=STORED_COLUMNS)
    if study is not None and rows.empty:
        opened.require_study(study)
    where = f"study {study!r}" if study is not None else "the store"
    if not (isinstance(key, str) and key):
        raise SpecError(f"--key: bad value {shown(key)}; allowed: a trial key of {where}, or a prefix of one")
    found = rows[rows["trial_key"].str.startswith(key)]
    keys = sorted(set(found["trial_key"]))
    if not keys:
        prefixes = {k[: len(key)] for k in rows["trial_key"]}
        raise SpecError(
            f"--key: bad value {shown(key)}; allowed: the key of one of the {len(rows)} trials of {where} in "
            f"{store}, or a prefix of one{did_you_mean(key, prefixes)}"
        )
    if len(keys) > 1:
        raise SpecError(
            f"--key: {shown(key)} begins {len(keys)} trial keys ({', '.join(keys[:3])}{', ...' * (len(keys) > 3)}); "
            f"allowed: a longer prefix that only one of them begins with"
        )
    row = found[found["trial_key"] == keys[0]].iloc[0].to_dict()
    if not isinstance(row.get("config_json"), str):
        raise SpecError(
            f"--key: trial {keys[0]} has no stored config (its config_json is empty); it cannot be replayed"
        )
    return json.loads(row["config_json"]), row


def spec_trial(args: argparse.Namespace) -> Dict:
    """The config of one trial of --config's spec (the default spec when none): the cell of --model, --optimizer
    and --epochs (each the spec's first when not given), at its first sample's values, with --lr, --wd, --seed."""
    from hpstudy.study.sampling import expand_cell
    from hpstudy.trainers.config import TrialConfig

    spec = load_spec(resolve_config(args.config or args.default_config))
    model = _one_of(spec, "--model", args.model, spec.models)
    optimizer = _one_of(spec, "--optimizer", args.optimizer, spec.optimizers)
    epochs = _one_of(spec, "--epochs", args.epochs, spec.epochs)
    first = expand_cell(spec, model, optimizer, epochs)[0].config
    given = {name: getattr(args, name) for name in ("lr", "wd", "seed") if getattr(args, name) is not None}
    try:
        return TrialConfig.from_dict(dict(first, **given)).to_dict()
    except ConfigError as exc:  # about a flag given: named as the flag
        if str(exc).split(":")[0] in given:
            raise SpecError(f"--{exc}") from None
        raise


def _one_of(spec: StudySpec, flag: str, value, allowed):
    """`value`, or the spec's first when None; SpecError naming `flag` for one the spec does not hold."""
    if value is None:
        return allowed[0]
    if value not in allowed:
        raise SpecError(
            f"{flag}: bad value {shown(value)}; allowed (in spec {spec.name!r}): {', '.join(map(str, allowed))}"
            f"{did_you_mean(value, allowed)}"
        )
    return value


COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run,
    "status": status,
    "report": report,
    "query": lambda a: print(query(a.store, a.study, a.expr, a.columns)) or 0,
    "findings": family_findings,
    "compact": compact_study,
    "prepare": prepare_data,
    "suggest": suggest,
    "importance": importance,
    "train": train,
}
