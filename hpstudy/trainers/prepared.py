"""Decode once for the whole study: an image folder turned into memory-mapped uint8 arrays.

`prepare` decodes every training image once, as 8-bit RGB by its bit depth (hpstudy.trainers.image_modes),
resized (bicubic) so its short side is `train_size` and centre-cropped to a square, and every validation image
exactly as timm's eval transform does (short side to image_size / 0.875, centre crop image_size). The arrays are
written under a temporary name, checksummed (sha256) and renamed, so a folder that exists is complete; a rerun of
`prepare` reuses it when the source images have the same names, labels, sizes and modification times (with
`verify_content`, the same bytes) and the same conversion to RGB, after verifying the checksums. Every trial and
study on the node then reads them through the page cache. `PreparedData` serves them: a
training batch is gathered on the CPU (a memory copy, no decoding), moved to the training device,
and cropped, flipped and AutoAugmented there (hpstudy.trainers.augment).

Resident: when the arrays fit in a share of the GPU memory the trial's process may still take
(`resident_budget`), `PreparedData.to` copies them to the GPU once per worker (hpstudy.trainers.loop
caches it) and every batch, training and validation, is gathered there by index: no per-batch copy
of images from the host and no host sync. The order and every augmentation draw come from the same
generator calls, so the batches are the memory-mapped path's bit for bit. Not on a CPU by default:
each worker process would hold a private copy, where the memory map is one copy in the page cache
shared by every trial on the node, and gathering from it is the same memory copy.

`prepare` deletes only what it wrote: `--out` must be missing, an empty folder or an earlier
preparation (its meta.json and arrays and nothing else), checked before decoding; a trial key names
a preparation by `data_digest` (its classes and its arrays' sha256s; hpstudy.trainers.prepared_meta,
which reads a meta.json without torch).

How this differs from decoding the full-size JPEG every epoch: the random-resized crop samples its
box from the stored `train_size` square, not the full image, so a non-square image loses its
edges outside the central square and a crop can carry at most `train_size` pixels of detail.
The exact path (`imagefolder`) stays available.
"""

import contextlib
import copy
import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import uuid
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np
import torch

from hpstudy.trainers.augment import DeviceAutoAugment, to_device, train_augment
from hpstudy.trainers.dataset import Dataset
from hpstudy.trainers.errors import DataError, shown
from hpstudy.trainers.image_modes import CONVERSION, read_rgb
from hpstudy.trainers.prepared_meta import ARRAYS, data_digest, own_meta, read_meta

FORMAT_VERSION = 1
PREPARED_FILES = ("meta.json",) + tuple(f"{name}.npy" for name in ARRAYS)  # all that prepare writes
OUT_ALLOWED = (
    "allowed: a path that does not exist, an empty folder, or a folder written by `hpstudy prepare` "
    "(replaced: only the files prepare wrote are deleted)"
)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Of the CUDA memory a process may still take, the share resident arrays may fill: the rest is the
# trials' (model, optimizer state, activations), and the arrays stay for the worker's later trials.
RESIDENT_SHARE = 0.5
CHUNK_BYTES = 1 << 28  # copied to the device this much at a time


def _train_image(img, size: int) -> np.ndarray:
    from torchvision.transforms import functional as TF

    return np.asarray(TF.center_crop(TF.resize(img, size, TF.InterpolationMode.BICUBIC), size), dtype=np.uint8)


@functools.lru_cache(maxsize=None)
def _val_transform(size: int):
    from timm.data import create_transform

    return create_transform(size, is_training=False, interpolation="bicubic", crop_pct=0.875, use_prefetcher=True)


def _val_image(img, size: int) -> np.ndarray:
    return _val_transform(size)(img).permute(1, 2, 0).numpy()


_DECODERS = {"train": _train_image, "val": _val_image}


def _unreadable(path: str, exc: OSError) -> DataError:
    return DataError(
        f"prepare: cannot read {shown(path)} ({exc.strerror or type(exc).__name__}); allowed: readable image files"
    )


def _source_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise _unreadable(path, exc)


