"""Fusion planning: which models of a study train K trials of a cell as one fused computation."""

from collections import Counter
from typing import Dict, List

import ray

from study.sampling import PlannedTrial
from study.spec import StudySpec
from study.trainable import use_assigned_cpus
from trainers.fused import measure_fusion

AUTO_FUSE_K = 8
AUTO_FUSE_MIN_SPEEDUP = 1.2


def fusion_groups(trials: List[PlannedTrial], sizes: Dict[str, int]) -> List[List[PlannedTrial]]:
    """Trials of one (model, optimizer, epochs) cell in chunks of the model's fusion size, in order."""
    cells: Dict[tuple, List[PlannedTrial]] = {}
    for t in trials:
        cells.setdefault((t.model, t.optimizer, t.epochs), []).append(t)
    groups = []
    for (model, _, _), members in cells.items():
        k = sizes.get(model, 1)
        groups += [members[i:i + k] for i in range(0, len(members), k)]
    return groups


def fusion_sizes(spec: StudySpec, pending: List[PlannedTrial], resources: Dict[str, float]) -> Dict[str, int]:
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
        result = ray.get(measure.remote(model, cfg["optimizer"], cfg["batch_size"], spec.dataset.size, k))
        fuse = result["speedup"] >= AUTO_FUSE_MIN_SPEEDUP
        print(f"fuse auto: {model}: {k} fused run {result['speedup']:.2f}x the speed of {k} alone "
              f"-> {'fuse ' + str(k) if fuse else 'no fusion'}", flush=True)
        if fuse:
            sizes[model] = k
    return sizes


def _measure_fusion(*args) -> Dict[str, float]:
    """trainers.fused.measure_fusion on a Ray worker, with as many torch threads as a trial would have."""
    use_assigned_cpus()
    return measure_fusion(*args)
