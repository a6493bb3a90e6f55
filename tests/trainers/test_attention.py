"""hpstudy::attention: torch's SDPA forward and backward, and under vmap one call over the members folded into
the batch."""

from typing import List

import pytest


def attention_calls():
    """A dispatch mode that records the shape of q at each hpstudy::attention call that reaches the kernels (below
    vmap), in its `shapes`."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class AttentionCalls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.shapes: List[torch.Size] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.hpstudy.attention.default:
                self.shapes.append(args[0].shape)
            return func(*args, **(kwargs or {}))

    return AttentionCalls()


@pytest.fixture(scope="module")
def under_vmap():
    """Skips the test where torch fails an internal assert running a custom op's vmap rule under a Python dispatch
    mode (torch 2.5; training runs none: the fused tests pass there)."""
    import torch
    from torch.func import vmap

    from hpstudy.trainers.attention import attention

    q = torch.zeros(2, 1, 1, 2, 2)
    try:
        with attention_calls():
            vmap(attention)(q, q, q)
    except RuntimeError:
        pytest.skip("torch 2.5: vmap under a dispatch mode")


def qkv(*shape, seed=0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, dtype=torch.float64, generator=generator, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("is_causal,scale", [(False, None), (True, 0.3)])
def test_the_op_is_sdpa_forward_and_backward(is_causal, scale):
    import torch
    import torch.nn.functional as F

    from hpstudy.trainers.attention import attention

    q, k, v = qkv(2, 3, 5, 4)
    out = attention(q, k, v, is_causal, scale)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-14)
    grad = torch.randn_like(out)
    got, expected = (torch.autograd.grad(o, (q, k, v), grad) for o in (out, want))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("options", [{}, {"scale": 0.3}, {"is_causal": True}, {"is_causal": True, "scale": 2.0}])
def test_sdpa_routed_through_the_op_keeps_every_option_it_is_given(options):
    """Inside the routing mode, an SDPA call with any causal flag and scale goes to the op (one call) and gives
    SDPA's own output for those options."""
    import torch
    import torch.nn.functional as F

    from hpstudy.trainers.attention import _SDPAThroughOp

    q, k, v = qkv(2, 3, 5, 4)
    want = F.scaled_dot_product_attention(q, k, v, **options)
    with attention_calls() as calls, _SDPAThroughOp():
        out = F.scaled_dot_product_attention(q, k, v, **options)
    assert calls.shapes == [q.shape]
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-14)


@pytest.mark.usefixtures("under_vmap")
def test_under_vmap_the_op_runs_once_over_all_members_as_the_loop_over_them():
    """Members on axis 1 of q, k and v shared (unbatched): one call of batch K x B; outputs and gradients
    (taken around vmap) are each member's own."""
    import torch
    import torch.nn.functional as F
    from torch.func import vmap

    from hpstudy.trainers.attention import attention

    members, batch = 3, 2
    q, k, v = qkv(batch, members, 4, 6, 8)
    k_shared, v_shared = (t[:, 0].detach().requires_grad_() for t in (k, v))
    with attention_calls() as calls:
        out = vmap(attention, in_dims=(1, None, None))(q, k_shared, v_shared)
    assert calls.shapes == [torch.Size([members * batch, 4, 6, 8])]
    loop = torch.stack([F.scaled_dot_product_attention(q[:, i], k_shared, v_shared) for i in range(members)])
    torch.testing.assert_close(out, loop, rtol=1e-12, atol=1e-14)
    grad = torch.randn_like(out)
    got, expected = (torch.autograd.grad(o, (q, k_shared, v_shared), grad) for o in (out, loop))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.usefixtures("under_vmap")
def test_vmapped_timm_attention_goes_through_the_op_and_back_to_sdpa_when_not_vmapped():
    import torch
    from timm.layers import Attention
    from torch.func import vmap

    from hpstudy.trainers.attention import set_vmapped_attention

    module = Attention(16, num_heads=2).double()
    x = torch.randn(3, 2, 5, 16, dtype=torch.float64)  # 3 members of a batch of 2
    loop = torch.stack([module(member) for member in x])
    with attention_calls() as calls:
        out = vmap(set_vmapped_attention(module, True))(x)
    assert calls.shapes == [torch.Size([6, 2, 5, 8])]
    torch.testing.assert_close(out, loop, rtol=1e-12, atol=1e-14)
    with attention_calls() as calls:
        set_vmapped_attention(module, False)(x[0])
    assert calls.shapes == [] and module.fused_attn
