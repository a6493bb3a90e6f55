"""Trials per GPU-hour: where a training step's time goes, section by section; prints one JSON object.

    bash bench/throughput_check.sh [--out results.json] [--only eager_batch_sweep,compiled_step] [--smoke]

Each section runs in its own subprocess with its own timeout (a section that hangs or crashes is a
result too), and `--out` is rewritten after each. On CUDA: vit_c_1gf at 224 px, bf16 autocast,
channels_last (the trial's defaults), synthetic data:
  eager_batch_sweep  Trainer.train_epoch images/s per batch; at the middle batch the ops dispatched
                     and host reads of one step (bench/op_count.py), the host's time to issue a step,
                     and the GPU's busy share over an epoch (torch.profiler: kernels' union / wall);
  fused_vs_foreach   the same epochs with torch's fused AdamW and with foreach;
  compiled_step      the whole step compiled (compile: inductor, and graph: CUDA graphs): the first
                     epoch's extra seconds (cold compile) and images/s after it, against eager;
  concurrent_trials  1, 2 and 4 trials at once on the device, each its own process: summed images/s;
  fused_k8           8 members of vit_c_tiny fused (trainers/fused.py) against one alone (bench/fused.py),
                     eager and, on CUDA, compiled (compile: inductor);
  warm_setup         a trial's setup and first step on a new Trainer against a warm worker's restart
                     (trainers/warm.py), eager and compiled (bench/trainer.py --warm);
  resident_input     a prepared folder's training batches (crop, flip, with and without AutoAugment)
                     gathered from the memory map and from the arrays held on the device (bench/data.py).
`--smoke` runs every section on the CPU with vit_c_tiny at 16 px (torch.compile with the aot_eager
backend: no code generation; 1 and 2 concurrent trials), a test of the script itself.
"""

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Tuple

import torch

from bench.checks import checker, machine, unknown_checks
from bench.data import make_folder, prepared_rates
from bench.fused import sweep
from bench.op_count import OpCounter
from bench.trainer import setup_times
from hpstudy.trainers import trial
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import exit_with
from hpstudy.trainers.loop import trial_schedule
from hpstudy.trainers.optim import build_optimizer
from hpstudy.trainers.prepared import prepare
from hpstudy.trainers.trial import Trainer


