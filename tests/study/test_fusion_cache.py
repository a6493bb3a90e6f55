"""`fuse: auto`'s probe cache (study/fusion_cache.py, study/fusion.py): measured once per machine and
probe, read back from then on; a file that cannot be read is ignored with a warning and rewritten."""

import dataclasses
import json
import logging
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpstudy.study.fusion import fusion_sizes, probed
from hpstudy.study.fusion_cache import FORMAT, Probe, cache_key, cache_path, lookup, machine, store
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from tests.helpers import SMALL, logged, small_spec

# a probe small enough to measure on one CPU in a few seconds
TINY = Probe(
    model="cnn_tiny",
    optimizer="adamw",
    batch_size=4,
    image_size=8,
    k=2,
    device="cpu",
    dtype="float32",
    compile="off",
    cpus=1,
    gpu=0.0,
)
HERE = {"host": "node-a", "device_name": "cpu", "torch": "2.5.1"}


def test_a_real_measurement_is_kept_and_read_back_unchanged(tmp_path):
    path = str(tmp_path / "cache" / "fusion.json")
    entry, cached = probed(TINY, path)
    assert not cached
    assert entry["result"]["speedup"] > 0 and entry["key"] == cache_key(TINY, machine(TINY))
    again, cached = probed(TINY, path)
    assert cached and again == entry  # read back: the same speedup, so the same verdict, without measuring
    assert json.loads(open(path).read()) == {"format": FORMAT, "entries": [entry]}
    other = dataclasses.replace(TINY, k=3)
    assert lookup(path, cache_key(other, machine(other))) is None  # another probe is not this one's entry


FIELDS = {
    "model": st.sampled_from(["vit_c_tiny", "vit_p_tiny", "timm:resnet10t"]),
    "device": st.sampled_from(["auto", "cuda", "cuda:1"]),
    "cpus": st.integers(2, 64),
    "gpu": st.sampled_from([0.25, 0.5, 1.0]),
    "k": st.integers(3, 16),
    "batch_size": st.integers(5, 512),
    "compile": st.sampled_from(["inductor", "graph"]),
}


@given(field=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_keys_differ_by_every_field_of_the_probe(field, data):
    """Another model, device, thread count (CPUs), GPU share, K, batch or compile mode is another entry."""
    changed = dataclasses.replace(TINY, **{field: data.draw(FIELDS[field])})
    assert cache_key(changed, HERE) != cache_key(TINY, HERE)


@given(part=st.sampled_from(sorted(HERE)), value=st.text(min_size=1, max_size=20))
def test_keys_differ_by_machine_device_name_and_torch(part, value):
    """The same probe on another host, GPU model or torch version is measured again."""
    other = dict(HERE, **{part: value})
    assert (cache_key(TINY, other) == cache_key(TINY, HERE)) == (value == HERE[part])


NOT_A_CACHE = [
    b"",
    b"{not json",
    b"\xff\xfe\x00garbage",
    json.dumps([1, 2]).encode(),
    json.dumps({"format": FORMAT + 1, "entries": []}).encode(),
    json.dumps({"format": FORMAT, "entries": [{"key": {}, "result": {"speedup": -1.0}}]}).encode(),
    json.dumps({"format": FORMAT, "entries": [{"key": {}, "result": {"speedup": "fast"}}]}).encode(),
    json.dumps({"format": FORMAT, "entries": [{"key": [], "result": {"speedup": 2.0}}]}).encode(),
    json.dumps({"format": FORMAT, "entries": "x"}).encode(),
    json.dumps({"tool": "someone else's", "entries": [{"key": {}, "result": {"speedup": 2.0}}]}).encode(),
]


@pytest.mark.parametrize("content", NOT_A_CACHE)
def test_a_corrupt_or_foreign_file_is_ignored_with_a_warning_and_rewritten(tmp_path, caplog, content):
    path = tmp_path / "fusion.json"
    path.write_bytes(content)
    key = cache_key(TINY, HERE)
    with caplog.at_level(logging.WARNING, logger="hpstudy.study.fusion_cache"):
        assert lookup(str(path), key) is None
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"fuse auto: ignored the cache {path} (")
    assert warning.endswith("); it is rewritten after the next measurement")
    entry = store(str(path), key, {"speedup": 1.5})
    caplog.clear()
    assert lookup(str(path), key) == entry and not caplog.records  # rewritten: read back without a warning
    assert not [name for name in os.listdir(tmp_path) if name != "fusion.json"]  # no temp file left


