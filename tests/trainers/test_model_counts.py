"""The model counts' cache (hpstudy.trainers.model_counts): a count read back equals a fresh one for every kind of
model, a changed key counts again, a broken, foreign or unwritable cache is survived, concurrent writers leave
valid JSON, and planning a study a second time imports no torch."""

import dataclasses
import json
import logging
import subprocess
import sys

import pytest

from hpstudy.trainers import flops, memory, model_counts, zoo
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.flops import model_profile, parameter_count
from hpstudy.trainers.memory import activation_bytes_per_image
from hpstudy.trainers.model_counts import FILE, cached, trial_config
from tests.helpers import REPO, TINY_TRIAL, small_spec, write_spec

CLASSES = 10


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder for this test (also a subprocess's, through the environment); its file's path."""
    monkeypatch.setenv("HPSTUDY_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / FILE


def _refuse_to_build(*args, **kwargs):
    raise AssertionError("a model was built: the count was not read back from the cache")


def _counts(model: str, size: int) -> dict:
    """Every count of `model` at `size` px through the public functions, past their in-process lru caches."""
    macs, params = model_profile.__wrapped__(model, CLASSES, size)
    return {
        "macs": macs,
        "params": params,
        "params_alone": parameter_count.__wrapped__(model, CLASSES, size),
        "activation_bytes": activation_bytes_per_image.__wrapped__(model, CLASSES, size),
    }


@pytest.mark.parametrize("model,size", [("vit_p_tiny", 32), ("vit_c_tiny", 32), ("cnn_tiny", 32), ("resnet50", 64)])
def test_a_count_read_back_equals_a_fresh_count(model, size, cache, monkeypatch):
    from hpstudy.trainers import models

    counted = flops._count(model, CLASSES, size, flops=True)
    fresh = dict(counted, params_alone=counted["params"])
    fresh["activation_bytes"] = memory._count_activation_bytes(model, CLASSES, size)
    assert _counts(model, size) == fresh and cache.is_file()  # counted, and stored
    monkeypatch.setattr(models, "build_model", _refuse_to_build)
    assert _counts(model, size) == fresh  # read back


def test_a_refused_config_is_refused_again_from_the_cache(cache, monkeypatch):
    """BatchNorm on micro-batches of one image: the check's message, read back word for word; a passing config too."""
    from hpstudy.trainers import models

    data = {"name": "synthetic", "image_size": 16, "num_classes": CLASSES}
    refused, fine = (dict(TINY_TRIAL, lr=0.1, batch_size=2, accum_steps=steps, dataset=data) for steps in (2, 1))
    with pytest.raises(ConfigError) as first:
        trial_config(refused)
    trial_config(fine)
    monkeypatch.setattr(models, "build_model", _refuse_to_build)
    with pytest.raises(ConfigError) as again:
        trial_config(refused)
    assert str(again.value) == str(first.value) and "accum_steps" in str(first.value)
    assert trial_config(fine).accum_steps == 1


class Counter:
    """A count that records each call (a stand-in for building a model)."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return {"macs": 1000 + self.calls}


@pytest.mark.parametrize(
    "change",
    ["torch version", "timm version", "hpstudy version", "source", "image size", "num_classes", "spec digest"],
)
def test_a_changed_key_counts_again(change, cache, monkeypatch):
    count, args = Counter(), {"num_classes": CLASSES, "image_size": 32}
    assert cached("macs", "cnn_tiny", count, **args) == cached("macs", "cnn_tiny", count, **args) == 1001
    assert count.calls == 1
    environment = model_counts._environment()
    if change.endswith("version") or change == "source":
        part = change.split()[0]
        monkeypatch.setattr(model_counts, "_environment", lambda: dict(environment, **{part: "other"}))
    elif change == "spec digest":
        spec = zoo.get_spec("cnn_tiny")
        changed = dataclasses.replace(spec, kwargs=dict(spec.kwargs, depth=spec.kwargs["depth"] + 1))
        monkeypatch.setitem(zoo._REGISTRY, "cnn_tiny", changed)
    else:
        args["_".join(change.split())] += 1
    assert cached("macs", "cnn_tiny", count, **args) == 1002 and count.calls == 2


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe\x00",  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # nested too deep to read
        b'["a list"]',
        b'{"format": 2, "entries": {}}',  # another layout
        b'{"format": 1, "entries": ["a list"]}',
    ],
)
def test_a_broken_or_foreign_file_is_ignored_and_rewritten(content, cache, caplog):
    cache.parent.mkdir()
    cache.write_bytes(content)
    count = Counter()
    with caplog.at_level(logging.DEBUG, logger=model_counts.__name__):
        assert cached("macs", "cnn_tiny", count, image_size=32) == 1001
    assert "ignored the cache" in caplog.text
    assert cached("macs", "cnn_tiny", count, image_size=32) == 1001 and count.calls == 1  # rewritten, readable


@pytest.mark.parametrize("stored", ["1001", True, -1, 1.5, None, [1001]])
def test_a_value_of_the_wrong_type_is_counted_again(stored, cache):
    count = Counter()
    cached("macs", "cnn_tiny", count, image_size=32)
    data = json.loads(cache.read_text())
    data["entries"] = {key: stored for key in data["entries"]}
    cache.write_text(json.dumps(data))
    assert cached("macs", "cnn_tiny", count, image_size=32) == 1002 and count.calls == 2
    assert list(json.loads(cache.read_text())["entries"].values()) == [1002]


def test_an_unwritable_cache_folder_still_counts(tmp_path, monkeypatch, caplog):
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("HPSTUDY_CACHE_DIR", str(tmp_path / "a_file" / "cache"))  # no folder can be made there
    count = Counter()
    with caplog.at_level(logging.DEBUG, logger=model_counts.__name__):
        assert [cached("macs", "cnn_tiny", count, image_size=32) for _ in range(2)] == [1001, 1002]
    assert "could not write the cache" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_the_cache_folder_is_hpstudy_cache_dir_else_xdg_else_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HPSTUDY_CACHE_DIR", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert model_counts.cache_folder() == tmp_path / "own"
    monkeypatch.delenv("HPSTUDY_CACHE_DIR")
    assert model_counts.cache_folder() == tmp_path / "xdg" / "hpstudy"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert model_counts.cache_folder() == tmp_path / "home" / ".cache" / "hpstudy"


WRITER = """
import sys
from hpstudy.trainers.model_counts import cached
for i in range(40):
    cached("macs", "cnn_tiny", lambda: {"macs": i}, image_size=32, writer=int(sys.argv[1]), i=i)
"""


def test_concurrent_writers_leave_valid_json(cache):
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(n)], cwd=REPO) for n in range(4)]
    reads = 0
    while any(w.poll() is None for w in writers):
        if cache.is_file():  # each read finds a whole file, never one half written
            data = json.loads(cache.read_text())
            assert data["format"] == model_counts.FORMAT and isinstance(data["entries"], dict)
            reads += 1
    assert [w.wait() for w in writers] == [0] * 4
    entries = json.loads(cache.read_text())["entries"]
    assert entries and all(isinstance(v, int) for v in entries.values()) and reads
    assert [p.name for p in cache.parent.iterdir()] == [FILE]  # no temp file left behind


PLAN = """
import json, sys
from hpstudy.study.gpu_plan import memory_plan, memory_trials
from hpstudy.study.spec import check_models, load_spec
from hpstudy.trainers.flops import model_profile
spec = load_spec(sys.argv[1])
check_models(spec)
lines = memory_plan(spec, memory_trials(spec), 40.0)
lines += [str(model_profile(m, 10, spec.dataset.size)) for m in spec.models]
print(json.dumps({"lines": lines, "heavy": sorted({m.split(".")[0] for m in sys.modules} & {"torch", "timm"})}))
"""


def _in_fresh_python(code: str, *argv: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two fresh interpreters importing torch: ~9 s
def test_checking_and_planning_a_spec_again_imports_no_torch(cache, tmp_path):
    """check_models, the memory plan and the FLOPs of a plan, in a fresh interpreter: torch and timm the first
    time (counting), neither the second (every count read back), and the same lines."""
    spec = write_spec(tmp_path, small_spec(models=["vit_p_tiny", "cnn_tiny"], resources={"cpu": 1, "gpu": 1}))
    first, second = (_in_fresh_python(PLAN, spec) for _ in range(2))
    assert first["heavy"] == ["timm", "torch"] and second["heavy"] == []
    assert second["lines"] == first["lines"] and "DOES NOT FIT" not in "".join(first["lines"])


DRY_RUN = """
import json, sys
from hpstudy.cli import hpstudy_main
assert hpstudy_main(["run", "--config", sys.argv[1], "--store", sys.argv[2], "--dry-run"]) == 0
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "timm"})))
"""


@pytest.mark.slow  # two fresh interpreters importing torch: ~9 s
def test_a_second_dry_run_imports_no_torch(cache, tmp_path):
    """The whole dry run of a CPU study, once its counts are cached, in a fresh interpreter: no torch, no timm
    (fusion's plan reads hpstudy.trainers.fused_spec; GPUs are counted only when a trial asks for one)."""
    spec = write_spec(tmp_path, small_spec(models=["cnn_tiny"], optimizers=["sgd"]))
    store = str(tmp_path / "store")
    # each run in a fresh interpreter: in this one, counts made by earlier tests sit in memory (lru_cache) and
    # a dry run would not write them to the cache folder
    assert _in_fresh_python(DRY_RUN, spec, store) == ["timm", "torch"]  # counts, and fills the cache
    assert _in_fresh_python(DRY_RUN, spec, store) == []
