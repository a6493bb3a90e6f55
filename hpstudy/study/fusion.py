"""Fusion planning: which models of a study train K trials of a cell as one fused computation.

Fused members share everything but PER_MEMBER (lr, wd, seed), so a cell whose box samples a recipe field
fuses only trials of one sample (its seeds). `fuse: auto` measures what fusion gains once per machine
(study/fusion_cache.py keeps it). Ray and the fused trainer (torch) are imported where they are used: the
dry run's plan (`fusion_notes`) needs neither."""

import json
import logging
import socket
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from hpstudy.study.fusion_cache import Probe, cache_key, cache_path, lookup, machine, new_entry, store
from hpstudy.study.sampling import PlannedTrial
from hpstudy.study.spec import SpecError, StudySpec
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.fused_spec import PER_MEMBER, UNSUPPORTED, check_fusable

logger = logging.getLogger(__name__)
AUTO_FUSE_K = 8
AUTO_FUSE_MIN_SPEEDUP = 1.2


def _shared(config: Dict[str, Any]) -> str:
    """What fused members must share: the trial config without its PER_MEMBER fields, as canonical JSON."""
    return json.dumps({k: v for k, v in config.items() if k not in PER_MEMBER}, sort_keys=True, default=str)


def fusion_groups(trials: List[PlannedTrial], sizes: Dict[str, int]) -> List[List[PlannedTrial]]:
    """Trials of one (model, optimizer, epochs) cell that differ in PER_MEMBER fields only, in chunks of the
    model's fusion size, in order."""
    cells: Dict[tuple, List[PlannedTrial]] = {}
    for t in trials:
        fused = sizes.get(t.model, 1) > 1
        cells.setdefault((t.model, t.optimizer, t.epochs, _shared(t.config) if fused else ""), []).append(t)
    groups = []
    for (model, _, _, _), members in cells.items():
        k = sizes.get(model, 1)
        groups += [members[i : i + k] for i in range(0, len(members), k)]
    return groups


def fusion_notes(spec: StudySpec) -> List[str]:
    """One line per (model, optimizer) whose box samples a field fused members cannot vary (anything but
    PER_MEMBER): its trials fuse only across the seeds of one sample, or not at all (none with fuse: off)."""
    if spec.fuse == "off":
        return []
    notes = []
    for model in spec.models:
        for optimizer in spec.optimizers:
            shared = [name for name, _ in spec.box(model, optimizer).axes() if name not in PER_MEMBER]
            if shared:
                verb, it = ("is", "it") if len(shared) == 1 else ("are", "them")
                what = f"{', '.join(shared)} {verb} sampled and fused trials share {it}"
                notes.append(
                    f"fuse: only the seeds of one sample fuse for cell {model} {optimizer}: {what}"
                    if len(spec.seeds) > 1
                    else f"fuse: off for cell {model} {optimizer}: {what}"
                )
    return notes


def fusion_sizes(spec: StudySpec, pending: List[PlannedTrial], resources: Dict[str, float]) -> Dict[str, int]:
    """Members per fused group for each model: `fuse: K` as given, `off` 1, `auto` by measurement.

    `auto` times K = 8 members fused against one alone on a worker with the trial's resources
    (so on the device the trials will use) and fuses where that is at least 1.2x faster; each probe is
    measured once per machine and read back from then on (hpstudy.study.fusion_cache).
    """
    if spec.fuse == "off" or not pending:
        return {}
    for note in fusion_notes(spec):
        logger.info("%s", note)
    unfusable = _unfusable_reason(spec, pending)
    if spec.fuse != "auto":
        if unfusable:
            raise SpecError(f"fuse: bad value {spec.fuse!r} for this recipe ({unfusable}); allowed: off or auto")
        return {m: int(spec.fuse) for m in spec.models}
    if unfusable:
        logger.info("fuse auto: no fusion: %s", unfusable)
        return {}
    import ray

    measure = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"])(_probe_on_worker)
    here = _workers_are_here()
    sizes = {}
    for model in sorted({t.model for t in pending}):
        cells = Counter((t.optimizer, t.epochs, _shared(t.config)) for t in pending if t.model == model)
        k = min(AUTO_FUSE_K, max(cells.values()))
        if k < 2:
            continue
        cfg = next(t for t in pending if t.model == model).config
        # timed as the trials will run: their device, dtype and compile mode, threads and GPU share
        probe = Probe(
            model=model,
            optimizer=cfg["optimizer"],
            batch_size=cfg["batch_size"],
            image_size=spec.dataset.size,
            k=k,
            device=cfg["device"],
            dtype=cfg["dtype"],
            compile=cfg.get("compile", "off"),
            cpus=max(1, int(resources["cpu"])),
            gpu=float(resources["gpu"]),
        )
        try:
            entry, where = _probe(probe, measure, here)
        except ray.exceptions.RayError as exc:  # e.g. out of memory: K members do not fit
            logger.warning("fuse auto: %s: no fusion: measuring %d fused failed (%s)", model, k, _first_line(exc))
            continue
        speedup = entry["result"]["speedup"]
        fuse = speedup >= AUTO_FUSE_MIN_SPEEDUP
        logger.info(
            "fuse auto: %s: %d fused run %.2fx the speed of %d alone -> %s (%s)",
            model,
            k,
            speedup,
            k,
            f"fuse {k}" if fuse else "no fusion",
            where,
        )
        if fuse:
            sizes[model] = k
    return sizes


