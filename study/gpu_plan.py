"""The dry run's memory plan: estimated peak GPU memory per model of a study, against the GPU."""

from typing import List, Optional

from hpstudy.study.sampling import PlannedTrial
from hpstudy.study.spec import StudySpec
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.memory import peak_memory_gb

# cluster.yaml's p4d.24xlarge nodes carry A100s with 40 GB each.
DEFAULT_GPU_MEMORY_GB = 40.0
NUM_CLASSES = {"digits": 10, "cifar10": 10, "cifar100": 100, "imagefolder": 1000}


def memory_plan(spec: StudySpec, trials: List[PlannedTrial], gpu_memory_gb: Optional[float]) -> List[str]:
    """Lines of the plan: per model, the estimated peak memory of one trial and whether it fits
    `gpu_memory_gb` (x the trial's GPU share), with the accum_steps that would make it fit."""
    budget = (gpu_memory_gb or DEFAULT_GPU_MEMORY_GB) * min(1.0, spec.resources.gpu)
    classes = NUM_CLASSES.get(spec.dataset.name, spec.dataset.num_classes)
    lines = [
        f"memory per trial (estimate; budget {budget:.1f} GB = {gpu_memory_gb or DEFAULT_GPU_MEMORY_GB:g} GB "
        f"GPU x {min(1.0, spec.resources.gpu):g} share):"
    ]
    seen = set()
    for trial in trials:
        if trial.model in seen:
            continue
        seen.add(trial.model)
        cfg = TrialConfig.from_dict(trial.config)
        need = peak_memory_gb(cfg, classes)
        verdict = "fits" if need <= budget else f"DOES NOT FIT: {_fix(cfg, classes, budget)}"
        lines.append(
            f"  {trial.model:<14} batch {cfg.batch_size} / accum_steps {cfg.accum_steps}: {need:6.1f} GB  {verdict}"
        )
    return lines


def _fix(cfg: TrialConfig, classes: int, budget: float) -> str:
    """The smallest accum_steps (a divisor of the batch that the config allows) that fits, or advice."""
    smallest = cfg.batch_size // cfg.accum_steps
    for steps in range(cfg.accum_steps, cfg.batch_size + 1):
        if cfg.batch_size % steps:
            continue
        try:
            smaller = TrialConfig.from_dict(dict(cfg.to_dict(), accum_steps=steps))
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
