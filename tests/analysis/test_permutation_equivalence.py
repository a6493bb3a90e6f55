"""The permutation tests' fast statistics give what the straightforward ones gave, bit for bit (#41): the same
splits from the same seeds and block numbers, the same minimum laws and Mann-Whitney probabilities per split,
the same hit counts and p-values, over generated samples (Hypothesis: sizes, n_a != n_b, ties, grids of k of
N, continuous errors). The references below are the code the fast paths replaced: every split sorted."""

import numpy as np
import pytest
import scipy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpstudy.analysis import inference, permutation
from hpstudy.analysis.inference import DIGITS, TAIL, _law

WEIGHTS = (1.0, -1.0)


def reference_split_laws(values, splits, n_a):
    """Each split's two minimum laws, every split's groups sorted."""
    a = np.sort(np.where(splits, values, np.inf), axis=1)[:, : min(n_a, TAIL + 1)]
    n_b = splits.shape[1] - n_a
    b = np.sort(np.where(splits, np.inf, values), axis=1)[:, : min(n_b, TAIL + 1)]
    return [_law(a, n_a), _law(b, n_b)]


def reference_nearer_prob(values, is_a, n_a):
    """P(a nearer its best): Δs merged into ties within a millionth of the range (a stable sort, each run
    replaced by its first), ranked by scipy, U of b over n_a n_b."""
    v = np.broadcast_to(values, is_a.shape)
    best_a = np.where(is_a, v, np.inf).min(-1, keepdims=True)
    best_b = np.where(is_a, np.inf, v).min(-1, keepdims=True)
    delta = v - np.where(is_a, best_a, best_b)
    order = np.argsort(delta, axis=-1, kind="stable")
    ordered = np.take_along_axis(delta, order, -1)
    starts = np.ones(ordered.shape, bool)
    starts[..., 1:] = np.diff(ordered, axis=-1) > 1e-6 * float(np.max(values) - np.min(values))
    first = np.maximum.accumulate(np.where(starts, np.arange(ordered.shape[-1]), 0), axis=-1)
    merged = np.empty_like(ordered)
    np.put_along_axis(merged, order, np.take_along_axis(ordered, first, -1), -1)
    n_b = is_a.shape[-1] - n_a
    u_b = np.where(is_a, 0.0, scipy.stats.rankdata(merged, axis=-1)).sum(-1) - n_b * (n_b + 1) / 2
    return u_b / (n_a * n_b)


def reference_splits(n_a, total, seed, blocks):
    """The random splits of these blocks, drawn as permutation_p drew them: a full argsort per split."""
    keys = [np.random.default_rng([*seed, b]).random((permutation.BLOCK, total)) for b in blocks]
    return np.argsort(np.concatenate(keys), axis=1) < n_a


def samples(draw_n=st.integers(1, 30)):
    """Two samples (n_a != n_b allowed) of errors continuous, on a coarse grid of k of N, or two values."""
    kind = st.sampled_from(["continuous", "grid", "two"])

    @st.composite
    def pair(draw):
        how = draw(kind)
        n = [draw(draw_n), draw(draw_n)]
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        shift = draw(st.sampled_from([0.0, 0.5, 3.0]))
        out = []
        for k, loc in zip(n, [10.0, 10.0 + shift]):
            e = loc + rng.gamma(2.0, 2.0, k)
            if how == "grid":
                e = np.round(e * 3) / 3  # errors of k of 300 images, in percent: many ties
            elif how == "two":
                e = np.where(rng.random(k) < 0.5, 10.0, 12.5)
            out.append(e)
        return out

    return pair()


def recorded(extreme, masks):
    """`extreme`, keeping every batch of splits it judges."""

    def judge(splits):
        masks.append(splits.copy())
        return extreme(splits)

    return judge


def best_extremes(x, y):
    """The best contrast's judge of splits, fast and reference, for the pooled samples x then y."""
    values = np.concatenate([x, y])
    raw = inference.raw_p([x, y], WEIGHTS)
    order = np.argsort(values)
    fast = lambda s: inference.raw_ps(inference._split_laws(values[order], order, s, len(x)), WEIGHTS) <= raw + 1e-12
    ref = lambda s: inference.raw_ps(reference_split_laws(values, s, len(x)), WEIGHTS) <= raw + 1e-12
    return fast, ref


