"""The permutation tests' first look at a bounded cost (permutation.first_look): FIRST splits up to 500 pooled
values, fewer above so that at most FIRST_VALUES values are permuted, and `sequential` draws on where the
verdict is not settled, so a big sample's verdict is the one a full first look gives."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpstudy.analysis import permutation
from hpstudy.analysis.inference import delta_test
from hpstudy.analysis.permutation import BLOCK, FIRST, FIRST_VALUES, first_look


@given(total=st.integers(2, 10**7), first=st.sampled_from([BLOCK, 4 * BLOCK, FIRST, 2 * FIRST]))
def test_the_first_look_is_whole_blocks_and_bounded_in_values(total, first):
    draws = first_look(total, first)
    assert draws % BLOCK == 0 and BLOCK <= draws <= max(first, BLOCK)
    assert draws * total <= max(FIRST_VALUES, BLOCK * total)
    if total * first <= FIRST_VALUES:
        assert draws == first


@pytest.mark.slow  # six Δ-EDF tests of 2,400 values, three with 10,000 splits first (~20 s)
@pytest.mark.parametrize("shift", [0.0, 0.15, 1.0])
def test_a_big_samples_verdict_is_the_full_first_looks(monkeypatch, shift):
    """2 x 1,200 trials on a grid of 1/360 (three shapes: the same, slightly and clearly different spreads):
    the bounded first look (2,000 splits) and a first look of FIRST splits give the same verdict."""
    rng = np.random.default_rng(7)
    ea = np.round(rng.gamma(2.0, 2.0, 1200) * 3.6) / 3.6 + 10
    eb = np.round(rng.gamma(2.0, 2.0 * (1 + shift), 1200) * 3.6) / 3.6 + 12
    assert first_look(len(ea) + len(eb)) == 2 * BLOCK < FIRST  # the bound is what this test runs
    bounded = delta_test(ea, eb)
    monkeypatch.setattr(permutation, "FIRST_VALUES", 10**12)
    full = delta_test(ea, eb)
    assert (bounded.test.p < 0.05) == (full.test.p < 0.05) and bounded.test.estimate == full.test.estimate
    assert bounded.test.mc is not None and full.test.mc is not None
