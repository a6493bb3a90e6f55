"""Shared test settings: CPU only, few threads, deterministic."""

import os

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import torch  # noqa: E402

torch.set_num_threads(2)