def delta_extremes(x, y):
    """The Δ-EDF test's judge of splits, fast and reference."""
    values = np.concatenate([x, y])
    observed = float(reference_nearer_prob(values, (np.arange(len(values)) < len(x))[None, :], len(x))[0])
    far = lambda prob: np.abs(prob - 0.5) >= abs(observed - 0.5) - 1e-9
    fast = lambda s: far(inference.nearer_prob(values, s, len(x)))
    ref = lambda s: far(reference_nearer_prob(values, s, len(x)))
    return fast, ref


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])  # one setting for all
@given(pair=samples(), seed=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=3), blocks=st.integers(1, 3))
@pytest.mark.parametrize("extremes", [best_extremes, delta_extremes])
def test_the_same_splits_and_hit_counts(monkeypatch, extremes, pair, seed, blocks):
    """permutation_p's splits are the reference's for every seed and block (several chunks a block), and the
    fast judge counts exactly the reference's hits, split by split."""
    x, y = pair
    total = len(x) + len(y)
    monkeypatch.setattr(permutation, "CHUNK_VALUES", 300 * total)  # blocks of BLOCK splits in 4 chunks
    fast, ref = extremes(x, y)
    masks: list = []
    first = blocks * permutation.BLOCK
    got = permutation.permutation_p(len(x), total, recorded(fast, masks), (), seed, first)
    want = permutation.permutation_p(len(x), total, ref, (), seed, first)
    splits = np.concatenate(masks)
    if got.exact:
        np.testing.assert_array_equal(splits, permutation.exact_splits(len(x), total))
    else:
        np.testing.assert_array_equal(splits, reference_splits(len(x), total, seed, range(blocks)))
    np.testing.assert_array_equal(fast(splits), ref(splits))
    assert got == want


@settings(max_examples=60)
@given(pair=samples(st.integers(1, 80)), seed=st.integers(0, 2**32 - 1))
def test_split_laws_and_nearer_probs_are_the_references(pair, seed):
    """On random splits (rows of n_a True), the minimum laws and the nearer-probabilities are identical."""
    x, y = pair
    values = np.concatenate([x, y])
    keys = np.random.default_rng(seed).random((64, len(values)))
    splits = np.argsort(keys, axis=1) < len(x)
    order = np.argsort(values)
    for (fv, fp), (rv, rp) in zip(
        inference._split_laws(values[order], order, splits, len(x)), reference_split_laws(values, splits, len(x))
    ):
        np.testing.assert_array_equal(fv, rv)
        np.testing.assert_array_equal(fp, rp)
    np.testing.assert_array_equal(
        inference.nearer_prob(values, splits, len(x)), reference_nearer_prob(values, splits, len(x))
    )


ATOMS = st.one_of(
    st.sampled_from([0.0, -0.0, 1e-5, -1e-5, 0.00005, 12.34565, -3.5, 7.25, 1e9, 1e12]),  # ties, mostly
    st.floats(-200.0, 200.0),
    st.floats(allow_nan=True, allow_infinity=True),
)


@settings(max_examples=200)
@given(
    rows=st.integers(1, 4).flatmap(
        lambda k: st.lists(st.lists(ATOMS, min_size=k * 50, max_size=k * 50), min_size=1, max_size=3)
    )
)
def test_the_atoms_order_is_the_stable_sort(rows):
    """The half laws' atoms in the order of a stable argsort of the rounded values: ties, signed zeros, values
    too big for integer keys, NaN and inf included."""
    with np.errstate(over="ignore", invalid="ignore"):  # the largest floats overflow when rounded
        rounded = np.round(np.array(rows, float), DIGITS)
        np.testing.assert_array_equal(inference._stable_order(rounded), np.argsort(rounded, axis=1, kind="stable"))


def test_calibration_and_tests_are_the_references(monkeypatch):
    """End to end, null raw p's of a four-group contrast and the two tests' p-values are the references'."""
    rng = np.random.default_rng(41)
    x, y = np.round(rng.gamma(2.0, 2.0, 300) * 3) / 3 + 10, np.round(rng.gamma(2.0, 2.2, 260) * 3) / 3 + 11
    n, weights = (300, 260, 280, 270), (1.0, -1.0, -1.0, 1.0)
    fast = [inference.null_raw_ps.__wrapped__(n, weights, 0), inference.best_contrast([x, y], WEIGHTS)]
    fast.append(inference.delta_test(x, y))
    monkeypatch.setattr(inference, "_stable_order", lambda v: np.argsort(v, axis=1, kind="stable"))
    monkeypatch.setattr(inference, "nearer_prob", reference_nearer_prob)
    monkeypatch.setattr(
        inference, "_split_laws", lambda o, order, s, k: reference_split_laws(o[np.argsort(order)], s, k)
    )
    np.testing.assert_array_equal(fast[0], inference.null_raw_ps.__wrapped__(n, weights, 0))
    assert fast[1] == inference.best_contrast([x, y], WEIGHTS)
    assert fast[2] == inference.delta_test(x, y)
