"""Datasets: digits (embedded default), CIFAR from local pickles, ImageNet-style folders, synthetic.

Small datasets are held as uint8 tensors (moved to the GPU when training there) and batched by
indexing, without a DataLoader worker round trip; `imagefolder` uses a multi-worker DataLoader with
timm's training transforms. Nothing downloads.
"""

import copy
import os
import pickle
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from trainers.errors import DataError

DATASETS = ("digits", "cifar10", "cifar100", "imagefolder", "synthetic")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DEFAULT_IMAGE_SIZE = {"digits": 16, "cifar10": 32, "cifar100": 32, "imagefolder": 224, "synthetic": 32}

_CIFAR_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"],
                b"labels", 10),
    "cifar100": ("cifar-100-python", ["train"], ["test"], b"fine_labels", 100),
}


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

    @classmethod
    def from_config(cls, value) -> "DataSpec":
        """A DataSpec from a name or a dict with the fields above."""
        if isinstance(value, DataSpec):
            return value
        if isinstance(value, str):
            value = {"name": value}
        unknown = set(value) - set(cls.__dataclass_fields__)
        if unknown:
            raise DataError(f"dataset: unknown key(s) {sorted(unknown)}; allowed: "
                            f"{sorted(cls.__dataclass_fields__)}")
        spec = cls(**value)
        if spec.name not in DATASETS:
            raise DataError(f"dataset.name: unknown dataset {spec.name!r}; allowed: {', '.join(DATASETS)}")
        return spec

    @property
    def size(self) -> int:
        return self.image_size or DEFAULT_IMAGE_SIZE[self.name]


