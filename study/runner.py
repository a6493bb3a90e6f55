"""Ray Tune wiring: one Tune trial per study trial (or per fused group of K), handed out by a queue
searcher; rows are written to the store as trials finish."""

import json
import logging
import os
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Dict, List, Optional

# Tune's default JSON/CSV/TensorBoard loggers cost driver memory and files per trial; the store is
# the record. Must be set before ray.tune is imported.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("TUNE_MAX_PENDING_TRIALS_PG", "16")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # our ProgressPrinter replaces Tune's tables

import ray  # noqa: E402
import torch  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

from study.progress import ProgressPrinter  # noqa: E402
from study.sampling import Trial, expand  # noqa: E402
from study.spec import StudySpec  # noqa: E402
from study.store import load_trials, open_root, stored_keys, write_spec_record, write_trial  # noqa: E402
from trainers.models import get_spec  # noqa: E402
from trainers.provenance import versions  # noqa: E402
from trainers.fused import train_fused  # noqa: E402
from trainers.trial import train_trial  # noqa: E402

CRASH_DIR_ENV = "HPSTUDY_CRASH_DIR"
EPOCH_METRICS = ("epoch", "train_loss", "train_top1_err", "top1_err", "top5_err", "lr", "seconds")


def _inject_crash(key: str) -> None:
    """Fault injection for recovery tests: if $HPSTUDY_CRASH_DIR/<key> holds a count N > 0, write
    N - 1 there and kill this worker process (as an OOM kill or a lost node would)."""
    folder = os.environ.get(CRASH_DIR_ENV)
    budget = os.path.join(folder, key) if folder else None
    if budget and os.path.exists(budget):
        with open(budget) as f:
            left = int(f.read() or 0)
        if left > 0:
            with open(budget, "w") as f:
                f.write(str(left - 1))
            os._exit(1)


def run_tune_trial(config: Dict, groups: List[Dict]) -> None:
    """Tune function trainable: train a group of trials (one, or K fused), report each epoch, then
    report the final rows."""
    group = groups[config["group"]]
    for key in group["keys"]:
        _inject_crash(key)
    # One intra-op thread per CPU the trial holds: an inherited OMP_NUM_THREADS would oversubscribe
    # the node when several trials share it (measured 5x slower on 2 cores).
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    torch.set_num_threads(max(1, int(cpus)))

    def report_epoch(record):
        tune.report({name: record[name] for name in EPOCH_METRICS})

    def report_fused_epoch(records):
        best = min(records.values(), key=lambda r: r["top1_err"])
        tune.report({"epoch": best["epoch"], "top1_err": best["top1_err"], "members_alive": len(records)})

    if len(group["configs"]) == 1:
        rows = [train_trial(group["configs"][0], on_epoch=report_epoch)]
    else:
        rows = train_fused(group["configs"], on_epoch=report_fused_epoch)
    node = ray.get_runtime_context().get_node_id()
    for key, row in zip(group["keys"], rows):
        row.update(trial_key=key, node=node)
    tune.report({"final": 1, "top1_err": min(r["top1_err"] for r in rows), "rows_json": json.dumps(rows)})


def failed_row(trial: Trial, error: str) -> Dict:
    """The stored row of a trial that failed after its last retry (left out of EDFs, counted)."""
    cfg = trial.config
    return {
        "trial_key": trial.key, "model": trial.model, "family": get_spec(trial.model).family,
        "optimizer": trial.optimizer, "epochs": trial.epochs, "lr": cfg["lr"], "wd": cfg["wd"],
        "seed": cfg["seed"], "dataset": cfg["dataset"]["name"], "batch_size": cfg["batch_size"],
        "status": "failed", "epochs_done": 0, "versions": versions(), "error": error[-4000:],
        "config_json": json.dumps(cfg, sort_keys=True, separators=(",", ":")),
        "finished_at": datetime.now(timezone.utc),
    }


