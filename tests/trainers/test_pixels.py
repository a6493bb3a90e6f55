"""Which pixels a trial sees on each input path. Coordinate images (channel 0 encodes the row, channel 1
the column, channel 2 names the image) go through the crops, flips and resizes; the expected pixels are
derived by hand (bilinear sampling of a linear ramp is the ramp) or made by torchvision's own ops."""

from __future__ import annotations

import math
import pickle
from typing import TYPE_CHECKING

import numpy as np
import pytest
from PIL import Image

if TYPE_CHECKING:
    import torch


ROW, COL = 7, 7  # ramp steps: channel 0 = ROW * row, channel 1 = COL * col


def coordinates(height: int, width: int, name: int = 100) -> torch.Tensor:
    """A uint8 CHW image whose pixel (r, c) is (ROW * r, COL * c, name)."""
    import torch

    rows = torch.arange(height)[:, None].expand(height, width) * ROW
    cols = torch.arange(width)[None, :].expand(height, width) * COL
    return torch.stack([rows, cols, torch.full_like(rows, name)]).to(torch.uint8)


def test_the_imagenet_statistics_are_timms():
    import timm.data

    from hpstudy.trainers.prepared import IMAGENET_MEAN, IMAGENET_STD

    assert (IMAGENET_MEAN, IMAGENET_STD) == (timm.data.IMAGENET_DEFAULT_MEAN, timm.data.IMAGENET_DEFAULT_STD)


@pytest.fixture(scope="module")
def squares(tmp_path_factory):
    """A folder of 10 lossless 32 px coordinate images (image i in class i % 2, named 10 * i + 20)."""
    root = tmp_path_factory.mktemp("squares")
    for split in ("train", "val"):
        for i in range(10):
            folder = root / split / f"class{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(coordinates(32, 32, 10 * i + 20).permute(1, 2, 0).numpy()).save(folder / f"{i}.png")
    return root


def _sampled(start: float, extent: float, size: int, limit: int) -> np.ndarray:
    """Where bilinear resampling of [start, start + extent) to `size` pixels reads the source: pixel
    centres, clamped to the image's border pixels [0, limit - 1]."""
    return np.clip(start + (np.arange(size) + 0.5) * extent / size - 0.5, 0, limit - 1)


def test_prepared_batches_are_resized_crops_of_the_stored_squares_flipped_along_the_width(squares, tmp_path):
    """The stored 32 px squares are the source images; a 4-image batch crops a box of each (replayed from
    the trial's generator in the order the epoch draws: order, boxes, flips) and resizes it to 24 px."""
    import torch

    from hpstudy.trainers.augment import rrc_boxes
    from hpstudy.trainers.prepared import PreparedData, prepare

    out = str(tmp_path / "prep")
    prepare(str(squares), out, train_size=32, image_size=24, workers=1, progress=None)
    data = PreparedData(out, 24)
    stored = torch.from_numpy(np.array(data.train_x)).permute(0, 3, 1, 2)
    names = stored[:, 2, 0, 0].tolist()
    assert torch.equal(stored, torch.stack([coordinates(32, 32, n) for n in names]))  # kept exactly
    batches = list(data.train_loader(4, torch.Generator().manual_seed(7)))
    replay = torch.Generator().manual_seed(7)
    order = torch.randperm(10, generator=replay)
    assert len(batches) == 2  # 10 // 4 steps: the partial batch is dropped
    flipped = []
    for step, (x, y) in enumerate(batches):
        index = order[4 * step : 4 * step + 4]
        boxes = rrc_boxes(torch.full((4,), 32), torch.full((4,), 32), replay)
        flips = torch.rand(4, generator=replay) < 0.5
        assert x.shape == (4, 3, 24, 24) and x.dtype == torch.uint8
        assert y.tolist() == [int(data.train_y[i]) for i in index]
        for image, i, (top, left, h, w), flip in zip(x, index, boxes.tolist(), flips):
            assert (image[2] == names[i]).all()  # the image drawn, its brightness untouched
            rows = ROW * _sampled(top, h, 24, 32)
            cols = COL * _sampled(left, w, 24, 32)[:: -1 if flip else 1]
            assert np.abs(image[0].numpy() - rows[:, None]).max() <= 1
            assert np.abs(image[1].numpy() - cols[None, :]).max() <= 1
            flipped.append(bool(flip))
    assert 0 < sum(flipped) < 8
    visited = [names[i] for i in order[:8]]
    assert sorted(int(x[b, 2, 0, 0]) for x, _ in batches for b in range(4)) == sorted(visited)
    assert len(set(visited)) == 8


