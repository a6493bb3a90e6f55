"""What a trial loads, checked without torch: `DataSpec` (a dataset name and its options), the dataset
registry (`DATASETS`: one `DatasetKind` per dataset, added with `register_dataset`) and the limits, the value
checks the configs share (`whole_in`, `finite_in`, `raise_first_bad`), and a study's dataset pinned when it
is planned (`check_data_path`, `pin_data`). Reading a spec needs this; loading the data (hpstudy.trainers.data,
through the entry's loader) does not happen then."""

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from hpstudy.trainers.errors import DataError, shown
from hpstudy.trainers.prepared_meta import data_digest, read_meta

MAX_IMAGE_SIZE = 4096
MAX_IMAGES = 10_000_000  # synthetic n_train / n_val
MAX_CLASSES = 100_000
MAX_SEED = 2**63 - 1  # seeds are stored as int64
SHA256 = re.compile(r"[0-9a-f]{64}")
LOADER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*")  # "module:function"
IMAGENET_TRAIN = 1281167  # the nominal training set of an image folder (ImageNet-1k is assumed)

# what the CIFAR loader reads: folder, training files, validation files, the batches' label key
CIFAR_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels"),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels"),
}
IMAGEFOLDER_LAYOUT = "train/<class>/*.JPEG and val/<class>/*.JPEG (ImageNet layout)"


@dataclass(frozen=True)
class DatasetKind:
    """A registered dataset: everything the spec, the path check, the loader and the dry run know of it."""

    name: str
    image_size: int  # the image side when the spec gives none
    loader: str  # "module:function", imported when loading (so this module stays torch-free); the function
    # takes (spec: DataSpec, num_workers: int, auto_augment: Optional[str], decode_on_device: bool) and
    # returns a hpstudy.trainers.dataset.Dataset
    train_size: Optional[int] = None  # nominal training images for the dry run's estimate (None: spec.n_train)
    num_classes: Optional[int] = None  # classes the dry run's memory plan assumes (None: spec.num_classes)
    layout: Optional[str] = None  # what its `path` holds, for messages (None: it reads no folder)
    check_folder: Optional[Callable[[str], Any]] = None  # raises DataError if the existing folder is not laid out

    @property
    def takes_path(self) -> bool:
        """Whether the dataset is read from a folder (`path`)."""
        return self.layout is not None


DATASETS: Dict[str, DatasetKind] = {}  # name -> entry, in registration order (iterating it gives the names)


def register_dataset(kind: DatasetKind) -> DatasetKind:
    """Add a dataset to the registry (names are unique; the loader a "module:function" reference)."""
    if not isinstance(kind.name, str) or not kind.name:
        raise ValueError(f"dataset {kind.name!r}: the name must be a non-empty string")
    if kind.name in DATASETS:
        raise ValueError(f"dataset {kind.name!r} is registered twice")
    if not whole_in(kind.image_size, 1, MAX_IMAGE_SIZE):
        raise ValueError(f"dataset {kind.name!r}: image_size {kind.image_size!r} is not in [1, {MAX_IMAGE_SIZE}]")
    if not (isinstance(kind.loader, str) and LOADER_NAME.fullmatch(kind.loader)):
        raise ValueError(f"dataset {kind.name!r}: loader {kind.loader!r} is not a 'module:function' reference")
    if kind.check_folder is not None and not kind.takes_path:
        raise ValueError(f"dataset {kind.name!r}: check_folder needs a layout (a dataset read from a folder)")
    DATASETS[kind.name] = kind
    return kind


def nominal_train_size(spec: "DataSpec") -> int:
    """Training images the dry run prices: the dataset's nominal size, or the spec's n_train."""
    size = DATASETS[spec.name].train_size
    return spec.n_train if size is None else size


def nominal_classes(spec: "DataSpec") -> int:
    """Classes the dry run's memory plan assumes: the dataset's, or the spec's num_classes."""
    classes = DATASETS[spec.name].num_classes
    return spec.num_classes if classes is None else classes


