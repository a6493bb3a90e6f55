"""FLOPs (multiply-adds, as in the paper) and parameter counts, measured by counting."""

from functools import lru_cache
from typing import Optional, Tuple

import torch
from torch.utils.flop_counter import FlopCounterMode

from hpstudy.trainers.models import build_model, set_fused_attention


def count_flops(model: torch.nn.Module, image_size: int, in_chans: int = 3) -> int:
    """Multiply-adds of one forward pass on one image (torch counts 2 FLOPs per multiply-add)."""
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
    """(FLOPs, params) of a registered model, counted on the meta device (no memory, fast)."""
    with torch.device("meta"):
        model = build_model(name, num_classes=num_classes, image_size=image_size)
    params = sum(p.numel() for p in model.parameters())
    return count_flops(model, image_size or _default_size(name)), params


def _default_size(name: str) -> int:
    from hpstudy.trainers.models import get_spec

    return get_spec(name).image_size