@dataclass(frozen=True)
class Setting:
    """What the sections train and for how long."""

    device: str
    model: str
    image_size: int
    batches: Tuple[int, ...]  # the sweep; the middle one is every other section's batch
    steps: int  # per timed epoch
    reps: int  # timed epochs (the median counts)
    compile_backend: str
    fused_model: str
    fused_image_size: int
    fused_batch: int
    fused_compile: Tuple[str, ...]  # fused_k8's compile modes: eager first, its row at the top level
    concurrency: Tuple[int, ...]  # trials at once
    input_images: int  # JPEGs prepared for resident_input (width x height, then train_size, image_size)
    input_jpeg: Tuple[int, int]
    input_sizes: Tuple[int, int]
    timeouts: Tuple[Tuple[str, int], ...]  # seconds per section
    flags: Tuple[str, ...] = ()  # what selects this setting on the command line

    @property
    def batch(self) -> int:
        """The batch of every section but the sweep."""
        return self.batches[len(self.batches) // 2]


GPU = Setting(
    "cuda",
    "vit_c_1gf",
    224,
    (64, 128, 256),
    16,
    3,
    "inductor",
    "vit_c_tiny",
    32,
    128,
    ("off", "inductor"),
    (1, 2, 4),
    4096,
    (500, 375),
    (256, 224),
    (
        ("eager_batch_sweep", 120),
        ("fused_vs_foreach", 90),
        ("compiled_step", 240),
        ("concurrent_trials", 150),
        ("fused_k8", 300),
        ("warm_setup", 150),
        ("resident_input", 120),
    ),
)
SMOKE = Setting(
    "cpu",
    "vit_c_tiny",
    16,
    (4, 8, 16),
    2,
    1,
    "aot_eager",
    "vit_c_tiny",
    16,
    4,
    ("off",),  # compiling 8 vmapped members takes minutes on a CPU: tests/trainers/test_fused_compiled.py
    (1, 2),
    64,
    (40, 30),
    (24, 16),
    tuple((name, 240) for name, _ in GPU.timeouts),
    ("--smoke",),
)


def trainer(setting: Setting, batch: int) -> Trainer:
    """A trial's Trainer of the setting's model on synthetic data: `steps` steps an epoch."""
    dataset = {"name": "synthetic", "image_size": setting.image_size, "n_train": setting.steps * batch, "n_val": 8}
    config = dict(model=setting.model, optimizer="adamw", epochs=1000, lr=1e-3, wd=0.05, batch_size=batch)
    return Trainer(TrialConfig.from_dict(dict(config, dataset=dataset, device=setting.device)))


def synchronize(trainer: Trainer) -> None:
    """Wait for the device's queued work (nothing to wait for on a CPU)."""
    if trainer.device.type == "cuda":
        torch.cuda.synchronize(trainer.device)


def timed_epoch(trainer: Trainer) -> float:
    """Seconds of one training epoch, the device's queue drained."""
    start = time.perf_counter()
    trainer.train_epoch()
    synchronize(trainer)
    return time.perf_counter() - start


def images_per_s(trainer: Trainer, reps: int) -> float:
    """Images/s of the median of `reps` epochs after a warm-up epoch."""
    timed_epoch(trainer)
    seconds = statistics.median(timed_epoch(trainer) for _ in range(reps))
    return round(trainer.steps_per_epoch * trainer.cfg.batch_size / seconds, 1)


def step_cost(trainer: Trainer) -> dict:
    """One step's ops and host reads, and the host's milliseconds to issue a step (the mean over an
    epoch's steps of the time until each call returns, the device not waited for)."""
    x, y = next(trainer.batches.train(trainer.cfg.batch_size, torch.Generator().manual_seed(0)))
    trainer._train_step(x, y)
    with OpCounter() as ops:
        trainer._train_step(x, y)
    synchronize(trainer)
    start = time.perf_counter()
    for _ in range(trainer.steps_per_epoch):
        trainer._train_step(x, y)
    issue_ms = 1e3 * (time.perf_counter() - start) / trainer.steps_per_epoch
    synchronize(trainer)
    return {
        "ops_per_step": ops.total,
        "host_reads_per_step": ops.host_reads,
        "host_issue_ms_per_step": round(issue_ms, 3),
    }


def gpu_busy_share(trainer: Trainer) -> float:
    """The share of an epoch's wall during which at least one kernel, copy or fill ran on the GPU
    (the union of torch.profiler's device intervals over the span from the epoch's start)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        trainer.train_epoch()
        synchronize(trainer)
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy, reach = 0.0, float("-inf")
    for start, end in spans:
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    first = min(e.time_range.start for e in prof.events())
    return round(busy / (reach - first), 3) if spans else 0.0


def eager_batch_sweep(setting: Setting) -> dict:
    """Images/s per batch; one step's cost at the middle batch; on CUDA the GPU's busy share."""
    result: Dict[str, object] = {
        "images_per_s": {str(b): images_per_s(trainer(setting, b), setting.reps) for b in setting.batches}
    }
    middle = trainer(setting, setting.batch)
    result.update(step_cost(middle))
    result["gpu_busy_share"] = gpu_busy_share(middle) if middle.device.type == "cuda" else None
    return result


def fused_vs_foreach(setting: Setting) -> dict:
    """The same trainer's images/s with torch's fused AdamW (the default) and with foreach."""
    fused = trainer(setting, setting.batch)
    foreach = trainer(setting, setting.batch)
    foreach.optimizer = build_optimizer("adamw", foreach.model, foreach.cfg.peak_lr, foreach.cfg.wd, fused=False)
    foreach.schedule = trial_schedule(foreach.optimizer, foreach.cfg, foreach.steps_per_epoch)
    rates = {name: images_per_s(t, setting.reps) for name, t in (("fused", fused), ("foreach", foreach))}
    return {f"images_per_s_{name}": rate for name, rate in rates.items()} | {
        "speedup": round(rates["fused"] / rates["foreach"], 3)
    }


def compiled_step(setting: Setting) -> dict:
    """The trial's whole step compiled (`compile: inductor` on the setting's backend; on CUDA also `graph`,
    its CUDA graphs): the first epoch's seconds beyond a compiled epoch's, and images/s against eager."""
    trial.INDUCTOR_BACKEND = setting.compile_backend
    eager = trainer(setting, setting.batch)
    eager_rate = images_per_s(eager, setting.reps)
    result: Dict[str, object] = {"backend": setting.compile_backend, "images_per_s_eager": eager_rate}
    for mode in ("inductor", "graph") if eager.device.type == "cuda" else ("inductor",):
        compiled = Trainer(dataclasses.replace(eager.cfg, compile=mode))
        first = timed_epoch(compiled)
        rate = images_per_s(compiled, setting.reps)
        result[mode] = {
            "cold_compile_s": round(first - compiled.steps_per_epoch * setting.batch / rate, 2),
            "images_per_s": rate,
            "speedup": round(rate / eager_rate, 3),
        }
    return result


def worker(setting: Setting, barrier: str, count: int) -> dict:
    """One of `count` concurrent trials: warm up, wait until all are warm (files in `barrier`), then
    images/s over the timed epochs."""
    one = trainer(setting, setting.batch)
    timed_epoch(one)
    open(os.path.join(barrier, str(os.getpid())), "w").close()
    while len(os.listdir(barrier)) < count:
        time.sleep(0.01)
    return {"images_per_s": images_per_s(one, setting.reps)}


def concurrent_trials(setting: Setting) -> dict:
    """1, 2 and 4 trials (the setting's concurrency) at once on the device, each a process: their
    summed images/s."""
    result = {}
    for count in setting.concurrency:
        with tempfile.TemporaryDirectory() as barrier:
            command = [*section_command("worker", setting), "--barrier", barrier, "--count", str(count)]
            procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(count)]
            rates = [json.loads(p.communicate()[0].splitlines()[-1])["images_per_s"] for p in procs]
        result[str(count)] = {"images_per_s_summed": round(sum(rates), 1), "images_per_s": rates}
    return result


def fused_k8(setting: Setting) -> dict:
    """8 fused members against one trial alone (bench/fused.py's sweep), eager, then each other compile mode
    of the setting under its name."""
    trial.INDUCTOR_BACKEND = setting.compile_backend
    rows = {
        mode: sweep(
            [setting.fused_model],
            [8],
            [setting.fused_batch],
            setting.fused_image_size,
            device=setting.device,
            steps=setting.steps,
            compile=mode,
        )[0]
        for mode in setting.fused_compile
    }
    eager, *compiled = setting.fused_compile
    return {"model": setting.fused_model, **rows[eager], **{mode: rows[mode] for mode in compiled}}


def warm_setup(setting: Setting) -> dict:
    """Seconds to a trial's first step done, a new Trainer against a warm restart (bench/trainer.py's
    setup_times), eager and with the step compiled (the setting's backend; CUDA graphs on CUDA)."""
    trial.INDUCTOR_BACKEND = setting.compile_backend
    modes = ("off", "graph") if setting.device == "cuda" else ("off", "inductor")
    return {
        mode: setup_times(setting.model, setting.batch, setting.image_size, setting.reps, setting.device, mode)
        for mode in modes
    }


def resident_input(setting: Setting) -> dict:
    """Images/s of a prepared folder's augmented training batches on the device, memory-mapped and resident
    (bench/data.py's prepared_rates), at the setting's batch."""
    with tempfile.TemporaryDirectory() as tmp:
        root, prep = os.path.join(tmp, "images"), os.path.join(tmp, "prepared")
        make_folder(root, setting.input_images, *setting.input_jpeg)
        # on the CPU a pool of decoders takes longer to start than the smoke's 64 small images to decode
        workers = (os.cpu_count() or 1) if setting.device == "cuda" else 1
        prepare(root, prep, *setting.input_sizes, workers=workers, progress=None)
        return {"images": setting.input_images, **prepared_rates(prep, torch.device(setting.device), setting.batch)}


SECTIONS: Dict[str, Callable] = {
    "eager_batch_sweep": eager_batch_sweep,
    "fused_vs_foreach": fused_vs_foreach,
    "compiled_step": compiled_step,
    "concurrent_trials": concurrent_trials,
    "fused_k8": fused_k8,
    "warm_setup": warm_setup,
    "resident_input": resident_input,
}


def section_command(name: str, setting: Setting) -> list:
    """The command line that runs one section (or a concurrent trial) in a fresh process."""
    return [sys.executable, "-m", "bench.throughput_check", "--section", name, *setting.flags]


def run_section(name: str, setting: Setting) -> dict:
    """A section in its own process under its timeout: its JSON, or why there is none."""
    timeout = dict(setting.timeouts)[name]
    try:
        done = subprocess.run(section_command(name, setting), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if done.returncode:
        return {"error": f"exit code {done.returncode}", "stderr_tail": done.stderr[-1500:]}
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="every section on the CPU, tiny, in seconds")
    parser.add_argument("--out", help="also write the results here, rewritten after each section")
    parser.add_argument("--only", help="run only these sections (comma-separated names)")
    parser.add_argument("--section", choices=[*SECTIONS, "worker"], help=argparse.SUPPRESS)
    parser.add_argument("--barrier", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    flags = parser.parse_args()
    setting = SMOKE if flags.smoke else GPU
    if flags.section:  # a child: one section's JSON on its last line
        if flags.section == "worker":
            result = worker(setting, flags.barrier, flags.count)
        else:
            result = SECTIONS[flags.section](setting)
        print(json.dumps(result, default=str))
        return
    if setting.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"bench": "throughput_check", "error": "no CUDA device (--smoke runs on the CPU)"}))
        sys.exit(1)
    shown = {k: v for k, v in asdict(setting).items() if k not in ("timeouts", "flags")}
    results = {**machine(torch.device(setting.device)), "setting": shown}
    check = checker(results, flags.out, flags.only, bench="throughput_check")
    for name in SECTIONS:
        check(name)(lambda name=name: run_section(name, setting))
    unknown = unknown_checks(check, flags.only)
    if unknown:
        results["error"] = f"--only: no section named {', '.join(unknown)}; allowed: {', '.join(SECTIONS)}"
    print(json.dumps({"bench": "throughput_check", **results}, default=str))
    if unknown:
        sys.exit(2)


if __name__ == "__main__":
    exit_with(main)  # the sections' processes too: none pays the exit-time collections
