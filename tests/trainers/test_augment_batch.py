"""The batch-vectorised device AutoAugment against torchvision applied to groups of images that drew
the same operations (the per-group path it replaces): the same pixels, the same draws, no host read."""

from collections import defaultdict

import pytest


@pytest.fixture(scope="module")
def aa():
    """One instance: its pixel maps are built once per image size."""
    from hpstudy.trainers.augment import DeviceAutoAugment

    return DeviceAutoAugment()


@pytest.fixture(scope="module")
def tv():
    """torchvision's AutoAugment with the ImageNet policy."""
    from torchvision.transforms.v2 import AutoAugment, AutoAugmentPolicy

    return AutoAugment(AutoAugmentPolicy.IMAGENET)


def _torchvision(tv, images, op, magnitude_idx, negative):
    """One operation on a group of images by torchvision's AutoAugment `tv`, its magnitude from its own table."""
    height, width = images.shape[-2:]
    magnitudes_fn, signed = tv._AUGMENTATION_SPACE[op]
    magnitudes = magnitudes_fn(10, height, width)
    magnitude = 0.0 if magnitudes is None else float(magnitudes[magnitude_idx])
    magnitude = -magnitude if signed and negative else magnitude
    return tv._apply_image_or_video_transform(images, op, magnitude, interpolation=tv.interpolation, fill=tv._fill)


def _per_group(tv, x, drawn):
    """Each group of images that drew the same operations transformed together, in order."""
    groups = defaultdict(list)
    for i, ops in enumerate(drawn):
        groups[ops].append(i)
    out = x.clone()
    for ops, members in groups.items():
        part = x[members]
        for op in ops:
            part = _torchvision(tv, part, *op)
        out[members] = part
    return out


def _batch(n=24, height=13, width=17, seed=0):
    """Random uint8 images, not square, with a flat one, a dark one and a two-level one (edge cases
    of AutoContrast, Equalize and Contrast's mean)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, height, width), dtype=torch.uint8, generator=g)
    x[0] = 77
    x[1] = torch.randint(0, 8, (3, height, width), dtype=torch.uint8, generator=g)
    x[2] = torch.randint(0, 2, (3, height, width), dtype=torch.uint8, generator=g) * 200
    return x


def test_every_operation_of_the_policy_at_every_magnitude_and_sign_equals_torchvision(aa, tv):
    """One batch per operation, its 20 images each with its own magnitude bin and sign."""
    import torch

    bins, negative = torch.arange(20) // 2, torch.arange(20) % 2 == 1
    x = _batch(n=20)
    assert set(aa.ops) == {op for sub in tv._policies for op, _, _ in sub} and len(aa.ops) == 10
    for op in aa.ops:
        out = aa.apply(x, op, bins, negative)
        for i in range(len(x)):
            expected = _torchvision(tv, x[i : i + 1], op, bins[i].item(), negative[i].item())
            assert torch.equal(out[i : i + 1], expected), (op, bins[i].item(), negative[i].item())
    assert torch.equal(aa.apply(x, "Posterize", 6, True), _torchvision(tv, x, "Posterize", 6, True))  # one for all


@pytest.mark.parametrize("seed", [0, 1])
def test_a_whole_batch_equals_the_per_group_path_and_consumes_the_same_draws(aa, tv, seed):
    import torch

    x = _batch(n=48, seed=seed)
    g = torch.Generator().manual_seed(seed)
    out = aa(x, g)
    reference = torch.Generator().manual_seed(seed)
    drawn = aa.draw(len(x), torch.Generator().manual_seed(seed))
    # the per-group path's draws: a sub-policy, whether each operation applies, each sign
    torch.randint(25, (len(x),), generator=reference), torch.rand(len(x), 2, generator=reference)
    torch.rand(len(x), 2, generator=reference)
    assert torch.equal(g.get_state(), reference.get_state())
    assert len(set(drawn)) > 10 and sum(map(len, drawn)) > len(x)  # many groups, most images changed
    assert torch.equal(out, _per_group(tv, x, drawn))
    assert torch.equal(aa(x, torch.Generator().manual_seed(seed)), out)  # reproducible


def test_the_batch_path_reads_nothing_on_the_host_and_its_kernels_do_not_grow_with_the_groups(aa):
    import torch

    from bench.op_count import OpCounter

    aa(_batch(n=4), torch.Generator())  # the first batch of a size builds its tables
    counts = {}
    for n in (4, 48):
        x, g = _batch(n=n), torch.Generator().manual_seed(3)
        groups = len(set(aa.draw(n, torch.Generator().manual_seed(3))))
        with OpCounter() as ops:
            aa(x, g)
        assert ops.host_reads == 0
        counts[groups] = ops.total
    (few, small), (many, large) = sorted(counts.items())
    assert many > 4 * few and small == large
