"""The dataset protocol (hpstudy.trainers.dataset.Dataset): every dataset class declares it, has its members
with its signatures, and serves uint8 NCHW image batches with int64 labels. Built on tiny data, no Ray."""

import inspect
import typing

import pytest

from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.dataset import Dataset
from tests.helpers import image_folder

MEMBERS = {"num_classes", "mean", "std", "num_train", "to", "steps_per_epoch", "train_loader", "val_loader"}
PER_CLASS = 5  # images per class and split in the image folder (two classes)
BATCH = 4
CLASSES = ("TensorData", "LoaderData", "DeviceDecodeData", "PreparedData")  # every dataset class, by name


@pytest.fixture(scope="module")
def classes() -> dict:
    """{name: class} of every dataset class."""
    from hpstudy.trainers.data import LoaderData, TensorData
    from hpstudy.trainers.device_decode import DeviceDecodeData
    from hpstudy.trainers.prepared import PreparedData

    return {cls.__name__: cls for cls in (TensorData, LoaderData, DeviceDecodeData, PreparedData)}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """{class name: (one of it on tiny data, its image side, its validation size)} for every dataset class."""
    from hpstudy.trainers.data import load_data
    from hpstudy.trainers.prepared import prepare

    root = tmp_path_factory.mktemp("data")
    folder = image_folder(root / "imgs", n=PER_CLASS, size=(20, 26))
    prepare(folder, str(root / "prepared"), train_size=20, image_size=16, workers=1, progress=None)
    images = DataSpec("imagefolder", path=folder, image_size=16)
    n_val = 2 * PER_CLASS
    return {
        "TensorData": (load_data(DataSpec("synthetic", num_classes=3, n_train=19, n_val=7, image_size=8)), 8, 7),
        "LoaderData": (load_data(images, num_workers=0), 16, n_val),
        "DeviceDecodeData": (load_data(images, num_workers=0, decode_on_device=True), 16, n_val),
        "PreparedData": (load_data(DataSpec("prepared", path=str(root / "prepared"), image_size=16)), 16, n_val),
    }


def _members(protocol) -> set:
    """The attributes, properties and methods a protocol declares."""
    return set(protocol.__annotations__) | {
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def _parameters(method) -> list:
    """(name, kind, default, annotation) of every parameter, string annotations resolved."""
    import torch

    hints = typing.get_type_hints(method, localns={"torch": torch})
    return [(p.name, p.kind, p.default, hints.get(p.name)) for p in inspect.signature(method).parameters.values()]


def test_the_protocol_declares_what_the_trainers_use_and_load_data_returns_it(classes):
    from hpstudy.trainers.data import load_data

    assert _members(Dataset) == MEMBERS
    assert typing.get_type_hints(load_data.__wrapped__)["return"] is Dataset
    assert all(Dataset in cls.__mro__ for cls in classes.values())  # declared, not only matching


@pytest.mark.parametrize("name", CLASSES)
def test_every_dataset_has_the_protocol_s_members_with_its_signatures(name, classes, datasets):
    import torch

    cls, (data, _, _) = classes[name], datasets[name]
    assert type(data) is cls and isinstance(data, Dataset)
    assert isinstance(data.num_classes, int) and data.num_classes >= 2 and isinstance(data.num_train, int)
    for stat in (data.mean, data.std):
        assert isinstance(stat, tuple) and len(stat) == 3 and all(0 < v < 1 for v in stat)
    for member in MEMBERS - set(Dataset.__annotations__) - {"num_train"}:
        assert _parameters(getattr(cls, member)) == _parameters(getattr(Dataset, member)), member
    assert isinstance(data.to(torch.device("cpu")), cls)


@pytest.mark.parametrize("name", CLASSES)
def test_an_epoch_and_a_validation_pass_are_uint8_nchw_images_with_int64_labels(name, datasets):
    import torch

    data, side, n_val = datasets[name]
    for loader, count in (
        (data.train_loader(BATCH, torch.Generator().manual_seed(0)), data.num_train // BATCH * BATCH),
        (data.val_loader(BATCH), n_val),
    ):
        batches = list(loader)
        for x, y in batches:
            assert x.dtype == torch.uint8 and x.shape[1:] == (3, side, side) and len(x) <= BATCH
            assert y.dtype == torch.int64 and y.shape == (len(x),)
            assert 0 <= y.min() and y.max() < data.num_classes
        assert sum(len(y) for _, y in batches) == count
    assert len(list(data.train_loader(BATCH, torch.Generator().manual_seed(1)))) == data.steps_per_epoch(BATCH)
