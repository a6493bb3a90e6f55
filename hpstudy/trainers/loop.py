"""The one training driver: the epoch loop, epoch records and trial rows shared by the solo trainer
(`hpstudy.trainers.trial.Trainer`) and the fused one (`hpstudy.trainers.fused.FusedTrainer`).

A trainer trains K >= 1 members (K = 1 alone) and implements `EpochTrainer`; `fit` runs its epochs,
builds each member's epoch records and, at the end, one trial row per member: `ok` with the last
epoch's errors, or `diverged` at chance error. In the spirit of pycls's train_epoch/test_epoch.
"""

import contextlib
import gc
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence

import torch

from hpstudy.trainers import schema
from hpstudy.trainers.config import TrialConfig, device_can_augment
from hpstudy.trainers.data import load_data
from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.flops import model_profile
from hpstudy.trainers.optim import build_schedule
from hpstudy.trainers.provenance import run_info

MemberRecords = Dict[int, Dict[str, Any]]  # member index -> epoch record


class EpochTrainer(Protocol):
    """What `fit` needs of a trainer of K members (K = len(cfgs))."""

    @property
    def cfgs(self) -> Sequence[TrialConfig]:
        """The members' configs, member k's at k (read only: a list or any other sequence)."""

    device: torch.device
    num_classes: int

    def run_epoch(self) -> Dict[int, Dict[str, Any]]:
        """Train and evaluate one epoch; metrics (EPOCH_COLUMNS but epoch/seconds) of live members."""

    def diverged(self, member: int) -> bool:
        """Whether the member diverged (and stopped training)."""

    def release(self) -> None:
        """Free models and optimizer state."""


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def configure_device(device: torch.device) -> None:
    """On CUDA: let cuDNN pick the fastest kernels for fixed shapes and use TF32 for float32
    matmuls and convolutions (Ampere and later); nothing on other devices."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


@dataclass(frozen=True)
class TrialSetup:
    """Where and how a trial computes, with the config's defaults resolved for its device."""

    device: torch.device
    dtype: torch.dtype
    amp: bool  # bf16 autocast
    data: Any  # the dataset on the device (data_for)


def trial_setup(cfg: TrialConfig) -> TrialSetup:
    """The trial's device, configured (configure_device), its dtype, AMP (as set, else on for CUDA
    only) and its data: what the solo and the fused trainer set up alike."""
    device = resolve_device(cfg.device)
    configure_device(device)
    amp = device.type == "cuda" if cfg.amp is None else cfg.amp
    return TrialSetup(device, getattr(torch, cfg.dtype), amp, data_for(cfg, device))


