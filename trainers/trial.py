"""Training one trial alone: the `Trainer` of one member, run by the shared driver (hpstudy.trainers.loop)."""

import contextlib
import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.utils import ModelEmaV3

from hpstudy.trainers.checkpoint import freeze_leading, load_checkpoint
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data import DeviceBatches
from hpstudy.trainers.init_file import verified_sha256
from hpstudy.trainers.loop import diverged_mask, fit, release_device_memory, trial_schedule, trial_setup
from hpstudy.trainers.models import build_model
from hpstudy.trainers.optim import build_optimizer

EpochCallback = Callable[[Dict[str, Any]], None]
# Steps between checks of the divergence flag: each check is one host sync; a diverged trial
# trains at most this many wasted steps before it stops.
DIVERGENCE_CHECK_EVERY = 16


@torch.no_grad()
def evaluate(models: Dict[str, torch.nn.Module], batches, autocast) -> Dict[str, Dict[str, float]]:
    """Top-1 and top-5 error (%) of each model on the validation batches, in one pass over them."""
    counts: Dict[str, Tuple[torch.Tensor, torch.Tensor]] = {}
    for model in models.values():
        model.eval()
    total = 0
    for x, y in batches:
        for name, model in models.items():
            with autocast():
                logits = model(x)
            hits = logits.topk(min(5, logits.shape[1]), dim=1).indices == y[:, None]
            top1, top5 = counts.get(name, (0, 0))
            counts[name] = (top1 + hits[:, 0].sum(), top5 + hits.any(dim=1).sum())  # on the device
        total += len(y)
    return {
        name: {"top1_err": 100.0 * (1 - float(top1) / total), "top5_err": 100.0 * (1 - float(top5) / total)}
        for name, (top1, top5) in counts.items()
    }


