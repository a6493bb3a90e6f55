"""Running a study on Ray Tune: Ray start-up, the study's trial groups as Tune runs of at most
TUNE_RUN_GROUPS groups (with the searcher, scheduler, stopper and store-writing callback of the
tune_*.py modules), and the store probe, compactions and summary around them."""

import contextlib
import gc
import logging
import os
import shutil
import signal
import tempfile
import time
from typing import Dict, Iterator, List, Optional, Sequence, Union

import ray
from ray import tune
from ray.util.debug import reset_log_once

from hpstudy.study.fusion import fusion_groups, fusion_sizes
from hpstudy.study.interruption import Interruption, RunStopped
from hpstudy.study.progress import ProgressPrinter, Tally
from hpstudy.study.ray_session import ray_session
from hpstudy.study.sampling import PlannedTrial, expand, expand_for_store
from hpstudy.study.spec import StudySpec
from hpstudy.study.store.layout import StoreFault, StoreLike
from hpstudy.study.store.lease import Lease
from hpstudy.study.store.store import Store
from hpstudy.study.trackers import Tracker, backfill, check_trackers, close_all, trackers_of
from hpstudy.study.trainable import run_tune_trial
from hpstudy.study.tune.scheduler import IdleActorsToNewTrials
from hpstudy.study.tune.searcher import GroupQueue
from hpstudy.study.tune.stopper import RunStopper
from hpstudy.study.tune.store_writer import StoreWriter

logger = logging.getLogger(__name__)


def local_slots(resources: Dict[str, float]) -> Optional[int]:
    """How many trials of `resources` the connected Ray holds at once (None if they need neither
    CPUs nor GPUs): the cap on concurrent trials on a local Ray, whose size does not change."""
    total = ray.cluster_resources()
    # division, not //: 1 // 0.1 is 9.0 in floating point
    fits = [int(total.get(name.upper(), 0) / need + 1e-9) for name, need in resources.items() if need > 0]
    return max(1, int(min(fits))) if fits else None


def _trial_name(trial) -> str:
    """A Tune trial's name (and folder name): its group's index."""
    return f"group-{trial.config['group']:06d}"


@contextlib.contextmanager
def _quiet(logger_name: str, level: int = logging.ERROR) -> Iterator[None]:
    """Raise a logger's level for the duration of a block, then restore it."""
    quieted = logging.getLogger(logger_name)
    before = quieted.level
    quieted.setLevel(level)
    try:
        yield
    finally:
        quieted.setLevel(before)


TUNE_RUN_GROUPS = 1000
TUNE_STORAGE = os.path.join(tempfile.gettempdir(), "hpstudy-tune")


