"""Reading a study spec loads no torch, timm, torchvision or Ray: `hpstudy.study.spec.load_spec` (the spec,
its dataset, its recipe's trial configs) runs on torch-free modules, so planning, dry runs and spec errors
answer at once. Building the models (`check_models`) is a separate step and may load torch."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.helpers import REPO

HEAVY = ("torch", "timm", "torchvision", "ray")
BUNDLED = os.path.join(REPO, "study", "configs")
PREPARED_META = {  # the fields a meta.json written by `hpstudy prepare` always has (no arrays needed)
    "version": 1,
    "source": "/images",
    "train_size": 256,
    "image_size": 224,
    "files_digest": "0" * 64,
    "classes": ["a", "b"],
    "sha256": {name: "1" * 64 for name in ("train_x", "train_y", "val_x", "val_y")},
}


def heavy_after_loading(path: str, before: str = "") -> dict:
    """A fresh interpreter's answer after running `before` and `load_spec(path)`: the spec's dataset and
    the heavy packages loaded."""
    probe = (
        f"import json, sys\n{before}\n"
        "from hpstudy.study.spec import load_spec\n"
        f"spec = load_spec({path!r})\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & " + repr(set(HEAVY)) + ")\n"
        "print(json.dumps({'dataset': spec.dataset.name, 'digest': spec.dataset.digest, 'heavy': loaded}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def bundled(name: str, tmp_path, **dataset) -> str:
    """The bundled spec `name`, its dataset changed by `dataset` (e.g. a path that exists here), in tmp_path."""
    with open(os.path.join(BUNDLED, f"{name}.yaml")) as f:
        raw = yaml.safe_load(f)
    raw["dataset"] = dict(raw["dataset"], **dataset)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_reading_the_demo_spec_loads_nothing_heavy():
    result = heavy_after_loading(os.path.join(BUNDLED, "demo_digits.yaml"))
    assert result == {"dataset": "digits", "digest": None, "heavy": []}


def test_reading_a_cifar_spec_with_its_path_checked_loads_nothing_heavy(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    result = heavy_after_loading(bundled("cifar10_lr_wd", tmp_path, path=str(tmp_path)))
    assert result == {"dataset": "cifar10", "digest": None, "heavy": []}


def test_reading_an_image_folder_spec_with_autoaugment_loads_nothing_heavy(tmp_path):
    for split in ("train", "val"):
        (tmp_path / split).mkdir()
    result = heavy_after_loading(bundled("paper_lr_wd", tmp_path, path=str(tmp_path)))
    assert result == {"dataset": "imagefolder", "digest": None, "heavy": []}


def test_reading_a_prepared_spec_pins_its_digest_and_loads_nothing_heavy(tmp_path):
    """The prepared folder's meta.json is read and its digest pinned; the device AutoAugment policy is checked."""
    data = tmp_path / "prepared"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps(PREPARED_META))
    spec = yaml.safe_load(open(os.path.join(BUNDLED, "demo_digits.yaml")))
    spec["dataset"] = {"name": "prepared", "path": str(data), "image_size": 224}
    spec["recipe"] = dict(spec["recipe"], auto_augment="original")
    path = tmp_path / "prepared.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = heavy_after_loading(str(path))
    assert result["dataset"] == "prepared" and len(result["digest"]) == 64
    assert result["heavy"] == []


@pytest.mark.slow  # a subprocess that imports torch (4 s); the check itself runs in the fast tier
def test_the_check_sees_torch_when_it_is_loaded():
    """The check can fail: torch loaded before the spec is read is reported."""
    result = heavy_after_loading(os.path.join(BUNDLED, "demo_digits.yaml"), before="import hpstudy.trainers.data")
    assert "torch" in result["heavy"]
