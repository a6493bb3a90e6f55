"""The store-writing Tune callback (study/tune_store_writer.py), driven directly with the real store."""

from types import SimpleNamespace

from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store_read import load_trials
from hpstudy.study.tune_store_writer import StoreWriter
from tests.helpers import small_spec


def test_a_stop_study_error_fails_its_group_and_keeps_the_first_reason(tmp_path):
    trials = expand(parse_spec(small_spec(name="w", models=["cnn_tiny"], optimizers=["sgd"], samples=3)))
    keys = [t.key for t in trials]
    writer = StoreWriter(str(tmp_path), "w", trials, [{"keys": keys[:2]}, {"keys": keys[2:]}])
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 0}), {"trial_error": "no GPU", "stop_study": True})
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 1}), {"trial_error": "bad", "stop_study": True})
    assert writer.stop_reason == "no GPU" and writer.fault is None
    stored = load_trials(str(tmp_path), "w").set_index("trial_key")
    assert stored.loc[keys, "error"].tolist() == ["no GPU", "no GPU", "bad"]
    assert set(stored["status"]) == {"failed"} and writer.tally.statuses == {"failed": 3}
