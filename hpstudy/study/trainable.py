"""What runs on a Ray worker: the Tune function trainable that trains one group of trials."""

import json
import os
import socket
import traceback
from typing import Any, Dict, List, Optional

import ray
import torch
from ray import tune

from hpstudy.study.faults import crash_if_asked
from hpstudy.trainers.errors import HpstudyError
from hpstudy.trainers.fused import train_fused
from hpstudy.trainers.provenance import cuda_unusable_reason
from hpstudy.trainers.warm import drop_resident, train_warm


def use_assigned_cpus() -> None:
    """One torch intra-op thread per CPU this worker holds: an inherited OMP_NUM_THREADS would
    oversubscribe the node when several trials share it (measured 5x slower on 2 cores)."""
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    torch.set_num_threads(max(1, int(cpus)))


def unusable_gpu_reason() -> Optional[str]:
    """Why a trial that holds GPUs cannot train on them (torch sees no usable CUDA: a CPU-only
    torch, a driver older than torch's CUDA, no devices visible), or None. Such a trial must not
    fall back to the CPU, as `device: auto` would, silently, for days."""
    share = ray.get_runtime_context().get_assigned_resources().get("GPU", 0)
    reason = cuda_unusable_reason() if share else None
    return reason and f"a trial holds {share:g} GPU on {socket.gethostname()}, but {reason}"


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


def _train_group(group: Dict) -> List[Dict]:
    """The rows of a group's trials: one trained alone, on the worker's warm trainer (hpstudy.trainers.warm), or
    K fused; each epoch reported to Tune."""
    if len(group["configs"]) == 1:
        return [train_warm(group["configs"][0], on_epoch=lambda r: tune.report(_reported(r)))]
    drop_resident()  # its device memory, for the fused trainer

    def report_best_member(records):
        best = min(records.values(), key=lambda r: r["top1_err"])
        tune.report({"epoch": best["epoch"], "top1_err": best["top1_err"], "members_alive": len(records)})

    return train_fused(group["configs"], on_epoch=report_best_member)


def run_tune_trial(config: Dict, groups: Dict[int, Dict]) -> None:
    """Train the group `groups[config["group"]]` of trials (one, or K fused), report each epoch,
    then report the rows.

    The last report carries the rows as JSON in `rows_json`; the driver's StoreWriter writes them.
    An error of the trial code is tried once more in this worker: if it repeats (same type and
    message), or is a user error (HpstudyError), it is deterministic and is reported as
    `trial_error` (stored as failed) instead of raised, since Ray's retries are for lost workers;
    a different second error is raised for Ray to retry. A trial that holds a GPU torch cannot
    use reports why as `trial_error` with `stop_study`, at once: the driver stores it failed and
    stops the study.
    """
    group = groups[config["group"]]
    for key in group["keys"]:
        crash_if_asked(key)
    use_assigned_cpus()
    use_assigned_gpus()
    wrong_device = unusable_gpu_reason()
    if wrong_device:  # stored failed, and the driver stops the study
        tune.report({"final": 1, "trial_error": wrong_device, "stop_study": 1})
        return
    first_error = None
    for _ in range(2):
        try:
            rows = _train_group(group)
            break
        except HpstudyError:
            tune.report({"final": 1, "trial_error": traceback.format_exc()})
            return
        except Exception as exc:  # the frames (and tensors) of a failed try are freed here
            if first_error == (type(exc), str(exc)):
                tune.report(
                    {"final": 1, "trial_error": "raised twice in a row, so not retried:\n" + traceback.format_exc()}
                )
                return
            if first_error is not None:
                raise
            first_error = (type(exc), str(exc))
    node = ray.get_runtime_context().get_node_id()
    for key, row in zip(group["keys"], rows):
        row.update(trial_key=key, node=node, error=None)
    tune.report({"final": 1, "top1_err": min(r["top1_err"] for r in rows), "rows_json": json.dumps(rows)})
