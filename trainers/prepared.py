"""Decode once for the whole study: an image folder turned into memory-mapped uint8 arrays.

`prepare` decodes every training image once, resized (bicubic) so its short side is `train_size`
and centre-cropped to a square, and every validation image exactly as timm's eval transform does
(short side to image_size / 0.875, centre crop image_size). The arrays are written under a
temporary name, checksummed (sha256) and renamed, so a folder that exists is complete; a rerun of
`prepare` reuses it after verifying the checksums. Every trial and study on the node then reads
them through the page cache. `PreparedData` serves them: a
training batch is gathered on the CPU (a memory copy, no decoding), moved to the training device,
and cropped, flipped and AutoAugmented there (trainers.augment).

How this differs from decoding the full-size JPEG every epoch: the random-resized crop samples its
box from the stored `train_size` square, not the full image, so a non-square image loses its
edges outside the central square and a crop can carry at most `train_size` pixels of detail.
The exact path (`imagefolder`) stays available.
"""

import contextlib
import hashlib
import json
import os
import shutil
import uuid
import multiprocessing
from typing import Dict, Iterator, Optional, Tuple

import numpy as np
import torch

from trainers.augment import DeviceAutoAugment, train_augment
from trainers.errors import DataError

FORMAT_VERSION = 1
ARRAYS = ("train_x", "train_y", "val_x", "val_y")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _decode_train(args) -> np.ndarray:
    path, size = args
    from PIL import Image
    from torchvision.transforms import functional as TF
    with Image.open(path) as img:
        img = TF.center_crop(TF.resize(img.convert("RGB"), size, TF.InterpolationMode.BICUBIC), size)
        return np.asarray(img, dtype=np.uint8)


def _decode_val(args) -> np.ndarray:
    path, size = args
    from PIL import Image
    from timm.data import create_transform
    transform = create_transform(size, is_training=False, interpolation="bicubic", crop_pct=0.875,
                                 use_prefetcher=True)
    with Image.open(path) as img:
        return transform(img.convert("RGB")).permute(1, 2, 0).numpy()


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def _listing(source: str):
    from torchvision.datasets import ImageFolder
    splits = {}
    for split in ("train", "val"):
        folder = os.path.join(source, split)
        if not os.path.isdir(folder):
            raise DataError(f"prepare: {folder!r} is missing; expected train/<class>/*.JPEG and val/<class>/*.JPEG")
        splits[split] = ImageFolder(folder)
    if splits["train"].classes != splits["val"].classes:
        raise DataError(f"prepare: {source!r}: train and val have different class folders")
    return splits


def _files_digest(splits) -> str:
    digest = hashlib.sha256()
    for split, folder in splits.items():
        for path, label in folder.samples:
            digest.update(f"{split}\0{os.path.relpath(path, folder.root)}\0{label}\0{os.path.getsize(path)}\n".encode())
    return digest.hexdigest()


@contextlib.contextmanager
def _decoding(workers: int):
    """An ordered map over decoding jobs: in this process for one worker, else in a pool of
    `workers` spawned processes (spawn, not fork: a forked child of a process with torch's thread
    pools can deadlock)."""
    if workers <= 1:
        yield map
        return
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield lambda fn, jobs: pool.imap(fn, jobs, chunksize=64)


def verify_arrays(path: str, meta: Dict) -> None:
    """Recompute the sha256 of every array in `path` against `meta` (its meta.json): DataError naming
    the first file that is missing or damaged, and how to rebuild the folder."""
    for name in ARRAYS:
        file = os.path.join(path, f"{name}.npy")
        if not os.path.isfile(file):
            problem = "is missing"
        elif _sha256(file) != meta.get("sha256", {}).get(name):
            problem = "fails its checksum"
        else:
            continue
        raise DataError(f"prepared data: {file} {problem}; rebuild the folder: delete {path} and run "
                        f"`hpstudy prepare` again")


