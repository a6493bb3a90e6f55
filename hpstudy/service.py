"""A study's plan, run and report as the command line (`hpstudy run [--dry-run]`, `hpstudy report`) and the
Python API (`hpstudy.plan`, `run`, `report`) share them: the plan's numbers per cell, the settings of a
run, the checks it makes before any trial, and the run itself under the study's lease (the spec-change
note, the trials, the report). Each caller parses and validates its own arguments, calls these, and
prints or returns what they give back."""

import contextlib
import functools
import json
import logging
import math
import numbers
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple, Union, cast

import pandas as pd

from hpstudy.analysis.metric import DEFAULT_METRIC, usable
from hpstudy.analysis.report_folder import check_report_dir, check_report_path, owned, publish
from hpstudy.study.sampling import cells, check_samples, expand_for_store
from hpstudy.study.spec import SpecError, StudySpec, check_models
from hpstudy.study.store.layout import StoreError, StoreFault, StoreLike, check_study_name, store_io
from hpstudy.study.store.read import CLI, Fields
from hpstudy.study.store.spec_record import report_location
from hpstudy.study.store.store import Store
from hpstudy.trainers.data_spec import nominal_train_size
from hpstudy.trainers.errors import shown

logger = logging.getLogger(__name__)
PROGRESS_INTERVAL = 10.0  # seconds between status lines in a terminal (`hpstudy run --progress-interval`)
COMPACT_EVERY = 1000  # stored trials between compactions during a run (`--compact-every`; 0: never)
NO_REPORT = "none"  # RunSettings.report: no report after the run


# a trial's assumed effective speed when none is given (--assume-tflops): a datacenter GPU, a CPU core
ASSUMED_TFLOPS = {"gpu": 100.0, "cpu": 0.02}


@dataclass(frozen=True)
class StudyPlan:
    """What a study would run: per (model, optimizer, epochs) cell its trials, those not yet stored, its
    lr and wd boxes, the model's forward multiply-adds per image and the estimated trial-hours of the
    trials to run (`cells`), at `tflops` effective TFLOP/s per trial over `n_train` images an epoch."""

    cells: pd.DataFrame
    tflops: float
    n_train: int

    @property
    def trial_hours(self) -> float:
        """The estimated compute of the trials to run, in trial-hours."""
        return float(self.cells["trial_hours"].sum())


def plan(spec: StudySpec, store: StoreLike, assume_tflops: Optional[float] = None) -> StudyPlan:
    """The study's plan (StudyPlan). Trials are counted, not expanded, unless some of the study is stored
    (then expanded, to match keys). A trial costs 3 x its forward FLOPs (2 per multiply-add) per image and
    epoch, on the dataset's registered nominal size (image folders: ImageNet-1k)."""
    from hpstudy.trainers.flops import model_profile  # counts a model not in the model counts' cache (torch)

    if assume_tflops is not None and not (
        isinstance(assume_tflops, numbers.Real) and not isinstance(assume_tflops, bool) and 0 < assume_tflops < math.inf
    ):
        raise SpecError(f"--assume-tflops: bad value {shown(assume_tflops)}; allowed: a number of TFLOP/s > 0")
    store = Store.of(store)
    n_train = nominal_train_size(spec.dataset)
    tflops = assume_tflops or ASSUMED_TFLOPS["gpu" if spec.resources.gpu else "cpu"]
    per_cell = spec.samples * len(spec.seeds)
    done = store.stored_keys(spec.name)
    # expanded (slow for a big spec) only when some of it is stored, to match keys
    planned = expand_for_store(spec, store) if done else []
    stored = Counter((t.model, t.optimizer, t.epochs) for t in planned if t.key in done)
    rows = []
    for model, opt, epochs in cells(spec):
        todo = per_cell - stored[(model, opt, epochs)]
        box = spec.box(model, opt)
        macs = model_profile(model, 10, spec.dataset.size)[0]  # class count barely moves the count
        hours = todo * 3 * 2 * macs * n_train * epochs / (tflops * 1e12) / 3600
        rows.append(
            dict(
                model=model,
                optimizer=opt,
                epochs=epochs,
                trials=per_cell,
                to_run=todo,
                lr_low=box.lr[0],
                lr_high=box.lr[1],
                wd_low=box.wd[0],
                wd_high=box.wd[1],
                gmacs=macs / 1e9,
                trial_hours=hours,
            )
        )
    return StudyPlan(pd.DataFrame(rows), tflops, n_train)


@dataclass(frozen=True)
class RunSettings:
    """How a study runs: its store, the cluster (`address`; None: a local Ray on this machine), a fresh
    start, the trials at once and CPUs of a local Ray, the status lines' interval, the compaction period,
    the trackers and the report (None: into the store; NO_REPORT: none; else a local folder)."""

    store: str
    address: Optional[str] = None
    fresh: bool = False
    max_concurrent: Optional[int] = None
    num_cpus: Optional[int] = None
    progress_interval: float = PROGRESS_INTERVAL
    compact_every: int = COMPACT_EVERY
    trackers: Sequence = ()
    report: Optional[str] = None


