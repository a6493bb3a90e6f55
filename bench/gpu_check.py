"""GPU-ready checks, run on a CUDA machine in one go; prints one JSON object.

    bash bench/gpu_check.sh [--out results.json] [--only cuda_tests,trainer_vit_c_1gf_224]

The CUDA tests (tests/e2e/test_cuda.py), hpstudy's trainer against the raw loop on vit_c_1gf at 224 px
(images/s, MFU), fused against alone for the tiny twins and the 1 GF ViTs at K = 1/4/8/16, a
32-trial study with `gpu: 0.25` per trial through Ray, then the GPU-ready defects' checks. Each
check records its numbers or its error and the next one runs; `--out` is rewritten after each
check, so a run stopped part way keeps what it measured. Ray's GPU shares (`gpu: 0` sees no GPU,
`gpu: 0.25` is capped to its quarter) are checked by the CUDA tests. With `--device cpu` the CUDA-only checks
are skipped (a smoke test of the script itself: `--images 32 --batch 16` is the smallest useful run).
"""

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import yaml

from bench.checks import checker, machine, unknown_checks
from bench.data import make_folder
from bench.fused import sweep
from bench.trainer import compare
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data import DeviceBatches, load_data
from hpstudy.trainers.fused import train_fused
from hpstudy.trainers.loop import fit
from hpstudy.trainers.memory import OVERHEAD_GB, peak_memory_gb
from hpstudy.trainers.prepared import prepare
from hpstudy.trainers.trial import Trainer, train_trial

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_TWINS = ["vit_p_tiny", "vit_c_tiny", "cnn_tiny"]
FUSED_KS = [1, 4, 8, 16]
FUSED_STEPS = 10  # timed steps per measurement: 3 steps of ~15 ms varied by up to 40% on an H200


def run_cuda_tests() -> dict:
    """tests/e2e/test_cuda.py in a pytest subprocess with the GPU visible; its summary line."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES") or "0")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-rfEs", "tests/e2e/test_cuda.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = done.stdout.strip().splitlines()
    return {
        "exit_code": done.returncode,
        "summary": lines[-1] if lines else done.stderr[-300:],
        "not_passed": [line for line in lines if line.startswith(("FAILED", "ERROR", "SKIPPED"))],
    }


def quarter_gpu_study(tmp: str, trials: int = 32, gpu: float = 0.25) -> dict:
    """A study of `trials` short trials with `gpu` (a quarter) each, run by run_edf.py through a
    local Ray; wall time, statuses and the trials' summed wall over the study's (Ray's start in it)."""
    from hpstudy.study.store.read import load_trials

    per_cell = trials // 4
    spec = {
        "name": "gpu_quarter",
        "recipe": {"batch_size": 128},
        "dataset": {"name": "synthetic", "image_size": 32, "n_train": 4096, "n_val": 512, "num_classes": 10},
        "models": ["vit_c_tiny", "cnn_tiny"],
        "optimizers": ["adamw", "sgd"],
        "epochs": [2],
        "samples": per_cell,
        "fuse": "off",
        "resources": {"cpu": 1, "gpu": gpu},
        "space": {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.1]}, "sgd": {"lr": [0.01, 1.0], "wd": [1e-5, 1e-3]}},
    }
    config, store = os.path.join(tmp, "gpu_quarter.yaml"), os.path.join(tmp, "store")
    with open(config, "w") as f:
        yaml.safe_dump(spec, f)
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "study", "run_edf.py"),
            "--config",
            config,
            "--store",
            store,
            "--report",
            "none",
            "--progress-interval",
            "30",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    wall = time.perf_counter() - start
    if done.returncode:
        return {"exit_code": done.returncode, "output_tail": (done.stdout + done.stderr)[-1500:]}
    rows = load_trials(store)
    return {
        "exit_code": 0,
        "trials": len(rows),
        "wall_s": round(wall, 1),
        "trials_per_hour": round(3600 * len(rows) / wall),
        "status": rows["status"].value_counts().to_dict(),
        "devices": sorted(rows["device"].unique()),
        "trial_wall_s_mean": round(float(rows["wall_s"].mean()), 2),
        "trial_wall_over_study_wall": round(float(rows["wall_s"].sum()) / wall, 2),
    }


def fused_summary(results: list) -> dict:
    """The sweep's rows, with each model's K=8 speedup (trials/hour fused over alone) pulled out."""
    return {
        "results": results,
        "k8_speedup": {f"{r['model']} b{r['batch']}": r["speedup"] for r in results if r["k"] == 8 and "speedup" in r},
    }