def prepare(source: str, out: str, train_size: int = 256, image_size: int = 224, workers: int = 1,
            progress=print) -> Dict:
    """Decode `source` (train/ and val/ class folders) once into `out`; reuse `out` when it already
    holds the same files at the same sizes. Returns the meta record (with `reused`)."""
    if train_size < image_size:
        raise DataError(f"prepare: --train-size {train_size} < --image-size {image_size}; allowed: >=")
    splits = _listing(source)
    wanted = {"version": FORMAT_VERSION, "source": os.path.abspath(source), "train_size": train_size,
              "image_size": image_size, "crop_pct": 0.875, "files_digest": _files_digest(splits),
              "classes": splits["train"].classes,
              "n_train": len(splits["train"]), "n_val": len(splits["val"])}
    meta_path = os.path.join(out, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            found = json.load(f)
        if {k: found.get(k) for k in wanted} == wanted:
            verify_arrays(out, found)
            return dict(found, reused=True)
    tmp = f"{out.rstrip('/')}.tmp-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)
    try:
        shapes = {"train_x": (wanted["n_train"], train_size, train_size, 3),
                  "val_x": (wanted["n_val"], image_size, image_size, 3)}
        with _decoding(workers) as imap:
            for split, size, decode in (("train", train_size, _decode_train), ("val", image_size, _decode_val)):
                samples = splits[split].samples
                images = np.lib.format.open_memmap(os.path.join(tmp, f"{split}_x.npy"), mode="w+",
                                                   dtype=np.uint8, shape=shapes[f"{split}_x"])
                for i, image in enumerate(imap(decode, [(p, size) for p, _ in samples])):
                    images[i] = image
                    if progress and (i + 1) % 10000 == 0:
                        progress(f"prepare: {split} {i + 1}/{len(samples)}")
                images.flush()
                del images
                np.save(os.path.join(tmp, f"{split}_y.npy"), np.array([y for _, y in samples], dtype=np.int64))
        meta = dict(wanted, sha256={name: _sha256(os.path.join(tmp, f"{name}.npy")) for name in ARRAYS})
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        if os.path.exists(out):
            shutil.rmtree(out)          # an older preparation of other files or sizes
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dict(meta, reused=False)


class PreparedData:
    """A folder written by `prepare`: memory-mapped uint8 arrays, augmented on the training device."""

    def __init__(self, path: str, image_size: int, auto_augment: Optional[str] = None):
        meta_path = os.path.join(path, "meta.json")
        if not os.path.isfile(meta_path):
            raise DataError(f"dataset 'prepared': {path!r} has no meta.json; make it with "
                            f"`hpstudy prepare --data <image folder> --out {path}`")
        with open(meta_path) as f:
            self.meta = json.load(f)
        if self.meta.get("version") != FORMAT_VERSION:
            raise DataError(f"dataset 'prepared': {path!r} has format {self.meta.get('version')}; "
                            f"allowed: {FORMAT_VERSION} (prepare it again)")
        if image_size != self.meta["image_size"]:
            raise DataError(f"dataset.image_size: bad value {image_size}; {path!r} was prepared for "
                            f"{self.meta['image_size']} px (validation images are stored at that size)")
        self.path = path
        arrays = {name: np.load(os.path.join(path, f"{name}.npy"), mmap_mode="r") for name in ARRAYS}
        self.train_x, self.train_y, self.val_x, self.val_y = (arrays[name] for name in ARRAYS)
        if len(self.train_x) != self.meta["n_train"] or len(self.val_x) != self.meta["n_val"]:
            raise DataError(f"dataset 'prepared': {path!r}: arrays do not match meta.json (prepare it again)")
        self.image_size = image_size
        self.num_classes = len(self.meta["classes"])
        self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD
        self.auto_augment = DeviceAutoAugment(auto_augment) if auto_augment else None

    def verify(self) -> None:
        """Recompute every array's sha256 against meta.json (verify_arrays)."""
        verify_arrays(self.path, self.meta)

    @property
    def num_train(self) -> int:
        return len(self.train_y)

    def to(self, device) -> "PreparedData":
        """Arrays stay memory-mapped on the CPU; batches move to the device per trial."""
        return self

    def steps_per_epoch(self, batch_size: int) -> int:
        return max(1, self.num_train // batch_size)

    def gather(self, index: np.ndarray, split: str = "train") -> Tuple[torch.Tensor, torch.Tensor]:
        """Images (uint8 NCHW, channels_last) and labels at `index`: a memory copy, no decoding."""
        x, y = (self.train_x, self.train_y) if split == "train" else (self.val_x, self.val_y)
        images = torch.from_numpy(np.take(x, index, axis=0)).permute(0, 3, 1, 2)
        return images, torch.from_numpy(np.take(y, index))

    def train_loader(self, batch_size: int, generator: torch.Generator, pin_memory: bool = False,
                     device: torch.device = torch.device("cpu")):
        """An iterable whose every pass is one epoch of augmented uint8 batches on `device`."""
        return PreparedEpochs(self, batch_size, generator, pin_memory, device)

    def val_loader(self, batch_size: int, pin_memory: bool = False, device=None) -> "PreparedVal":
        """The validation set in order (stored exactly as timm's eval transform makes it)."""
        return PreparedVal(self, batch_size)


class PreparedVal:
    """Passes over the validation set in order, each gathering one batch at a time from the memory
    map (no copy of the whole set is held between or during passes)."""

    def __init__(self, data: PreparedData, batch_size: int):
        self.data, self.batch_size = data, batch_size

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        n, b = len(self.data.val_y), self.batch_size
        for start in range(0, n, b):
            yield self.data.gather(np.arange(start, min(start + b, n)), "val")


class PreparedEpochs:
    """Epochs of a PreparedData: shuffled batches gathered on the CPU, augmented on the device."""

    def __init__(self, data: PreparedData, batch_size: int, generator: torch.Generator, pin_memory: bool,
                 device: torch.device):
        self.data, self.batch_size, self.generator = data, batch_size, generator
        self.pin_memory, self.device = pin_memory, device

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        data, b = self.data, self.batch_size
        order = torch.randperm(data.num_train, generator=self.generator).numpy()
        for step in range(data.steps_per_epoch(b)):
            x, y = data.gather(order[step * b:(step + 1) * b])
            if self.pin_memory:
                x, y = x.pin_memory(), y.pin_memory()
            x = x.to(self.device, non_blocking=True)
            yield train_augment(x, data.image_size, self.generator, data.auto_augment), y
