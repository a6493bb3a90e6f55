"""Training one trial alone: the `Trainer` of one member, run by the shared driver (trainers.loop)."""

import contextlib
import gc
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.utils import ModelEmaV3

from trainers.config import TrialConfig
from trainers.loop import data_on_device, diverged_mask, fit, resolve_device, trial_schedule
from trainers.models import build_model
from trainers.optim import build_optimizer

EpochCallback = Callable[[Dict[str, Any]], None]


@torch.no_grad()
def evaluate(model: torch.nn.Module, data, batch_size: int, dtype, autocast) -> Dict[str, float]:
    """Top-1 and top-5 error (%) on the validation set."""
    model.eval()
    correct1 = correct5 = total = 0
    for x, y in data.val_batches(batch_size, dtype):
        with autocast():
            logits = model(x)
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices
        hits = top == y[:, None]
        correct1 += hits[:, 0].sum().item()
        correct5 += hits.any(dim=1).sum().item()
        total += len(y)
    return {"top1_err": 100.0 * (1 - correct1 / total), "top5_err": 100.0 * (1 - correct5 / total)}


class Trainer:
    """Holds the model, optimizer, schedule and data of one trial and trains it epoch by epoch."""

    def __init__(self, cfg: TrialConfig):
        self.cfg = cfg
        self.cfgs = [cfg]
        self._diverged = False
        self.device = resolve_device(cfg.device)
        self.dtype = getattr(torch, cfg.dtype)
        on_cuda = self.device.type == "cuda"
        self.amp = on_cuda if cfg.amp is None else cfg.amp
        channels_last = on_cuda if cfg.channels_last is None else cfg.channels_last
        self.data = data_on_device(cfg.dataset, self.device, cfg.num_workers)
        self.num_classes = self.data.num_classes

        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)  # timm's Mixup draws from numpy's global generator
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.model = build_model(cfg.model, self.num_classes, cfg.dataset.size).to(self.device, self.dtype)
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = build_optimizer(cfg.optimizer, self.model, cfg.peak_lr, cfg.wd)
        self.steps_per_epoch = self.data.steps_per_epoch(cfg.batch_size)
        self.schedule = trial_schedule(self.optimizer, cfg, self.steps_per_epoch)
        self.ema = ModelEmaV3(self.model, decay=cfg.ema_decay, use_warmup=True) if cfg.ema_decay else None
        self.mixup = None
        if cfg.mixup or cfg.cutmix:
            self.mixup = Mixup(mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix,
                               label_smoothing=cfg.label_smoothing, num_classes=self.num_classes)
        self.step = 0
        self.channels_last = channels_last

    def autocast(self):
        """bf16 autocast when AMP is on (CUDA by default; CPU autocast also works), else a no-op."""
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def _loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits = logits.float() if logits.dtype != torch.float64 else logits
        if target.ndim == 2:
            return SoftTargetCrossEntropy()(logits, target)
        return F.cross_entropy(logits, target, label_smoothing=self.cfg.label_smoothing)

    def train_epoch(self) -> Dict[str, float]:
        """One epoch; returns mean train loss, train top-1 error and last lr, or {"diverged": True}."""
        self.model.train()
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.device, dtype=torch.int64)
        total = 0
        lr = self.optimizer.param_groups[0]["lr"]
        for x, y in self.data.train_batches(self.cfg.batch_size, self.generator, self.dtype):
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            self.schedule.step_update(self.step)
            lr = self.optimizer.param_groups[0]["lr"]
            target = y
            if self.mixup is not None:
                x, target = self.mixup(x, y)
            with self.autocast():
                logits = self.model(x)
            loss = self._loss(logits, target)
            if diverged_mask(loss.detach(), self.cfg).item():
                return {"diverged": True}
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            self.optimizer.step()
            if self.ema is not None:
                self.ema.update(self.model, step=self.step)
            self.step += 1
            loss_sum += loss.detach()
            correct += (logits.argmax(1) == y).sum()  # stays on the device: no second sync per step
            total += len(y)
        return {"diverged": False, "train_loss": loss_sum.item() / self.steps_per_epoch,
                "train_top1_err": 100.0 * (1 - correct.item() / max(1, total)), "lr": lr}

    def evaluate(self) -> Dict[str, float]:
        """Validation errors of the model (and of its EMA when on)."""
        batch = max(self.cfg.batch_size, 256)
        metrics = evaluate(self.model, self.data, batch, self.dtype, self.autocast)
        if self.ema is not None:
            metrics["ema_top1_err"] = evaluate(self.ema.module, self.data, batch, self.dtype,
                                               self.autocast)["top1_err"]
        return metrics

    def run_epoch(self) -> Dict[int, Dict[str, Any]]:
        """Train and evaluate one epoch (trainers.loop.EpochTrainer); {} once diverged."""
        train = self.train_epoch()
        if train.pop("diverged"):
            self._diverged = True
            return {}
        return {0: {**train, "ema_top1_err": None, **self.evaluate()}}

    def diverged(self, member: int = 0) -> bool:
        """Whether the trial diverged."""
        return self._diverged

    def release(self) -> None:
        """Free the model, optimizer and schedule (and cached GPU memory) so a reused actor starts clean."""
        del self.model, self.optimizer, self.schedule, self.ema
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def train_trial(config: Dict[str, Any], on_epoch: Optional[EpochCallback] = None) -> Dict[str, Any]:
    """Train one trial from a plain config dict; return its row (trainers.schema) and `epoch_log`.

    Divergence (non-finite loss or loss above `divergence_loss`) ends the trial with status
    `diverged` and chance error; it never raises. Infrastructure errors (e.g. out of memory) do
    raise, so that Ray can retry the trial.
    """
    trainer = Trainer(TrialConfig.from_dict(config))
    report = None if on_epoch is None else (lambda records: on_epoch(records[0]))
    return fit(trainer, report)[0]
