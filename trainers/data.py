"""Datasets: digits (embedded default), CIFAR from local pickles, ImageNet-style folders, synthetic.

Every dataset yields uint8 batches; `DeviceBatches` moves them to the training device and
normalises them there (no float32 images cross a process boundary or the PCIe bus). Small datasets
are held as uint8 tensors on the training device and batched by indexing, with their random
crops and flips drawn once per epoch; `imagefolder` uses multi-worker DataLoaders (built once per
trial, persistent workers) with timm's training transforms. Nothing downloads.
"""

import dataclasses
import math
import os
import pickle
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple, cast

import numpy as np
import torch
import torch.nn.functional as F

from hpstudy.trainers.dataset import Batches, Dataset
from hpstudy.trainers.device_decode import DeviceDecodeData
from hpstudy.trainers.errors import DataError, shown
from hpstudy.trainers.prepared import IMAGENET_MEAN, IMAGENET_STD, PreparedData, data_digest, read_meta

DATASETS = ("digits", "cifar10", "cifar100", "imagefolder", "prepared", "synthetic")
DEFAULT_IMAGE_SIZE = {"digits": 16, "cifar10": 32, "cifar100": 32, "imagefolder": 224, "prepared": 224, "synthetic": 32}
MAX_IMAGE_SIZE = 4096
MAX_IMAGES = 10_000_000  # synthetic n_train / n_val
MAX_CLASSES = 100_000
MAX_SEED = 2**63 - 1  # seeds are stored as int64
SHA256 = re.compile(r"[0-9a-f]{64}")

_CIFAR_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels", 10),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels", 100),
}


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
        return self.image_size or DEFAULT_IMAGE_SIZE[self.name]


class TensorData(Dataset):
    """A dataset held as uint8 NCHW tensors on one device, batched by indexing (no DataLoader)."""

    def __init__(
        self, train_x, train_y, val_x, val_y, num_classes: int, mean, std, flip: bool = False, pad_crop: int = 0
    ):
        self.train_x, self.train_y, self.val_x, self.val_y = train_x, train_y, val_x, val_y
        self.num_classes = num_classes
        self.mean, self.std = tuple(mean), tuple(std)  # per channel, in [0, 1] units
        self.flip, self.pad_crop = flip, pad_crop

    @property
    def num_train(self) -> int:
        return len(self.train_y)

    def to(self, device: torch.device) -> "TensorData":
        """The same data on `device` (a new object; a no-op when it is already there)."""
        if self.train_x.device == torch.device(device):
            return self
        train_x, train_y, val_x, val_y = (t.to(device) for t in (self.train_x, self.train_y, self.val_x, self.val_y))
        return TensorData(
            train_x, train_y, val_x, val_y, self.num_classes, self.mean, self.std, self.flip, self.pad_crop
        )

    def train_loader(
        self,
        batch_size: int,
        generator: torch.Generator,
        pin_memory: bool = False,
        device: Optional[torch.device] = None,
    ) -> "TensorEpochs":
        """An iterable whose every pass is one epoch of shuffled, augmented uint8 batches."""
        return TensorEpochs(self, batch_size, generator)

    def val_loader(self, batch_size: int, pin_memory: bool = False, device: Optional[torch.device] = None):
        """The validation set in order, as uint8 batches (an iterable: one pass per evaluation)."""
        return [
            (self.val_x[start : start + batch_size], self.val_y[start : start + batch_size])
            for start in range(0, len(self.val_y), batch_size)
        ]


