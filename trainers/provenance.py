"""Where and with what a trial ran: hostname and package versions (with the git sha of hpstudy)."""

import json
import os
import socket
import subprocess
from functools import lru_cache
from importlib import metadata

import torch

_PACKAGES = ("torch", "timm", "ray", "hpstudy")


@lru_cache(maxsize=1)
def versions() -> str:
    """JSON of the versions of torch, timm, ray, hpstudy and the source tree's git sha."""
    found = {}
    for package in _PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    found["git_sha"] = os.environ.get("HPSTUDY_GIT_SHA") or _git_sha()
    return json.dumps(found, sort_keys=True)


def _git_sha():
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run_info(device: torch.device) -> dict:
    """Row fields describing the machine: hostname, versions, and the device's name."""
    name = str(device)
    if device.type == "cuda":
        name = f"{device} ({torch.cuda.get_device_name(device)})"
    return {"device": name, "hostname": socket.gethostname(), "versions": versions()}
