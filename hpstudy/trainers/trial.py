"""Training one trial alone: the `Trainer` of one member, run by the shared driver (hpstudy.trainers.loop)."""

import contextlib
import dataclasses
import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.data.mixup import cutmix_bbox_and_lam, mixup_target
from timm.loss import SoftTargetCrossEntropy
from timm.utils import ModelEmaV3

from hpstudy.trainers.checkpoint import freeze_leading, load_checkpoint
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data import DeviceBatches
from hpstudy.trainers.init_file import verified_sha256
from hpstudy.trainers.loop import (
    diverged_mask,
    fit,
    onednn_off_for_cpu_bf16,
    release_device_memory,
    scheduled_lrs,
    trial_schedule,
    trial_setup,
)
from hpstudy.trainers.models import build_model
from hpstudy.trainers.optim import apply_weight_decay, build_optimizer, prime_state

EpochCallback = Callable[[Dict[str, Any]], None]
# Steps between checks of the divergence flag: each check is one host sync; a diverged trial
# trains at most this many wasted steps before it stops.
DIVERGENCE_CHECK_EVERY = 16
# torch.compile's backend for `compile: inductor` (tests set aot_eager: the same graphs, no code generation)
INDUCTOR_BACKEND = "inductor"
# The config fields `Trainer.restart` sets in place; every other field shapes the trainer's tensors, modules,
# compiled graphs or data (mixing and the EMA being on too: `shape`)
RESTARTABLE = (
    "seed",
    "lr",
    "reference_batch_size",
    "wd",
    "warmup_epochs",
    "min_lr_ratio",
    "mixup",
    "cutmix",
    "ema_decay",
    "divergence_loss",
)


def shape(cfg: TrialConfig) -> Dict[str, Any]:
    """What a trainer of `cfg` is built around: its config but the RESTARTABLE values, and whether it mixes
    (mixup or CutMix) and keeps an EMA; trials of one shape can share a trainer (`Trainer.restart`)."""
    kept = {name: value for name, value in cfg.to_dict().items() if name not in RESTARTABLE}
    return dict(kept, mixing=bool(cfg.mixup or cfg.cutmix), ema=bool(cfg.ema_decay))


def compiled_step(fn: Callable, mode: str) -> Callable:
    """`fn` as the config's `compile` mode runs it: itself (off), or torch.compile'd whole (fullgraph, its
    backward traced too) with inductor, or with inductor's CUDA graphs (graph: mode reduce-overhead)."""
    if mode == "off":
        return fn
    options: Dict[str, Any] = {"mode": "reduce-overhead"} if mode == "graph" else {"backend": INDUCTOR_BACKEND}
    return torch._dynamo.config.patch(trace_autograd_ops=True)(torch.compile(fn, fullgraph=True, **options))


def mix_draws(mixup: Mixup, steps: int, image_size: int) -> Tuple[List[Tuple[float, float]], List[Tuple[int, ...]]]:
    """An epoch of timm's per-batch mixup/CutMix draws, from numpy's global generator in the order timm's
    Mixup draws them: per step the images' weight and the targets' weight, and the CutMix box (rows
    yl:yh, columns xl:xh; empty for a mixup step, whose images are blended instead)."""
    weights, boxes = [], []
    for _ in range(steps):
        lam, use_cutmix = mixup._params_per_batch()  # timm's draw (Mixup.__call__ draws the same way)
        box = (0, 0, 0, 0)
        if use_cutmix and lam != 1.0:  # timm draws no box for an unmixed batch
            box, lam = cutmix_bbox_and_lam(
                (image_size, image_size), lam, ratio_minmax=mixup.cutmix_minmax, correct_lam=mixup.correct_lam
            )
            weights.append((1.0, lam))
        else:
            weights.append((lam, lam))
        boxes.append(tuple(int(v) for v in box))
    return weights, boxes


def mixer(cfg: TrialConfig, num_classes: int) -> Optional[Mixup]:
    """timm's Mixup with the trial's mixup and CutMix alphas (its draws: mix_draws), or None when both are off."""
    if not (cfg.mixup or cfg.cutmix):
        return None
    return Mixup(
        mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, label_smoothing=cfg.label_smoothing, num_classes=num_classes
    )


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