class TensorEpochs:
    """Epochs of a TensorData: each pass draws its order, crops and flips at once from the CPU
    generator (the same numbers on every device) and moves them to the data's device in one copy."""

    def __init__(self, data: TensorData, batch_size: int, generator: torch.Generator):
        self.data, self.batch_size, self.generator = data, batch_size, generator

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        data, b = self.data, self.batch_size
        steps = data.steps_per_epoch(b)
        device = data.train_x.device
        order = torch.randperm(data.num_train, generator=self.generator)
        shifts = (
            torch.randint(0, 2 * data.pad_crop + 1, (2, steps * b), generator=self.generator) if data.pad_crop else None
        )
        mirrored = (torch.rand(steps * b, generator=self.generator) < 0.5) if data.flip else None
        order = order.to(device, non_blocking=True)
        shifts, mirrored = (t.to(device, non_blocking=True) if t is not None else None for t in (shifts, mirrored))
        for step in range(steps):
            window = slice(step * b, (step + 1) * b)
            idx = order[window]
            x = data.train_x[idx]
            if shifts is not None:
                x = random_crop(x, data.pad_crop, shifts[0, window], shifts[1, window])
            if mirrored is not None:
                x = torch.where(mirrored[window, None, None, None], x.flip(3), x)
            yield x, data.train_y[idx]


def random_crop(x: torch.Tensor, pad: int, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
    """Per-sample crop of x's size at offsets (dy, dx) of the zero-padded batch, by indexing."""
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    batch = torch.arange(n, device=x.device)[:, None, None, None]
    chan = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, chan, rows, cols]


class LoaderData(Dataset):
    """An ImageNet-layout folder, decoded and augmented (timm's transforms: random-resized crop,
    flip, AutoAugment) by DataLoader workers, which send uint8 batches; normalisation happens on
    the training device."""

    def __init__(self, root: str, image_size: int, num_workers: int, auto_augment: Optional[str]):
        from timm.data import create_transform
        from torchvision.datasets import ImageFolder

        train_tf = create_transform(
            image_size, is_training=True, auto_augment=auto_augment, interpolation="bicubic", use_prefetcher=True
        )
        val_tf = create_transform(
            image_size, is_training=False, interpolation="bicubic", crop_pct=0.875, use_prefetcher=True
        )
        self.train_set = ImageFolder(os.path.join(root, "train"), transform=train_tf)
        self.val_set = ImageFolder(os.path.join(root, "val"), transform=val_tf)
        self.num_classes = len(self.train_set.classes)
        self.num_workers = num_workers
        self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD

    @property
    def num_train(self) -> int:
        return len(self.train_set)

    def to(self, device: torch.device) -> "LoaderData":
        """Images are decoded on the CPU by workers; batches move to the device per trial."""
        return self

    def _loader(self, dataset, batch_size: int, shuffle: bool, pin_memory: bool, generator=None):
        # built once per trial: persistent workers then serve every epoch
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            generator=generator,
            num_workers=self.num_workers,
            pin_memory=pin_memory,
            persistent_workers=self.num_workers > 0,
        )

    def train_loader(
        self,
        batch_size: int,
        generator: torch.Generator,
        pin_memory: bool = False,
        device: Optional[torch.device] = None,
    ):
        """A DataLoader whose every pass is one shuffled epoch of uint8 batches."""
        return self._loader(self.train_set, batch_size, True, pin_memory, generator)

    def val_loader(self, batch_size: int, pin_memory: bool = False, device: Optional[torch.device] = None):
        """A DataLoader over the validation set in order (uint8 batches)."""
        return self._loader(self.val_set, batch_size, False, pin_memory)