def _source_sha256(path: str) -> str:
    return hashlib.sha256(_source_bytes(path)).hexdigest()


def _decode(job: Tuple[str, str, int]) -> Tuple[np.ndarray, str]:
    """One source image of a split decoded as that split is stored, and the sha256 of its bytes;
    DataError naming the file when it cannot be decoded (raised in a pool worker, it reaches the caller)."""
    from PIL import UnidentifiedImageError

    path, split, size = job
    data = _source_bytes(path)
    try:
        image = _DECODERS[split](read_rgb(path, data), size)
    except DataError as exc:  # an image without a scale (hpstudy.trainers.image_modes)
        raise DataError(f"prepare: {exc}")
    except Exception as exc:  # PIL raises many types for a damaged file
        reason = (
            "not an image PIL can read"
            if isinstance(exc, UnidentifiedImageError)
            else str(exc).splitlines()[0]
            if str(exc)
            else type(exc).__name__
        )
        raise DataError(
            f"prepare: cannot decode {shown(path)} ({reason}); allowed: image files PIL can "
            f"read (replace or remove this one)"
        )
    return image, hashlib.sha256(data).hexdigest()


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def _listing(source: str):
    from torchvision.datasets import ImageFolder

    layout = "train/<class>/*.JPEG and val/<class>/*.JPEG, at least one image per class"
    splits = {}
    for split in ("train", "val"):
        folder = os.path.join(source, split)
        if not os.path.isdir(folder):
            raise DataError(f"prepare: {shown(folder)} is missing; expected {layout}")
        try:
            splits[split] = ImageFolder(folder)
        except FileNotFoundError as exc:  # no class folders, or a class folder without images
            raise DataError(f"prepare: {shown(folder)}: {exc}; expected {layout}")
    if splits["train"].classes != splits["val"].classes:
        raise DataError(f"prepare: {shown(source)}: train and val have different class folders")
    return splits


def _entries(splits) -> Iterator[Tuple[str, str, str, int]]:
    """(split, path, path in the split, label) of every source image, in the order they are stored."""
    for split, folder in splits.items():
        for path, label in folder.samples:
            yield split, path, os.path.relpath(path, folder.root), label


def _digest(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(f"{line}\n".encode())
    return digest.hexdigest()


def _files_digest(splits) -> str:
    """A digest of every source image's name, label, size and modification time (no reading)."""

    def line(path, *named):
        try:
            stat = os.stat(path)
        except OSError as exc:  # a dangling link
            raise _unreadable(path, exc)
        return "\0".join(map(str, (*named, stat.st_size, stat.st_mtime_ns)))

    return _digest(line(path, split, rel, label) for split, path, rel, label in _entries(splits))


def _content_digest(splits, shas: Iterable[str]) -> str:
    """A digest of every source image's name, label and bytes (`shas`: their sha256s, in listing order)."""
    return _digest(f"{split}\0{rel}\0{label}\0{sha}" for (split, _, rel, label), sha in zip(_entries(splits), shas))


def _hashed_content(splits, workers: int) -> str:
    """The content digest of the source images, each read and hashed now (by `workers` processes)."""
    with _decoding(workers) as imap:
        return _content_digest(splits, imap(_source_sha256, [path for _, path, _, _ in _entries(splits)]))


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


def _existing(out: str) -> Optional[Dict]:
    """What `--out` holds that prepare may replace: None when nothing is there, {} for an empty folder,
    the meta.json of an earlier preparation holding only prepare's files. DataError naming `--out`, why
    and what is allowed for anything else (a file, a symbolic link, the working directory or a folder
    above it, a folder holding anything prepare did not write)."""

    def refuse(why: str) -> DataError:
        return DataError(f"--out: {shown(out)} {why}; {OUT_ALLOWED}")

    if os.path.islink(out):
        raise refuse("is a symbolic link (never followed)")
    if not os.path.lexists(out):
        return None
    if not os.path.isdir(out):
        raise refuse("is not a folder")
    real = os.path.realpath(out)
    if os.path.commonpath([real, os.getcwd()]) == real:
        raise refuse("is the working directory or a folder above it")
    try:
        entries = sorted(os.listdir(out))
    except OSError as exc:
        raise refuse(f"cannot be listed ({exc.strerror or type(exc).__name__})")
    if not entries:
        return {}
    foreign = [
        e
        for e in entries
        if e not in PREPARED_FILES or os.path.islink(os.path.join(out, e)) or not os.path.isfile(os.path.join(out, e))
    ]
    if foreign:
        raise refuse(f"holds {shown(foreign)}, which `hpstudy prepare` did not write")
    meta = own_meta(out)
    if meta is None:
        raise refuse("is not empty and holds no meta.json written by `hpstudy prepare`")
    return meta


def _remove_preparation(out: str) -> None:
    """Delete the files prepare writes, then the folder: rmdir, so anything else in it stays."""
    for name in PREPARED_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out, name))
    os.rmdir(out)


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
        raise DataError(
            f"prepared data: {file} {problem}; rebuild the folder: delete {path} and run `hpstudy prepare` again"
        )


