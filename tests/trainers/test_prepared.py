"""A prepared image folder served as training and validation batches (hpstudy.trainers.prepared)."""

import os
import re

import pytest

from hpstudy.trainers.errors import DataError
from tests.helpers import image_folder


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A preparation (train squares 32 px, validation 24 px) of 8 training and 8 validation images."""
    from hpstudy.trainers.prepared import prepare

    root = tmp_path_factory.mktemp("prepared")
    out = str(root / "prep")
    prepare(image_folder(root / "imgs"), out, train_size=32, image_size=24, workers=1, progress=None)
    return out


def test_a_preparation_opened_at_another_size_names_the_size_it_was_made_for(prepared):
    from hpstudy.trainers.prepared import PreparedData

    message = rf"^dataset.image_size: bad value 32; '{re.escape(prepared)}' was prepared for 24 px"
    with pytest.raises(DataError, match=message):
        PreparedData(prepared, 32)


def test_training_batches_are_delivered_on_the_device_asked_for(prepared):
    """The meta device stands in for a GPU; None is the CPU."""
    import torch

    from hpstudy.trainers.prepared import PreparedData

    data = PreparedData(prepared, 24)
    for device, kind in ((torch.device("meta"), "meta"), (None, "cpu")):
        x, y = next(iter(data.train_loader(4, torch.Generator().manual_seed(0), device=device)))
        assert x.device.type == kind and x.shape == (4, 3, 24, 24) and x.dtype == torch.uint8


def test_auto_augment_changes_the_training_batches_it_is_asked_for(prepared):
    """The same draws crop the same images; AutoAugment then changes some of them (seed 0: most of 8)."""
    import torch

    from hpstudy.trainers.prepared import PreparedData

    loader = lambda policy: PreparedData(prepared, 24, policy).train_loader(8, torch.Generator().manual_seed(0))
    first = lambda policy: next(iter(loader(policy)))
    (plain, labels), (augmented, same_labels) = first(None), first("original")
    assert torch.equal(labels, same_labels)
    assert sum(not torch.equal(a, b) for a, b in zip(plain, augmented)) >= 4


def test_an_image_that_cannot_be_read_is_named_with_the_reason(tmp_path):
    """An image listed but gone when its decoding job runs (deleted meanwhile)."""
    from hpstudy.trainers.prepared import _decode

    gone = os.path.join(tmp_path, "0.JPEG")
    reason = r"\(No such file or directory\); allowed: readable image files$"
    with pytest.raises(DataError, match=rf"^prepare: cannot read '{re.escape(gone)}' {reason}"):
        _decode((gone, "train", 32))