def whole_in(value: Any, low: float, high: float) -> bool:
    """Whether `value` is an int (not a bool) in [low, high]."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def finite_in(
    value: Any, low: float = -math.inf, high: float = math.inf, open_low: bool = False, open_high: bool = False
) -> bool:
    """Whether `value` is a finite int or float (not a bool) between low and high (ends open if asked)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        if not math.isfinite(value):
            return False
    except OverflowError:  # an int beyond the float range (YAML reads 1 followed by 400 zeros as one)
        return False
    return (value > low if open_low else value >= low) and (value < high if open_high else value <= high)


def raise_first_bad(checks: Iterable[Tuple[str, Any, bool, str]], error: type) -> None:
    """Raise `error` for the first (field, value, allowed?, what is allowed) check that fails,
    naming the field, the value and what is allowed."""
    for name, value, ok, allowed in checks:
        if not ok:
            raise error(f"{name}: bad value {shown(value)}; allowed: {allowed}")


@dataclass(frozen=True)
class DataSpec:
    """What to load: a dataset name and its options (hashable, so loads are cached per process)."""

    name: str = field(metadata={"doc": "dataset name"})
    path: Optional[str] = field(default=None, metadata={"doc": "folder of cifar10/cifar100/imagefolder data"})
    image_size: Optional[int] = field(default=None, metadata={"doc": "image side in pixels (default per dataset)"})
    num_classes: int = field(default=10, metadata={"doc": "classes (synthetic only)"})
    n_train: int = field(default=512, metadata={"doc": "training images (synthetic only)"})
    n_val: int = field(default=256, metadata={"doc": "validation images (synthetic only)"})
    seed: int = field(default=0, metadata={"doc": "seed of the images (synthetic only)"})
    digest: Optional[str] = field(
        default=None,
        metadata={
            "doc": "the preparation's digest (prepared only), filled in when a study is planned so the trial key "
            "names the arrays; a trial refuses a folder that holds another preparation"
        },
    )

    @classmethod
    def from_config(cls, value) -> "DataSpec":
        """A DataSpec from a name or a dict with the fields above."""
        if isinstance(value, DataSpec):
            return value
        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict) or "name" not in value:
            raise DataError(
                f"dataset: bad value {shown(value)}; allowed: a dataset name or a mapping with "
                f"`name` and options from {sorted(cls.__dataclass_fields__)}"
            )
        unknown = set(value) - set(cls.__dataclass_fields__)
        if unknown:
            raise DataError(
                f"dataset: unknown key(s) {shown(sorted(map(str, unknown)))}; allowed: "
                f"{sorted(cls.__dataclass_fields__)}"
            )
        spec = cls(**value)
        spec.validate()
        return spec

    def validate(self) -> None:
        """Raise DataError naming the first field whose value is not allowed."""
        if not isinstance(self.name, str) or self.name not in DATASETS:
            raise DataError(f"dataset.name: unknown dataset {shown(self.name)}; allowed: {', '.join(DATASETS)}")
        raise_first_bad(
            [
                (
                    "dataset.path",
                    self.path,
                    self.path is None or (isinstance(self.path, str) and self.path != ""),
                    "null or a folder path",
                ),
                (
                    "dataset.image_size",
                    self.image_size,
                    self.image_size is None or whole_in(self.image_size, 1, MAX_IMAGE_SIZE),
                    f"null (the dataset's default) or an integer in [1, {MAX_IMAGE_SIZE}]",
                ),
                (
                    "dataset.num_classes",
                    self.num_classes,
                    whole_in(self.num_classes, 2, MAX_CLASSES),
                    f"an integer in [2, {MAX_CLASSES}]",
                ),
                (
                    "dataset.n_train",
                    self.n_train,
                    whole_in(self.n_train, 1, MAX_IMAGES),
                    f"an integer in [1, {MAX_IMAGES}]",
                ),
                ("dataset.n_val", self.n_val, whole_in(self.n_val, 1, MAX_IMAGES), f"an integer in [1, {MAX_IMAGES}]"),
                ("dataset.seed", self.seed, whole_in(self.seed, 0, MAX_SEED), "an integer in [0, 2**63)"),
                (
                    "dataset.digest",
                    self.digest,
                    self.digest is None
                    or (
                        self.name == "prepared"
                        and isinstance(self.digest, str)
                        and SHA256.fullmatch(self.digest) is not None
                    ),
                    "null, or 64 lower-case hex digits with dataset prepared",
                ),
            ],
            DataError,
        )

    @property
    def size(self) -> int:
        """The image side in pixels: `image_size`, else the dataset's default."""
        return self.image_size or DATASETS[self.name].image_size


