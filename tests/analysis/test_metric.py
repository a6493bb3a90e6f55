"""Which rows and values count (analysis/metric.py): array samples with nulls, and left-out groups
named when the grouping columns are categorical (as a table read with categories may hold them)."""

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.metric import LeftOutWarning, finite, usable


def test_finite_leaves_out_nulls_of_a_plain_list_and_returns_floats():
    """A failed trial's error is null (None in a list): left out and counted; integers come back as floats."""
    with pytest.warns(LeftOutWarning, match=r"^errors: left out 1 of 3 values that are not finite"):
        values, n_left_out = finite([10, None, 12], "errors")
    assert n_left_out == 1 and values.dtype == np.float64 and values.tolist() == [10.0, 12.0]


def test_a_categorical_group_whose_trials_are_all_left_out_is_named():
    """Category c has no row at all and is not named; b lost both its rows and is."""
    frame = pd.DataFrame(
        {
            "model": pd.Categorical(["a", "a", "b", "b"], categories=["a", "b", "c"]),
            "status": ["ok", "ok", "failed", "ok"],
            "top1_err": [10.0, 11.0, np.nan, np.inf],
        }
    )
    with pytest.warns(LeftOutWarning, match=r"; model b: all 2 trials left out$"):
        rows = usable(frame, "final", "by_model", by=["model"])
    assert rows.kept["top1_err"].tolist() == [10.0, 11.0]