def cuda_flags() -> dict:
    """cuDNN autotuning and TF32 (matmuls, convolutions): what hpstudy.trainers.loop.configure_device sets on CUDA."""
    return {
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }


def clear_cuda_flags() -> None:
    """Turn the three flags off, so that a trial's setting them shows."""
    torch.backends.cudnn.benchmark = torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--images", type=int, default=2048, help="training JPEGs of the generated image folder")
    parser.add_argument("--batch", type=int, default=256, help="batch of the input-throughput checks")
    parser.add_argument("--out", help="also write the results here, rewritten after each check")
    parser.add_argument("--only", help="run only these checks (comma-separated names)")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print(json.dumps({"bench": "gpu_check", "error": "no CUDA device"}))
        return
    device = torch.device(args.device)
    results = machine(device)
    check = checker(results, args.out, args.only)
    tmp = tempfile.mkdtemp()

    @check("cuda_tests")
    def _():
        return run_cuda_tests() if cuda else {"skipped": "CUDA only"}

    @check("trainer_vit_c_1gf_224")  # hpstudy's loop against the raw loop, same precision and layout
    def _():
        if not cuda:
            return {"skipped": "CUDA only"}
        return compare("vit_c_1gf", 128, 224, 2048, 9, args.device)

    @check("fused_tiny_twins_32px")
    def _():
        batch, steps = (128, FUSED_STEPS) if cuda else (args.batch, 2)  # a CPU smoke run keeps it small
        return fused_summary(
            sweep(
                TINY_TWINS,
                FUSED_KS,
                [batch],
                32,
                device=args.device,
                steps=steps,
                max_samples=16 * batch if cuda else 4 * batch,
            )
        )

    @check("fused_1gf_vits_224px")
    def _():
        if not cuda:
            return {"skipped": "CUDA only"}
        return fused_summary(
            sweep(["vit_c_1gf", "vit_p_1gf"], FUSED_KS, [32], 224, device=args.device, steps=FUSED_STEPS)
        )

    @check("study_32_trials_gpu_quarter")
    def _():
        return quarter_gpu_study(tmp) if cuda else {"skipped": "CUDA only"}

    root, prep = os.path.join(tmp, "imgs"), os.path.join(tmp, "prep")

    @check("image_folder")  # what the input-path checks below read
    def _():
        make_folder(root, args.images, 500, 375)
        prepare(root, prep, 256, 224, workers=os.cpu_count() or 1, progress=None)
        return {"images": args.images, "jpeg_size": "500x375", "prepared": "256 -> 224"}

    small = dict(
        model="cnn_tiny",
        optimizer="adamw",
        epochs=1,
        lr=1e-3,
        wd=0.05,
        batch_size=64,
        device=args.device,
        auto_augment="original",
        num_workers=4,
    )

    for decode in ("workers", "device"):

        @check(f"imagefolder_trial_decode_{decode}")  # defect 1: evaluation on CUDA
        def _():
            row = train_trial(
                dict(small, decode=decode, dataset={"name": "imagefolder", "path": root, "image_size": 64})
            )
            return {"status": row["status"], "top1_err": row["top1_err"], "device": row["device"]}

    @check("prepared_trial")
    def _():
        row = train_trial(dict(small, dataset={"name": "prepared", "path": prep, "image_size": 224}))
        return {"status": row["status"], "top1_err": row["top1_err"]}

    for name, spec, decode in (
        ("workers", {"name": "imagefolder", "path": root}, "workers"),
        ("device_decode", {"name": "imagefolder", "path": root}, "device"),
        ("prepared", {"name": "prepared", "path": prep}, "workers"),
    ):

        @check(f"input_images_per_s_{name}")  # the three input paths, AutoAugment on
        def _():
            data = load_data(
                TrialConfig.from_dict(dict(small, dataset=dict(spec, image_size=224))).dataset,
                num_workers=min(8, os.cpu_count() or 1),
                auto_augment="original",
                decode_on_device=decode == "device",
            )
            view = DeviceBatches(data, device, torch.bfloat16, channels_last=True)
            generator = torch.Generator().manual_seed(0)
            for _ in view.train(args.batch, generator):  # warm-up epoch: workers, cuDNN, nvJPEG
                pass
            if cuda:
                torch.cuda.synchronize()
            start, seen = time.perf_counter(), 0
            for x, _ in view.train(args.batch, generator):
                seen += len(x)
            if cuda:
                torch.cuda.synchronize()
            return {
                "images_per_s": round(seen / (time.perf_counter() - start), 1),
                "cpu_workers": min(8, os.cpu_count() or 1),
            }

    sync_data = {
        "synthetic": {"name": "synthetic", "image_size": 32, "n_train": 4096, "n_val": 256},
        "device_decode": {"name": "imagefolder", "path": root, "image_size": 64},
        "prepared": {"name": "prepared", "path": prep, "image_size": 224},
    }
    for name, dataset in sync_data.items():

        @check(f"syncs_per_epoch_{name}")  # defect 6: no host sync per step, on each input path
        def _():
            if not cuda:
                return {"skipped": "CUDA only"}
            trainer = Trainer(TrialConfig.from_dict(dict(small, batch_size=32, decode="device", dataset=dataset)))
            trainer.train_epoch()  # warm-up
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                trainer.train_epoch()
                torch.cuda.set_sync_debug_mode(0)
            return {"steps": trainer.steps_per_epoch, "syncs": sum("synchroniz" in str(w.message) for w in caught)}

    @check("cuda_flags_after_trial")  # defect 9: cuDNN autotuning and TF32 on CUDA, alone and fused
    def _():
        synthetic = dict(
            small, batch_size=32, dataset={"name": "synthetic", "image_size": 32, "n_train": 64, "n_val": 32}
        )
        flags = {}
        for name, train in (
            ("solo", lambda: train_trial(synthetic)),
            ("fused", lambda: train_fused([dict(synthetic, seed=seed) for seed in range(2)])),
        ):
            clear_cuda_flags()
            train()
            flags[name] = cuda_flags()
        return {**flags, "expected": cuda}

    @check("memory_after_trial")  # defect 5: nothing kept between trials
    def _():
        if not cuda:
            return {"skipped": "CUDA only"}
        gc.collect()
        before = torch.cuda.memory_allocated(device)
        trainer = Trainer(
            TrialConfig.from_dict(
                dict(
                    small,
                    model="vit_p_1gf",
                    batch_size=32,
                    ema_decay=0.999,
                    dataset={"name": "synthetic", "image_size": 224, "n_train": 64, "n_val": 32, "num_classes": 1000},
                )
            )
        )
        during = torch.cuda.memory_allocated(device)
        fit(trainer)
        del trainer
        gc.collect()
        return {
            "mb_before": before / 1e6,
            "mb_with_trial": during / 1e6,
            "mb_after": torch.cuda.memory_allocated(device) / 1e6,
        }

    for model in ("vit_p_1gf", "regnety_1gf", "vit_c_4gf"):

        @check(f"peak_memory_{model}")  # the dry run's estimate against the allocator
        def _():
            if not cuda:
                return {"skipped": "CUDA only"}
            cfg = TrialConfig.from_dict(
                dict(
                    small,
                    model=model,
                    batch_size=256,
                    accum_steps=2,
                    ema_decay=0.9999,
                    dataset={"name": "synthetic", "image_size": 224, "n_train": 512, "n_val": 64, "num_classes": 1000},
                )
            )
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            trainer = Trainer(cfg)
            trainer.train_epoch()
            measured = torch.cuda.max_memory_allocated(device) / 1e9
            trainer.release()
            return {
                "measured_gb": round(measured, 2),
                "estimated_gb": round(peak_memory_gb(cfg, 1000) - OVERHEAD_GB, 2),
            }

    @check("fuse_auto_out_of_memory")  # defect 2: an OOM while measuring means "no fusion"
    def _():
        if not cuda:
            return {"skipped": "CUDA only"}
        import ray

        from hpstudy.study.fusion import fusion_sizes
        from hpstudy.study.sampling import expand
        from hpstudy.study.spec import parse_spec

        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="WARNING")
        try:
            spec = parse_spec(
                {
                    "name": "oom",
                    "dataset": {"name": "synthetic", "image_size": 224, "num_classes": 1000},
                    "recipe": {"batch_size": 512},
                    "models": ["vit_p_4gf"],
                    "optimizers": ["adamw"],
                    "epochs": [1],
                    "samples": 8,
                    "space": {"adamw": {"lr": [1e-3, 1e-2], "wd": [0.01, 0.1]}},
                    "resources": {"cpu": 1, "gpu": 1},
                    "fuse": "auto",
                }
            )
            return {"sizes": fusion_sizes(spec, expand(spec), {"cpu": 1, "gpu": 1})}
        finally:
            ray.shutdown()

    unknown = unknown_checks(check, args.only)
    if unknown:
        results["error"] = f"--only: no check named {', '.join(unknown)}; allowed: {', '.join(sorted(check.names))}"
    print(json.dumps({"bench": "gpu_check", **results}, default=str))
    if unknown:
        sys.exit(2)


if __name__ == "__main__":
    main()
