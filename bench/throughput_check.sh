#!/usr/bin/env bash
# Trials per GPU-hour on a CUDA machine, section by section (bench/throughput_check.py): prints one
# JSON object; each section has its own timeout, the whole run at most THROUGHPUT_CHECK_TIMEOUT
# seconds (default 540). Needs hpstudy's dependencies installed (pip install -e .).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch, timm, hpstudy.trainers" 2>/dev/null \
    || { echo '{"bench": "throughput_check", "error": "dependencies missing: pip install -e . first"}'; exit 1; }
timeout "${THROUGHPUT_CHECK_TIMEOUT:-540}" python3 -m bench.throughput_check "$@"
