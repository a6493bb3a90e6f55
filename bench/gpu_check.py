"""GPU-ready checks, run on a CUDA machine in one go; prints one JSON object.

    bash bench/gpu_check.sh            # python -m bench.gpu_check, with a time limit per check

Each check records its numbers or its error and the next one runs. With `--device cpu` the
CUDA-only checks are skipped (a smoke test of the script itself: `--images 32 --batch 16` is the
smallest useful run).
"""

import argparse
import gc
import json
import os
import platform
import tempfile
import time
import traceback
import warnings

import torch

from bench.data import make_folder
from trainers.config import TrialConfig
from trainers.data import DeviceBatches, load_data
from trainers.fused import train_fused
from trainers.loop import fit
from trainers.memory import OVERHEAD_GB, peak_memory_gb
from trainers.prepared import prepare
from trainers.trial import Trainer, train_trial


def check(results: dict, name: str):
    """Decorator: run the check, store its dict (or its error) under `name`."""
    def wrap(fn):
        start = time.perf_counter()
        try:
            results[name] = {**fn(), "seconds": round(time.perf_counter() - start, 1)}
        except Exception as exc:   # a check that fails is a result too
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500],
                             "trace": traceback.format_exc().splitlines()[-3:]}
        return fn
    return wrap


def cuda_flags() -> dict:
    """cuDNN autotuning and TF32 (matmuls, convolutions): what trainers.loop.configure_device sets on CUDA."""
    return {"cudnn_benchmark": torch.backends.cudnn.benchmark, "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32}


def clear_cuda_flags() -> None:
    """Turn the three flags off, so that a trial's setting them shows."""
    torch.backends.cudnn.benchmark = torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--images", type=int, default=2048, help="training JPEGs of the generated image folder")
    parser.add_argument("--batch", type=int, default=256, help="batch of the input-throughput checks")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print(json.dumps({"bench": "gpu_check", "error": "no CUDA device"}))
        return
    device = torch.device(args.device)
    results = {"device": torch.cuda.get_device_name(device) if cuda else "cpu",
               "torch": torch.__version__, "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    tmp = tempfile.mkdtemp()
    root, prep = os.path.join(tmp, "imgs"), os.path.join(tmp, "prep")
    make_folder(root, args.images, 500, 375)
    prepare(root, prep, 256, 224, workers=os.cpu_count() or 1, progress=None)
    small = dict(model="cnn_tiny", optimizer="adamw", epochs=1, lr=1e-3, wd=0.05, batch_size=64,
                 device=args.device, auto_augment="original", num_workers=4)

    for decode in ("workers", "device"):
        @check(results, f"imagefolder_trial_decode_{decode}")   # defect 1: evaluation on CUDA
        def _():
            row = train_trial(dict(small, decode=decode, dataset={"name": "imagefolder", "path": root, "image_size": 64}))
            return {"status": row["status"], "top1_err": row["top1_err"], "device": row["device"]}

    @check(results, "prepared_trial")
    def _():
        row = train_trial(dict(small, dataset={"name": "prepared", "path": prep, "image_size": 224}))
        return {"status": row["status"], "top1_err": row["top1_err"]}

    for name, spec, decode in (("workers", {"name": "imagefolder", "path": root}, "workers"),
                               ("device_decode", {"name": "imagefolder", "path": root}, "device"),
                               ("prepared", {"name": "prepared", "path": prep}, "workers")):
        @check(results, f"input_images_per_s_{name}")   # the three input paths, AutoAugment on
        def _():
            data = load_data(TrialConfig.from_dict(dict(small, dataset=dict(spec, image_size=224))).dataset,
                             num_workers=min(8, os.cpu_count() or 1), auto_augment="original",
                             decode_on_device=decode == "device")
            view = DeviceBatches(data, device, torch.bfloat16, channels_last=True)
            generator = torch.Generator().manual_seed(0)
            for _ in view.train(args.batch, generator):   # warm-up epoch: workers, cuDNN, nvJPEG
                pass
            if cuda:
                torch.cuda.synchronize()
            start, seen = time.perf_counter(), 0
            for x, _ in view.train(args.batch, generator):
                seen += len(x)
            if cuda:
                torch.cuda.synchronize()
            return {"images_per_s": round(seen / (time.perf_counter() - start), 1), "cpu_workers": min(8, os.cpu_count() or 1)}

    sync_data = {"synthetic": {"name": "synthetic", "image_size": 32, "n_train": 4096, "n_val": 256},
                 "device_decode": {"name": "imagefolder", "path": root, "image_size": 64},
                 "prepared": {"name": "prepared", "path": prep, "image_size": 224}}
    for name, dataset in sync_data.items():
        @check(results, f"syncs_per_epoch_{name}")   # defect 6: no host sync per step, on each input path
        def _():
            if not cuda:
                return {"skipped": "CUDA only"}
            trainer = Trainer(TrialConfig.from_dict(dict(small, batch_size=32, decode="device", dataset=dataset)))
            trainer.train_epoch()                   # warm-up
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                trainer.train_epoch()
                torch.cuda.set_sync_debug_mode(0)
            return {"steps": trainer.steps_per_epoch, "syncs": sum("synchroniz" in str(w.message) for w in caught)}

    @check(results, "cuda_flags_after_trial")   # defect 9: cuDNN autotuning and TF32 on CUDA, alone and fused
    def _():
        synthetic = dict(small, batch_size=32, dataset={"name": "synthetic", "image_size": 32, "n_train": 64, "n_val": 32})
        flags = {}
        for name, train in (("solo", lambda: train_trial(synthetic)),
                            ("fused", lambda: train_fused([dict(synthetic, seed=seed) for seed in range(2)]))):
            clear_cuda_flags()
            train()
            flags[name] = cuda_flags()
        return {**flags, "expected": cuda}

    @check(results, "memory_after_trial")   # defect 5: nothing kept between trials
    def _():
        if not cuda:
            return {"skipped": "CUDA only"}
        gc.collect()
        before = torch.cuda.memory_allocated(device)
        trainer = Trainer(TrialConfig.from_dict(dict(small, model="vit_p_1gf", batch_size=32, ema_decay=0.999,
                                                     dataset={"name": "synthetic", "image_size": 224, "n_train": 64,
                                                              "n_val": 32, "num_classes": 1000})))
        during = torch.cuda.memory_allocated(device)
        fit(trainer)
        del trainer
        gc.collect()
        return {"mb_before": before / 1e6, "mb_with_trial": during / 1e6,
                "mb_after": torch.cuda.memory_allocated(device) / 1e6}

    for model in ("vit_p_1gf", "regnety_1gf", "vit_c_4gf"):
        @check(results, f"peak_memory_{model}")   # the dry run's estimate against the allocator
        def _():
            if not cuda:
                return {"skipped": "CUDA only"}
            cfg = TrialConfig.from_dict(dict(small, model=model, batch_size=256, accum_steps=2, ema_decay=0.9999,
                                             dataset={"name": "synthetic", "image_size": 224, "n_train": 512,
                                                      "n_val": 64, "num_classes": 1000}))
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            trainer = Trainer(cfg)
            trainer.train_epoch()
            measured = torch.cuda.max_memory_allocated(device) / 1e9
            trainer.release()
            return {"measured_gb": round(measured, 2), "estimated_gb": round(peak_memory_gb(cfg, 1000) - OVERHEAD_GB, 2)}

    @check(results, "ray_gpu_shares")   # defect 4 (gpu: 0) and the memory cap of fractional GPUs
    def _():
        if not cuda:
            return {"skipped": "CUDA only"}
        import ray

        from study.trainable import use_assigned_gpus
        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="WARNING")
        try:
            def probe(fraction_of_total):
                use_assigned_gpus()
                if not torch.cuda.is_available():
                    return {"cuda_visible": False}
                total = torch.cuda.get_device_properties(0).total_memory
                try:
                    block = torch.empty(int(total * fraction_of_total), dtype=torch.uint8, device="cuda")
                    del block
                    return {"cuda_visible": True, "allocated_over_share": True}
                except torch.OutOfMemoryError:
                    return {"cuda_visible": True, "allocated_over_share": False}

            no_gpu = ray.get(ray.remote(num_gpus=0)(probe).remote(0.3))
            quarter = ray.get(ray.remote(num_gpus=0.25)(probe).remote(0.3))
            return {"gpu_0_trial": no_gpu, "gpu_0.25_trial_allocating_30pct": quarter}
        finally:
            ray.shutdown()

    @check(results, "fuse_auto_out_of_memory")   # defect 2: an OOM while measuring means "no fusion"
    def _():
        if not cuda:
            return {"skipped": "CUDA only"}
        import ray

        from study.fusion import fusion_sizes
        from study.sampling import expand
        from study.spec import parse_spec
        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="WARNING")
        try:
            spec = parse_spec({"name": "oom", "dataset": {"name": "synthetic", "image_size": 224, "num_classes": 1000},
                               "recipe": {"batch_size": 512}, "models": ["vit_p_4gf"], "optimizers": ["adamw"],
                               "epochs": [1], "samples": 8, "space": {"adamw": {"lr": [1e-3, 1e-2], "wd": [0.01, 0.1]}},
                               "resources": {"cpu": 1, "gpu": 1}, "fuse": "auto"})
            return {"sizes": fusion_sizes(spec, expand(spec), {"cpu": 1, "gpu": 1})}
        finally:
            ray.shutdown()

    print(json.dumps({"bench": "gpu_check", **results}, default=str))


if __name__ == "__main__":
    main()
