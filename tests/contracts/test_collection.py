"""Collecting the suite stays light: no test module imports torch, timm, Ray, matplotlib, scipy.stats or optuna
where pytest collects it (they load in the tests that use them), so `pytest` on a subset, and every xdist worker,
does not pay the whole stack's imports before its first test (docs/development.md)."""

import json
import subprocess
import sys

from tests.helpers import REPO

HEAVY = (
    "torch",
    "torchvision",
    "timm",
    "ray",
    "ray.tune",
    "safetensors.torch",
    "matplotlib",
    "scipy.stats",
    "scipy.optimize",
    "scipy.integrate",
    "optuna",
    "sklearn",
)
COLLECT = f"""
import json, sys, pytest
code = pytest.main(["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "", "tests"])
print(json.dumps({{"code": int(code), "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def test_collecting_every_tier_imports_no_heavy_module():
    out = subprocess.run([sys.executable, "-c", COLLECT], cwd=REPO, capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}, out.stdout[-2000:] + out.stderr[-2000:]
