"""What runs on a Ray worker: the Tune function trainable that trains one group of trials."""

import json
import os
from typing import Any, Dict, List

import ray
import torch
from ray import tune

from study.faults import crash_if_asked
from trainers.fused import train_fused
from trainers.trial import train_trial


def use_assigned_cpus() -> None:
    """One torch intra-op thread per CPU this worker holds: an inherited OMP_NUM_THREADS would
    oversubscribe the node when several trials share it (measured 5x slower on 2 cores)."""
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    torch.set_num_threads(max(1, int(cpus)))


def use_assigned_gpus() -> None:
    """Keep a trial on the GPUs Ray gave it: none visible when it holds no GPU (Ray leaves
    CUDA_VISIBLE_DEVICES as it was for such workers, so `device: auto` would pick GPU 0), and a
    memory cap of its share when it holds a fraction of one (`gpu: 0.25` trials share a GPU)."""
    share = ray.get_runtime_context().get_assigned_resources().get("GPU", 0)
    if not share:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    elif share < 1 and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(share)


def _reported(record: Dict[str, Any]) -> Dict[str, Any]:
    """An epoch record as Tune metrics (Tune wants numbers, not None)."""
    return {k: v for k, v in record.items() if v is not None}


def run_tune_trial(config: Dict, groups: List[Dict]) -> None:
    """Train a group of trials (one, or K fused), report each epoch, then report the rows.

    The last report carries the rows as JSON in `rows_json`; the driver's StoreWriter writes them.
    """
    group = groups[config["group"]]
    for key in group["keys"]:
        crash_if_asked(key)
    use_assigned_cpus()
    use_assigned_gpus()
    if len(group["configs"]) == 1:
        rows = [train_trial(group["configs"][0], on_epoch=lambda r: tune.report(_reported(r)))]
    else:
        def report_best_member(records):
            best = min(records.values(), key=lambda r: r["top1_err"])
            tune.report({"epoch": best["epoch"], "top1_err": best["top1_err"], "members_alive": len(records)})
        rows = train_fused(group["configs"], on_epoch=report_best_member)
    node = ray.get_runtime_context().get_node_id()
    for key, row in zip(group["keys"], rows):
        row.update(trial_key=key, node=node, error=None)
    tune.report({"final": 1, "top1_err": min(r["top1_err"] for r in rows), "rows_json": json.dumps(rows)})