def prepare(
    source: str,
    out: str,
    train_size: int = 256,
    image_size: int = 224,
    workers: int = 1,
    progress=print,
    verify_content: bool = False,
) -> Dict:
    """Decode `source` (train/ and val/ class folders) once into `out`; reuse `out` when it already holds a
    preparation of the same files (names, labels, sizes and modification times; with `verify_content`, also
    their bytes) by the same conversion to RGB, else replace it. Returns the meta record (with `reused`)."""
    if train_size < image_size:
        raise DataError(f"prepare: --train-size {train_size} < --image-size {image_size}; allowed: >=")
    found = _existing(out)  # before any decoding: refuses what prepare must not replace
    splits = _listing(source)
    wanted = {
        "version": FORMAT_VERSION,
        "source": os.path.abspath(source),
        "train_size": train_size,
        "image_size": image_size,
        "crop_pct": 0.875,
        "conversion": CONVERSION,
        "files_digest": _files_digest(splits),
        "classes": splits["train"].classes,
        "n_train": len(splits["train"]),
        "n_val": len(splits["val"]),
    }
    if (
        found
        and {k: found.get(k) for k in wanted} == wanted
        and (not verify_content or found.get("content_digest") == _hashed_content(splits, workers))
    ):
        verify_arrays(out, found)
        return dict(found, reused=True)
    tmp = f"{os.path.abspath(out)}.tmp-{uuid.uuid4().hex[:8]}"
    os.makedirs(tmp)
    try:
        meta = _write(splits, tmp, wanted, workers, progress)
        if _existing(out) is not None:  # checked again: nothing has come into it since
            _remove_preparation(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # made above: only prepare's files are in it
        raise
    return dict(meta, reused=False)


def _write(splits, tmp: str, wanted: Dict, workers: int, progress) -> Dict:
    """Decode every image into arrays in `tmp` and write its meta.json; returns the meta record."""
    shapes = {
        "train": (wanted["n_train"], wanted["train_size"], wanted["train_size"], 3),
        "val": (wanted["n_val"], wanted["image_size"], wanted["image_size"], 3),
    }
    shas: List[str] = []
    with _decoding(workers) as imap:
        for split in ("train", "val"):
            samples = splits[split].samples
            size = shapes[split][1]
            images = np.lib.format.open_memmap(
                os.path.join(tmp, f"{split}_x.npy"), mode="w+", dtype=np.uint8, shape=shapes[split]
            )
            for i, (image, sha) in enumerate(imap(_decode, [(p, split, size) for p, _ in samples])):
                images[i] = image
                shas.append(sha)
                if progress and (i + 1) % 10000 == 0:
                    progress(f"prepare: {split} {i + 1}/{len(samples)}")
            images.flush()
            del images
            np.save(os.path.join(tmp, f"{split}_y.npy"), np.array([y for _, y in samples], dtype=np.int64))
    meta = dict(
        wanted,
        content_digest=_content_digest(splits, shas),
        sha256={name: _sha256(os.path.join(tmp, f"{name}.npy")) for name in ARRAYS},
    )
    meta["digest"] = data_digest(meta)
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def resident_budget(device: torch.device) -> int:
    """Bytes a PreparedData's arrays may take held on `device`: RESIDENT_SHARE of what this process may still
    allocate on a CUDA device (its free memory, within the process's memory fraction); 0 elsewhere."""
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    # a `gpu: 0.25` trial shares the GPU and each sharer holds its own copy: its cap, not the free memory, binds;
    # a torch that cannot read the cap back (2.5) counts the whole card, and a copy past the cap runs
    # out of memory, which `hold` takes as "keep the memory map"
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda device: 1.0)(device)
    allowed = fraction * total - torch.cuda.memory_reserved(device)
    return int(RESIDENT_SHARE * min(free, allowed))


