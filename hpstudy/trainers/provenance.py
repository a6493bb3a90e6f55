"""Where and with what a trial ran: hostname and package versions (with the git sha of hpstudy),
and why torch cannot use CUDA on a machine."""

import ctypes
import json
import os
import socket
import subprocess
from functools import lru_cache
from importlib import metadata
from typing import Dict, Optional

import torch

_PACKAGES = ("torch", "timm", "ray", "hpstudy")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The git sha of a checkout shipped without .git (a cluster's nodes): written from the user's
# checkout by cluster.yaml's setup commands, read when `git` finds no checkout here.
GIT_SHA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "GIT_SHA")


@lru_cache(maxsize=1)
def versions() -> str:
    """JSON of the versions of torch, timm, ray, hpstudy and the source tree's git sha."""
    found: Dict[str, Optional[str]] = {}
    for package in _PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    found["git_sha"] = os.environ.get("HPSTUDY_GIT_SHA") or _git_sha() or _recorded_git_sha()
    return json.dumps(found, sort_keys=True)


def _git_sha() -> Optional[str]:
    """HEAD of the git checkout hpstudy runs from; None for a copy without .git (even one that lies
    inside some other repository)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True, timeout=5, cwd=_ROOT
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode or len(lines) != 2 or os.path.realpath(lines[0]) != os.path.realpath(_ROOT):
        return None
    return lines[1]


def _recorded_git_sha() -> Optional[str]:
    """The sha in GIT_SHA_FILE, if it was written."""
    try:
        with open(GIT_SHA_FILE) as f:
            return f.read().strip() or None
    except OSError:
        return None


def _driver_cuda_version() -> Optional[str]:
    """The newest CUDA version the installed NVIDIA driver supports ("12.4"), or None without one."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int()
    if driver.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def cuda_unusable_reason() -> Optional[str]:
    """Why torch cannot use CUDA here, naming torch's CUDA build, the driver's CUDA version and
    CUDA_VISIBLE_DEVICES; None when it can."""
    if torch.cuda.is_available():
        return None
    built, driver = torch.version.cuda, _driver_cuda_version()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    parts = [
        f"torch {torch.__version__} is " + (f"built for CUDA {built}" if built else "a CPU-only build"),
        f"the NVIDIA driver supports CUDA up to {driver}"
        if driver
        else "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded)",
        "CUDA_VISIBLE_DEVICES is " + ("unset" if visible is None else repr(visible)),
    ]
    if built and driver and _version(built) > _version(driver):
        parts.append(f"install a torch built for CUDA {driver} or older, or a newer driver")
    return "torch cannot use CUDA: " + "; ".join(parts)


def _version(text: str) -> tuple:
    return tuple(int(p) for p in text.split(".")[:2])


def run_info(device: torch.device) -> dict:
    """Row fields describing the machine: hostname, versions, and the device's name."""
    name = str(device)
    if device.type == "cuda":
        name = f"{device} ({torch.cuda.get_device_name(device)})"
    return {"device": name, "hostname": socket.gethostname(), "versions": versions()}