class DeviceBatches:
    """One trial's view of a dataset: uint8 batches moved to `device` and normalised there to
    `dtype` (channels_last when asked). Loaders are built once per trial (per generator) and reused
    every epoch; the cached dataset itself is never changed."""

    def __init__(self, data: Dataset, device: torch.device, dtype: torch.dtype, channels_last: bool = False):
        self.data, self.device, self.dtype, self.channels_last = data, device, dtype, channels_last
        self.pin_memory = device.type == "cuda"
        self.mean = torch.tensor(data.mean, dtype=dtype).view(1, -1, 1, 1).to(device)
        self.std = torch.tensor(data.std, dtype=dtype).view(1, -1, 1, 1).to(device)
        self._train: Dict[Tuple[int, int], Batches] = {}
        self._val: Dict[int, Batches] = {}

    def prepare(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """A uint8 batch as normalised `dtype` on the device (labels too)."""
        x = x.to(self.device, non_blocking=True).to(self.dtype).div_(255.0).sub_(self.mean).div_(self.std)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y.to(self.device, non_blocking=True)

    def train(self, batch_size: int, generator: torch.Generator) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of training batches drawn with `generator`."""
        key = (batch_size, id(generator))
        if key not in self._train:
            self._train[key] = self.data.train_loader(batch_size, generator, self.pin_memory, self.device)
        for x, y in self._train[key]:
            yield self.prepare(x, y)

    def val(self, batch_size: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """The validation set in order."""
        if batch_size not in self._val:
            self._val[batch_size] = self.data.val_loader(batch_size, self.pin_memory, self.device)
        for x, y in self._val[batch_size]:
            yield self.prepare(x, y)


def _require_dir(path: Optional[str], name: str, layout: str) -> str:
    if not path:
        raise DataError(f"dataset {name!r} needs `path`: a local folder laid out as {layout}")
    if not os.path.isdir(path):
        raise DataError(f"dataset {name!r}: path {shown(path)} does not exist or is not a folder; expected {layout}")
    return path


def _stats(x: torch.Tensor):
    """Per-channel mean and std of uint8 images, in [0, 1] units."""
    x = x.float().div(255.0)
    return x.mean(dim=(0, 2, 3)).tolist(), x.std(dim=(0, 2, 3)).tolist()


def _resize_uint8(x: torch.Tensor, size: int) -> torch.Tensor:
    if x.shape[-1] == size:
        return x
    return (
        F.interpolate(x.float(), size=(size, size), mode="bilinear", align_corners=False)
        .round()
        .clamp(0, 255)
        .to(torch.uint8)
    )


def _tensor_data(train_x, train_y, val_x, val_y, num_classes, size, **aug) -> TensorData:
    train_x, val_x = _resize_uint8(train_x, size), _resize_uint8(val_x, size)
    mean, std = _stats(train_x)
    return TensorData(train_x, train_y, val_x, val_y, num_classes, mean, std, **aug)


def load_digits_data(size: int) -> TensorData:
    """scikit-learn's bundled 8x8 digits: a fixed stratified 80/20 split, upsampled, 3 channels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    x_tr, x_va, y_tr, y_va = train_test_split(
        images, digits.target, test_size=0.2, stratify=digits.target, random_state=0
    )
    to_x = lambda a: torch.from_numpy(a)[:, None].expand(-1, 3, -1, -1).contiguous()
    to_y = lambda a: torch.from_numpy(a).long()
    return _tensor_data(to_x(x_tr), to_y(y_tr), to_x(x_va), to_y(y_va), 10, size)


def _latin1(text: str, encoding: str) -> bytes:
    """`_codecs.encode` as a protocol-2 pickle of bytes calls it, for latin-1 only (no other codec)."""
    if encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"refused _codecs.encode with encoding {shown(encoding)}")
    return text.encode("latin1")


_RECONSTRUCT = np.ndarray(0).__reduce__()[0]  # numpy's array rebuilders (_frombuffer: pickle protocol 5)
_FROMBUFFER = np.ndarray(0).__reduce_ex__(5)[0]


class CifarUnpickler(pickle.Unpickler):
    """An unpickler for CIFAR's python batches: dicts of lists, numbers, strings and numpy arrays. Any other
    global (os.system, eval, subprocess: how a crafted pickle runs code) is refused before it is called."""

    GLOBALS = {
        ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 1's name
        ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 2's
        ("numpy.core.numeric", "_frombuffer"): _FROMBUFFER,
        ("numpy._core.numeric", "_frombuffer"): _FROMBUFFER,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1,
    }

    def find_class(self, module: str, name: str):
        try:
            return self.GLOBALS[module, name]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused global {shown(f'{module}.{name}')}: a CIFAR batch holds "
                f"only numpy arrays, lists, numbers and strings"
            ) from None


def _read_cifar_batch(path: str, label_key: bytes):
    try:
        with open(path, "rb") as f:
            batch = CifarUnpickler(f, encoding="bytes").load()
        data, labels = batch[b"data"], batch[label_key]
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: not a CIFAR pickle batch with b'data' and {label_key!r} ({exc})")
    x = torch.from_numpy(np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32))
    return x, torch.as_tensor(labels, dtype=torch.long)