def _workers_are_here() -> bool:
    """Whether every node of the connected Ray is this machine (a local Ray): then the driver keeps the cache."""
    import ray

    host = socket.gethostname()
    return ray.is_initialized() and all(node["NodeManagerHostname"] == host for node in ray.nodes() if node["Alive"])


def _probe(probe: Probe, measure: Any, here: bool) -> Tuple[Dict[str, Any], str]:
    """The probe's cache entry and where it came from. A local Ray's workers are this machine: the driver reads this
    user's cache, and on a miss measures on a worker and writes it; a cluster's worker does both on its machine."""
    import ray

    if not here:
        entry, cached = ray.get(measure.remote(probe, cached=True))
        host = entry["key"]["machine"]["host"]
        return entry, f"measured {entry['measured']}, cached on {host}" if cached else f"measured now, kept on {host}"
    path, key = cache_path(), cache_key(probe, machine(probe))
    entry = lookup(path, key)
    if entry:
        return entry, f"measured {entry['measured']} on this machine, read from {path}: delete it to measure again"
    measured, _ = ray.get(measure.remote(probe, cached=False))
    return store(path, key, measured["result"]), f"measured now, kept in {path}"


def probed(probe: Probe, path: Optional[str]) -> Tuple[Dict[str, Any], bool]:
    """The probe's entry on this machine ({key, result, measured}) and whether it was cached: read from the cache
    file `path`, else measured now (hpstudy.trainers.fused.measure_fusion) and written there (path None: neither)."""
    key = cache_key(probe, machine(probe))
    entry = lookup(path, key) if path else None
    if entry:
        return entry, True
    from hpstudy.trainers.fused import measure_fusion  # torch and timm: only to measure

    result = measure_fusion(
        probe.model,
        probe.optimizer,
        probe.batch_size,
        probe.image_size,
        probe.k,
        device=probe.device,
        dtype=probe.dtype,
        compile=probe.compile,
    )
    return (store(path, key, result) if path else new_entry(key, result)), False


def _unfusable_reason(spec: StudySpec, pending: List[PlannedTrial]) -> str:
    """Why the study's recipe cannot train fused (check_fusable's message, or an option fusion does not
    support that a box samples), or ''."""
    unsupported = sorted(
        {name for m in spec.models for o in spec.optimizers for name, _ in spec.box(m, o).axes() if name in UNSUPPORTED}
    )
    if unsupported:
        return f"{unsupported[0]} is sampled and is not supported in fused training; train alone"
    try:
        check_fusable([TrialConfig.from_dict(t.config) for t in pending[:1]])
    except ConfigError as exc:
        return str(exc)
    return ""


def _first_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:200] if lines else type(exc).__name__


def _probe_on_worker(probe: Probe, cached: bool) -> Tuple[Dict[str, Any], bool]:
    """`probed` on a Ray worker, with as many torch threads as a trial would have and its GPUs, reading and writing
    the worker's own cache when `cached`."""
    from hpstudy.study.trainable import use_assigned_cpus, use_assigned_gpus

    use_assigned_cpus()
    use_assigned_gpus()
    return probed(probe, cache_path() if cached else None)
