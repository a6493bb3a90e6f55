"""K members trained fused against the same K trained one after another, per model, batch and K.

    python -m bench.fused [--models vit_p_tiny,vit_c_tiny,cnn_tiny] [--ks 1,4,8,16,64]
                          [--batches 1,8,128] [--image-size 32] [--device auto] [--steps 3]
                          [--compile off|inductor]

Prints one JSON object: per (model, batch, K) the step time alone and fused, samples/s per member
both ways, and the speedup K t_alone / t_fused (>1: fusion wins); with `--compile inductor` both
train compiled (the step compiled in the warm-up epoch, not timed). On a GPU run it also with
`--models vit_c_1gf,vit_p_1gf --image-size 224`.
"""

import argparse
import json
import os
import platform
import sys

import torch

from hpstudy.trainers.fused import measure_fusion
from hpstudy.trainers.loop import resolve_device


def sweep(
    models,
    ks,
    batches,
    image_size: int,
    optimizer: str = "adamw",
    device: str = "auto",
    steps: int = 3,
    max_samples: int = 4096,
    compile: str = "off",
) -> list:
    """measure_fusion for every (model, batch, K) with K x batch <= max_samples; a pair that cannot
    train (e.g. BatchNorm at batch 1) is kept with its error."""
    results = []
    for model in models:
        for batch in batches:
            alone = None  # timed once per (model, batch): every K's speedup shares it
            for k in ks:
                if k * batch > max_samples:
                    continue
                entry = {"model": model, "batch": batch, "k": k}
                try:
                    r = measure_fusion(
                        model, optimizer, batch, image_size, k, steps, device, alone_step_s=alone, compile=compile
                    )
                    alone = r["alone_step_s"]
                    entry.update({name: round(value, 5) for name, value in r.items()})
                except (ValueError, RuntimeError) as exc:
                    entry["error"] = str(exc).splitlines()[0]
                results.append(entry)
                print(json.dumps(entry), file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vit_p_tiny,vit_c_tiny,cnn_tiny")
    parser.add_argument("--ks", default="1,4,8,16,64")
    parser.add_argument("--batches", default="1,8,128")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--optimizer", default="adamw")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--max-samples", type=int, default=4096, help="skip (K x batch) above this, to bound the run time on CPUs"
    )
    parser.add_argument("--compile", default="off", choices=("off", "inductor"), help="the trials' compile mode")
    args = parser.parse_args()
    results = sweep(
        args.models.split(","),
        [int(k) for k in args.ks.split(",")],
        [int(b) for b in args.batches.split(",")],
        args.image_size,
        args.optimizer,
        args.device,
        args.steps,
        args.max_samples,
        args.compile,
    )
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        json.dumps(
            {
                "bench": "fused",
                "device": name,
                "image_size": args.image_size,
                "optimizer": args.optimizer,
                "compile": args.compile,
                "threads": torch.get_num_threads(),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
