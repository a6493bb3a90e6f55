"""TensorBoard runs named for a reader (study/trackers.py run_folder): model, optimizer, epochs and the key's
first 8 digits, not the key alone; which trials a folder holds is still read back by their full keys."""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.study.trackers import TensorBoardTracker, run_folder

ROWS = st.fixed_dictionaries(
    {
        "study": st.just("s"),
        "model": st.sampled_from(["vit_c_tiny", "cnn_tiny", "timm:resnet10t", "timm:hf-hub:org/vit"]),
        "optimizer": st.sampled_from(["adamw", "sgd"]),
        "epochs": st.integers(1, 400),
        "trial_key": st.text("0123456789abcdef", min_size=20, max_size=20),
        "status": st.sampled_from(["ok", "diverged", "failed"]),
        "top1_err": st.floats(0, 90),
        "lr": st.floats(1e-5, 1.0),
    }
)


@given(row=ROWS)
def test_a_run_is_named_by_model_optimizer_epochs_and_key_prefix(row):
    name = run_folder(row)
    model, run = name.split(os.sep)
    assert model == row["model"].replace(":", "-").replace("/", "-")
    assert run == f"{row['optimizer']}-{row['epochs']}ep-{row['trial_key'][:8]}"
    assert ":" not in name and row["trial_key"] not in name


@settings(max_examples=20, deadline=None)
@given(rows=st.lists(ROWS, min_size=1, max_size=6, unique_by=lambda r: r["trial_key"]))
def test_the_trials_held_are_read_back_by_their_full_keys(tmp_path_factory, rows):
    """Every ok or diverged trial written is held under its key, a failed one is not, and a folder an earlier
    hpstudy named by the key (<study>/<key>/) still counts as that key's."""
    folder = tmp_path_factory.mktemp("tb")
    tracker = TensorBoardTracker(str(folder))
    for row in rows:
        tracker.log_trial(row, [{"epoch": 1, "top1_err": row["top1_err"]}])
    old = folder / "s" / ("f" * 20)
    old.mkdir()
    (old / "events.out.tfevents.1700000000.host.example.ok").write_bytes(b"")
    held = {r["trial_key"] for r in rows if r["status"] != "failed"} | {"f" * 20}
    assert tracker.logged_keys("s") == held
    assert tracker.logged_keys("another") == set()