def run_trials(
    study: str,
    trials: List[PlannedTrial],
    store: Store,
    resources: Dict[str, float],
    max_retries: int,
    max_concurrent: Optional[int] = None,
    progress_interval: float = 10.0,
    fusion: Optional[Dict[str, int]] = None,
    interruption: Optional[Interruption] = None,
    compact_every: int = 0,
    trackers: Sequence[Tracker] = (),
    lease: Optional[Lease] = None,
) -> Tally:
    """Run `trials` on the connected Ray with Tune (K of a cell per Tune trial where `fusion` says
    so) and store each as it ends, compacting the study's files every `compact_every` stored trials
    (0: never) and handing each stored row to `trackers`; returns the tally of what was stored. Stops
    early on a store fault (StoreFault; losing the study's `lease` is one), a node that cannot run
    trials (RunStopped) or `interruption`'s signal."""
    groups = [
        {"keys": [t.key for t in g], "configs": [t.config for t in g]} for g in fusion_groups(trials, fusion or {})
    ]
    writer = StoreWriter(store, study, trials, groups, interruption, compact_every, trackers)
    if lease is not None:  # another driver took the study over: stop writing, as on a full disk
        lease.on_lost(lambda fault: setattr(writer, "fault", fault))
    progress, stopper = ProgressPrinter(writer, len(trials), progress_interval), RunStopper(writer)
    try:
        # Tune keeps every trial of a run (its last result, metric statistics) until the run ends,
        # and saves all of them to its experiment state again and again: the study runs as Tune
        # runs of at most TUNE_RUN_GROUPS groups each, so the driver's memory and each save stay
        # bounded however many trials the study has.
        for first in range(0, len(groups), TUNE_RUN_GROUPS):
            stop = min(first + TUNE_RUN_GROUPS, len(groups))
            name = f"{study}-{time.strftime('%Y%m%d-%H%M%S')}-{first // TUNE_RUN_GROUPS}"
            # a worker reads (unpickles) the groups it is given at every trial it starts: only this
            # Tune run's (at most TUNE_RUN_GROUPS), not the study's, whose size has no bound
            chunk = {i: groups[i] for i in range(first, stop)}
            trainable = tune.with_resources(
                tune.with_parameters(run_tune_trial, groups=chunk), {"cpu": resources["cpu"], "gpu": resources["gpu"]}
            )
            tuner = tune.Tuner(
                trainable,
                tune_config=tune.TuneConfig(
                    search_alg=GroupQueue(first, stop),
                    num_samples=stop - first,
                    scheduler=IdleActorsToNewTrials(),
                    reuse_actors=True,
                    max_concurrent_trials=max_concurrent,
                    trial_name_creator=_trial_name,
                    trial_dirname_creator=_trial_name,
                ),
                run_config=tune.RunConfig(
                    name=name,
                    storage_path=TUNE_STORAGE,
                    failure_config=tune.FailureConfig(max_failures=max_retries),
                    stop=stopper,
                    callbacks=[writer, progress],
                    verbose=0,
                    log_to_file=False,
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                ),
            )
            # With Tune's loggers off, its ResultGrid cannot fetch metrics and warns once per trial;
            # the store is the record, so that warning is noise.
            try:
                with _quiet("ray.tune.analysis.experiment_analysis"):
                    tuner.fit()
            finally:
                # Tune's folder (experiment state, a folder per trial) is not the record and resuming
                # never reads it: left behind, it grows by ~30 KB a trial in the temp dir on every run
                shutil.rmtree(os.path.join(TUNE_STORAGE, name), ignore_errors=True)
                # Tune's experiment-state saves add a log_once key per trial and save (the text of
                # the trial's metric deques and checkpoint manager, ~1.2 KB a trial) to Ray's
                # process-wide set, which nothing empties: 24 MB of driver memory at 20,000 trials
                reset_log_once()
                # the finished run's Tune objects (trials, results, actors' handles) hold reference
                # cycles, which only Python's rare full collections free: free them before the next
                # run allocates its own on top (after the last run a full collection would only add
                # ~0.4 s to every study's end, with torch, timm and Ray loaded)
                if stop < len(groups):
                    gc.collect()
            if stopper.stop_all():
                break
    finally:
        progress.final()
    if writer.fault is not None:
        raise StoreFault(
            f"{writer.fault}; this run stored {len(writer.tally)} of its {len(trials)} trials before that and stopped"
        )
    if writer.stop_reason is not None:
        raise RunStopped(writer.stop_reason.strip().splitlines()[-1], 1)
    return writer.tally


# what run_study reads back for the run's summary (not the whole rows: those stay in the store)
SUMMARY_COLUMNS = ["model", "status", "top1_err", "wall_s"]
COMPACT_EVERY = 1000


