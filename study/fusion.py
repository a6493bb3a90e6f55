"""Fusion planning: which models of a study train K trials of a cell as one fused computation.

Fused members share everything but PER_MEMBER (lr, wd, seed), so a cell whose box samples a recipe field
fuses only trials of one sample (its seeds). Ray is imported where it is used: the dry run's plan
(`fusion_notes`) needs none."""

import json
from collections import Counter
from typing import Any, Dict, List

from hpstudy.study.sampling import PlannedTrial
from hpstudy.study.spec import SpecError, StudySpec
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.fused import PER_MEMBER, UNSUPPORTED, check_fusable, measure_fusion

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
    (so on the device the trials will use) and fuses where that is at least 1.2x faster.
    """
    if spec.fuse == "off" or not pending:
        return {}
    for note in fusion_notes(spec):
        print(note, flush=True)
    unfusable = _unfusable_reason(spec, pending)
    if spec.fuse != "auto":
        if unfusable:
            raise SpecError(f"fuse: bad value {spec.fuse!r} for this recipe ({unfusable}); allowed: off or auto")
        return {m: int(spec.fuse) for m in spec.models}
    if unfusable:
        print(f"fuse auto: no fusion: {unfusable}", flush=True)
        return {}
    import ray

    measure = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"])(_measure_fusion)
    sizes = {}
    for model in sorted({t.model for t in pending}):
        cells = Counter((t.optimizer, t.epochs, _shared(t.config)) for t in pending if t.model == model)
        k = min(AUTO_FUSE_K, max(cells.values()))
        if k < 2:
            continue
        cfg = next(t for t in pending if t.model == model).config
        try:
            # timed as the trials will run: compiled when the recipe compiles the step
            compile_mode = cfg.get("compile", "off")
            result = ray.get(
                measure.remote(model, cfg["optimizer"], cfg["batch_size"], spec.dataset.size, k, compile=compile_mode)
            )
        except ray.exceptions.RayError as exc:  # e.g. out of memory: K members do not fit
            print(f"fuse auto: {model}: no fusion: measuring {k} fused failed ({_first_line(exc)})", flush=True)
            continue
        fuse = result["speedup"] >= AUTO_FUSE_MIN_SPEEDUP
        print(
            f"fuse auto: {model}: {k} fused run {result['speedup']:.2f}x the speed of {k} alone "
            f"-> {'fuse ' + str(k) if fuse else 'no fusion'}",
            flush=True,
        )
        if fuse:
            sizes[model] = k
    return sizes


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


def _measure_fusion(*args, **kwargs) -> Dict[str, float]:
    """hpstudy.trainers.fused.measure_fusion on a Ray worker, with as many torch threads as a trial would have."""
    from hpstudy.study.trainable import use_assigned_cpus, use_assigned_gpus

    use_assigned_cpus()
    use_assigned_gpus()
    return measure_fusion(*args, **kwargs)
