"""Fused trials: K members of one (model, optimizer, epochs) cell trained as one vmapped computation.

Members differ in lr, wd and seed (init and data order); each member's numbers match the same
trial trained alone by `train_trial`. Parameters, buffers (BatchNorm statistics per member) and
optimizer state are stacked along a leading K axis (`torch.func.stack_module_state`), the loss
and gradients come from `vmap(grad_and_value(functional_call))`, and AdamW / SGD-Nesterov are
applied to the stacked tensors with per-member lr and wd. torch.optim cannot take a learning rate
per slice of one tensor, so the two update rules are written here, step for step as in
torch.optim's single-tensor code. Nothing reduces across members.

A member whose loss is non-finite or above `divergence_loss` is masked out at that step (its
parameters stop changing) and reported `diverged`; the others go on unchanged.
"""

import copy
import gc
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from trainers.config import TrialConfig
from trainers.errors import ConfigError
from trainers.data import DeviceBatches
from trainers.loop import MemberRecords, data_for, diverged_mask, fit, resolve_device, trial_schedule
from trainers.models import build_model, set_fused_attention
from trainers.trial import Trainer

PER_MEMBER = ("lr", "wd", "seed")
# recipe options fusion does not implement, with the values that mean "off"
UNSUPPORTED = {"mixup": (0,), "cutmix": (0,), "ema_decay": (None,), "grad_clip": (None,), "amp": (None, False),
               "accum_steps": (1,), "grad_checkpointing": (False,)}


def check_fusable(cfgs: Sequence[TrialConfig]) -> None:
    """Members must share everything but lr, wd and seed, and use the options fusion supports."""
    first = cfgs[0].to_dict()
    for cfg in cfgs[1:]:
        diff = [k for k, v in cfg.to_dict().items() if k not in PER_MEMBER and v != first[k]]
        if diff:
            raise ConfigError(f"fused members differ in {diff}; only {PER_MEMBER} may differ")
    for name, off in UNSUPPORTED.items():
        if first[name] not in off:
            raise ConfigError(f"{name}: {first[name]!r} is not supported in fused training; train alone")