def require_dir(path: Optional[str], name: str, layout: str) -> str:
    """`path` when it is an existing folder; DataError naming dataset `name` and the expected `layout` otherwise."""
    if not path:
        raise DataError(f"dataset {name!r} needs `path`: a local folder laid out as {layout}")
    if not os.path.isdir(path):
        raise DataError(f"dataset {name!r}: path {shown(path)} does not exist or is not a folder; expected {layout}")
    return path


def check_data_path(spec: DataSpec) -> None:
    """Fail early, naming the path and the expected layout, if a dataset's files are not there."""
    kind = DATASETS[spec.name]
    if kind.layout is None:
        return
    root = require_dir(spec.path, spec.name, kind.layout)
    if kind.check_folder is not None:
        kind.check_folder(root)


def _check_image_folder(root: str) -> None:
    """DataError unless `root` holds train/ and val/ folders."""
    for split in ("train", "val"):
        if not os.path.isdir(os.path.join(root, split)):
            raise DataError(
                f"dataset 'imagefolder': {shown(os.path.join(root, split))} is missing; expected {IMAGEFOLDER_LAYOUT}"
            )


def pin_data(spec: DataSpec, must_exist: bool) -> DataSpec:
    """The dataset a study is planned with: with `must_exist`, its path absolute and laid out as expected
    (DataError naming dataset.path); for `prepared`, `digest` set from the folder's meta.json where there is
    one, so trial keys name its arrays (DataError naming dataset.digest when a given one differs)."""
    if must_exist and spec.path is not None and not os.path.isabs(spec.path):
        raise DataError(
            f"dataset.path: bad value {shown(spec.path)} (a relative path: trials run in other "
            f"working directories); allowed: an absolute path every worker can read"
        )
    try:
        if must_exist:
            check_data_path(spec)
        if spec.name != "prepared" or not (
            spec.path and os.path.isabs(spec.path) and os.path.isfile(os.path.join(spec.path, "meta.json"))
        ):
            return spec
        found = data_digest(read_meta(spec.path))
    except DataError as exc:
        raise DataError(f"dataset.path: {exc}")
    if spec.digest is not None and spec.digest != found:
        raise DataError(
            f"dataset.digest: bad value {shown(spec.digest)}; allowed: the digest of "
            f"{shown(spec.path)} ({found}), or null to take it from the folder"
        )
    return dataclasses.replace(spec, digest=found)


for _kind in (
    DatasetKind("digits", 16, "hpstudy.trainers.data:load_digits", train_size=1437, num_classes=10),
    DatasetKind(
        "cifar10",
        32,
        "hpstudy.trainers.data:load_cifar",
        train_size=50000,
        num_classes=10,
        layout="cifar-10-batches-py/ (the python version of cifar10)",
    ),
    DatasetKind(
        "cifar100",
        32,
        "hpstudy.trainers.data:load_cifar",
        train_size=50000,
        num_classes=100,
        layout="cifar-100-python/ (the python version of cifar100)",
    ),
    DatasetKind(
        "imagefolder",
        224,
        "hpstudy.trainers.data:load_image_folder",
        train_size=IMAGENET_TRAIN,
        num_classes=1000,
        layout=IMAGEFOLDER_LAYOUT,
        check_folder=_check_image_folder,
    ),
    DatasetKind(
        "prepared",
        224,
        "hpstudy.trainers.data:load_prepared",
        train_size=IMAGENET_TRAIN,
        layout="a folder made by `hpstudy prepare` (meta.json, *.npy)",
        check_folder=read_meta,
    ),
    DatasetKind("synthetic", 32, "hpstudy.trainers.data:load_synthetic"),
):
    register_dataset(_kind)