def test_a_preparation_is_reused_only_at_the_sizes_it_was_made_for(squares, tmp_path):
    from hpstudy.trainers.prepared import PreparedData, prepare

    out = str(tmp_path / "prep")
    assert not prepare(str(squares), out, train_size=32, image_size=24, workers=1, progress=None)["reused"]
    assert prepare(str(squares), out, train_size=32, image_size=24, workers=1, progress=None)["reused"]
    for train_size, image_size in ((32, 16), (40, 16)):
        meta = prepare(str(squares), out, train_size=train_size, image_size=image_size, workers=1, progress=None)
        data = PreparedData(out, image_size)
        assert not meta["reused"] and data.train_x.shape[1:3] == (train_size,) * 2
        assert data.val_x.shape[1:3] == (image_size,) * 2


def test_device_decoded_crops_are_torchvisions_resized_crops_flipped_along_the_width():
    import torch
    from torchvision.transforms.v2 import functional as TF

    from hpstudy.trainers.augment import rrc_boxes
    from hpstudy.trainers.device_decode import train_crops

    images = [coordinates(30, 36, 1), coordinates(36, 30, 2), coordinates(20, 34, 3), coordinates(33, 33, 4)] * 4
    out = train_crops(images, 16, torch.Generator().manual_seed(3))
    replay = torch.Generator().manual_seed(3)
    heights, widths = torch.tensor([i.shape[1] for i in images]), torch.tensor([i.shape[2] for i in images])
    boxes = rrc_boxes(heights, widths, replay).long().tolist()
    flips = (torch.rand(len(images), generator=replay) < 0.5).tolist()
    assert 0 < sum(flips) < len(images)
    for image, crop, box, flip in zip(images, out, boxes, flips):
        expected = TF.resized_crop(image, *box, [16, 16], interpolation=TF.InterpolationMode.BILINEAR, antialias=True)
        assert torch.equal(crop, expected.flip(-1) if flip else expected)
        cols = crop[1, 8].double()  # one row of the column ramp: falls along the width when mirrored
        assert (cols.diff() <= 0).all() if flip else (cols.diff() >= 0).all()
        # the row ramp runs down, never across (±1: the oldest torchvision rounds its uint8 resize so)
        assert (crop[0].double().diff(dim=1).abs() <= 1).all()


@pytest.mark.parametrize("height,width,top,left", [(22, 30, 1, 5), (30, 22, 5, 1), (22, 22, 1, 1)])
def test_device_decoded_validation_images_are_timms_centre_crop(height, width, top, left):
    """At 20 px timm resizes the short side to floor(20 / 0.875) = 22 px (here: already 22, nothing
    resampled) and keeps the centre 20 px: the margins are round((22 - 20) / 2) and round((30 - 20) / 2)."""
    import torch

    from hpstudy.trainers.device_decode import eval_crops

    image = coordinates(height, width)
    assert torch.equal(eval_crops([image], 20)[0], image[:, top : top + 20, left : left + 20])


def _write_cifar10(root, n_per_batch=20):
    """CIFAR-10's python batches of white images (their padding shows as black borders)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": np.full((n_per_batch, 3072), 255, np.uint8), b"labels": [0] * n_per_batch}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    return str(root)


@pytest.mark.parametrize("size,pad", [(32, 4), (16, 2), (7, 1)])
def test_cifar_crops_shift_by_up_to_an_eighth_of_the_side_at_least_one_pixel(size, pad, tmp_path):
    """CIFAR's standard augmentation: pad 4 px at 32 px (1/8 of the side, at least 1) and crop at a
    random offset; each image's shift is read off the black rows and columns the padding brings in."""
    import torch

    from hpstudy.trainers.data import TensorEpochs, load_cifar_data

    data = load_cifar_data("cifar10", _write_cifar10(tmp_path), size)
    shifts = []
    for x, _ in TensorEpochs(data, 25, torch.Generator().manual_seed(0)):
        for image in x[:, 0]:
            black_rows = (image == 0).all(1).tolist()
            black_cols = (image == 0).all(0).tolist()
            assert (image > 0).sum() == (size - sum(black_rows)) * (size - sum(black_cols))
            shift = lambda black: black.index(False) if black[0] else -black[::-1].index(False)
            shifts.append((shift(black_rows), shift(black_cols)))
    assert len(shifts) == 100
    for axis in (0, 1):
        assert {s[axis] for s in shifts} == set(range(-pad, pad + 1))
    assert math.isclose(sum(s == (0, 0) for s in shifts) / 100, 1 / (2 * pad + 1) ** 2, abs_tol=0.1)