@contextlib.contextmanager
def onednn_off_for_cpu_bf16(device: torch.device, amp: bool) -> Iterator[None]:
    """A training step's context: oneDNN off (torch's own kernels) for a bf16 (autocast) trial on a CPU, else
    nothing. oneDNN's bf16 convolution backward_weights on AMX CPUs (brgconv_bwd_w; seen with oneDNN 3.5 in torch
    2.5.1 and 3.12 in torch 2.14.1) leaves the weight gradient unwritten at kernel taps that see only padding (a
    3x3 stride-2 conv on a 1x1 map), so they hold what the allocator last freed there (NaN from an earlier
    diverged trial in the same process) where the gradient is 0. Only the enabled flag changes
    (torch.backends.mkldnn.flags would also set TF32 and warn)."""
    if device.type != "cpu" or not amp:
        yield
        return
    enabled = torch._C._get_mkldnn_enabled()  # what torch.backends.mkldnn.enabled reads and sets
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def release_device_memory(device: torch.device) -> None:
    """After a trial on CUDA: collect reference cycles that may hold device tensors and return the
    cached blocks, so a reused worker starts the next trial with the GPU's memory free. Nothing on
    a CPU: there Python's own collector frees cycles, and a full collection with torch and timm
    loaded costs about 0.4 s, most of a short trial."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def decodes_on_device(cfg: TrialConfig, device: torch.device) -> bool:
    """Whether an image folder is decoded on `device`: `decode: device`, or `auto` on a CUDA device
    when the device pipeline can run the AutoAugment policy (else the workers run timm's)."""
    if cfg.decode == "auto":
        return device.type == "cuda" and device_can_augment(cfg.auto_augment)
    return cfg.decode == "device"


def data_for(cfg: TrialConfig, device: torch.device):
    """The trial's dataset on `device` (see decodes_on_device for image folders)."""
    return data_on_device(cfg.dataset, device, cfg.num_workers, cfg.auto_augment, decodes_on_device(cfg, device))


@lru_cache(maxsize=2)
def data_on_device(
    spec: DataSpec, device: torch.device, num_workers: int, auto_augment: Optional[str], decode_on_device: bool
):
    """The dataset on `device`, cached per worker process so reused Ray actors load it once."""
    return load_data(spec, num_workers, auto_augment, decode_on_device).to(device)


def chance_error(num_classes: int, k: int = 1) -> float:
    """Top-k error (%) of uniform guessing over num_classes."""
    return 100.0 * (1.0 - min(k, num_classes) / num_classes)


def diverged_mask(losses: torch.Tensor, cfg: TrialConfig) -> torch.Tensor:
    """True where a loss is non-finite or above the config's `divergence_loss`."""
    return ~torch.isfinite(losses) | (losses > cfg.divergence_loss)


def trial_schedule(optimizer: torch.optim.Optimizer, cfg: TrialConfig, steps_per_epoch: int):
    """The trial's per-step warmup + cosine schedule on `optimizer` (whose lr is cfg.peak_lr)."""
    return build_schedule(
        optimizer, cfg.epochs * steps_per_epoch, round(cfg.warmup_epochs * steps_per_epoch), cfg.min_lr_ratio
    )


def scheduled_lrs(schedule, steps: int) -> List[float]:
    """The lr `schedule` (trial_schedule's) sets before each of the first `steps` steps, in order (it
    sets every parameter group's lr alike: group 0's)."""
    lrs = []
    for step in range(steps):
        schedule.step_update(step)
        lrs.append(schedule.optimizer.param_groups[0]["lr"])
    return lrs


def fit(trainer: EpochTrainer, on_epoch: Optional[Callable[[MemberRecords], None]] = None) -> List[Dict]:
    """Run every epoch of `trainer`; return one trial row per member (with its `epoch_log`).

    on_epoch({member: record}) is called after each epoch with the records of the live members.
    The trainer is released at the end, also when an error (e.g. out of memory) escapes.
    """
    started = time.time()
    logs: List[List[Dict[str, Any]]] = [[] for _ in trainer.cfgs]
    try:
        for epoch in range(1, trainer.cfgs[0].epochs + 1):
            t0 = time.time()
            metrics = trainer.run_epoch()
            if not metrics:
                break
            if trainer.device.type == "cuda":
                torch.cuda.synchronize(trainer.device)
            records = {k: schema.epoch_record(epoch=epoch, seconds=time.time() - t0, **m) for k, m in metrics.items()}
            for k, record in records.items():
                logs[k].append(record)
            if on_epoch is not None:
                on_epoch(records)
    finally:
        trainer.release()
    wall_s = time.time() - started
    return [trial_row(cfg, logs[k], trainer.diverged(k), trainer, wall_s) for k, cfg in enumerate(trainer.cfgs)]


def trial_row(
    cfg: TrialConfig, epoch_log: List[Dict[str, Any]], diverged: bool, trainer: EpochTrainer, wall_s: float
) -> Dict[str, Any]:
    """The trial row (hpstudy.trainers.schema, all but the study's columns) plus `epoch_log`."""
    last = epoch_log[-1] if epoch_log else {}
    if diverged:
        chance = chance_error(trainer.num_classes)
        ema = chance if cfg.ema_decay else None
        errors = {
            "top1_err": chance,
            "top5_err": chance_error(trainer.num_classes, 5),
            "best_top1_err": chance,
            "ema_top1_err": ema,
            "best_ema_top1_err": ema,
        }
    else:
        ema_errors = [e["ema_top1_err"] for e in epoch_log if e["ema_top1_err"] is not None]
        errors = {
            "top1_err": last["top1_err"],
            "top5_err": last["top5_err"],
            "best_top1_err": min(e["top1_err"] for e in epoch_log),
            "ema_top1_err": last["ema_top1_err"],
            "best_ema_top1_err": min(ema_errors) if ema_errors else None,
        }
    flops, params = model_profile(cfg.model, trainer.num_classes, cfg.dataset.size)
    row = schema.trainer_row(
        **cfg.row_fields(),
        **errors,
        **run_info(trainer.device),
        flops=flops,
        params=params,
        status=schema.DIVERGED if diverged else schema.OK,
        train_loss=last.get("train_loss"),
        epochs_done=len(epoch_log),
        wall_s=wall_s,
        head_reinit=getattr(trainer, "head_reinit", None),  # fused trainers never fine-tune
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    return dict(row, epoch_log=epoch_log)
