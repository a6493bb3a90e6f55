"""The store-writing Tune callback (study/tune/store_writer.py), driven directly with the real store."""

from types import SimpleNamespace

from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.read import load_trials
from tests.helpers import small_spec


def test_a_stop_study_error_fails_its_group_and_keeps_the_first_reason(tmp_path):
    from hpstudy.study.tune.store_writer import StoreWriter

    trials = expand(parse_spec(small_spec(name="w", models=["cnn_tiny"], optimizers=["sgd"], samples=3)))
    keys = [t.key for t in trials]
    writer = StoreWriter(str(tmp_path), "w", trials, [{"keys": keys[:2]}, {"keys": keys[2:]}])
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 0}), {"trial_error": "no GPU", "stop_study": True})
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 1}), {"trial_error": "bad", "stop_study": True})
    assert writer.stop_reason == "no GPU" and writer.fault is None
    stored = load_trials(str(tmp_path), "w").set_index("trial_key")
    assert stored.loc[keys, "error"].tolist() == ["no GPU", "no GPU", "bad"]
    assert set(stored["status"]) == {"failed"} and writer.tally.statuses == {"failed": 3}


class StoreReadingTracker:
    """A tracker that, when handed a row, looks up what the store holds of that trial."""

    def __init__(self, store):
        self.store, self.seen = store, []

    def log_trial(self, row, epochs):
        self.seen.append((row["trial_key"], row["trial_key"] in set(load_trials(self.store, "w")["trial_key"])))

    def close(self):
        pass


def test_a_tracker_gets_a_row_only_once_the_store_holds_it(tmp_path):
    from hpstudy.study.tune.store_writer import StoreWriter

    trials = expand(parse_spec(small_spec(name="w", models=["cnn_tiny"], optimizers=["sgd"], samples=2)))
    keys = [t.key for t in trials]
    tracker = StoreReadingTracker(str(tmp_path))
    writer = StoreWriter(str(tmp_path), "w", trials, [{"keys": keys}], trackers=[tracker])
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 0}), {"trial_error": "boom"})
    assert tracker.seen == [(keys[0], True), (keys[1], True)]
    # a store that cannot be written: the row is not stored, so no tracker gets it
    (tmp_path / "file").write_text("")
    broken = StoreReadingTracker(str(tmp_path / "file"))
    writer = StoreWriter(str(tmp_path / "file"), "w", trials, [{"keys": keys}], trackers=[broken])
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 0}), {"trial_error": "boom"})
    assert writer.fault is not None and broken.seen == []
