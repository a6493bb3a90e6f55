"""The one-trial training loop: train, evaluate each epoch, stop on divergence, return a trial row."""

import contextlib
import gc
import math
import time
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.utils import ModelEmaV3

from trainers.config import TrialConfig
from trainers.data import DataSpec, load_data
from trainers.flops import model_profile
from trainers.models import build_model, get_spec
from trainers.optim import build_optimizer, build_schedule, scaled_lr
from trainers.provenance import run_info

EpochCallback = Callable[[Dict[str, Any]], None]


def chance_error(num_classes: int, k: int = 1) -> float:
    """Top-k error (%) of uniform guessing over num_classes."""
    return 100.0 * (1.0 - min(k, num_classes) / num_classes)


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@lru_cache(maxsize=2)
def data_on_device(spec: DataSpec, device: torch.device, num_workers: int):
    """The dataset on `device`, cached per worker process so reused Ray actors load it once."""
    return load_data(spec, num_workers).to(device)


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
        lr = scaled_lr(cfg.lr, cfg.batch_size, cfg.reference_batch_size or cfg.batch_size)
        self.optimizer = build_optimizer(cfg.optimizer, self.model, lr, cfg.wd)
        self.steps_per_epoch = self.data.steps_per_epoch(cfg.batch_size)
        self.schedule = build_schedule(self.optimizer, cfg.epochs * self.steps_per_epoch,
                                       round(cfg.warmup_epochs * self.steps_per_epoch), cfg.min_lr_ratio)
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
        """One epoch; returns mean train loss, train top-1 error, last lr, or marks divergence."""
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
            loss_value = loss.item()
            if not math.isfinite(loss_value) or loss_value > self.cfg.divergence_loss:
                return {"diverged": True, "train_loss": loss_value, "lr": lr}
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

    def release(self) -> None:
        """Free the model and optimizer (and cached GPU memory) so a reused actor starts clean."""
        del self.model, self.optimizer, self.ema
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def train_trial(config: Dict[str, Any], on_epoch: Optional[EpochCallback] = None) -> Dict[str, Any]:
    """Train one trial from a plain config dict; return its row (DESIGN.md fields) and epoch log.

    Divergence (non-finite loss or loss above `divergence_loss`) ends the trial with status
    `diverged` and chance error; it never raises. Infrastructure errors (e.g. out of memory) do
    raise, so that Ray can retry the trial.
    """
    cfg = TrialConfig.from_dict(config)
    started = time.time()
    trainer = Trainer(cfg)
    epochs: List[Dict[str, Any]] = []
    status, best = "ok", math.inf
    metrics: Dict[str, float] = {}
    train: Dict[str, float] = {}
    try:
        for epoch in range(1, cfg.epochs + 1):
            t0 = time.time()
            train = trainer.train_epoch()
            if train["diverged"]:
                status = "diverged"
                break
            metrics = trainer.evaluate()
            best = min(best, metrics["top1_err"])
            if trainer.device.type == "cuda":
                torch.cuda.synchronize(trainer.device)
            record = {"epoch": epoch, "train_loss": train["train_loss"],
                      "train_top1_err": train["train_top1_err"], "lr": train["lr"],
                      "top1_err": metrics["top1_err"], "top5_err": metrics["top5_err"],
                      "ema_top1_err": metrics.get("ema_top1_err"), "seconds": time.time() - t0}
            epochs.append(record)
            if on_epoch is not None:
                on_epoch(record)
    finally:
        trainer.release()

    if status == "diverged":
        chance = chance_error(trainer.num_classes)
        metrics = {"top1_err": chance, "top5_err": chance_error(trainer.num_classes, 5),
                   "ema_top1_err": chance if cfg.ema_decay else None}
        best = chance
    return trial_row(cfg, status, metrics, best, train.get("train_loss"), epochs,
                     time.time() - started, trainer)


def trial_row(cfg: TrialConfig, status: str, metrics: Dict[str, float], best: float,
              train_loss: Optional[float], epoch_log: List[Dict[str, Any]], wall_s: float,
              trainer) -> Dict[str, Any]:
    """The trial row of DESIGN.md (plus `epoch_log`) from a finished trial's numbers."""
    flops, params = model_profile(cfg.model, trainer.num_classes, cfg.dataset.size)
    return {
        "model": cfg.model, "family": get_spec(cfg.model).family, "flops": flops, "params": params,
        "optimizer": cfg.optimizer, "epochs": cfg.epochs, "lr": cfg.lr, "wd": cfg.wd,
        "seed": cfg.seed, "dataset": cfg.dataset.name, "batch_size": cfg.batch_size,
        "status": status, "top1_err": metrics["top1_err"], "top5_err": metrics["top5_err"],
        "best_top1_err": best, "ema_top1_err": metrics.get("ema_top1_err"),
        "train_loss": train_loss, "epochs_done": len(epoch_log), "wall_s": wall_s,
        **run_info(trainer.device),
        "config_json": cfg.to_json(),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "epoch_log": epoch_log,
    }
