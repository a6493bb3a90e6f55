"""Attention that vmaps onto torch's fused kernels: the custom op `hpstudy::attention` and the routing of timm's
self-attention through it in a vmapped (fused) trial.

torch's scaled_dot_product_attention has no vmap batching rule on every backend (on the CPU vmap falls back to a
loop over members), so fused trials used to compute attention explicitly (softmax(QK^T)V). The op is SDPA whose
vmap rule folds the vmapped member axis into the attention batch: under vmap the fused (flash / memory-efficient)
kernel runs once over K x B. Its backward recomputes SDPA under autograd (the fused backward kernel, plus one
attention forward). Differentiate around vmap (autograd over a vmapped loss), not inside it: torch.func.grad
cannot run a custom op's autograd formula (torch 2.14).
"""

from functools import partial
from typing import Optional

import torch
import torch.nn.functional as F
from timm.layers import Attention
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from hpstudy.trainers.models import set_fused_attention


@torch.library.custom_op("hpstudy::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False, scale: Optional[float] = None) -> Tensor:
    """F.scaled_dot_product_attention(q, k, v) without mask or dropout, (B, H, N, D) in and out."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)


@attention.register_fake
def _(q, k, v, is_causal=False, scale=None):
    # SDPA on fake tensors: the output's strides are those of the kernel the real call picks
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)


def _save_inputs(ctx, inputs, output):
    q, k, v, ctx.is_causal, ctx.scale = inputs
    ctx.save_for_backward(q, k, v)


def _backward(ctx, grad: Tensor):
    # a custom op's kernel runs below autograd, so the vjp lives in the formula, not in a second op
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=ctx.is_causal, scale=ctx.scale)
        return (*torch.autograd.grad(out, (q, k, v), grad), None, None)


attention.register_autograd(_backward, setup_context=_save_inputs)


@attention.register_vmap
def _(info, in_dims, q, k, v, is_causal=False, scale=None):
    def fold(t: Tensor, dim: Optional[int]) -> Tensor:
        t = t.expand(info.batch_size, *t.shape) if dim is None else t.movedim(dim, 0)
        return t.flatten(0, 1)  # (K, B, H, N, D) -> (K x B, H, N, D)

    out = attention(fold(q, in_dims[0]), fold(k, in_dims[1]), fold(v, in_dims[2]), is_causal, scale)
    return out.unflatten(0, (info.batch_size, -1)), 0


class _SDPAThroughOp(TorchFunctionMode):
    """Sends F.scaled_dot_product_attention calls the op computes (no mask, no dropout) to hpstudy::attention."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and len(args) == 3:
            options = dict(kwargs)
            is_causal, scale = options.pop("is_causal", False), options.pop("scale", None)
            if options.pop("attn_mask", None) is None and not options.pop("dropout_p", 0.0) and not options:
                return attention(*args, is_causal, scale)
        return func(*args, **kwargs)


def _forward_through_op(module: nn.Module, *args, **kwargs):
    with _SDPAThroughOp():
        return type(module).forward(module, *args, **kwargs)


def _plain(module: nn.Module) -> bool:
    return type(module) is Attention


def routes_attention(model: nn.Module) -> bool:
    """Whether `model` has attention that set_vmapped_attention sends through hpstudy::attention under vmap."""
    return any(_plain(module) for module in model.modules())


def set_vmapped_attention(model: nn.Module, vmapped: bool) -> nn.Module:
    """Attention for `model` run under vmap or not. Under vmap timm's plain self-attention (`Attention`: the ViTs')
    runs torch's fused SDPA through hpstudy::attention, and attention with a relative position bias (CoAtNet,
    ViT_REL) runs explicitly; not under vmap, all of it runs torch's fused SDPA."""
    set_fused_attention(model, not vmapped)
    for module in model.modules():
        if _plain(module):
            module.fused_attn = True  # type: ignore[assignment]  # as in set_fused_attention
            if vmapped:
                module.forward = partial(_forward_through_op, module)
            else:
                vars(module).pop("forward", None)
    return model
