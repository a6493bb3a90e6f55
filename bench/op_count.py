"""Ops dispatched and host reads of a piece of PyTorch code: what a training step costs the host.

    with OpCounter() as ops:
        trainer._train_step(x, y)
    ops.total, ops.host_reads, ops.counts.most_common(10)

Used by tests/trainers/test_op_budget.py (budgets per step, on the CPU) and by
bench/throughput_check.py (ops and host reads per step on the device).
"""

import collections
from typing import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# .item(), float(), int(), bool() of a tensor: the value read on the host
SCALAR_READ = torch.ops.aten._local_scalar_dense.default
COPIES = (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default)
# On a CPU tensor these read its memory directly and dispatch nothing
UNDISPATCHED_READS = ("tolist", "numpy", "cpu")


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it (by name, in `counts`; not the profiler's markers)
    and the host reads among them: scalar reads, copies from a device to the host, and calls of
    `UNDISPATCHED_READS`, which reach no dispatcher on a CPU tensor and are counted by wrapping
    those methods of torch.Tensor while the counter is active."""

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = collections.Counter()
        self.host_reads = 0
        self._saved = {}

    @property
    def total(self) -> int:
        """Aten ops dispatched."""
        return sum(self.counts.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace == "aten":
            self.counts[str(func.overloadpacket)] += 1
            source = args[0] if func is torch.ops.aten._to_copy.default else args[1] if len(args) > 1 else None
            if func is SCALAR_READ or (
                func in COPIES and torch.is_tensor(source) and source.device.type != "cpu" and out.device.type == "cpu"
            ):
                self.host_reads += 1
        return out

    def __enter__(self):
        for name in UNDISPATCHED_READS:
            self._saved[name] = method = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._counted(method))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, method in self._saved.items():
            setattr(torch.Tensor, name, method)
        return super().__exit__(*exc)

    def _counted(self, method):
        def read(tensor, *args, **kwargs):
            self.host_reads += tensor.device.type == "cpu"  # a device tensor's copy is dispatched
            return method(tensor, *args, **kwargs)

        return read