def check_settings(settings: RunSettings) -> None:
    """Refuse, before anything runs, a setting no run can take (named by its command-line flag, which the
    API's arguments mirror)."""
    if settings.max_concurrent is not None and settings.max_concurrent < 1:
        raise SpecError(f"--max-concurrent: bad value {settings.max_concurrent}; allowed: an integer >= 1")
    if settings.num_cpus is not None and settings.num_cpus < 1:
        raise SpecError(f"--num-cpus: bad value {settings.num_cpus}; allowed: an integer >= 1")
    if not (math.isfinite(settings.progress_interval) and settings.progress_interval > 0):
        raise SpecError(
            f"--progress-interval: bad value {settings.progress_interval}; allowed: a number of seconds > 0"
        )
    if settings.compact_every < 0:
        raise SpecError(
            f"--compact-every: bad value {settings.compact_every}; allowed: an integer >= 0 (0: never during the run)"
        )
    if "://" not in settings.store and os.path.exists(settings.store) and not os.path.isdir(settings.store):
        raise SpecError(f"--store: {settings.store!r} is a file; allowed: a folder or a URI")


def check_local_resources(spec: StudySpec, num_cpus: Optional[int]) -> None:
    """A local Ray can never give a trial more CPUs or GPUs than this machine has."""
    cpus = num_cpus or os.cpu_count()  # None when Python cannot tell: then Ray finds out
    if cpus is not None and spec.resources.cpu > cpus:
        raise SpecError(
            f"resources.cpu: bad value {spec.resources.cpu}; allowed: <= {cpus} "
            f"(CPUs of the local Ray; pass --address to use a cluster)"
        )
    if spec.resources.gpu == 0:
        return  # torch (2 s to import) only to count GPUs that are asked for
    import torch

    gpus = torch.cuda.device_count()
    if spec.resources.gpu > gpus:
        raise SpecError(
            f"resources.gpu: bad value {spec.resources.gpu}; allowed: <= {gpus} "
            f"(GPUs on this machine; pass --address to use a cluster)"
        )


def check_before_trials(
    spec: StudySpec, store: StoreLike, address: Optional[str], num_cpus: Optional[int], report: Optional[str]
) -> None:
    """What a run checks once its spec is read and before any trial: this machine's CPUs and GPUs for a
    local Ray, and that the report can be written (`report`: None in the store, "none" no report, else a
    folder), so it fails now and not after the study."""
    if not address:
        check_local_resources(spec, num_cpus)
    if report is None:
        check_store_report_dir(store, spec.name)
    elif report != "none":
        check_report_dir(report, "--report")


def spec_change_note(store: Store, spec: StudySpec) -> Optional[str]:
    """A note when the study already has a recorded spec whose trials differ from this spec's and some
    stored rows belong to the earlier spec only: how many (they stay, but status and the report leave
    them out). None when every stored row is a trial of this spec (a spec that adds trials), and when the
    store cannot be read: the store probe (or the plan) that follows reports that."""
    try:
        record = store.spec_record(spec.name)
    except StoreFault:
        return None
    if record is None or record["spec"] == json.loads(json.dumps(spec.source)):
        return None
    keys = {t.key for t in expand_for_store(spec, store)}
    if set(record.get("trial_keys", ())) == keys:
        return None
    earlier = len(set(store.load_trials(spec.name)["trial_key"]) - keys)
    if not earlier:
        return None
    rows = "1 stored row comes" if earlier == 1 else f"{earlier} stored rows come"
    return (
        f"note: study {spec.name!r} in {store} was run with a different spec; {rows} "
        f"from that earlier spec: they stay in the store, but this run's summary, `hpstudy status` "
        f"and the report leave them out (--fresh deletes them; a new name keeps the studies apart)"
    )


def print_note(store: Store, spec: StudySpec) -> None:
    """Show spec_change_note's note, if there is one (this module's logger, at INFO: the API's too)."""
    note = spec_change_note(store, spec)
    if note:
        logger.info("%s", note)


STORE_REPORT = "report folder in the store"  # how errors name <store>/reports/<study>/
NAME_MAX = 255  # bytes of a folder's name on the filesystems a store lives on (ext4, xfs)


