"""The dry run's memory plan: estimated peak GPU memory per model of a study, against the GPU."""

from typing import Dict, List, Optional, Tuple

from hpstudy.study.sampling import PlannedTrial, expand, expand_cell
from hpstudy.study.spec import StudySpec
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data_spec import nominal_classes
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.memory import peak_memory_gb
from hpstudy.trainers.model_counts import trial_config

# cluster.yaml's p4d.24xlarge nodes carry A100s with 40 GB each.
DEFAULT_GPU_MEMORY_GB = 40.0
# the trial-config fields trainers/memory.py sizes a trial by (beside its model and dataset); a model is planned
# at the largest over its trials' settings
MEMORY_FIELDS = ("optimizer", "batch_size", "accum_steps", "ema_decay", "grad_checkpointing")


def memory_plan(spec: StudySpec, trials: List[PlannedTrial], gpu_memory_gb: Optional[float]) -> List[str]:
    """Lines of the plan: per model, the estimated peak memory of one trial and whether it fits
    `gpu_memory_gb` (x the trial's GPU share), with the accum_steps that would make it fit."""
    budget = (gpu_memory_gb or DEFAULT_GPU_MEMORY_GB) * min(1.0, spec.resources.gpu)
    classes = nominal_classes(spec.dataset)  # the dataset's registered class count, else the spec's
    lines = [
        f"memory per trial (estimate; budget {budget:.1f} GB = {gpu_memory_gb or DEFAULT_GPU_MEMORY_GB:g} GB "
        f"GPU x {min(1.0, spec.resources.gpu):g} share):"
    ]
    settings: Dict[str, Dict[Tuple, PlannedTrial]] = {}  # model -> one trial per distinct memory setting
    for trial in trials:
        settings.setdefault(trial.model, {}).setdefault(tuple(trial.config.get(f) for f in MEMORY_FIELDS), trial)
    for model, distinct in settings.items():
        cfgs = [trial_config(t.config) for t in distinct.values()]
        need, cfg = max(((peak_memory_gb(c, classes), c) for c in cfgs), key=lambda pair: pair[0])
        verdict = "fits" if need <= budget else f"DOES NOT FIT: {_fix(cfg, classes, budget)}"
        largest = f" (the largest of {len(cfgs)} sampled settings)" if len(cfgs) > 1 else ""
        lines.append(
            f"  {model:<14} batch {cfg.batch_size} / accum_steps {cfg.accum_steps}: {need:6.1f} GB  {verdict}{largest}"
        )
    return lines


def memory_trials(spec: StudySpec) -> List[PlannedTrial]:
    """The trials the memory plan sizes: every trial where a box samples a field in MEMORY_FIELDS (the plan
    takes each model's largest), else each (model, optimizer)'s first (its other trials need as much)."""
    sampled = {name for m in spec.models for o in spec.optimizers for name, _ in spec.box(m, o).axes()}
    if sampled & set(MEMORY_FIELDS):
        return expand(spec)
    return [expand_cell(spec, model, opt, spec.epochs[0])[0] for model in spec.models for opt in spec.optimizers]


def _fix(cfg: TrialConfig, classes: int, budget: float) -> str:
    """The smallest accum_steps (a divisor of the batch that the config allows) that fits, or advice."""
    smallest = cfg.batch_size // cfg.accum_steps
    for steps in range(cfg.accum_steps, cfg.batch_size + 1):
        if cfg.batch_size % steps:
            continue
        try:
            smaller = trial_config(dict(cfg.to_dict(), accum_steps=steps))
        except ConfigError:  # e.g. BatchNorm on micro-batches of one image; smaller ones are refused too
            break
        if peak_memory_gb(smaller, classes) <= budget:
            return f"set recipe.accum_steps: {steps} (micro-batch {cfg.batch_size // steps})"
        smallest = cfg.batch_size // steps
    checkpointing = "" if cfg.grad_checkpointing else "set recipe.grad_checkpointing: true, or "
    images = "1 image" if smallest == 1 else f"{smallest} images"
    return (
        f"no micro-batch fits (not even the smallest the model can train on, {images}): "
        f"{checkpointing}give trials a GPU (or GPU share) with more memory"
    )