def load_cifar_data(name: str, path: str, size: int) -> TensorData:
    """CIFAR-10/100 from the python pickle batches in a local folder (or its parent)."""
    folder, train_files, val_files, label_key, classes = _CIFAR_LAYOUT[name]
    layout = f"{folder}/ with {', '.join(train_files + val_files)} (the python version of {name})"
    root = _require_dir(path, name, layout)
    if os.path.isdir(os.path.join(root, folder)):
        root = os.path.join(root, folder)
    missing = [f for f in train_files + val_files if not os.path.isfile(os.path.join(root, f))]
    if missing:
        raise DataError(f"dataset {name!r}: {shown(root)} lacks {missing}; expected {layout}")
    read = lambda files: [_read_cifar_batch(os.path.join(root, f), label_key) for f in files]
    (tx, ty), (vx, vy) = [tuple(torch.cat(t) for t in zip(*read(files))) for files in (train_files, val_files)]
    return _tensor_data(tx, ty, vx, vy, classes, size, flip=True, pad_crop=max(1, size // 8))


def load_synthetic_data(spec: DataSpec) -> TensorData:
    """Seeded class-prototype images plus noise: learnable, any size and class count."""
    g = torch.Generator().manual_seed(spec.seed)
    size = spec.size
    prototypes = torch.rand(spec.num_classes, 3, size, size, generator=g) * 255

    def make(n):
        y = torch.randint(0, spec.num_classes, (n,), generator=g)
        x = prototypes[y] * 0.5 + torch.rand(n, 3, size, size, generator=g) * 127
        return x.round().clamp(0, 255).to(torch.uint8), y

    (tx, ty), (vx, vy) = make(spec.n_train), make(spec.n_val)
    return _tensor_data(tx, ty, vx, vy, spec.num_classes, size)


def check_data_path(spec: DataSpec) -> None:
    """Fail early, naming the path and the expected layout, if a dataset's files are not there."""
    if spec.name in _CIFAR_LAYOUT:
        folder = _CIFAR_LAYOUT[spec.name][0]
        _require_dir(spec.path, spec.name, f"{folder}/ (the python version of {spec.name})")
    elif spec.name == "imagefolder":
        layout = "train/<class>/*.JPEG and val/<class>/*.JPEG (ImageNet layout)"
        root = _require_dir(spec.path, spec.name, layout)
        for split in ("train", "val"):
            if not os.path.isdir(os.path.join(root, split)):
                raise DataError(
                    f"dataset 'imagefolder': {shown(os.path.join(root, split))} is missing; expected {layout}"
                )
    elif spec.name == "prepared":
        read_meta(_require_dir(spec.path, spec.name, "a folder made by `hpstudy prepare` (meta.json, *.npy)"))


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


@lru_cache(maxsize=4)
def load_data(
    spec: DataSpec, num_workers: int = 4, auto_augment: Optional[str] = None, decode_on_device: bool = False
) -> Dataset:
    """Load a dataset once per process (trials reusing a Ray actor share it). `auto_augment` is
    the AutoAugment policy of image folders (None: off); `decode_on_device` makes an image folder
    send JPEG bytes and decode them on the training device (hpstudy.trainers.device_decode)."""
    check_data_path(spec)
    path = cast(str, spec.path)  # check_data_path has refused a missing path for the datasets read from a folder
    if spec.name == "digits":
        return load_digits_data(spec.size)
    if spec.name in _CIFAR_LAYOUT:
        return load_cifar_data(spec.name, path, spec.size)
    if spec.name == "synthetic":
        return load_synthetic_data(spec)
    if spec.name == "prepared":
        return PreparedData(path, spec.size, auto_augment, spec.digest)
    if decode_on_device:
        return DeviceDecodeData(path, spec.size, num_workers, auto_augment)
    return LoaderData(path, spec.size, num_workers, auto_augment)