def _copy_to(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A memory-mapped array copied to `device` CHUNK_BYTES at a time (no host copy of the whole array)."""
    out = torch.empty(array.shape, dtype=torch.from_numpy(np.empty(0, array.dtype)).dtype, device=device)
    rows = max(1, CHUNK_BYTES // max(1, array[:1].nbytes))
    for start in range(0, len(array), rows):
        out[start : start + rows].copy_(torch.from_numpy(np.array(array[start : start + rows])))
    return out


class PreparedData(Dataset):
    """A folder written by `prepare`: uint8 arrays, memory-mapped or held on the training device (`to`),
    augmented on the training device."""

    def __init__(self, path: str, image_size: int, auto_augment: Optional[str] = None, digest: Optional[str] = None):
        self.meta = read_meta(path)
        found = data_digest(self.meta)
        if digest is not None and found != digest:
            raise DataError(
                f"dataset.digest: {shown(path)} holds the preparation {found}, not the {digest} this "
                f"trial was planned with; allowed: the same preparation (rerun the study to plan it "
                f"with the new preparation's trial keys)"
            )
        if self.meta.get("version") != FORMAT_VERSION:
            raise DataError(
                f"dataset 'prepared': {shown(path)} has format {shown(self.meta.get('version'))}; "
                f"allowed: {FORMAT_VERSION} (prepare it again)"
            )
        if image_size != self.meta["image_size"]:
            raise DataError(
                f"dataset.image_size: bad value {image_size}; {shown(path)} was prepared for "
                f"{shown(self.meta['image_size'])} px (validation images are stored at that size)"
            )
        self.path = path
        arrays = {}
        for name in ARRAYS:
            file = os.path.join(path, f"{name}.npy")
            try:
                arrays[name] = np.load(file, mmap_mode="r")
            except (OSError, ValueError) as exc:  # missing, truncated, not an .npy
                raise DataError(
                    f"dataset 'prepared': cannot read {shown(file)} ({type(exc).__name__}); prepare "
                    f"it again (delete {path} and run `hpstudy prepare`)"
                )
        self.train_x, self.train_y, self.val_x, self.val_y = (arrays[name] for name in ARRAYS)
        if len(self.train_x) != self.meta["n_train"] or len(self.val_x) != self.meta["n_val"]:
            raise DataError(f"dataset 'prepared': {shown(path)}: arrays do not match meta.json (prepare it again)")
        self.image_size = image_size
        self.num_classes = len(self.meta["classes"])
        self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD
        self.auto_augment = DeviceAutoAugment(auto_augment) if auto_augment else None
        self.resident: Optional[Dict[str, torch.Tensor]] = None  # the arrays held on a device (`to`)

    def verify(self) -> None:
        """Recompute every array's sha256 against meta.json (verify_arrays)."""
        verify_arrays(self.path, self.meta)

    @property
    def num_train(self) -> int:
        return len(self.train_y)

    @property
    def nbytes(self) -> int:
        """Bytes of the four arrays."""
        return sum(getattr(self, name).nbytes for name in ARRAYS)

    @property
    def device(self) -> torch.device:
        """Where batches are gathered: the device the arrays are held on, else the CPU (the memory map)."""
        return self.resident["train_x"].device if self.resident is not None else torch.device("cpu")

    def to(self, device: torch.device) -> "PreparedData":
        """The data on `device`: held there when its arrays fit resident_budget (`hold`), else memory-mapped."""
        return self.hold(device, resident_budget(torch.device(device)))

    def hold(self, device: torch.device, budget: int) -> "PreparedData":
        """The data with its arrays held on `device` when they take at most `budget` bytes and can be
        allocated there, else memory-mapped (batches gathered on the CPU)."""
        device = torch.device(device)
        if self.resident is not None and self.device == device:
            return self
        mapped = self if self.resident is None else self._holding(None)
        if self.nbytes > budget:
            return mapped
        try:
            return self._holding({name: _copy_to(getattr(self, name), device) for name in ARRAYS})
        except torch.OutOfMemoryError:  # another process took the memory since the budget was read
            return mapped

    def _holding(self, resident: Optional[Dict[str, torch.Tensor]]) -> "PreparedData":
        """A copy (the same memory maps and AutoAugment) holding `resident`."""
        held = copy.copy(self)
        held.resident = resident
        return held

    def place_index(self, index: torch.Tensor) -> Union[np.ndarray, torch.Tensor]:
        """A CPU index as `gather` takes it: copied (once, without a sync) to the device the arrays are
        held on, else as numpy."""
        return index.numpy() if self.resident is None else to_device(index, self.device)

    def gather(self, index: Union[np.ndarray, torch.Tensor], split: str = "train") -> Tuple[torch.Tensor, torch.Tensor]:
        """Images (uint8 NCHW, channels_last) and labels at `index` (from place_index): a memory copy, no
        decoding; on the device the arrays are held on, else from the memory map."""
        if self.resident is not None:
            x, y = self.resident[f"{split}_x"], self.resident[f"{split}_y"]
            index = torch.as_tensor(index, device=x.device)  # a no-op for place_index's
            return x.index_select(0, index).permute(0, 3, 1, 2), y.index_select(0, index)
        x, y = (self.train_x, self.train_y) if split == "train" else (self.val_x, self.val_y)
        images = torch.from_numpy(np.take(x, index, axis=0)).permute(0, 3, 1, 2)
        return images, torch.from_numpy(np.take(y, index))

    def train_loader(
        self,
        batch_size: int,
        generator: torch.Generator,
        pin_memory: bool = False,
        device: Optional[torch.device] = None,
    ) -> "PreparedEpochs":
        """An iterable whose every pass is one epoch of augmented uint8 batches on `device` (None: the CPU)."""
        return PreparedEpochs(self, batch_size, generator, pin_memory, device)

    def val_loader(
        self, batch_size: int, pin_memory: bool = False, device: Optional[torch.device] = None
    ) -> "PreparedVal":
        """The validation set in order (stored exactly as timm's eval transform makes it)."""
        return PreparedVal(self, batch_size)


class PreparedVal:
    """Passes over the validation set in order, each gathering one batch at a time from the memory
    map or the device the arrays are held on (no copy of the whole set is held between or during passes)."""

    def __init__(self, data: PreparedData, batch_size: int):
        self.data, self.batch_size = data, batch_size

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        n, b = len(self.data.val_y), self.batch_size
        index = self.data.place_index(torch.arange(n))
        for start in range(0, n, b):
            yield self.data.gather(index[start : start + b], "val")


class PreparedEpochs:
    """Epochs of a PreparedData: shuffled batches gathered on the CPU (or where the arrays are held),
    augmented on the device."""

    def __init__(
        self,
        data: PreparedData,
        batch_size: int,
        generator: torch.Generator,
        pin_memory: bool,
        device: Optional[torch.device],
    ):
        self.data, self.batch_size, self.generator = data, batch_size, generator
        self.pin_memory, self.device = pin_memory, device

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        data, b = self.data, self.batch_size
        order = data.place_index(torch.randperm(data.num_train, generator=self.generator))
        for step in range(data.steps_per_epoch(b)):
            x, y = data.gather(order[step * b : (step + 1) * b])
            if self.pin_memory and data.resident is None:
                x, y = x.pin_memory(), y.pin_memory()
            x = x.to(self.device, non_blocking=True)
            yield train_augment(x, data.image_size, self.generator, data.auto_augment), y
