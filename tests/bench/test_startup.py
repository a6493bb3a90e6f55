import pytest


def test_the_line_through_two_study_walls_splits_fixed_from_per_trial_cost():
    from bench.startup import line_through

    # 10 s fixed and 0.25 s a trial, whichever order the sizes come in
    for points in ([(4, 11.0), (64, 26.0)], [(64, 26.0), (4, 11.0)]):
        line = line_through(points)
        assert line["fixed_s"] == pytest.approx(10.0)
        assert line["per_trial_s"] == pytest.approx(0.25)


def test_one_study_size_twice_cannot_split_the_cost():
    from bench.startup import line_through

    with pytest.raises(ValueError, match="two different study sizes"):
        line_through([(8, 12.0), (8, 13.0)])


@pytest.mark.parametrize("text", ["4", "4,4", "4,6", "0,8", "a,8", "4,8,12", "-4,8"])
def test_trials_must_be_two_different_multiples_of_four(text):
    from bench.startup import parse_sizes

    with pytest.raises(ValueError, match=f"--trials: bad value '{text}'"):
        parse_sizes(text)


def test_trials_are_sorted():
    from bench.startup import parse_sizes

    assert parse_sizes("64,4") == [4, 64]