class FusedTrainer:
    """Trains K trial configs of one cell at once; `members[k]` mirrors `Trainer` for cfgs[k]."""

    def __init__(self, cfgs: Sequence[TrialConfig]):
        check_fusable(cfgs)
        self.cfgs = list(cfgs)
        cfg = cfgs[0]
        self.k = len(cfgs)
        self.device = resolve_device(cfg.device)
        self.dtype = getattr(torch, cfg.dtype)
        data = data_for(cfg, self.device)
        self.batches = DeviceBatches(data, self.device, self.dtype)
        self.num_classes = data.num_classes
        models = []
        for member in cfgs:
            torch.manual_seed(member.seed)
            model = build_model(member.model, self.num_classes, member.dataset.size).to(self.device, self.dtype)
            # torch's fused attention kernel has no vmap batching rule and would fall back to a loop
            models.append(set_fused_attention(model, False))
        params, buffers = stack_module_state(models)
        self.params = {n: p.detach() for n, p in params.items()}
        self.buffers = buffers
        self.base = copy.deepcopy(models[0]).to("meta")
        self.generators = [torch.Generator().manual_seed(m.seed) for m in cfgs]
        self.steps_per_epoch = data.steps_per_epoch(cfg.batch_size)
        # every member's lr at every step, computed once and kept on the device (no copy per step)
        self.lr_table = torch.tensor([_lr_per_step(m, self.steps_per_epoch) for m in cfgs],
                                     dtype=self.dtype).T.contiguous().to(self.device)
        shape = lambda p: (self.k,) + (1,) * (p.ndim - 1)
        wd = torch.tensor([m.wd for m in cfgs], dtype=self.dtype, device=self.device)
        # no decay on 1-D parameters of the member model (2-D once stacked)
        self.wd = {n: (wd.view(shape(p)) if p.ndim > 2 else torch.zeros(shape(p), dtype=self.dtype, device=self.device))
                   for n, p in self.params.items()}
        self.state = {n: {} for n in self.params}
        self.step = 0
        self.alive = torch.ones(self.k, dtype=torch.bool, device=self.device)
        self.diverged_step = torch.full((self.k,), -1, dtype=torch.int64, device=self.device)
        self.grad_fn = vmap(grad_and_value(self._loss), in_dims=(0, 0, 0, 0))
        self.forward = vmap(self._logits, in_dims=(0, 0, None))

    def _logits(self, params, buffers, x):
        return functional_call(self.base, (params, buffers), (x,))

    def _loss(self, params, buffers, x, y):
        logits = self._logits(params, buffers, x)
        return F.cross_entropy(logits, y, label_smoothing=self.cfgs[0].label_smoothing)

    @property
    def diverged_at(self) -> List[Optional[int]]:
        """Per member: the step at which it diverged, or None (reads the device: one sync)."""
        return [None if s < 0 else s for s in self.diverged_step.tolist()]

    def _update(self, grads: Dict[str, torch.Tensor], lrs: torch.Tensor) -> None:
        """One AdamW or SGD-Nesterov step on every stacked parameter, dead members left as they are."""
        optimizer = self.cfgs[0].optimizer
        step = self.step + 1  # torch.optim counts steps from 1
        for name, p in self.params.items():
            g = grads[name]
            lr = lrs.view((self.k,) + (1,) * (p.ndim - 1))
            wd, state = self.wd[name], self.state[name]
            if optimizer == "adamw":
                beta1, beta2, eps = 0.9, 0.999, 1e-8
                new = p * (1 - lr * wd)
                m = state.setdefault("exp_avg", torch.zeros_like(p))
                v = state.setdefault("exp_avg_sq", torch.zeros_like(p))
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                bias1 = 1 - beta1 ** step
                bias2_sqrt = math.sqrt(1 - beta2 ** step)
                new = new - (lr / bias1) * (m / ((v.sqrt() / bias2_sqrt) + eps))
            else:
                momentum = 0.9
                d_p = g + wd * p
                buf = state.get("momentum_buffer")
                buf = d_p.clone() if buf is None else buf.mul_(momentum).add_(d_p)
                state["momentum_buffer"] = buf
                new = p - lr * (d_p + momentum * buf)
            alive = self.alive.view((self.k,) + (1,) * (p.ndim - 1))
            self.params[name] = torch.where(alive, new, p)

    def train_epoch(self) -> Dict[str, np.ndarray]:
        """One epoch for all members; returns per-member mean train loss and last lr."""
        self.base.train()
        cfg = self.cfgs[0]
        loss_sum = torch.zeros(self.k, dtype=torch.float64, device=self.device)
        iterators = [self.batches.train(cfg.batch_size, g) for g in self.generators]
        lrs = self.lr_table[min(self.step, len(self.lr_table) - 1)]
        for batches in zip(*iterators):
            x = torch.stack([b[0] for b in batches])
            y = torch.stack([b[1] for b in batches])
            lrs = self.lr_table[self.step]
            grads, losses = self.grad_fn(self.params, self.buffers, x, y)
            newly = diverged_mask(losses, cfg) & self.alive
            self.diverged_step = torch.where(newly, self.step, self.diverged_step)
            self.alive &= ~newly
            self._update(grads, lrs)
            loss_sum += torch.where(self.alive, losses.detach().double(), torch.zeros_like(loss_sum))
            self.step += 1
        return {"train_loss": (loss_sum / self.steps_per_epoch).cpu().numpy(), "lr": lrs.cpu().numpy()}

    @torch.no_grad()
    def evaluate(self) -> Dict[str, np.ndarray]:
        """Per-member top-1 and top-5 validation error (%)."""
        self.base.eval()
        correct1 = torch.zeros(self.k, device=self.device)
        correct5 = torch.zeros(self.k, device=self.device)
        total = 0
        for x, y in self.batches.val(max(self.cfgs[0].batch_size, 256)):
            logits = self.forward(self.params, self.buffers, x)
            top = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
            hits = top == y[None, :, None]
            correct1 += hits[..., 0].sum(1)
            correct5 += hits.any(-1).sum(1)
            total += len(y)
        return {"top1_err": (100 * (1 - correct1 / total)).cpu().numpy(),
                "top5_err": (100 * (1 - correct5 / total)).cpu().numpy()}

    def run_epoch(self) -> Dict[int, Dict[str, Any]]:
        """Train and evaluate one epoch (trainers.loop.EpochTrainer): metrics of the live members."""
        train = self.train_epoch()
        if not self.alive.any():
            return {}
        metrics = self.evaluate()
        return {k: {"train_loss": float(train["train_loss"][k]), "train_top1_err": None,
                    "lr": float(train["lr"][k]), "top1_err": float(metrics["top1_err"][k]),
                    "top5_err": float(metrics["top5_err"][k]), "ema_top1_err": None}
                for k in torch.nonzero(self.alive).flatten().tolist()}

    def diverged(self, member: int) -> bool:
        """Whether the member diverged (and was masked out)."""
        return bool(self.diverged_step[member] >= 0)

    def release(self) -> None:
        """Free the stacked parameters, buffers and optimizer state."""
        del self.params, self.buffers, self.state, self.batches
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _lr_per_step(cfg: TrialConfig, steps_per_epoch: int) -> List[float]:
    """The member's lr at every step: timm's schedule run on a stand-in optimizer."""
    stand_in = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=cfg.peak_lr)
    schedule = trial_schedule(stand_in, cfg, steps_per_epoch)
    lrs = []
    for step in range(cfg.epochs * steps_per_epoch):
        schedule.step_update(step)
        lrs.append(stand_in.param_groups[0]["lr"])
    return lrs


def train_fused(configs: Sequence[Dict[str, Any]],
                on_epoch: Optional[Callable[[MemberRecords], None]] = None) -> List[Dict[str, Any]]:
    """Train K trial configs of one cell fused; return K trial rows as `train_trial` would.

    on_epoch({k: record}) is called after each epoch with the records of the live members.
    """
    return fit(FusedTrainer([TrialConfig.from_dict(c) for c in configs]), on_epoch)


def measure_fusion(model: str, optimizer: str, batch_size: int, image_size: int, k: int, steps: int = 3,
                   device: str = "auto", dtype: str = "float32") -> Dict[str, float]:
    """Time K members fused against one trial alone (then x K, as K trials one after another).

    Both train `steps` steps of synthetic data after a warm-up epoch; speedup = K t_alone / t_fused.
    """
    data = {"name": "synthetic", "image_size": image_size, "n_train": batch_size * steps,
            "n_val": batch_size, "num_classes": 10}
    base = dict(model=model, optimizer=optimizer, epochs=2, lr=1e-3, wd=1e-4, batch_size=batch_size,
                dataset=data, device=device, dtype=dtype)

    def timed(trainer) -> float:
        trainer.train_epoch()                       # warm-up: allocations, kernel selection
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        start = time.perf_counter()
        trainer.train_epoch()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        return (time.perf_counter() - start) / steps

    alone = timed(Trainer(TrialConfig.from_dict(base)))
    fused = timed(FusedTrainer([TrialConfig.from_dict(dict(base, seed=i)) for i in range(k)]))
    return {"alone_step_s": alone, "fused_step_s": fused, "speedup": k * alone / fused,
            "samples_per_s_per_member_alone": batch_size / alone,
            "samples_per_s_per_member_fused": batch_size / fused}