class GroupQueue(Searcher):
    """Hands out the study's trial groups in order, one index per Tune trial.

    Tune's grid_search deep-copies the whole value list for every variant, which is quadratic in
    the number of trials (5,000 trials never started); this is linear.
    """

    def __init__(self, n_groups: int):
        super().__init__()
        self.n_groups, self.next_group = n_groups, 0

    def suggest(self, trial_id: str):
        if self.next_group >= self.n_groups:
            return Searcher.FINISHED
        self.next_group += 1
        return {"group": self.next_group - 1}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        pass


class StoreWriter(tune.Callback):
    """Writes each finished trial (and its epochs) to the store from the driver, exactly once."""

    def __init__(self, store: str, study: str, trials: List[Trial], groups: List[Dict]):
        self.store, self.study = store, study
        self.by_key = {t.key: t for t in trials}
        self.groups = groups
        self.finished: List[Dict] = []       # small summaries, for progress and the final report

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "rows_json" not in result:
            return
        for row in json.loads(result["rows_json"]):
            epochs = row.pop("epoch_log")
            write_trial(self.store, self.study, row, epochs)
            self._record(row)

    def on_trial_error(self, iteration, trials, trial, **info):
        stored = {r["trial_key"] for r in self.finished}
        error = _error_text(trial)
        for key in self.groups[trial.config["group"]]["keys"]:
            if key not in stored:  # a group that crashed after its rows were stored keeps them
                row = failed_row(self.by_key[key], error)
                write_trial(self.store, self.study, row)
                self._record(row)

    def _record(self, row: Dict) -> None:
        self.finished.append({k: row.get(k) for k in ("trial_key", "model", "status", "top1_err", "wall_s")})


def _error_text(trial) -> str:
    """The trial's error trace: Tune writes it to the trial's local folder first, and only later to
    storage (where `Trial.get_error` reads), so read the local file when it is there."""
    path = trial.error_file
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read()
    return str(trial.get_error() or "unknown error")


def _trial_name(trial) -> str:
    return f"group-{trial.config['group']:06d}"


def _ray_init(address: Optional[str], num_cpus: Optional[int]) -> bool:
    """Connect to a cluster, or start a local Ray on loopback only; True if we started it."""
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=True)
        return False
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True,
             configure_logging=True, logging_level="WARNING")
    return True


def fusion_groups(trials: List[Trial], sizes: Dict[str, int]) -> List[List[Trial]]:
    """Trials of one (model, optimizer, epochs) cell in chunks of the model's fusion size, in order."""
    cells: Dict[tuple, List[Trial]] = {}
    for t in trials:
        cells.setdefault((t.model, t.optimizer, t.epochs), []).append(t)
    groups = []
    for (model, _, _), members in cells.items():
        k = sizes.get(model, 1)
        groups += [members[i:i + k] for i in range(0, len(members), k)]
    return groups


