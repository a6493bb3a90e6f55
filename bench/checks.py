"""What the device benches share (bench/gpu_check.py, bench/throughput_check.py): named checks whose
results, or errors, go into one JSON object rewritten after each, and the machine they ran on."""

import json
import os
import platform
import sys
import time
import traceback

import torch


def machine(device: torch.device) -> dict:
    """The device's name, torch's version and the host's architecture and cores."""
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }


def checker(results: dict, out: str = None, only: str = None, bench: str = "gpu_check"):
    """A decorator factory: check(name) runs the check, stores its dict (or its error) under `name`
    and rewrites `out` as {"bench": bench, **results}; checks not named in `only`
    (comma-separated) are skipped."""
    wanted = set(only.split(",")) if only else None

    def check(name: str):
        check.names.add(name)

        def wrap(fn):
            if wanted is not None and name not in wanted:
                return fn
            start = time.perf_counter()
            try:
                results[name] = {**fn(), "seconds": round(time.perf_counter() - start, 1)}
            except Exception as exc:  # a check that fails is a result too
                results[name] = {
                    "error": f"{type(exc).__name__}: {exc}"[:500],
                    "trace": traceback.format_exc().splitlines()[-3:],
                }
            print(json.dumps({name: results[name]}, default=str), file=sys.stderr, flush=True)
            if out:
                with open(out, "w") as f:
                    json.dump({"bench": bench, **results}, f, default=str, indent=1)
            return fn

        return wrap

    check.names = set()
    return check


def unknown_checks(check, only: str = None) -> list:
    """The names in `only` (comma-separated) that no check registered with `check` has."""
    return sorted(set(only.split(",")) - check.names) if only else []
