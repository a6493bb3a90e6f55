"""The dataset registry (hpstudy.trainers.data_spec.DATASETS): a dataset is one `register_dataset` entry, and
that entry is what the spec's checks, the path check, load_data and the dry run read."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from hpstudy.commands import print_plan
from hpstudy.service import plan
from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.trainers.data_spec import (
    DATASETS,
    DatasetKind,
    DataSpec,
    check_data_path,
    nominal_classes,
    nominal_train_size,
    register_dataset,
)
from hpstudy.trainers.errors import DataError
from tests.helpers import small_spec

if TYPE_CHECKING:
    from hpstudy.trainers.data import TensorData

TINY_TRAIN = 123  # the nominal size the dry run prices (the loader below makes fewer)
BUILT_IN = ("digits", "cifar10", "cifar100", "imagefolder", "prepared", "synthetic")


def load_tiny(spec, num_workers, auto_augment, decode_on_device) -> TensorData:
    """A tiny in-memory dataset of the same type digits loads: 3 classes, `spec.size` pixels a side."""
    import torch

    from hpstudy.trainers.data import TensorData

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (12, 3, spec.size, spec.size), generator=g, dtype=torch.uint8)
    y = torch.arange(12) % 3
    return TensorData(x[:9], y[:9], x[9:], y[9:], 3, (0.5,) * 3, (0.25,) * 3)


@pytest.fixture
def tiny():
    """The dataset `tiny` registered (one entry) for the test, removed after."""
    from hpstudy.trainers.data import load_data

    kind = register_dataset(DatasetKind("tiny", 8, f"{__name__}:load_tiny", train_size=TINY_TRAIN, num_classes=3))
    try:
        yield kind
    finally:
        DATASETS.pop("tiny", None)
        load_data.cache_clear()


def test_the_built_in_datasets_are_registered_in_order():
    assert tuple(DATASETS) == BUILT_IN
    assert {name: kind.image_size for name, kind in DATASETS.items()} == {
        "digits": 16,
        "cifar10": 32,
        "cifar100": 32,
        "imagefolder": 224,
        "prepared": 224,
        "synthetic": 32,
    }
    assert [name for name, kind in DATASETS.items() if kind.takes_path] == [
        "cifar10",
        "cifar100",
        "imagefolder",
        "prepared",
    ]


def test_the_nominal_sizes_and_classes_are_the_registry_s_or_the_spec_s():
    sizes = {name: nominal_train_size(DataSpec(name, n_train=77, num_classes=7)) for name in DATASETS}
    assert sizes == {
        "digits": 1437,
        "cifar10": 50000,
        "cifar100": 50000,
        "imagefolder": 1281167,
        "prepared": 1281167,  # a prepared folder: ImageNet-1k is assumed, as for image folders
        "synthetic": 77,
    }
    classes = {name: nominal_classes(DataSpec(name, n_train=77, num_classes=7)) for name in DATASETS}
    assert classes == {"digits": 10, "cifar10": 10, "cifar100": 100, "imagefolder": 1000, "prepared": 7, "synthetic": 7}


def test_a_registered_dataset_is_one_entry_the_spec_the_loader_and_the_dry_run_read(tiny, tmp_path, capsys):
    from hpstudy.trainers.data import TensorData, load_data

    spec = DataSpec.from_config("tiny")  # the name is accepted
    assert spec.size == 8 and DataSpec.from_config({"name": "tiny", "image_size": 4}).size == 4
    check_data_path(spec)  # it reads no folder: nothing to check
    data = load_data(spec)
    assert isinstance(data, TensorData) and data.train_x.shape == (9, 3, 8, 8) and data.num_classes == 3
    assert nominal_classes(spec) == 3 and nominal_train_size(spec) == TINY_TRAIN

    study = parse_spec(small_spec(dataset={"name": "tiny"}, models=["cnn_tiny"], optimizers=["sgd"]))
    assert study.dataset == spec
    planned = plan(study, str(tmp_path / "store"), 1e-6)
    assert planned.n_train == TINY_TRAIN
    print_plan(study, planned)
    assert f"x {TINY_TRAIN} images x epochs" in capsys.readouterr().out.splitlines()[-1]

    with pytest.raises(SpecError, match=r"allowed: digits, .*, synthetic, tiny; did you mean 'tiny'\?$"):
        parse_spec(small_spec(dataset={"name": "tinny"}), check_paths=False)


def test_a_dataset_read_from_a_folder_has_its_path_and_layout_checked(tmp_path):
    seen = []
    register_dataset(
        DatasetKind("folders", 8, f"{__name__}:load_tiny", layout="a folder of tiny things", check_folder=seen.append)
    )
    try:
        with pytest.raises(DataError, match=r"^dataset 'folders' needs `path`: a local folder laid out as a folder of"):
            check_data_path(DataSpec("folders"))
        check_data_path(DataSpec("folders", path=str(tmp_path)))
        assert seen == [str(tmp_path)]
    finally:
        DATASETS.pop("folders")


@pytest.mark.parametrize(
    "kind,message",
    [
        (DatasetKind("digits", 8, "m:f"), "registered twice"),
        (DatasetKind("new", 0, "m:f"), "image_size 0"),
        (DatasetKind("new", 8, "hpstudy.trainers.data.load_tiny"), "not a 'module:function' reference"),
        (DatasetKind("new", 8, "m:f", check_folder=print), "check_folder needs a layout"),
    ],
)
def test_a_bad_entry_is_refused_and_not_registered(kind, message):
    with pytest.raises(ValueError, match=message):
        register_dataset(kind)
    assert tuple(DATASETS) == BUILT_IN


@pytest.mark.parametrize("typo,near", [("cifar1O", "cifar10"), ("digit", "digits"), ("imagefoler", "imagefolder")])
def test_an_unknown_name_is_one_line_naming_the_valid_ones_and_the_nearest(typo, near):
    with pytest.raises(SpecError) as info:
        parse_spec(small_spec(dataset={"name": typo}), check_paths=False)
    assert str(info.value) == (
        f"dataset.name: unknown dataset {typo!r}; allowed: digits, cifar10, cifar100, imagefolder, prepared, "
        f"synthetic; did you mean {near!r}?"
    )
    with pytest.raises(DataError, match=f"^dataset.name: unknown dataset {typo!r}; allowed: digits, "):
        DataSpec.from_config(typo)
