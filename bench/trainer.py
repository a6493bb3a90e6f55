"""hpstudy's trial loop against a plain hand-written PyTorch loop: same model, data tensors, batch,
steps and optimizer, in one process, runs interleaved; prints the median time ratio as JSON.

    python -m bench.trainer [--model vit_c_tiny] [--batch-size 128] [--reps 7]
"""

import argparse
import json
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from trainers.config import TrialConfig
from trainers.models import build_model
from trainers.optim import build_optimizer
from trainers.trial import Trainer


def plain_epoch(model, optimizer, data, batch_size: int, generator: torch.Generator) -> float:
    """The loop a researcher would write by hand over the same uint8 tensors."""
    model.train()
    n = data.num_train
    order = torch.randperm(n, generator=generator)
    mean = torch.tensor(data.mean).view(1, -1, 1, 1)
    std = torch.tensor(data.std).view(1, -1, 1, 1)
    total = torch.zeros(())
    for step in range(n // batch_size):
        idx = order[step * batch_size:(step + 1) * batch_size]
        x = (data.train_x[idx].float() / 255.0 - mean) / std
        loss = F.cross_entropy(model(x), data.train_y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return total.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vit_c_tiny")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--n-train", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    dataset = {"name": "synthetic", "image_size": 32, "n_train": args.n_train, "n_val": 256}
    cfg = TrialConfig.from_dict(dict(model=args.model, optimizer="adamw", epochs=1000, lr=1e-3, wd=0.05,
                                     batch_size=args.batch_size, dataset=dataset, device="cpu"))
    trainer = Trainer(cfg)
    torch.manual_seed(0)
    model = build_model(args.model, trainer.num_classes, 32)
    optimizer = build_optimizer("adamw", model, 1e-3, 0.05)
    generator = torch.Generator().manual_seed(0)
    trainer.train_epoch(), plain_epoch(model, optimizer, trainer.batches.data, args.batch_size, generator)  # warm up
    ours, plain = [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        trainer.train_epoch()
        t1 = time.perf_counter()
        plain_epoch(model, optimizer, trainer.batches.data, args.batch_size, generator)
        t2 = time.perf_counter()
        ours.append(t1 - t0)
        plain.append(t2 - t1)
    ratios = [a / b for a, b in zip(ours, plain)]
    steps = args.n_train // args.batch_size
    print(json.dumps({
        "bench": "trainer", "model": args.model, "batch_size": args.batch_size, "steps_per_epoch": steps,
        "reps": args.reps, "hpstudy_epoch_s_median": round(statistics.median(ours), 4),
        "plain_epoch_s_median": round(statistics.median(plain), 4),
        "ratio_median": round(statistics.median(ratios), 4), "ratios": [round(r, 4) for r in ratios],
        "target_ratio": 1.05, "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, cpu"}))


if __name__ == "__main__":
    main()
