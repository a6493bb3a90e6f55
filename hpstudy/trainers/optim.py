"""Optimizers (AdamW, SGD+Nesterov) without decay on 1-D params, and warmup + cosine schedules."""

from typing import Dict, List

import torch
from timm.scheduler import CosineLRScheduler
from torch import nn

from hpstudy.trainers.config import OPTIMIZERS
from hpstudy.trainers.errors import ConfigError, shown

# Devices with torch.optim's fused AdamW and SGD (since torch 2.4; hpstudy needs 2.5.1): one kernel
# per parameter group and step, no per-parameter host work and no host read of the step count.
# Their arithmetic differs from the foreach kernels' by rounding (float32: ~1e-5 of a weight after
# a few AdamW steps from zero moments; float64: ~1e-14).
FUSED_DEVICES = ("cuda", "cpu")


def param_groups(model: nn.Module, weight_decay: float) -> List[Dict]:
    """Two groups: decay on weights (>= 2-D), none on norm gains and biases (all 1-D params).

    Tokens and position embeddings are 3-D and decay, as in pycls.
    """
    decay: List[nn.Parameter] = []
    no_decay: List[nn.Parameter] = []
    for param in model.parameters():
        if param.requires_grad:
            (no_decay if param.ndim <= 1 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def fused_kernels(params: List[nn.Parameter]) -> Dict[str, bool]:
    """torch.optim's kernel choice for `params`: fused where every parameter is a floating-point
    tensor on a FUSED_DEVICES device, else foreach (one list operation per step and group)."""
    fused = all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in params)
    return {"fused": True} if fused else {"foreach": True}


def build_optimizer(
    name: str,
    model: nn.Module,
    lr: float,
    weight_decay: float,
    momentum: float = 0.9,
    betas=(0.9, 0.999),
    fused: bool = True,
    traced: bool = False,
) -> torch.optim.Optimizer:
    """AdamW (betas 0.9/0.999) or SGD (momentum 0.9, Nesterov) over `param_groups`, with torch's
    fused kernels where the device has them (`fused_kernels`), else, or with fused=False, foreach; with
    traced=True the per-tensor loop, which torch.compile traces into its own kernels (Dynamo does not
    trace the fused kernels, and foreach refuses a tensor lr), and no weight decay of its own: the traced
    step applies it (apply_weight_decay), as a tensor, since a new float would compile the step again."""
    groups = param_groups(model, 0.0 if traced else weight_decay)
    params = [p for group in groups for p in group["params"]]
    kernels = {"foreach": False} if traced else fused_kernels(params) if fused else {"foreach": True}
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), **kernels)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=True, **kernels)
    raise ConfigError(f"optimizer: unknown {shown(name)}; allowed: {', '.join(OPTIMIZERS)}")


def prime_state(optimizer: torch.optim.Optimizer) -> None:
    """Create SGD's momentum buffers as zeros before its first step, which would create them (as the gradient:
    0 * momentum + grad, the same update), so a compiled step sees one state layout at every step."""
    if isinstance(optimizer, torch.optim.SGD):
        for group in optimizer.param_groups:
            for param in group["params"]:
                optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param)


def apply_weight_decay(name: str, params: List[torch.Tensor], lr: torch.Tensor, weight_decay: torch.Tensor) -> None:
    """The weight decay torch.optim's single-tensor AdamW or SGD applies to `params` at the start of its step,
    from a tensor `weight_decay`: AdamW's decoupled `param *= 1 - lr * wd`, SGD's `grad += wd * param`
    (torch.optim's own form for a tensor; its float form branches on `wd != 0`, which Dynamo cannot trace
    for a tensor); a parameter without a gradient is left alone, as torch.optim leaves it."""
    for param in params:
        if param.grad is None:
            continue
        if name == "adamw":
            param.mul_(1 - lr * weight_decay)
        else:
            param.grad.addcmul_(param, weight_decay)


def build_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int, min_lr_ratio: float
) -> CosineLRScheduler:
    """Per-step linear warmup from 0, then half-period cosine down to min_lr_ratio * lr.

    Call `schedule.step_update(step)` before optimizer step `step` (0-based); warmup reaches the
    full lr at step `warmup_steps`, the cosine ends at `total_steps`.
    """
    base_lr = optimizer.param_groups[0]["lr"]
    warmup_steps = min(warmup_steps, total_steps - 1)
    return CosineLRScheduler(
        optimizer,
        t_initial=max(1, total_steps - warmup_steps),
        lr_min=base_lr * min_lr_ratio,
        warmup_t=warmup_steps,
        warmup_lr_init=0.0,
        warmup_prefix=True,
        t_in_epochs=False,
    )
