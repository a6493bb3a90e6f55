"""Peak GPU memory of a trial, estimated before anything runs (counted on the meta device).

Activations: one forward pass of one image in bf16 on the meta device, summing the bytes of every
tensor autograd saves for the backward pass (torch.autograd.graph.saved_tensors_hooks); no memory
is used and no GPU is needed. Weights, gradients, optimizer state and EMA are counted from the
parameter count. The result is an estimate (the allocator's fragmentation, cuDNN workspaces and
the CUDA context come on top: `OVERHEAD_GB`).
"""

from functools import lru_cache

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.flops import parameter_count
from hpstudy.trainers.model_counts import cached

OVERHEAD_GB = 2.0  # CUDA context, cuDNN/cuBLAS workspaces, allocator slack
OPTIMIZER_STATE = {"adamw": 2, "sgd": 1}  # fp32 tensors of state per parameter


@lru_cache(maxsize=None)
def activation_bytes_per_image(model: str, num_classes: int, image_size: int) -> int:
    """Bytes saved for the backward pass per training image (bf16 activations, as under autocast), counted
    once per environment (hpstudy.trainers.model_counts)."""
    count = lambda: {"activation_bytes": _count_activation_bytes(model, num_classes, image_size)}  # noqa: E731
    return cached("activation_bytes", model, count, num_classes=num_classes, image_size=image_size)


def _count_activation_bytes(model: str, num_classes: int, image_size: int) -> int:
    """activation_bytes_per_image, counted: one training-mode forward pass in bf16 on the meta device."""
    import torch

    from hpstudy.trainers.models import build_model

    dtype = torch.bfloat16
    with torch.device("meta"):
        net = build_model(model, num_classes, image_size).to(dtype).train()
        x = torch.zeros(2, 3, image_size, image_size, dtype=dtype)  # 2: BatchNorm needs > 1 sample
    seen = {id(p) for p in net.parameters()}  # weights are not activations
    saved = [0]

    def pack(t: torch.Tensor):
        base = t if t._base is None else t._base  # a view shares its base's memory
        if id(base) not in seen:
            seen.add(id(base))
            saved[0] += base.numel() * base.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        net(x).float().logsumexp(-1).sum()
    return saved[0] // 2


def peak_memory_gb(cfg: TrialConfig, num_classes: int, checkpointing_factor: float = 0.25) -> float:
    """Estimated peak GPU memory (GB) of one trial: fp32 weights, gradients, optimizer state and EMA,
    plus bf16 activations of one micro-batch (batch_size / accum_steps), plus OVERHEAD_GB.
    Gradient checkpointing is taken to keep `checkpointing_factor` of the activations."""
    size = cfg.dataset.size
    params = parameter_count(cfg.model, num_classes, size)
    states = 2 + OPTIMIZER_STATE[cfg.optimizer] + (1 if cfg.ema_decay else 0)
    activations = activation_bytes_per_image(cfg.model, num_classes, size) * cfg.batch_size / cfg.accum_steps
    if cfg.grad_checkpointing:
        activations *= checkpointing_factor
    return (4 * params * states + activations) / 1e9 + OVERHEAD_GB
