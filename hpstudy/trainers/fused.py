"""Fused trials: K members of one (model, optimizer, epochs) cell trained as one vmapped computation.

Members differ in lr, wd and seed (init and data order); each member's numbers match the same
trial trained alone by `train_trial`. Parameters, buffers (BatchNorm statistics per member) and
optimizer state are stacked along a leading K axis (`torch.func.stack_module_state`), the losses
and gradients come from `vmap(grad_and_value(functional_call))` (a stack of one member, or a model
whose attention runs hpstudy::attention: autograd over the sum of the members' losses), and AdamW /
SGD-Nesterov are applied to the stacked tensors with per-member lr and wd. torch.optim cannot take
a learning rate per slice of one tensor, so the two update rules are written here, step for step
as in torch.optim's single-tensor code. Nothing reduces across members.

Under vmap, ViT attention runs torch's fused kernel once over all members (hpstudy.trainers.attention).
`compile: inductor` (or graph, on CUDA) compiles the step whole, as a trial alone does: the step
count, the lrs and the divergence state live on the device, so no step reads or writes a host value.

A member whose loss is non-finite or above `divergence_loss` is masked out at that step (its
parameters stop changing) and reported `diverged`; the others go on unchanged.
"""

import contextlib
import copy
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap
from torch.overrides import TorchFunctionMode

from hpstudy.trainers.attention import routes_attention, set_vmapped_attention
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data import DeviceBatches
from hpstudy.trainers.fused_spec import check_fusable
from hpstudy.trainers.loop import (
    MemberRecords,
    diverged_mask,
    fit,
    onednn_off_for_cpu_bf16,
    release_device_memory,
    scheduled_lrs,
    trial_schedule,
    trial_setup,
)
from hpstudy.trainers.models import build_model
from hpstudy.trainers.trial import Trainer, compiled_step

ADAMW_BETAS, ADAMW_EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW's defaults


