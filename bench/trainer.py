"""hpstudy's trial loop against a plain hand-written PyTorch loop: same model, data tensors, batch,
steps, optimizer and precision, in one process, runs interleaved (alternating which goes first);
prints the median time ratio, images/s and (on CUDA) the model FLOPs utilisation as JSON.

    python -m bench.trainer [--model vit_c_tiny] [--batch-size 128] [--reps 7]
    python -m bench.trainer --device cuda --model vit_c_1gf --image-size 224   # on a GPU

With --warm it times a trial's setup instead: a new Trainer against a warm one restarted for another seed, lr and
wd (hpstudy.trainers.warm), each with its first training step (where a compiled step compiles).

    python -m bench.trainer --warm --model vit_c_1gf --image-size 224 --batch-size 32 --reps 3
"""

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.flops import model_profile
from hpstudy.trainers.models import build_model
from hpstudy.trainers.optim import build_optimizer
from hpstudy.trainers.trial import Trainer

# Dense bf16 peak of an H100/H200 SXM (the vendor's datasheet): the MFU denominator on CUDA
# unless --peak-tflops names another.
H100_BF16_PEAK_TFLOPS = 989.0


def plain_epoch(
    model, optimizer, data, batch_size: int, generator: torch.Generator, amp: bool, channels_last: bool
) -> float:
    """The loop a researcher would write by hand over the same uint8 tensors, on their device."""
    model.train()
    device = data.train_x.device
    order = torch.randperm(data.num_train, generator=generator).to(device)
    mean = torch.tensor(data.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(data.std, device=device).view(1, -1, 1, 1)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    total = torch.zeros((), device=device)
    for step in range(data.num_train // batch_size):
        idx = order[step * batch_size : (step + 1) * batch_size]
        x = ((data.train_x[idx].float() / 255.0 - mean) / std).contiguous(memory_format=memory_format)
        with torch.autocast(device.type, dtype=torch.bfloat16) if amp else contextlib.nullcontext():
            logits = model(x)
        loss = F.cross_entropy(logits.float(), data.train_y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return total.item()


def compare(
    model_name: str, batch_size: int, image_size: int, n_train: int, reps: int, device: str, peak_tflops: float = None
) -> dict:
    """Epoch times of hpstudy's Trainer and the plain loop, interleaved `reps` times after a warm-up."""
    dataset = {"name": "synthetic", "image_size": image_size, "n_train": n_train, "n_val": 256}
    cfg = TrialConfig.from_dict(
        dict(
            model=model_name,
            optimizer="adamw",
            epochs=1000,
            lr=1e-3,
            wd=0.05,
            batch_size=batch_size,
            dataset=dataset,
            device=device,
        )
    )
    trainer = Trainer(cfg)
    channels_last = trainer.batches.channels_last
    torch.manual_seed(0)
    model = build_model(model_name, trainer.num_classes, image_size).to(trainer.device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer("adamw", model, 1e-3, 0.05)
    generator = torch.Generator().manual_seed(0)
    data = trainer.batches.data

    def timed(epoch) -> float:
        start = time.perf_counter()
        epoch()
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        return time.perf_counter() - start

    def plain():
        return plain_epoch(model, optimizer, data, batch_size, generator, trainer.amp, channels_last)

    timed(trainer.train_epoch), timed(plain)  # warm up: allocations, kernel selection
    ours, theirs = [], []
    for rep in range(reps):  # alternate which goes first, so neither always follows the other
        if rep % 2:
            theirs.append(timed(plain))
        ours.append(timed(trainer.train_epoch))
        if not rep % 2:
            theirs.append(timed(plain))
    ratios = [a / b for a, b in zip(ours, theirs)]
    steps = n_train // batch_size
    images = steps * batch_size
    macs, _ = model_profile(model_name, trainer.num_classes, image_size)
    result = {
        "bench": "trainer",
        "model": model_name,
        "image_size": image_size,
        "batch_size": batch_size,
        "steps_per_epoch": steps,
        "reps": reps,
        "device": trainer.device.type,
        "amp_bf16": trainer.amp,
        "channels_last": channels_last,
        "hpstudy_epoch_s_median": round(statistics.median(ours), 4),
        "plain_epoch_s_median": round(statistics.median(theirs), 4),
        "ratio_median": round(statistics.median(ratios), 4),
        "ratios": [round(r, 4) for r in ratios],
        "hpstudy_images_per_s": round(images / statistics.median(ours), 1),
        "plain_images_per_s": round(images / statistics.median(theirs), 1),
        "train_flops_per_image": 6 * macs,
        "target_ratio": 1.05,
    }
    peak = peak_tflops or (H100_BF16_PEAK_TFLOPS if trainer.device.type == "cuda" else None)
    if peak:  # training = 3 forward passes' worth, 2 FLOPs per multiply-add
        for name in ("hpstudy", "plain"):
            result[f"{name}_mfu"] = round(result[f"{name}_images_per_s"] * 6 * macs / (peak * 1e12), 4)
        result["mfu_peak_tflops"] = peak
    return result


def setup_times(model_name: str, batch_size: int, image_size: int, reps: int, device: str, compile_mode: str) -> dict:
    """Median seconds to a trial's first step done: a new Trainer's setup, or a warm one's restart, then the step."""
    dataset = {"name": "synthetic", "image_size": image_size, "n_train": batch_size, "n_val": batch_size}
    base = dict(model=model_name, optimizer="adamw", epochs=100, lr=1e-3, wd=0.05, batch_size=batch_size)
    cfg = TrialConfig.from_dict(dict(base, dataset=dataset, device=device, compile=compile_mode))
    trainer = Trainer(cfg)  # warm up: the dataset's load, kernel selection

    def timed(start) -> dict:
        setup = time.perf_counter()
        trainer.train_epoch()  # one step: the epoch is one batch
        if trainer.device.type == "cuda":
            torch.cuda.synchronize(trainer.device)
        return {"setup_s": setup - start, "first_step_s": time.perf_counter() - setup}

    timed(time.perf_counter())
    fresh, warm = [], []
    for rep in range(1, reps + 1):
        trainer.release()
        start = time.perf_counter()
        trainer = Trainer(dataclasses.replace(cfg, seed=rep))
        fresh.append(timed(start))
        start = time.perf_counter()
        trainer.restart(dataclasses.replace(cfg, seed=rep + reps, lr=2e-3, wd=0.1))
        warm.append(timed(start))
    medians = lambda runs, key: round(statistics.median(run[key] for run in runs), 4)
    return {
        "bench": "trainer_setup",
        "model": model_name,
        "image_size": image_size,
        "batch_size": batch_size,
        "compile": compile_mode,
        "reps": reps,
        "device": trainer.device.type,
        **{
            f"{name}_{key}_median": medians(runs, key)
            for name, runs in (("fresh", fresh), ("warm", warm))
            for key in ("setup_s", "first_step_s")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_c_tiny")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--n-train", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help=f"peak TFLOP/s for the MFU (default on CUDA: {H100_BF16_PEAK_TFLOPS:g}, an H100/H200's dense bf16)",
    )
    parser.add_argument("--warm", action="store_true", help="time a trial's setup, new and warm (see above)")
    parser.add_argument("--compile", default="off", help="the trials' compile mode (--warm only)")
    args = parser.parse_args()
    if args.warm:
        result = setup_times(args.model, args.batch_size, args.image_size, args.reps, args.device, args.compile)
    else:
        result = compare(
            args.model, args.batch_size, args.image_size, args.n_train, args.reps, args.device, args.peak_tflops
        )
    name = torch.cuda.get_device_name() if result["device"] == "cuda" else "cpu"
    print(
        json.dumps(
            {
                **result,
                "threads": torch.get_num_threads(),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {name}",
            }
        )
    )


if __name__ == "__main__":
    main()