def write_report(
    store: StoreLike,
    study: Union[str, Sequence[str]],
    out: Optional[str],
    metric: str = DEFAULT_METRIC,
    fields: Fields = CLI,
) -> str:
    """Load a study from the store and write its analysis report (figures, tables, HTML) on the
    `metric` error into the folder `out`, or by default into the store (<store>/reports/<study>/,
    through its filesystem, so the report lives as long as the rows); shows (logs) the full location of
    its index.html, and which metric was used (naming any fallback). Returns that location. Either
    folder is written only if it is new, empty or an earlier report (hpstudy.analysis.report_folder).
    `study` may name several studies (a list): one report over them (hpstudy.analysis.report_across), by
    default in <store>/reports/<a>+<b>/ (names sorted). A missing store or study is named as `fields` say
    (the flags, or the API's arguments)."""
    studies = list(dict.fromkeys(study)) if isinstance(study, (list, tuple)) else [cast(str, study)]
    if out:
        check_report_path(out, "--out")
    if not studies:
        raise StoreError(f"{fields.study}: bad value []; allowed: one study's name, or several")
    for name in studies:
        check_study_name(name, fields.study)  # a bad name is named before the store
    title = "+".join(sorted(studies))
    if not out and len(title.encode()) > NAME_MAX:  # found now, not when the report is written after its analysis
        raise StoreError(
            f"{fields.study}: bad value, {len(studies)} studies whose names make a report folder name of "
            f"{len(title.encode())} bytes ({title[:40]}...); allowed: at most {NAME_MAX} bytes for "
            f"<store>/reports/<a>+<b>/, or a folder of your own (--out)"
        )
    store = Store.of(store, fields.store)
    for name in studies:
        store.require_study(name, fields)  # before --out is made: a mistyped store leaves no empty folder behind
    if out:
        check_report_dir(out, "--out")
    else:
        check_store_report_dir(store, title)
    build, trials = _report_builder(store, studies, metric, fields)
    if out:
        page = os.path.abspath(build(out))
    else:
        fs, base, folder, location = report_location(store, title)
        with tempfile.TemporaryDirectory(prefix="hpstudy-report-") as made:
            name = os.path.basename(build(made))
            with store_io(f"write the report into {location}"):
                publish(fs, folder, made, STORE_REPORT, root=base)
        page = f"{location}/{name}"
    logger.info("report: %s", page)
    logger.info("metric: %s", usable(trials, metric).metric)
    return page


def _report_builder(
    store: Store, studies: Sequence[str], metric: str, fields: Fields
) -> Tuple[Callable[[str], str], pd.DataFrame]:
    """What writes the report of `studies` into a folder (returning its index.html), and their trials."""
    if len(studies) == 1:
        from hpstudy.analysis.report import build_report  # matplotlib: only when a report is written

        trials, epochs, record = store.load_study(studies[0], fields)
        return functools.partial(build_report, trials, epochs, record, metric=metric), trials
    from hpstudy.analysis.report_across import build_across_report

    tables = {name: store.load_study(name, fields)[0] for name in studies}
    return functools.partial(build_across_report, tables, metric=metric), pd.concat(tables.values())


def check_store_report_dir(store: StoreLike, study: str) -> None:
    """ReportError (exit 2) now, not after a study, when the study's report folder in the store is not
    hpstudy's to write (a user's files in it, or a symbolic link out of the store). A store that cannot
    be read is left to the store probe that follows (it says what to fix)."""
    fs, base, folder, _ = report_location(store, study)
    with contextlib.suppress(OSError):
        owned(fs, folder, STORE_REPORT, root=base)


def check_run(spec: StudySpec, settings: RunSettings) -> None:
    """What a run checks once its spec is read and before any trial: the models and samples of the spec,
    this machine's CPUs and GPUs for a local Ray, and that the report can be written."""
    check_models(spec)
    check_samples(spec)
    check_before_trials(spec, settings.store, settings.address, settings.num_cpus, settings.report)


def run(
    spec: StudySpec,
    settings: RunSettings,
    command: str,
    wait: bool = False,
    how: str = "--wait",
    on_stored: Optional[Callable[[pd.DataFrame], None]] = None,
    fields: Fields = CLI,
) -> Tuple[pd.DataFrame, Optional[str]]:
    """Run the study's trials not yet stored, holding its lease (one driver per study: `command` names this
    one; with `wait`, after another ends, `how` saying how to ask for that), then its report; returns the
    stored trials and the report's location (None without one). `on_stored` sees the trials before the
    report is written; a missing store or study is named as `fields` say."""
    from hpstudy.study.runner import check_store_writable, run_study  # torch and Ray: only when a study runs

    store = Store.open(settings.store)
    check_store_writable(store)
    with store.lease(spec.name, command, wait, how) as lease:
        print_note(store, spec)
        stored = run_study(
            spec,
            store,
            fresh=settings.fresh,
            address=settings.address,
            max_concurrent=settings.max_concurrent,
            num_cpus=settings.num_cpus,
            progress_interval=settings.progress_interval,
            compact_every=settings.compact_every,
            trackers=settings.trackers,
            lease=lease,
        )
        if on_stored:
            on_stored(stored)
        location = None
        if settings.report != NO_REPORT:
            location = write_report(store, spec.name, settings.report, fields=fields)
    return stored, location