class FusedTrainer:
    """Trains K trial configs of one cell at once; member k mirrors `Trainer` for cfgs[k].

    The stacked parameters live in one flat (K, N) buffer (`params` holds per-parameter views into
    it), so each optimizer step is a handful of large kernels rather than a Python loop over
    parameters. A stack of one member runs without vmap (see `_per_member`). `run_epoch` drops
    members that diverged from the stack at the end of an epoch, so they stop costing compute;
    `members` maps stack positions to the original member indices.
    """

    def __init__(self, cfgs: Sequence[TrialConfig]):
        check_fusable(cfgs)
        self.cfgs = list(cfgs)
        cfg = cfgs[0]
        self.k = len(cfgs)
        setup = trial_setup(cfg)
        # bf16 autocast as a trial alone has it (on CUDA unless amp: false): autocast sits below
        # vmap in torch's dispatch, so each member's matmuls run in bf16 as they would alone
        self.device, self.dtype, self.amp = setup.device, setup.dtype, setup.amp
        cfg.check_compile(self.device.type)
        data = setup.data
        self.batches = DeviceBatches(data, self.device, self.dtype)  # never channels_last (UNSUPPORTED)
        self.num_classes = data.num_classes
        models = []
        for member in cfgs:
            torch.manual_seed(member.seed)
            models.append(build_model(member.model, self.num_classes, member.dataset.size).to(self.device, self.dtype))
        params, buffers = stack_module_state(models)
        self.names = list(params)
        self.shapes = [p.shape[1:] for p in params.values()]
        self.sizes = [p[0].numel() for p in params.values()]
        self.flat = torch.cat([p.detach().reshape(self.k, -1) for p in params.values()], 1)
        self.buffers = buffers
        self.base = set_vmapped_attention(copy.deepcopy(models[0]).to("meta"), self.k > 1)
        # torch.func.grad cannot run hpstudy::attention's backward (torch 2.14); members share
        # nothing, so autograd over the sum of their losses gives each member its own gradient
        self.grad_around_vmap = routes_attention(self.base)
        if self.amp:
            _norms_in_float32(self.base)
        self.generators = [torch.Generator().manual_seed(m.seed) for m in cfgs]
        self.steps_per_epoch = data.steps_per_epoch(cfg.batch_size)
        # every member's lr at every step, computed once and kept on the device (no copy per step)
        self.lr_table = (
            torch.tensor([_lr_per_step(m, self.steps_per_epoch) for m in cfgs], dtype=self.dtype)
            .T.contiguous()
            .to(self.device)
        )
        # weight decay per member and position; none on the member model's 1-D parameters
        decays = torch.cat(
            [torch.full((n,), float(len(shape) > 1), dtype=self.dtype) for shape, n in zip(self.shapes, self.sizes)]
        ).to(self.device)
        self.wd = torch.tensor([m.wd for m in cfgs], dtype=self.dtype, device=self.device)[:, None] * decays
        # the optimizer's state from the start (zeros: the first step's update is torch.optim's)
        names = ("exp_avg", "exp_avg_sq") if cfg.optimizer == "adamw" else ("momentum_buffer",)
        self.state: Dict[str, torch.Tensor] = {name: torch.zeros_like(self.flat) for name in names}
        # AdamW's bias corrections 1 - beta1^t and sqrt(1 - beta2^t) at every step t (from 1, as torch.optim
        # counts), in Python's float64 as torch.optim computes them
        (beta1, beta2), steps = ADAMW_BETAS, range(1, len(self.lr_table) + 1)
        corrections = [(1 - beta1**t, math.sqrt(1 - beta2**t)) for t in steps] if cfg.optimizer == "adamw" else []
        self.bias_corrections = torch.tensor(corrections, dtype=torch.float64, device=self.device)
        self.step = 0
        self.step_t = torch.zeros(1, dtype=torch.int64, device=self.device)  # the step, read on the device
        self.alive = torch.ones(self.k, dtype=torch.bool, device=self.device)
        self.members = list(range(self.k))
        self.positions = torch.arange(self.k, device=self.device)  # the stack's original member indices
        self.diverged_step = torch.full((self.k,), -1, dtype=torch.int64, device=self.device)
        self.params = self._views(self.flat)
        self._train_step = compiled_step(self._step, cfg.compile)

    def _views(self, flat: torch.Tensor) -> Dict[str, torch.Tensor]:
        """A (K, *shape) view of the flat (K, N) buffer per parameter name."""
        parts = flat.split(self.sizes, dim=1)
        return {n: t.view(self.k, *shape) for n, t, shape in zip(self.names, parts, self.shapes)}

    def _per_member(self, fn: Callable, params, buffers, *batch, batch_stacked: bool = True) -> torch.Tensor:
        """fn(params, buffers, *batch) for every member, stacked: vmapped, or, for a stack of one,
        called on the member's own slices (through vmap, a one-member stack trained at 0.6x the
        speed of its trial alone on CPU; a group whose other members diverged ends up as one)."""
        if self.k > 1:
            return vmap(fn, in_dims=(0, 0) + (0 if batch_stacked else None,) * len(batch))(params, buffers, *batch)
        first = lambda tree: {name: t[0] for name, t in tree.items()}
        return fn(first(params), first(buffers), *(b[0] if batch_stacked else b for b in batch))[None]

    def _logits(self, params, buffers, x):
        # bf16 autocast in training only: outside torch.func.grad, vmap's convolution rule meets
        # bf16 activations with float32 weights, so evaluation runs in float32 (a trial alone
        # evaluates in bf16: the errors differ by bf16 rounding, as the batched kernels' do); the
        # gradients taken around vmap (grad_around_vmap) need the casts of _AutocastUnderVmap
        autocast = self.amp and self.base.training
        casts = _AutocastUnderVmap() if autocast and self.grad_around_vmap else contextlib.nullcontext()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast), casts:
            return functional_call(self.base, (params, buffers), (x,))

    def _loss(self, params, buffers, x, y):
        logits = self._logits(params, buffers, x)
        logits = logits.float() if logits.dtype == torch.bfloat16 else logits  # the loss in float32, as alone
        return F.cross_entropy(logits, y, label_smoothing=self.cfgs[0].label_smoothing)

    @property
    def diverged_at(self) -> List[Optional[int]]:
        """Per member: the step at which it diverged, or None (reads the device: one sync)."""
        return [None if s < 0 else s for s in self.diverged_step.tolist()]

    def _losses_and_grad(self, x: torch.Tensor, y: torch.Tensor):
        """Each member's loss on its batch, and their gradients as one (K, N) tensor."""
        if self.k > 1 and not self.grad_around_vmap:
            grads, losses = vmap(grad_and_value(self._loss))(self.params, self.buffers, x, y)
            return losses, torch.cat([grads[n].reshape(self.k, -1) for n in self.names], 1)
        flat = self.flat.detach().requires_grad_()
        loss = self._per_member(self._loss, self._views(flat), self.buffers, x, y)
        (grad,) = torch.autograd.grad(loss.sum(), flat)
        return loss.detach(), grad

    def _step(self, x: torch.Tensor, y: torch.Tensor, loss_sum: torch.Tensor) -> None:
        """One training step of every member (compiled whole unless `compile: off`): gradients, divergence,
        the update, the live members' losses added to `loss_sum`, the step count."""
        losses, grad = self._losses_and_grad(x, y)
        newly = diverged_mask(losses, self.cfgs[0]) & self.alive
        self.diverged_step[self.positions] = torch.where(newly, self.step_t, self.diverged_step[self.positions])
        self.alive &= ~newly
        self._update(grad, self.lr_table.index_select(0, self.step_t)[0])
        loss_sum += torch.where(self.alive, losses.double(), torch.zeros_like(loss_sum))
        self.step_t += 1

    @torch.no_grad()
    def _update(self, g: torch.Tensor, lrs: torch.Tensor) -> None:
        """One AdamW or SGD-Nesterov step on the flat buffer given its gradient `g` (the
        arithmetic of torch.optim's single-tensor code), dead members left as they are."""
        p, lr = self.flat, lrs[:, None]
        if self.cfgs[0].optimizer == "adamw":
            (beta1, beta2), eps = ADAMW_BETAS, ADAMW_EPS
            m, v = self.state["exp_avg"], self.state["exp_avg_sq"]
            new = p * (1 - lr * self.wd)
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            bias1, bias2_sqrt = self.bias_corrections.index_select(0, self.step_t)[0]  # 0-dim: no type promotion
            new = new - (lr / bias1) * (m / ((v.sqrt() / bias2_sqrt) + eps))
        else:
            momentum = 0.9
            d_p = g + self.wd * p
            buf = self.state["momentum_buffer"].mul_(momentum).add_(d_p)  # from zeros: d_p at the first step
            new = p - lr * (d_p + momentum * buf)
        p.copy_(torch.where(self.alive[:, None], new, p))  # in place: the views stay valid

    def train_epoch(self) -> Dict[str, np.ndarray]:
        """One epoch for the members in the stack; per stack position: mean train loss and last lr."""
        self.base.train()
        cfg = self.cfgs[0]
        loss_sum = torch.zeros(self.k, dtype=torch.float64, device=self.device)
        iterators = [self.batches.train(cfg.batch_size, g) for g in self.generators]
        last = min(self.step, len(self.lr_table) - 1)
        for batches in zip(*iterators):
            x = torch.stack([b[0] for b in batches])
            y = torch.stack([b[1] for b in batches])
            with onednn_off_for_cpu_bf16(self.device, self.amp):
                self._train_step(x, y, loss_sum)
            last = self.step
            self.step += 1
        return {"train_loss": (loss_sum / self.steps_per_epoch).cpu().numpy(), "lr": self.lr_table[last].cpu().numpy()}

    @torch.no_grad()
    def evaluate(self) -> Dict[str, np.ndarray]:
        """Per stack position: top-1 and top-5 validation error (%)."""
        self.base.eval()
        correct1 = torch.zeros(self.k, device=self.device)
        correct5 = torch.zeros(self.k, device=self.device)
        total = 0
        for x, y in self.batches.val(max(self.cfgs[0].batch_size, 256)):
            logits = self._per_member(self._logits, self.params, self.buffers, x, batch_stacked=False)
            top = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
            hits = top == y[None, :, None]
            correct1 += hits[..., 0].sum(1)
            correct5 += hits.any(-1).sum(1)
            total += len(y)
        return {
            "top1_err": (100 * (1 - correct1 / total)).cpu().numpy(),
            "top5_err": (100 * (1 - correct5 / total)).cpu().numpy(),
        }

    def drop_diverged(self) -> None:
        """Remove diverged members from the stack (parameters, buffers, state, data, schedule)."""
        keep = torch.nonzero(self.alive).flatten()
        if len(keep) == self.k:
            return
        self.flat, self.wd = self.flat[keep], self.wd[keep]
        self.state = {name: t[keep] for name, t in self.state.items()}
        self.buffers = {name: b[keep] for name, b in self.buffers.items()}
        self.lr_table, self.alive = self.lr_table[:, keep], self.alive[keep]
        kept = keep.tolist()
        self.generators = [self.generators[i] for i in kept]
        self.members = [self.members[i] for i in kept]
        self.positions = self.positions[keep]
        self.k = len(kept)
        self.params = self._views(self.flat)
        set_vmapped_attention(self.base, self.k > 1)

    def run_epoch(self) -> Dict[int, Dict[str, Any]]:
        """Train and evaluate one epoch (hpstudy.trainers.loop.EpochTrainer): metrics of the live members,
        by original member index; diverged members leave the stack first."""
        train = self.train_epoch()
        if not self.alive.any():
            return {}
        alive = self.alive.cpu()
        self.drop_diverged()
        train = {name: values[alive.numpy()] for name, values in train.items()}
        metrics = self.evaluate()
        return {
            member: {
                "train_loss": float(train["train_loss"][i]),
                "train_top1_err": None,
                "lr": float(train["lr"][i]),
                "top1_err": float(metrics["top1_err"][i]),
                "top5_err": float(metrics["top5_err"][i]),
                "ema_top1_err": None,
            }
            for i, member in enumerate(self.members)
        }

    def diverged(self, member: int) -> bool:
        """Whether the member diverged (and was masked out)."""
        return bool(self.diverged_step[member] >= 0)

    def release(self) -> None:
        """Free the stacked parameters, buffers and optimizer state."""
        del self.params, self.flat, self.buffers, self.state, self.batches, self._train_step
        release_device_memory(self.device)