class TensorData:
    """A dataset held as uint8 NCHW tensors, normalised per batch on the device it lives on."""

    def __init__(self, train_x, train_y, val_x, val_y, num_classes: int, mean, std,
                 flip: bool = False, pad_crop: int = 0):
        self.train_x, self.train_y, self.val_x, self.val_y = train_x, train_y, val_x, val_y
        self.num_classes = num_classes
        self.mean = torch.as_tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.as_tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.flip, self.pad_crop = flip, pad_crop

    @property
    def num_train(self) -> int:
        return len(self.train_y)

    def to(self, device) -> "TensorData":
        """The same data on `device` (a no-op when it is already there)."""
        if self.train_x.device == torch.device(device):
            return self
        moved = [t.to(device) for t in (self.train_x, self.train_y, self.val_x, self.val_y)]
        return TensorData(*moved, self.num_classes, self.mean.flatten(), self.std.flatten(),
                          self.flip, self.pad_crop)

    def _normalize(self, x: torch.Tensor, dtype) -> torch.Tensor:
        x = x.to(dtype).div_(255.0)
        return (x - self.mean.to(x)) / self.std.to(x)

    def steps_per_epoch(self, batch_size: int) -> int:
        return max(1, self.num_train // batch_size)

    def train_batches(self, batch_size: int, generator: torch.Generator,
                      dtype=torch.float32) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of shuffled, augmented batches (last partial batch dropped)."""
        order = torch.randperm(self.num_train, generator=generator).to(self.train_x.device)
        for step in range(self.steps_per_epoch(batch_size)):
            idx = order[step * batch_size:(step + 1) * batch_size]
            x = self.train_x[idx]
            if self.pad_crop or self.flip:
                x = random_crop_flip(x, self.pad_crop, self.flip, generator)
            yield self._normalize(x, dtype), self.train_y[idx]

    def val_batches(self, batch_size: int, dtype=torch.float32):
        """The validation set in order."""
        for start in range(0, len(self.val_y), batch_size):
            yield (self._normalize(self.val_x[start:start + batch_size], dtype),
                   self.val_y[start:start + batch_size])


def random_crop_flip(x: torch.Tensor, pad: int, flip: bool, generator: torch.Generator):
    """Per-sample random crop after zero padding and random horizontal flip, batched by indexing."""
    n, c, h, w = x.shape
    if pad:
        padded = F.pad(x, (pad, pad, pad, pad))
        dy = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator).to(x.device)
        dx = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator).to(x.device)
        rows = (dy + torch.arange(h, device=x.device))[:, None, :, None]
        cols = (dx + torch.arange(w, device=x.device))[:, None, None, :]
        batch = torch.arange(n, device=x.device)[:, None, None, None]
        chan = torch.arange(c, device=x.device)[None, :, None, None]
        x = padded[batch, chan, rows, cols]
    if flip:
        mirrored = (torch.rand(n, generator=generator) < 0.5).to(x.device)
        x = torch.where(mirrored[:, None, None, None], x.flip(3), x)
    return x


class LoaderData:
    """An ImageNet-layout folder read by multi-worker DataLoaders with the paper's transforms."""

    def __init__(self, root: str, image_size: int, num_workers: int, pin_memory: bool,
                 auto_augment: Optional[str] = "original"):
        from timm.data import create_transform
        from torchvision.datasets import ImageFolder
        train_tf = create_transform(image_size, is_training=True, auto_augment=auto_augment,
                                    interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD)
        val_tf = create_transform(image_size, is_training=False, interpolation="bicubic",
                                  crop_pct=0.875, mean=IMAGENET_MEAN, std=IMAGENET_STD)
        self.train_set = ImageFolder(os.path.join(root, "train"), transform=train_tf)
        self.val_set = ImageFolder(os.path.join(root, "val"), transform=val_tf)
        self.num_classes = len(self.train_set.classes)
        self.num_workers, self.pin_memory = num_workers, pin_memory

    @property
    def num_train(self) -> int:
        return len(self.train_set)

    def to(self, device) -> "LoaderData":
        """A copy that pins memory when training on CUDA (the cached original is left unchanged)."""
        moved = copy.copy(self)
        moved.pin_memory = torch.device(device).type == "cuda"
        return moved

    def steps_per_epoch(self, batch_size: int) -> int:
        return max(1, self.num_train // batch_size)

    def _loader(self, dataset, batch_size, shuffle, generator=None):
        return torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, shuffle=shuffle, drop_last=shuffle, generator=generator,
            num_workers=self.num_workers, pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0)

    def train_batches(self, batch_size, generator, dtype=torch.float32):
        for x, y in self._loader(self.train_set, batch_size, True, generator):
            yield x.to(dtype), y

    def val_batches(self, batch_size, dtype=torch.float32):
        for x, y in self._loader(self.val_set, batch_size, False):
            yield x.to(dtype), y


def _require_dir(path: Optional[str], name: str, layout: str) -> str:
    if not path:
        raise DataError(f"dataset {name!r} needs `path`: a local folder laid out as {layout}")
    if not os.path.isdir(path):
        raise DataError(f"dataset {name!r}: path {path!r} does not exist or is not a folder; "
                        f"expected {layout}")
    return path


def _stats(x: torch.Tensor):
    """Per-channel mean and std of uint8 images, in [0, 1] units."""
    x = x.float().div(255.0)
    return x.mean(dim=(0, 2, 3)).tolist(), x.std(dim=(0, 2, 3)).tolist()


def _resize_uint8(x: torch.Tensor, size: int) -> torch.Tensor:
    if x.shape[-1] == size:
        return x
    return F.interpolate(x.float(), size=(size, size), mode="bilinear", align_corners=False) \
        .round().clamp(0, 255).to(torch.uint8)


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
    x_tr, x_va, y_tr, y_va = train_test_split(images, digits.target, test_size=0.2,
                                              stratify=digits.target, random_state=0)
    to_x = lambda a: torch.from_numpy(a)[:, None].expand(-1, 3, -1, -1).contiguous()
    to_y = lambda a: torch.from_numpy(a).long()
    return _tensor_data(to_x(x_tr), to_y(y_tr), to_x(x_va), to_y(y_va), 10, size)


def _read_cifar_batch(path: str, label_key: bytes):
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
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
        raise DataError(f"dataset {name!r}: {root!r} lacks {missing}; expected {layout}")
    read = lambda files: [_read_cifar_batch(os.path.join(root, f), label_key) for f in files]
    (tx, ty), (vx, vy) = [tuple(torch.cat(t) for t in zip(*read(files)))
                          for files in (train_files, val_files)]
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
                raise DataError(f"dataset 'imagefolder': {os.path.join(root, split)!r} is missing; "
                                f"expected {layout}")


@lru_cache(maxsize=4)
def load_data(spec: DataSpec, num_workers: int = 4):
    """Load a dataset once per process (trials reusing a Ray actor share it)."""
    check_data_path(spec)
    if spec.name == "digits":
        return load_digits_data(spec.size)
    if spec.name in _CIFAR_LAYOUT:
        return load_cifar_data(spec.name, spec.path, spec.size)
    if spec.name == "synthetic":
        return load_synthetic_data(spec)
    return LoaderData(spec.path, spec.size, num_workers, pin_memory=torch.cuda.is_available())
