"""An image folder decoded on the training device: DataLoader workers only read the JPEG bytes;
each batch is decoded at once by torchvision.io.decode_jpeg (nvJPEG on CUDA) and cropped, resized,
flipped and AutoAugmented there (hpstudy.trainers.augment). Selected by `decode: auto` on CUDA; on the CPU
it runs too (torchvision's CPU decoder), for tests and benchmarks. Files that are not JPEGs (PNG, TIFF, ...)
are decoded in the workers as the worker path decodes them (as 8-bit RGB by bit depth,
hpstudy.trainers.image_modes) and sent as pixels.

Differences from the worker path: bilinear (antialiased) instead of PIL bicubic resizing; the crop
boxes, flips and AutoAugment draws follow the same distributions.
"""

import math
import os
from typing import Iterator, List, Optional, Tuple, Union

import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms.v2 import functional as TF

from hpstudy.trainers.augment import DeviceAutoAugment, rrc_boxes
from hpstudy.trainers.dataset import Dataset
from hpstudy.trainers.image_modes import read_rgb
from hpstudy.trainers.prepared import IMAGENET_MEAN, IMAGENET_STD

EVAL_CROP_PCT = 0.875
JPEG_START = b"\xff\xd8\xff"  # how every JPEG file begins: its start-of-image marker, then the next marker


def _read_bytes(path: str) -> Union[bytes, np.ndarray]:
    """A JPEG file's bytes, decoded later on the device; any other image decoded here (uint8 HWC RGB)."""
    # plain bytes cross the worker queue by pickling (torchvision's read_file tensors are shared
    # through file descriptors, which fails for many small files)
    with open(path, "rb") as f:
        data = f.read()
    return data if data.startswith(JPEG_START) else np.array(read_rgb(path, data))


def _bytes_and_label(batch) -> Tuple[List[Union[bytes, np.ndarray]], torch.Tensor]:
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch])


def decode(files: List[Union[bytes, np.ndarray]], device: torch.device) -> List[torch.Tensor]:
    """A batch as RGB uint8 CHW images on `device`: JPEG files (their bytes) decoded there at once, images the
    workers decoded (uint8 HWC arrays) moved there."""
    jpegs = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files if isinstance(f, bytes)]
    decoded = iter(decode_jpeg(jpegs, mode=ImageReadMode.RGB, device=device) if jpegs else [])
    return [next(decoded) if isinstance(f, bytes) else torch.from_numpy(f).permute(2, 0, 1).to(device) for f in files]


def train_crops(images: List[torch.Tensor], size: int, generator: torch.Generator) -> torch.Tensor:
    """Random-resized crops (bilinear, antialiased) of each decoded image, flipped at random."""
    heights = torch.tensor([img.shape[-2] for img in images])
    widths = torch.tensor([img.shape[-1] for img in images])
    boxes = rrc_boxes(heights, widths, generator).long().tolist()
    flips = (torch.rand(len(images), generator=generator) < 0.5).tolist()
    crops = []
    for img, (top, left, h, w), flip in zip(images, boxes, flips):
        crop = TF.resized_crop(img, top, left, h, w, [size, size], antialias=True)
        crops.append(crop.flip(-1) if flip else crop)
    return torch.stack(crops)


def eval_crops(images: List[torch.Tensor], size: int) -> torch.Tensor:
    """timm's eval transform on decoded images: short side to size / 0.875, centre crop."""
    scaled = math.floor(size / EVAL_CROP_PCT)
    return torch.stack([TF.center_crop(TF.resize(img, scaled, antialias=True), [size, size]) for img in images])


class DeviceDecodeData(Dataset):
    """An ImageNet-layout folder whose workers send JPEG bytes, decoded on the device, and other images' pixels."""

    def __init__(self, root: str, image_size: int, num_workers: int, auto_augment: Optional[str]):
        from torchvision.datasets import ImageFolder

        self.train_set = ImageFolder(os.path.join(root, "train"), loader=_read_bytes)
        self.val_set = ImageFolder(os.path.join(root, "val"), loader=_read_bytes)
        self.num_classes = len(self.train_set.classes)
        self.image_size, self.num_workers = image_size, num_workers
        self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD
        self.auto_augment = DeviceAutoAugment(auto_augment) if auto_augment else None

    @property
    def num_train(self) -> int:
        return len(self.train_set)

    def to(self, device: torch.device) -> "DeviceDecodeData":
        """Bytes are read on the CPU; images are decoded on the device per batch."""
        return self

    def _loader(self, dataset, batch_size: int, shuffle: bool, generator=None):
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            generator=generator,
            num_workers=self.num_workers,
            collate_fn=_bytes_and_label,
            persistent_workers=self.num_workers > 0,
        )

    def train_loader(
        self,
        batch_size: int,
        generator: torch.Generator,
        pin_memory: bool = False,
        device: Optional[torch.device] = None,
    ) -> "DecodedEpochs":
        """An iterable whose every pass is one epoch of augmented uint8 batches decoded on `device` (None: CPU)."""
        return DecodedEpochs(self, self._loader(self.train_set, batch_size, True, generator), generator, device)

    def val_loader(
        self, batch_size: int, pin_memory: bool = False, device: Optional[torch.device] = None
    ) -> "DecodedEpochs":
        """The validation set in order, decoded and centre-cropped on `device` (None: the CPU)."""
        return DecodedEpochs(self, self._loader(self.val_set, batch_size, False), None, device)


class DecodedEpochs:
    """Passes over a byte loader, decoding each batch on the device (training crops when a
    generator is given, evaluation crops otherwise)."""

    def __init__(
        self, data: DeviceDecodeData, loader, generator: Optional[torch.Generator], device: Optional[torch.device]
    ):
        self.data, self.loader, self.generator = data, loader, generator
        self.device = torch.device("cpu") if device is None else device

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        size = self.data.image_size
        for files, labels in self.loader:
            images = decode(files, self.device)
            if self.generator is None:
                yield eval_crops(images, size), labels
                continue
            x = train_crops(images, size, self.generator)
            if self.data.auto_augment is not None:
                x = self.data.auto_augment(x, self.generator)
            yield x, labels