class _AutocastUnderVmap(TorchFunctionMode):
    """Convolutions and linear layers in autocast's dtype, cast as autocast casts them: outside torch.func.grad,
    vmap rewrites them (with batched weights) into ops autocast leaves in float32 before autocast sees them."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (F.conv1d, F.conv2d, F.conv3d, F.linear):
            dtype = torch.get_autocast_dtype(args[0].device.type)
            args = tuple(a.to(dtype) if torch.is_tensor(a) else a for a in args)
        return func(*args, **(kwargs or {}))


def _norms_in_float32(model: torch.nn.Module) -> None:
    """Run the model's BatchNorm layers on float32 inputs and give back bf16: torch's vmap rule for
    batch_norm cannot mix a bf16 input with float32 weights, which a layer alone under autocast
    does (computing in float32 inside, so the numbers are the same)."""

    def to_float32(module, args):
        return tuple(a.float() if torch.is_tensor(a) and a.dtype == torch.bfloat16 else a for a in args)

    def to_bf16(module, args, output):
        return output.to(torch.bfloat16) if torch.is_autocast_enabled(output.device.type) else output

    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.register_forward_pre_hook(to_float32)
            module.register_forward_hook(to_bf16)


def _lr_per_step(cfg: TrialConfig, steps_per_epoch: int) -> List[float]:
    """The member's lr at every step: timm's schedule run on a stand-in optimizer."""
    stand_in = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.peak_lr)
    return scheduled_lrs(trial_schedule(stand_in, cfg, steps_per_epoch), cfg.epochs * steps_per_epoch)


def train_fused(
    configs: Sequence[Dict[str, Any]], on_epoch: Optional[Callable[[MemberRecords], None]] = None
) -> List[Dict[str, Any]]:
    """Train K trial configs of one cell fused; return K trial rows as `train_trial` would.

    on_epoch({k: record}) is called after each epoch with the records of the live members.
    """
    return fit(FusedTrainer([TrialConfig.from_dict(c) for c in configs]), on_epoch)


def measure_fusion(
    model: str,
    optimizer: str,
    batch_size: int,
    image_size: int,
    k: int,
    steps: int = 3,
    device: str = "auto",
    dtype: str = "float32",
    alone_step_s: Optional[float] = None,
    compile: str = "off",
) -> Dict[str, float]:
    """Time K members fused against one trial alone (then x K, as K trials one after another).

    Both train `steps` steps of synthetic data after a warm-up epoch (which compiles the step, for a
    `compile` mode other than off); speedup = K t_alone / t_fused. `alone_step_s`, when given, is the
    alone step time already measured (one per sweep over K).
    """
    data = {
        "name": "synthetic",
        "image_size": image_size,
        "n_train": batch_size * steps,
        "n_val": batch_size,
        "num_classes": 10,
    }
    base = dict(
        model=model,
        optimizer=optimizer,
        epochs=2,
        lr=1e-3,
        wd=1e-4,
        batch_size=batch_size,
        dataset=data,
        device=device,
        dtype=dtype,
        compile=compile,
    )

    def timed(trainer) -> float:
        trainer.train_epoch()  # warm-up: allocations, kernel selection
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        start = time.perf_counter()
        trainer.train_epoch()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        return (time.perf_counter() - start) / steps

    alone = timed(Trainer(TrialConfig.from_dict(base))) if alone_step_s is None else alone_step_s
    fused = timed(FusedTrainer([TrialConfig.from_dict(dict(base, seed=i)) for i in range(k)]))
    return {
        "alone_step_s": alone,
        "fused_step_s": fused,
        "speedup": k * alone / fused,
        "samples_per_s_per_member_alone": batch_size / alone,
        "samples_per_s_per_member_fused": batch_size / fused,
    }
