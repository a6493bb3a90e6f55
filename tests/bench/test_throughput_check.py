import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_smoke_run_measures_every_section_and_rewrites_out_after_each(tmp_path):
    from bench.throughput_check import SECTIONS, SMOKE

    out = tmp_path / "throughput.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.throughput_check", "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert json.loads(out.read_text()) == result
    assert {name: result[name].get("error") for name in SECTIONS} == dict.fromkeys(SECTIONS)
    sweep = result["eager_batch_sweep"]
    assert set(sweep["images_per_s"]) == {str(b) for b in SMOKE.batches}
    assert sweep["host_reads_per_step"] == 0 and sweep["ops_per_step"] > 0
    assert result["fused_vs_foreach"]["images_per_s_fused"] > 0 and result["compiled_step"]["backend"] == "aot_eager"
    assert [len(result["concurrent_trials"][str(n)]["images_per_s"]) for n in SMOKE.concurrency] == [1, 2]
    assert result["fused_k8"]["k"] == 8 and result["fused_k8"]["speedup"] > 0
    warm = result["warm_setup"]
    assert {"off", "inductor"} <= set(warm) and all(warm[m]["warm_setup_s_median"] > 0 for m in ("off", "inductor"))
    rates = {k: v for k, v in result["resident_input"].items() if k.endswith("_images_per_s")}
    assert sorted(rates) == sorted(
        f"prepared_{m}_{a}_images_per_s" for m in ("mapped", "resident") for a in ("plain", "aa")
    )
    assert min(rates.values()) > 0


def test_an_unknown_section_is_named_and_nothing_runs(monkeypatch, capsys):
    from bench.throughput_check import SECTIONS, main

    monkeypatch.setattr(sys, "argv", ["throughput_check", "--smoke", "--only", "no_such_section"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    result = json.loads(capsys.readouterr().out)
    assert "--only: no section named no_such_section; allowed: eager_batch_sweep" in result["error"]
    assert not set(SECTIONS) & set(result)
