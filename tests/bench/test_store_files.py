import pyarrow.parquet as pq
import pytest

from bench.store_files import STUDY, TARGET_PEAK_MB, TARGET_RATIO, compare, run_child, write_files
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.trainers.schema import TRIAL_SCHEMA


@pytest.mark.parametrize("files,epochs", [(3, 2), (5, 0)])
def test_the_bench_writes_one_complete_row_a_file_as_a_run_does(files, epochs, tmp_path):
    write_files(str(tmp_path), files, epochs)
    written = sorted((tmp_path / f"trials/study={STUDY}").iterdir())
    assert len(written) == files and all(pq.read_metadata(path).num_rows == 1 for path in written)
    assert all(pq.read_schema(path) == TRIAL_SCHEMA for path in written)
    trials = load_trials(str(tmp_path), STUDY)
    # a trial trained from scratch, without EMA, that did not fail: null only where such a trial's row is
    unset = ["init_sha256", "ema_top1_err", "best_ema_top1_err", "head_reinit", "error"]
    assert len(trials) == files and trials.drop(columns=unset).notna().all().all()
    assert len(load_epochs(str(tmp_path), STUDY)) == files * epochs


def test_a_reader_in_its_own_process_reports_its_rows_time_and_peak(tmp_path):
    write_files(str(tmp_path), 4, 1)
    result = run_child("load_epochs", str(tmp_path), 8 * 2**30)
    assert result["rows"] == 4 and result["peak_rss_mb"] > 0 and 0 <= result["call_s"] <= result["wall_s"]
    assert "failed" in run_child("load_trials", str(tmp_path), 2**20)  # 1 MiB: no interpreter starts in it


def _run(call_s: float, peak: int) -> dict:
    return {"wall_s": call_s + 1, "call_s": call_s, "cpu_s": call_s, "peak_rss_mb": peak, "rows": 1}


@pytest.mark.parametrize("ratio", [0.5, TARGET_RATIO, TARGET_RATIO * 1.5])
@pytest.mark.parametrize("peak", [100, TARGET_PEAK_MB, TARGET_PEAK_MB + 1])
def test_a_reader_meets_the_targets_only_within_both(ratio, peak):
    verdicts = compare({"r": _run(2.0 * ratio, peak)}, _run(9.0, peak), {"r": _run(2.0, 50)})
    verdict = verdicts["r"]
    assert verdict["peak_met"] == (peak <= TARGET_PEAK_MB) and verdict["time_met"] == (ratio <= TARGET_RATIO)
    assert verdict["call_s_ratio"] == pytest.approx(ratio, abs=0.05)
    assert verdicts["compact"] == {"peak_met": peak <= TARGET_PEAK_MB}  # the compaction: its peak only
    failed = compare({"r": {"failed": "exit 1"}}, {"failed": "exit 1"}, {"r": _run(2.0, 50)})
    assert failed == {"r": {"peak_met": False, "time_met": False}, "compact": {"peak_met": False}}
