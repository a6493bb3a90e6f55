"""The device AutoAugment's draws against the ImageNet policy table: what each image is given to apply."""

from collections import Counter

import pytest
import scipy


def _policy_distribution():
    """P(the operations an image applies), derived from torchvision's ImageNet policy table: a sub-policy
    drawn uniformly, each of its two operations applied with its own probability and a fair sign."""
    from torchvision.transforms.v2 import AutoAugment, AutoAugmentPolicy

    table = AutoAugment(AutoAugmentPolicy.IMAGENET)._policies
    assert len(table) == 25 and table[0] == (("Posterize", 0.4, 8), ("Rotate", 0.6, 9))  # the paper's first
    probs: Counter = Counter()
    for (op1, p1, m1), (op2, p2, m2) in table:
        for a1 in (False, True):
            for a2 in (False, True):
                for n1 in (False, True):
                    for n2 in (False, True):
                        ops = ((op1, m1, n1),) * a1 + ((op2, m2, n2),) * a2
                        probs[ops] += (p1 if a1 else 1 - p1) * (p2 if a2 else 1 - p2) / 25 / 4
    return {ops: p for ops, p in probs.items() if p > 0}  # an operation of probability 1 is never left out


def test_each_image_draws_a_sub_policy_its_operations_and_their_signs_with_the_tables_odds():
    import torch

    from hpstudy.trainers.augment import DeviceAutoAugment

    n = 20_000
    drawn = Counter(DeviceAutoAugment("original").draw(n, torch.Generator().manual_seed(0)))
    probs = _policy_distribution()
    assert set(drawn) <= set(probs) and min(probs.values()) * n >= 5  # every cell large enough for a chi-square
    observed, expected = zip(*((drawn[ops], p * n) for ops, p in probs.items()))
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-3
    assert drawn[()] / n == pytest.approx(probs[()], abs=0.01)  # images left as they are


@pytest.mark.parametrize("height,width,box", [(256, 320, (16, 48, 224)), (320, 256, (48, 16, 224)), (8, 8, (0, 0, 7))])
def test_the_centre_crop_box_keeps_seven_eighths_of_the_short_side_in_the_middle(height, width, box):
    """By hand: 256 * 0.875 = 224, centred (320 - 224) / 2 = 48; 8 * 0.875 = 7, the odd pixel left over at the end."""
    from hpstudy.trainers.augment import center_crop_box

    assert center_crop_box(height, width) == box
