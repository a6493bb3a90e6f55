"""FLOPs (multiply-adds, as in the paper) and parameter counts, measured by counting (torch is imported to
count; a count made before is read back from hpstudy.trainers.model_counts' cache without it)."""

from functools import lru_cache
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from hpstudy.trainers.model_counts import cached
from hpstudy.trainers.zoo import get_spec

if TYPE_CHECKING:
    import torch


def count_flops(model: "torch.nn.Module", image_size: int, in_chans: int = 3) -> int:
    """Multiply-adds of one forward pass on one image (torch counts 2 FLOPs per multiply-add)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from hpstudy.trainers.models import set_fused_attention

    device = next(model.parameters()).device
    # The counter does not see fused scaled_dot_product_attention on every backend; explicit
    # attention makes QK^T and AV plain matmuls that it counts everywhere.
    set_fused_attention(model, False)
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(torch.zeros(1, in_chans, image_size, image_size, device=device))
    finally:
        set_fused_attention(model, True)
    return counter.get_total_flops() // 2


@lru_cache(maxsize=None)
def model_profile(name: str, num_classes: int = 1000, image_size: Optional[int] = None) -> Tuple[int, int]:
    """(FLOPs, params) of a registered model, counted on the meta device (no memory) once per environment."""
    size = image_size or get_spec(name).image_size
    count = lambda: _count(name, num_classes, size, flops=True)  # noqa: E731
    return (
        cached("macs", name, count, num_classes=num_classes, image_size=size),
        cached("params", name, count, num_classes=num_classes, image_size=size),
    )


@lru_cache(maxsize=None)
def parameter_count(name: str, num_classes: int, image_size: int) -> int:
    """Parameters of a registered model, counted on the meta device once per environment."""
    count = lambda: _count(name, num_classes, image_size, flops=False)  # noqa: E731
    return cached("params", name, count, num_classes=num_classes, image_size=image_size)


def _count(name: str, num_classes: int, image_size: int, flops: bool) -> Dict[str, int]:
    """The model's parameters and, with `flops`, its multiply-adds (hpstudy.trainers.model_counts' quantities),
    built once on the meta device."""
    import torch

    from hpstudy.trainers.models import build_model

    with torch.device("meta"):
        model = build_model(name, num_classes=num_classes, image_size=image_size)
    counted = {"params": sum(p.numel() for p in model.parameters())}
    return dict(counted, macs=count_flops(model, image_size)) if flops else counted