class Trainer:
    """Holds the model, optimizer, schedule and data of one trial and trains it epoch by epoch."""

    def __init__(self, cfg: TrialConfig):
        if cfg.init is not None:  # the row's config then names the checkpoint's bytes
            cfg = dataclasses.replace(cfg, init_sha256=verified_sha256(cfg.init, cfg.init_sha256))
        self.cfg = cfg
        self.cfgs = [cfg]
        self._diverged = False
        setup = trial_setup(cfg)
        self.device, self.dtype, self.amp, data = setup.device, setup.dtype, setup.amp, setup.data
        channels_last = self.device.type == "cuda" if cfg.channels_last is None else cfg.channels_last
        self.batches = DeviceBatches(data, self.device, self.dtype, channels_last)
        self.num_classes = data.num_classes

        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)  # timm's Mixup draws from numpy's global generator
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.model = build_model(cfg.model, self.num_classes, cfg.dataset.size)
        # None: from scratch; True/False: fine-tuned, with the head re-initialised or loaded
        self.head_reinit = None if cfg.init is None else load_checkpoint(self.model, cfg.init, cfg.model)
        if cfg.freeze:
            freeze_leading(self.model, cfg.freeze)
        self.model = self.model.to(self.device, self.dtype)
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        if cfg.grad_checkpointing:
            # timm's method, typed Tensor | Module by torch's Module.__getattr__
            self.model.set_grad_checkpointing(True)  # type: ignore[operator]
        self.optimizer = build_optimizer(cfg.optimizer, self.model, cfg.peak_lr, cfg.wd)
        self.steps_per_epoch = data.steps_per_epoch(cfg.batch_size)
        self.schedule = trial_schedule(self.optimizer, cfg, self.steps_per_epoch)
        self.ema = ModelEmaV3(self.model, decay=cfg.ema_decay, use_warmup=True) if cfg.ema_decay else None
        self.mixup = None
        if cfg.mixup or cfg.cutmix:
            self.mixup = Mixup(
                mixup_alpha=cfg.mixup,
                cutmix_alpha=cfg.cutmix,
                label_smoothing=cfg.label_smoothing,
                num_classes=self.num_classes,
            )
        self.step = 0

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

    def _train_step(self, x: torch.Tensor, y: torch.Tensor):
        """Forward and backward of one batch in `accum_steps` micro-batches, then one optimizer
        step; returns (loss, correct predictions), both on the device."""
        target = y
        if self.mixup is not None:
            x, target = self.mixup(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        accum = self.cfg.accum_steps
        loss = torch.zeros((), device=self.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.device, dtype=torch.int64)
        for xm, tm, ym in zip(x.chunk(accum), target.chunk(accum), y.chunk(accum)):
            with self.autocast():
                logits = self.model(xm)
            micro = self._loss(logits, tm) / accum
            micro.backward()
            loss += micro.detach()
            correct += (logits.argmax(1) == ym).sum()
        if self.cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(self.model, step=self.step)
        return loss, correct

    def train_epoch(self) -> Dict[str, float]:
        """One epoch; returns mean train loss, train top-1 error and last lr, or {"diverged": True}.

        Everything stays on the device during the epoch; the divergence flag is read every
        DIVERGENCE_CHECK_EVERY steps, and with the epoch's sums at the end (one host sync each).
        """
        self.model.train()
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.device, dtype=torch.int64)
        bad = torch.zeros((), device=self.device, dtype=torch.bool)
        total, lr = 0, self.optimizer.param_groups[0]["lr"]
        for i, (x, y) in enumerate(self.batches.train(self.cfg.batch_size, self.generator)):
            self.schedule.step_update(self.step)
            lr = self.optimizer.param_groups[0]["lr"]
            loss, hits = self._train_step(x, y)
            bad |= diverged_mask(loss, self.cfg)
            if (i + 1) % DIVERGENCE_CHECK_EVERY == 0 and bad.item():
                return {"diverged": True}
            self.step += 1
            loss_sum += loss
            correct += hits
            total += len(y)
        # the flag and the epoch's sums in one host read (counts are exact in float64 below 2^53)
        flag, loss_total, hits_total = torch.stack([bad.double(), loss_sum, correct.double()]).tolist()
        if flag:
            return {"diverged": True}
        return {
            "diverged": False,
            "train_loss": loss_total / self.steps_per_epoch,
            "train_top1_err": 100.0 * (1 - hits_total / max(1, total)),
            "lr": lr,
        }

    def evaluate(self) -> Dict[str, float]:
        """Validation errors of the model (and of its EMA when on), in one pass over the data."""
        models = {"model": self.model, **({"ema": self.ema.module} if self.ema is not None else {})}
        errors = evaluate(models, self.batches.val(max(self.cfg.batch_size, 256)), self.autocast)
        metrics = errors["model"]
        if self.ema is not None:
            metrics["ema_top1_err"] = errors["ema"]["top1_err"]
        return metrics

    def run_epoch(self) -> Dict[int, Dict[str, Any]]:
        """Train and evaluate one epoch (hpstudy.trainers.loop.EpochTrainer); {} once diverged."""
        train = self.train_epoch()
        if train.pop("diverged"):
            self._diverged = True
            return {}
        return {0: {**train, "ema_top1_err": None, **self.evaluate()}}

    def diverged(self, member: int = 0) -> bool:
        """Whether the trial diverged."""
        return self._diverged

    def release(self) -> None:
        """Free model, optimizer, schedule, EMA and loaders (and cached GPU memory) so a reused
        actor starts the next trial clean."""
        del self.model, self.optimizer, self.schedule, self.ema, self.mixup, self.batches
        release_device_memory(self.device)


def train_trial(config: Dict[str, Any], on_epoch: Optional[EpochCallback] = None) -> Dict[str, Any]:
    """Train one trial from a plain config dict; return its row (hpstudy.trainers.schema) and `epoch_log`.

    Divergence (non-finite loss or loss above `divergence_loss`) ends the trial with status
    `diverged` and chance error; it never raises. Infrastructure errors (e.g. out of memory) do
    raise, so that Ray can retry the trial.
    """
    trainer = Trainer(TrialConfig.from_dict(config))
    report = None if on_epoch is None else (lambda records: on_epoch(records[0]))
    return fit(trainer, report)[0]
