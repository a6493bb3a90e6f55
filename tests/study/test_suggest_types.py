"""`hpstudy.suggest`'s points are plain Python values: a notebook shows 0.00195, not np.float64(0.00195)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis.stats import good_ranges
from hpstudy.study.store.layout import write_trial
from hpstudy.study.suggest import suggestion
from tests.helpers import stored_row

PLAIN = (float, int, str, bool, type(None))


def _plain(value) -> bool:
    """Whether `value` is built of Python's own scalars, tuples, lists and dicts only (no numpy scalar)."""
    if isinstance(value, dict):
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return type(value) in PLAIN


ROW = st.tuples(
    st.sampled_from([("cnn_tiny", "adamw"), ("cnn_tiny", "sgd"), ("vit_c_tiny", "adamw")]),
    st.floats(-5, -1),  # log10 lr
    st.floats(-6, -1),  # log10 wd
    st.sampled_from(["ok", "ok", "diverged", "failed"]),
    st.floats(0.5, 90),  # top-1 error
)


@settings(max_examples=10, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=12))
def test_every_value_of_every_point_is_a_plain_python_value(tmp_path_factory, rows):
    store = str(tmp_path_factory.mktemp("store"))
    for i, ((model, optimizer), log_lr, log_wd, status, err) in enumerate(rows):
        row = dict(model=model, family=model[:-5], optimizer=optimizer, epochs=3, lr=10**log_lr, wd=10**log_wd)
        write_trial(
            store,
            "s",
            stored_row(trial_key=f"k{i}", status=status, top1_err=None if status == "failed" else err, **row),
        )
    points = suggestion(store, "s", good_ranges)["points"]
    assert points and all(_plain(point) for point in points), points
    assert all(type(p["lr"]) is float and type(p["wd"]) is float for p in points if p["lr"] is not None)
