"""Shared test settings: CPU only, few threads, deterministic."""

import os

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import torch  # noqa: E402

torch.set_num_threads(2)

# A local Ray started by the tests binds to loopback only, as run_edf.py's does (ray reads this
# when first imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