@dataclasses.dataclass
class StepTensors:
    """What changes from step to step, kept on the device and updated in place by the step itself, so a
    captured or compiled step reads no host value."""

    step: torch.Tensor  # the step count (int64, one element)
    lr_table: torch.Tensor  # the lr of every step (float32 on CUDA, whose kernels read it so; float64 on a CPU)
    lr: torch.Tensor  # the step's lr, which fused and traced optimizers take as a tensor (index_select writes it)
    wd: torch.Tensor  # the weight decay a traced step applies (a new value compiles nothing new; build_optimizer)
    ema_weights: torch.Tensor  # the EMA's weight at every step, in the model's dtype (lerp_ takes it so); empty
    mix_weights: torch.Tensor  # an epoch's mixing draws (mix_draws): (image, target) weights per step; empty ...
    mix_boxes: torch.Tensor  # ... and CutMix boxes per step, without mixing


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
        self.model = self._seeded_model(cfg)
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
        cfg.check_compile(self.device.type)
        self.traced = cfg.compile != "off"
        self.optimizer = build_optimizer(cfg.optimizer, self.model, cfg.peak_lr, cfg.wd, traced=self.traced)
        if self.traced:
            prime_state(self.optimizer)
        self.steps_per_epoch = data.steps_per_epoch(cfg.batch_size)
        self.decayed = self.optimizer.param_groups[0]["params"]  # param_groups' first group: the decayed weights
        self.ema = ModelEmaV3(self.model, decay=cfg.ema_decay, use_warmup=True) if cfg.ema_decay else None
        self.ema_lerped, self.ema_copied = [], []
        if self.ema is not None:
            pairs = list(zip(*(m.state_dict(keep_vars=True).values() for m in (self.ema.module, self.model))))
            self.ema_lerped = [pair for pair in pairs if pair[0].is_floating_point()]
            self.ema_copied = [pair for pair in pairs if not pair[0].is_floating_point()]
        self.mixup = mixer(cfg, self.num_classes)
        self.per_step = self._step_tensors(cfg)
        self._set_schedule(cfg)
        self.params = [p for group in self.optimizer.param_groups for p in group["params"]]
        # compiled: torch.optim's step without its wrapper (grad mode, hooks, profiler label), at which Dynamo
        # breaks the graph; _apply_update runs it under no_grad
        step = type(self.optimizer).step
        self.optimizer_step = step if cfg.compile == "off" else inspect.unwrap(step)
        self._gradients = compiled_step(self._forward_backward, cfg.compile)
        self._update = compiled_step(self._apply_update, cfg.compile)
        self.step = 0

    def _step_tensors(self, cfg: TrialConfig) -> StepTensors:
        """The trial's per-step tensors on its device: the step at 0, the EMA's weights, room for the schedule
        (_set_schedule fills it) and for an epoch's mixing draws (train_epoch fills them)."""
        device, lr_dtype = self.device, torch.float64 if self.device.type == "cpu" else torch.float32
        mixed_steps = self.steps_per_epoch * (self.mixup is not None)
        return StepTensors(
            step=torch.zeros(1, dtype=torch.int64, device=device),
            lr_table=torch.empty(cfg.epochs * self.steps_per_epoch, dtype=lr_dtype, device=device),
            lr=torch.empty(1, dtype=lr_dtype, device=device),
            wd=torch.tensor([cfg.wd], dtype=lr_dtype, device=device),
            ema_weights=torch.tensor(self._ema_weights(cfg), dtype=self.dtype, device=device),
            mix_weights=torch.ones(mixed_steps, 2, dtype=torch.float64, device=device),
            mix_boxes=torch.zeros(mixed_steps, 4, dtype=torch.int64, device=device),
        )

    def _seeded_model(self, cfg: TrialConfig) -> torch.nn.Module:
        """The trial's model as its seed builds it on the CPU, after seeding torch's and numpy's global generators
        (timm's Mixup draws from numpy's) and the data order's generator, in this order."""
        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        return build_model(cfg.model, self.num_classes, cfg.dataset.size)

    def _set_schedule(self, cfg: TrialConfig) -> None:
        """The trial's lr schedule (timm's, from its peak lr), its lr at every step (lrs, lr_table) and the
        optimizer's lr: the tensor `lr`."""
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.peak_lr
        self.schedule = trial_schedule(self.optimizer, cfg, self.steps_per_epoch)
        self.lrs = scheduled_lrs(self.schedule, cfg.epochs * self.steps_per_epoch)
        lr_table = self.per_step.lr_table
        lr_table.copy_(torch.tensor(self.lrs, dtype=lr_table.dtype))
        if self.traced:  # traced AdamW divides by the lr (torch's capturable form): a warmup's first lr, 0, gave NaN
            lr_table.clamp_(min=1e-12 * cfg.peak_lr)
        self.per_step.lr.copy_(lr_table[:1])
        for group in self.optimizer.param_groups:
            group["lr"] = self.per_step.lr
            # the base lr timm's scheduler notes in the groups (it keeps its own): a compiled step guards on every
            # float of a group, and a scheduler made for the next trial would take it as its base lr
            del group["initial_lr"]

    def _ema_weights(self, cfg: TrialConfig) -> List[float]:
        """The EMA's weight at every step of `cfg` (none without an EMA): timm's ModelEmaV3.update lerps by
        1 - decay, its decay warming up."""
        if self.ema is None:
            return []
        return [1.0 - self.ema.get_decay(step) for step in range(cfg.epochs * self.steps_per_epoch)]

    def restarts_for(self, cfg: TrialConfig) -> bool:
        """Whether `restart` can train `cfg`: a trial of this trainer's `shape`, from scratch (not fine-tuned)."""
        return cfg.init is None and shape(cfg) == shape(self.cfg)

    @torch.no_grad()
    def restart(self, cfg: TrialConfig) -> None:
        """Train `cfg` (see restarts_for) next, from where `Trainer(cfg)` would start: the model's weights and
        buffers as its seed builds them, the optimizer's state, the EMA, the schedule, the step count and the
        generators set in place, so a compiled step keeps its inputs and compiles nothing new."""
        if not self.restarts_for(cfg):
            raise ValueError("a trainer restarts only for a trial of its shape, from scratch")
        self.cfg, self.cfgs, self._diverged, self.step = cfg, [cfg], False, 0
        self.batches = DeviceBatches(self.batches.data, self.device, self.dtype, self.batches.channels_last)
        self.model.load_state_dict(self._seeded_model(cfg).state_dict())
        if self.traced:  # zeros, as torch.optim starts AdamW's state and prime_state SGD's
            for state in self.optimizer.state.values():
                for value in state.values():
                    value.zero_()
        else:
            self.optimizer.state.clear()  # eager torch.optim creates it at the first step
            self.optimizer.param_groups[0]["weight_decay"] = cfg.wd
        self.per_step.wd.fill_(cfg.wd)
        self._set_schedule(cfg)
        if self.ema is not None and cfg.ema_decay:  # both or neither: the shape says whether the EMA is on
            self.ema.decay = cfg.ema_decay
            for ema_value, value in self.ema_lerped + self.ema_copied:
                ema_value.copy_(value)
            self.per_step.ema_weights.copy_(torch.tensor(self._ema_weights(cfg), dtype=self.dtype))
        self.mixup = mixer(cfg, self.num_classes)
        self.per_step.step.zero_()

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
        with onednn_off_for_cpu_bf16(self.device, self.amp):
            loss, correct = self._gradients(x, y)
        self._update()
        return loss, correct

    def _at_step(self, table: torch.Tensor) -> torch.Tensor:
        """The step's row of a per-step table, read on the device."""
        return table.index_select(0, self.per_step.step)[0]

    def _mixed(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The batch mixed as timm's Mixup mixes it (mode batch), with the step's draws read on the device:
        images blended with the batch flipped, or the CutMix box pasted from it; soft targets."""
        assert self.mixup is not None
        in_epoch = self.per_step.step.remainder(self.steps_per_epoch)
        weight, target_weight = self.per_step.mix_weights.index_select(0, in_epoch)[0]
        yl, yh, xl, xh = self.per_step.mix_boxes.index_select(0, in_epoch)[0]
        flipped = x.flip(0)
        blended = x * weight + flipped * (1.0 - weight)
        rows = torch.arange(x.shape[-2], device=x.device)
        cols = torch.arange(x.shape[-1], device=x.device)
        box = ((rows >= yl) & (rows < yh))[:, None] & ((cols >= xl) & (cols < xh))
        target = mixup_target(y, self.mixup.num_classes, target_weight, self.mixup.label_smoothing)
        return torch.where(box, flipped, blended), target

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor):
        """Forward and backward of one batch in `accum_steps` micro-batches, the gradients left on the
        parameters; returns (loss, correct predictions), both on the device."""
        x, target = (x, y) if self.mixup is None else self._mixed(x, y)
        for param in self.params:  # Optimizer.zero_grad(set_to_none=True), which Dynamo does not trace
            param.grad = None
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
        return loss, correct

    def _apply_update(self) -> None:
        """The step's update: the lr of the step, clipping, the optimizer's step, the EMA, the step count."""
        per_step = self.per_step
        with torch.no_grad():
            torch.index_select(per_step.lr_table, 0, per_step.step, out=per_step.lr)
            if self.cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            if self.traced:
                apply_weight_decay(self.cfg.optimizer, self.decayed, per_step.lr, per_step.wd)
            self.optimizer_step(self.optimizer)
            if self.ema is not None:
                weight = self._at_step(per_step.ema_weights)
                for ema_value, value in self.ema_lerped:
                    ema_value.lerp_(value, weight)
                for ema_value, value in self.ema_copied:
                    ema_value.copy_(value)
            per_step.step += 1

    def train_epoch(self) -> Dict[str, float]:
        """One epoch; returns mean train loss, train top-1 error and last lr, or {"diverged": True}.

        Everything stays on the device during the epoch; the divergence flag is read every
        DIVERGENCE_CHECK_EVERY steps, and with the epoch's sums at the end (one host sync each).
        """
        self.model.train()
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        correct = torch.zeros((), device=self.device, dtype=torch.int64)
        bad = torch.zeros((), device=self.device, dtype=torch.bool)
        total, lr = 0, self.lrs[self.step]
        self.per_step.step.fill_(self.step)  # steps run outside an epoch (a benchmark's) leave the schedule as it was
        if self.mixup is not None:
            weights, boxes = mix_draws(self.mixup, self.steps_per_epoch, self.cfg.dataset.size)
            self.per_step.mix_weights.copy_(torch.tensor(weights, dtype=torch.float64))
            self.per_step.mix_boxes.copy_(torch.tensor(boxes, dtype=torch.int64))
        for i, (x, y) in enumerate(self.batches.train(self.cfg.batch_size, self.generator)):
            lr = self.lrs[self.step]
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
        del self.model, self.optimizer, self.schedule, self.ema, self.mixup, self.batches, self.per_step
        del self.params, self.decayed, self.ema_lerped, self.ema_copied, self._gradients, self._update
        release_device_memory(self.device)


def train_trial(config: Dict[str, Any], on_epoch: Optional[EpochCallback] = None) -> Dict[str, Any]:
    """Train one trial from a plain config dict; return its row (hpstudy.trainers.schema) and `epoch_log`.

    Divergence (non-finite loss or loss above `divergence_loss`) ends the trial with status
    `diverged` and chance error; it never raises. Infrastructure errors (e.g. out of memory) do
    raise, so that Ray can retry the trial.
    """
    return run_trial(Trainer(TrialConfig.from_dict(config)), on_epoch)


def run_trial(trainer: Trainer, on_epoch: Optional[EpochCallback] = None) -> Dict[str, Any]:
    """`fit` the one trial of `trainer`; return its row (see train_trial)."""
    report = None if on_epoch is None else (lambda records: on_epoch(records[0]))
    return fit(trainer, report)[0]
