#!/usr/bin/env bash
# The GPU-ready checks of hpstudy on a CUDA machine, in one run (a few minutes on an H200): prints
# one JSON object (bench/gpu_check.py). Needs hpstudy's dependencies installed (pip install -e .).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch, timm, ray, trainers, study" 2>/dev/null \
    || { echo '{"bench": "gpu_check", "error": "dependencies missing: pip install -e . first"}'; exit 1; }
timeout "${GPU_CHECK_TIMEOUT:-540}" python3 -m bench.gpu_check "$@"