def run_trials(study: str, trials: List[Trial], store: str, resources: Dict[str, float],
               max_retries: int, address: Optional[str] = None, max_concurrent: Optional[int] = None,
               num_cpus: Optional[int] = None, progress_interval: float = 10.0,
               fusion: Optional[Dict[str, int]] = None) -> List[Dict]:
    """Run `trials` on Ray Tune (K of a cell per Tune trial where `fusion` says so) and store each
    as it ends; returns summaries of what was stored."""
    started_ray = _ray_init(address, num_cpus)
    groups = [{"keys": [t.key for t in g], "configs": [t.config for t in g]}
              for g in fusion_groups(trials, fusion or {})]
    writer = StoreWriter(store, study, trials, groups)
    progress = ProgressPrinter(writer, len(trials), progress_interval)
    storage = os.path.join(tempfile.gettempdir(), "hpstudy-tune")
    try:
        tuner = tune.Tuner(
            tune.with_resources(tune.with_parameters(run_tune_trial, groups=groups),
                                {"cpu": resources["cpu"], "gpu": resources["gpu"]}),
            tune_config=tune.TuneConfig(search_alg=GroupQueue(len(groups)), num_samples=len(groups),
                                        reuse_actors=True, max_concurrent_trials=max_concurrent,
                                        trial_name_creator=_trial_name,
                                        trial_dirname_creator=_trial_name),
            run_config=tune.RunConfig(
                name=f"{study}-{time.strftime('%Y%m%d-%H%M%S')}", storage_path=storage,
                failure_config=tune.FailureConfig(max_failures=max_retries),
                callbacks=[writer, progress], verbose=0, log_to_file=False,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
        )
        # With Tune's loggers off, its ResultGrid cannot fetch metrics and warns once per trial;
        # the store is the record, so that warning is noise.
        logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
        tuner.fit()
    finally:
        progress.final()
        if started_ray:
            ray.shutdown()
    return writer.finished



def run_study(spec: StudySpec, store: str, fresh: bool = False, address: Optional[str] = None,
              max_concurrent: Optional[int] = None, num_cpus: Optional[int] = None,
              progress_interval: float = 10.0):
    """Run every trial of `spec` not yet stored as ok/diverged; return the study's stored rows."""
    trials = expand(spec)
    if fresh:
        fs, base = open_root(store)
        for table in ("trials", "epochs"):
            fs.delete_dir_contents(f"{base}/{table}/study={spec.name}", missing_dir_ok=True)
    write_spec_record(store, spec.name, spec.source, len(trials))
    done = stored_keys(store, spec.name)
    pending = [t for t in trials if t.key not in done]
    print(f"study {spec.name}: {len(trials)} trials, {len(trials) - len(pending)} already stored, "
          f"{len(pending)} to run; store {store}", flush=True)
    if pending:
        resources = {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}
        started_ray = _ray_init(address, num_cpus)
        try:
            fusion = fusion_sizes(spec, pending, resources)
            run_trials(spec.name, pending, store, resources, spec.max_retries, address=address,
                       max_concurrent=max_concurrent, num_cpus=num_cpus,
                       progress_interval=progress_interval, fusion=fusion)
        finally:
            if started_ray:
                ray.shutdown()
    stored = load_trials(store, spec.name)
    return stored[stored["trial_key"].isin({t.key for t in trials})].reset_index(drop=True)


AUTO_FUSE_K = 8
AUTO_FUSE_MIN_SPEEDUP = 1.2


def fusion_sizes(spec: StudySpec, pending: List[Trial], resources: Dict[str, float]) -> Dict[str, int]:
    """Members per fused group for each model: `fuse: K` as given, `off` 1, `auto` by measurement.

    `auto` times K = 8 members fused against one alone on a worker with the trial's resources
    (so on the device the trials will use) and fuses where that is at least 1.2x faster.
    """
    if spec.fuse == "off":
        return {}
    if spec.fuse != "auto":
        return {m: int(spec.fuse) for m in spec.models}
    measure = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"])(_measure_fusion)
    sizes = {}
    for model in sorted({t.model for t in pending}):
        cells = Counter((t.optimizer, t.epochs) for t in pending if t.model == model)
        k = min(AUTO_FUSE_K, max(cells.values()))
        if k < 2:
            continue
        cfg = next(t for t in pending if t.model == model).config
        result = ray.get(measure.remote(resources["cpu"], model, cfg["optimizer"], cfg["batch_size"],
                                        spec.dataset.size, k))
        fuse = result["speedup"] >= AUTO_FUSE_MIN_SPEEDUP
        print(f"fuse auto: {model}: {k} fused run {result['speedup']:.2f}x the speed of {k} alone "
              f"-> {'fuse ' + str(k) if fuse else 'no fusion'}", flush=True)
        if fuse:
            sizes[model] = k
    return sizes


def _measure_fusion(cpus: float, *args) -> Dict[str, float]:
    """measure_fusion on a Ray worker, with as many torch threads as the trial would have."""
    from trainers.fused import measure_fusion
    torch.set_num_threads(max(1, int(cpus)))
    return measure_fusion(*args)