def run_study(
    spec: StudySpec,
    store: StoreLike,
    fresh: bool = False,
    address: Optional[str] = None,
    max_concurrent: Optional[int] = None,
    num_cpus: Optional[int] = None,
    progress_interval: float = 10.0,
    compact_every: int = COMPACT_EVERY,
    trackers: Sequence[Union[str, Tracker]] = (),
    lease: Optional[Lease] = None,
    wait: bool = False,
):
    """Run every trial of `spec` not yet stored as ok/diverged; return the study's stored trials
    (SUMMARY_COLUMNS, with trial_key and study).

    The study's lease (hpstudy.study.store.lease) is held from before anything of the study is
    written to the end: the caller's `lease`, else one taken here after the store probe (StudyBusy
    while another driver holds it; with `wait`, waiting for it). Losing it stops the run (StoreFault).

    Each trial this run stores also goes to `trackers` (`KIND:DIR` texts or Tracker objects,
    hpstudy.study.trackers; checked before anything runs), which are closed when the run ends.

    The store is probed (a file written and deleted) before anything runs; a store fault at any
    point raises StoreFault saying what is stored and that rerunning the same command resumes.
    The study's files are compacted (hpstudy.study.store.compaction.compact) before the run, every `compact_every`
    stored trials (0: not during the run) and after it, so a long study stays a few files to read.
    SIGINT or SIGTERM stops the run (see Interruption) and raises RunStopped with exit code 128 +
    the signal's number; so does a node that cannot run the trials, with exit code 1. On a local
    Ray (no `address`) at most `local_slots` trials run at once (`max_concurrent` may cap lower)."""
    store = Store.of(store)
    trackers = trackers_of(trackers)
    check_trackers(trackers)  # each folder created and probed: a bad target stops the run before any trial
    with close_all(trackers), contextlib.ExitStack() as held:
        trials = expand(spec)
        keys = {t.key for t in trials}
        if lease is None:
            check_store_writable(store)
            lease = held.enter_context(store.lease(spec.name, "hpstudy.run", wait, "wait=True"))
        done = set()
        interruption = Interruption()
        try:
            with interruption:
                lease.check()  # before the first file of the study is deleted or rewritten
                if fresh:
                    store.delete_study(spec.name)
                store.compact(spec.name)  # also finishes a compaction a killed driver left half done
                trials = expand_for_store(spec, store)  # after the compaction: read from fewer files
                keys = {t.key for t in trials}
                if spec.source is None:  # parse_spec keeps the raw spec; the record is made of it
                    raise TypeError(f"run_study: spec {spec.name!r} has no source (make it with parse_spec)")
                store.write_spec_record(spec.name, spec.source, len(trials), keys)
                done = store.stored_keys(spec.name)
                pending = [t for t in trials if t.key not in done]
                logger.info(
                    "study %s: %d trials, %d already stored, %d to run; store %s",
                    spec.name,
                    len(trials),
                    len(trials) - len(pending),
                    len(pending),
                    store,
                )
                # the trials stored before this run, to each tracker that lacks them
                for line in backfill(trackers, store, spec.name, done & keys):
                    logger.info("%s", line)
                if pending:
                    resources = {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}
                    with ray_session(address, num_cpus):
                        interruption.arm()  # ray.init replaced the SIGTERM handler
                        if not address:  # a cluster may grow: only a local Ray is capped
                            max_concurrent = min(filter(None, (max_concurrent, local_slots(resources))), default=None)
                        fusion = fusion_sizes(spec, pending, resources)
                        if interruption.signum is None:
                            run_trials(
                                spec.name,
                                pending,
                                store,
                                resources,
                                spec.max_retries,
                                max_concurrent=max_concurrent,
                                progress_interval=progress_interval,
                                fusion=fusion,
                                interruption=interruption,
                                compact_every=compact_every,
                                trackers=trackers,
                                lease=lease,
                            )
                    if interruption.signum is None:
                        lease.check()
                        store.compact(spec.name)
            stored = store.load_trials(spec.name, columns=SUMMARY_COLUMNS)
        except StoreFault as exc:
            raise StoreFault(
                f"{exc}; {len(done & keys)} of the study's {len(trials)} trials were stored before "
                f"this run; rerun the same command to resume"
            ) from exc
        except KeyboardInterrupt:  # a second signal: quit at once
            interruption.signum = interruption.signum or signal.SIGINT
        except RunStopped as stop:
            raise RunStopped(
                f"error: {stop}; the study stopped: {_count_finished(store, spec.name, keys)}/"
                f"{len(trials)} stored; fix that and rerun the same command to resume",
                stop.exit_code,
            ) from None
        if interruption.signum is not None:
            raise RunStopped(
                f"interrupted: {_count_finished(store, spec.name, keys)}/{len(trials)} stored; rerun "
                f"the same command to resume",
                128 + interruption.signum,
            )
        return stored[stored["trial_key"].isin(keys)].reset_index(drop=True)


def check_store_writable(store: Store) -> None:
    """StoreFault, saying that no trial was run, unless a file can be written to the store and deleted."""
    try:
        store.probe()
    except StoreFault as exc:
        raise StoreFault(
            f"{exc}; the store {store} must be writable: no trial was run; fix it and rerun the same command"
        ) from exc


def _count_finished(store: Store, study: str, keys: set) -> int:
    """How many of `keys` are stored as ok/diverged."""
    return len(store.stored_keys(study) & keys)
