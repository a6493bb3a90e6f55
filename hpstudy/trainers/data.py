"""Datasets: digits (embedded default), CIFAR from local pickles, ImageNet-style folders, synthetic.

Every dataset yields uint8 batches; `DeviceBatches` moves them to the training device and
normalises them there (no float32 images cross a process boundary or the PCIe bus). Small datasets
are held as uint8 tensors on the training device and batched by indexing, with their random
crops and flips drawn once per epoch; `imagefolder` uses multi-worker DataLoaders (built once per
trial, persistent workers) with timm's training transforms. Nothing downloads. What to load (`DataSpec`)
and its checks are hpstudy.trainers.data_spec, which imports no torch.
"""

import importlib
import os
import pickle
from functools import lru_cache
from typing import Dict, Iterator, Optional, Tuple, cast

import numpy as np
import torch
import torch.nn.functional as F

from hpstudy.trainers.data_spec import CIFAR_LAYOUT, DATASETS, DataSpec, check_data_path, require_dir
from hpstudy.trainers.dataset import Batches, Dataset
from hpstudy.trainers.device_decode import DeviceDecodeData
from hpstudy.trainers.errors import DataError, shown
from hpstudy.trainers.image_modes import read_rgb
from hpstudy.trainers.prepared import IMAGENET_MEAN, IMAGENET_STD, PreparedData


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
    """An ImageNet-layout folder, decoded (as 8-bit RGB by bit depth, hpstudy.trainers.image_modes) and augmented
    (timm's transforms: random-resized crop, flip, AutoAugment) by DataLoader workers, which send uint8 batches;
    normalisation happens on the training device."""

    def __init__(self, root: str, image_size: int, num_workers: int, auto_augment: Optional[str]):
        from timm.data import create_transform
        from torchvision.datasets import ImageFolder

        train_tf = create_transform(
            image_size, is_training=True, auto_augment=auto_augment, interpolation="bicubic", use_prefetcher=True
        )
        val_tf = create_transform(
            image_size, is_training=False, interpolation="bicubic", crop_pct=0.875, use_prefetcher=True
        )
        self.train_set = ImageFolder(os.path.join(root, "train"), transform=train_tf, loader=read_rgb)
        self.val_set = ImageFolder(os.path.join(root, "val"), transform=val_tf, loader=read_rgb)
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
    folder, train_files, val_files, label_key = CIFAR_LAYOUT[name]
    classes = DATASETS[name].num_classes
    layout = f"{folder}/ with {', '.join(train_files + val_files)} (the python version of {name})"
    root = require_dir(path, name, layout)
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


# The registered datasets' loaders (hpstudy.trainers.data_spec.DATASETS names them as "module:function"): each
# takes the spec and load_data's options; check_data_path has refused a missing path for those read from a folder.
def load_digits(spec: DataSpec, num_workers: int, auto_augment: Optional[str], decode_on_device: bool) -> Dataset:
    return load_digits_data(spec.size)


def load_cifar(spec: DataSpec, num_workers: int, auto_augment: Optional[str], decode_on_device: bool) -> Dataset:
    return load_cifar_data(spec.name, cast(str, spec.path), spec.size)


def load_synthetic(spec: DataSpec, num_workers: int, auto_augment: Optional[str], decode_on_device: bool) -> Dataset:
    return load_synthetic_data(spec)


def load_prepared(spec: DataSpec, num_workers: int, auto_augment: Optional[str], decode_on_device: bool) -> Dataset:
    return PreparedData(cast(str, spec.path), spec.size, auto_augment, spec.digest)


def load_image_folder(spec: DataSpec, num_workers: int, auto_augment: Optional[str], decode_on_device: bool) -> Dataset:
    path = cast(str, spec.path)
    if decode_on_device:
        return DeviceDecodeData(path, spec.size, num_workers, auto_augment)
    return LoaderData(path, spec.size, num_workers, auto_augment)


@lru_cache(maxsize=4)
def load_data(
    spec: DataSpec, num_workers: int = 4, auto_augment: Optional[str] = None, decode_on_device: bool = False
) -> Dataset:
    """Load a dataset once per process (trials reusing a Ray actor share it) with its registered loader.
    `auto_augment` is the AutoAugment policy of image folders (None: off); `decode_on_device` makes an image
    folder send JPEG bytes and decode them on the training device (hpstudy.trainers.device_decode)."""
    check_data_path(spec)
    module, function = DATASETS[spec.name].loader.split(":")
    return getattr(importlib.import_module(module), function)(spec, num_workers, auto_augment, decode_on_device)