def test_an_unwritable_cache_is_a_warning_and_the_result_still_returned(tmp_path, caplog):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING, logger="hpstudy.study.fusion_cache"):
        entry = store(str(blocked / "fusion.json"), cache_key(TINY, HERE), {"speedup": 3.0})
    assert entry["result"] == {"speedup": 3.0}
    assert "could not write the cache" in caplog.text


def test_the_cache_folder_follows_hpstudy_cache_dir_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("HPSTUDY_CACHE_DIR", raising=False)
    assert cache_path() == str(tmp_path / "xdg" / "hpstudy" / "fusion.json")
    monkeypatch.setenv("HPSTUDY_CACHE_DIR", str(tmp_path / "own"))
    assert cache_path() == str(tmp_path / "own" / "fusion.json")


@pytest.mark.slow
def test_a_study_measures_on_a_local_ray_once_and_the_next_run_reads_the_verdict(tmp_path, monkeypatch, caplog):
    """A real local Ray: the first fusion_sizes measures on a worker and keeps it; the second starts no
    measurement (the cache is read on the driver) and decides the same."""
    import ray

    monkeypatch.setenv("HPSTUDY_CACHE_DIR", str(tmp_path))
    spec = parse_spec(
        small_spec(fuse="auto", models=["cnn_tiny"], optimizers=["adamw"], recipe=dict(SMALL["recipe"], batch_size=8))
    )
    ray.init(num_cpus=1, include_dashboard=False, address="local")
    try:
        with caplog.at_level(logging.INFO, logger="hpstudy"):
            first = fusion_sizes(spec, expand(spec), {"cpu": 1, "gpu": 0})
            (measured,) = logged(caplog)
            caplog.clear()
            os.utime(tmp_path / "fusion.json", (0, 0))
            second = fusion_sizes(spec, expand(spec), {"cpu": 1, "gpu": 0})
            (read,) = logged(caplog)
    finally:
        ray.shutdown()
    assert first == second
    assert measured.startswith("fuse auto: cnn_tiny: 3 fused run ") and "(measured now, kept in " in measured
    assert f"on this machine, read from {tmp_path / 'fusion.json'}: delete it to measure again)" in read
    assert os.stat(tmp_path / "fusion.json").st_mtime == 0  # read, not written again


def test_each_model_is_probed_as_its_trials_will_run(monkeypatch, caplog):
    """The probe carries the trials' compile mode, their CPUs (torch threads) and GPU share, so a cached verdict is
    never one measured for other resources (an out-of-memory while probing: tests/trainers/test_fused.py)."""
    from hpstudy.study import fusion

    probes = []

    def stand_in(probe, measure, here):
        probes.append(probe)
        return {"result": {"speedup": 1.0}}, "measured now"

    monkeypatch.setattr(fusion, "_probe", stand_in)
    spec = parse_spec(small_spec(fuse="auto", recipe=dict(SMALL["recipe"], compile="inductor")))
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        assert fusion_sizes(spec, expand(spec), {"cpu": 2, "gpu": 0.5}) == {}
    assert sorted(p.model for p in probes) == ["cnn_tiny", "vit_c_tiny"]
    assert {(p.compile, p.cpus, p.gpu, p.k, p.batch_size, p.image_size) for p in probes} == {
        ("inductor", 2, 0.5, 3, 64, 16)
    }
    assert logged(caplog)[-1] == (
        "fuse auto: vit_c_tiny: 3 fused run 1.00x the speed of 3 alone -> no fusion (measured now)"
    )
