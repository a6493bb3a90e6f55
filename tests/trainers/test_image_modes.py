"""Images of every Pillow mode and bit depth as 8-bit RGB (hpstudy.trainers.image_modes): generated in memory and
written as users have them (PNG, TIFF, PGM/PPM), then read by `hpstudy prepare` and the image-folder loaders. The
stored level of each pixel is the documented scaling of its source value: round(v * 255 / top), top the value the
mode's white stands for; 8-bit colour modes are Pillow's own conversion to RGB, as before."""

import io
import json
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from hpstudy.cli import hpstudy_main
from hpstudy.trainers.errors import DataError
from hpstudy.trainers.image_modes import read_rgb, to_rgb

TRAIN, VAL = 16, 14  # a 16 px square is stored whole (train) and as its centre 14 px (val: 14 / 0.875 = 16)

# Grey modes by their source values: the numpy type Pillow's raw bytes of the mode hold, the values a
# generated pixel takes, and the value white stands for.
GREY = {
    "1": (np.bool_, st.booleans(), 1),
    "L": ("u1", st.integers(0, 255), 255),
    "I;16": ("<u2", st.integers(0, 65535), 65535),
    "I;16L": ("<u2", st.integers(0, 65535), 65535),
    "I;16B": (">u2", st.integers(0, 65535), 65535),
    "I;16N": ("=u2", st.integers(0, 65535), 65535),
    "I": ("=i4", st.integers(0, 65535), 65535),
    "F": ("=f4", st.floats(0, 1, width=32), 1),
}
# 8-bit colour modes: their channels, and the stored RGB each pixel's channels give (None: Pillow's conversion)
COLOUR = {
    "RGB": (3, lambda v: v),
    "RGBA": (4, lambda v: v[..., :3]),  # alpha dropped
    "RGBX": (4, lambda v: v[..., :3]),
    "LA": (2, lambda v: v[..., [0, 0, 0]]),
    "CMYK": (4, None),
    "YCbCr": (3, None),
    "LAB": (3, None),
    "HSV": (3, None),
}
PALETTE = ("P", "PA")
# 16-bit colour files Pillow opens as 8 bits itself: the PNG colour type (None: a PPM) and the channels read
DEEP = {
    "RGB16.png": (2, [0, 1, 2]),
    "RGBA16.png": (6, [0, 1, 2]),
    "LA16.png": (4, [0, 0, 0]),
    "RGB16.ppm": (None, [0, 1, 2]),
}
# The files each mode is written to, as Pillow writes them (a mode missing here is tested in memory only)
FILES = {
    "1": ("png", "tif"),
    "L": ("png", "tif", "pgm"),
    "I;16": ("png", "tif", "pgm"),
    "I;16L": ("tif",),
    "I;16B": ("png", "tif"),
    "I": ("tif", "pgm"),
    "F": ("tif",),
    "RGB": ("png", "tif", "ppm"),
    "RGBA": ("png", "tif"),
    "LA": ("png", "tif"),
    "CMYK": ("tif",),
    "YCbCr": ("tif",),
    "LAB": ("tif",),
    "P": ("png", "tif"),
    "PA": ("tif",),
}
EIGHT_BIT = ("1", "L", "P", "PA", *COLOUR)
FORMATS = {"png": "PNG", "tif": "TIFF", "pgm": "PPM", "ppm": "PPM", "JPEG": "JPEG"}  # Pillow's name of each
ALL_MODES = (*GREY, *COLOUR, *PALETTE)
KINDS = [(mode, suffix) for mode, suffixes in FILES.items() for suffix in suffixes] + [
    (mode, mode.split(".")[1]) for mode in DEEP
]


@dataclass
class Case:
    """The source pixels' documented levels (H x W x 3), how far a stored level may be off, and the mode."""

    level: np.ndarray
    within: float
    mode: str


def grey(draw, mode: str, shape) -> Tuple[Image.Image, Case]:
    """A grey image of `mode` with any values it is read on, each at the nearest level of its scaling."""
    dtype, values, top = GREY[mode]
    v = draw(arrays(dtype, shape, elements=values))
    image = Image.fromarray(v) if mode == "1" else Image.frombytes(mode, shape[::-1], v.tobytes())
    level = np.repeat(v.astype(np.float64)[..., None] * (255 / top), 3, axis=2)
    return image, Case(level, 0.5 + 1e-9, mode)  # the nearest level


def colour(draw, mode: str, shape) -> Tuple[Image.Image, Case]:
    """An 8-bit colour image of `mode` with any channel values, and the RGB they are stored as."""
    channels, stored = COLOUR[mode]
    v = draw(arrays(np.uint8, (*shape, channels)))
    image = Image.frombytes(mode, shape[::-1], v.tobytes())
    level = np.asarray(image.convert("RGB")) if stored is None else stored(v)
    return image, Case(level.astype(np.float64), 0, mode)


def palette(draw, mode: str, shape) -> Tuple[Image.Image, Case]:
    """A palette image (P, or PA with alpha) of any indices into any 256 colours: stored as its colours."""
    index = draw(arrays(np.uint8, shape))
    colours = draw(arrays(np.uint8, (256, 3)))
    planes = index if mode == "P" else np.stack([index, draw(arrays(np.uint8, shape))], axis=2)
    image = Image.frombytes(mode, shape[::-1], planes.tobytes())
    image.putpalette(colours.tobytes())
    return image, Case(colours[index].astype(np.float64), 0, mode)


@st.composite
def images(draw, mode: str, side=st.integers(1, 12)) -> Tuple[Image.Image, Case]:
    """An image of `mode`, of any size, with any values the mode holds (I and F: in the range they are read on)."""
    shape = (draw(side), draw(side))
    make = grey if mode in GREY else colour if mode in COLOUR else palette
    return make(draw, mode, shape)


def png16(values: np.ndarray, colour_type: int) -> bytes:
    """A 16-bit PNG of `values` (H x W x channels uint16): Pillow opens these files but cannot write them."""
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in values)  # filter 0: the row as it is
    header = struct.pack(">IIBBBBB", values.shape[1], values.shape[0], 16, colour_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def deep(draw, mode: str, shape) -> Tuple[bytes, Case]:
    """A 16-bit colour file of `mode` (DEEP) and its levels, within one of the 16-bit rule's."""
    colour_type, read = DEEP[mode]
    v = draw(arrays(np.uint16, (*shape, {None: 3, 2: 3, 6: 4, 4: 2}[colour_type])))
    header = f"P6 {shape[1]} {shape[0]} 65535\n".encode()  # Pillow writes no 16-bit PPM either
    data = png16(v, colour_type) if colour_type is not None else header + v.astype(">u2").tobytes()
    return data, Case(v[..., read].astype(np.float64) * (255 / 65535), 1, mode)


@st.composite
def files(draw, kinds=KINDS, side=st.just(TRAIN)) -> Tuple[Case, str, bytes]:
    """(levels, file suffix, file bytes): an image of one of `kinds` (mode, suffix) written as such a file."""
    mode, suffix = draw(st.sampled_from(kinds))
    if mode in DEEP:
        data, case = deep(draw, mode, (draw(side), draw(side)))
        return case, suffix, data
    image, case = draw(images(mode, side))
    written = io.BytesIO()
    image.save(written, FORMATS[suffix])
    return case, suffix, written.getvalue()


def stored_as_documented(stored: np.ndarray, case: Case) -> None:
    """Every stored level is within `case.within` of the documented one."""
    assert stored.dtype == np.uint8 and stored.shape == case.level.shape
    off = np.abs(stored.astype(np.float64) - case.level)
    assert off.max(initial=0) <= case.within, (case.mode, off.max())


@pytest.mark.parametrize("mode", ALL_MODES)
@given(data=st.data())
def test_every_mode_becomes_rgb_at_its_documented_level(mode, data):
    image, case = data.draw(images(mode))
    stored_as_documented(np.asarray(to_rgb(image, "x")), case)


@pytest.mark.parametrize("mode,suffix", KINDS, ids=[f"{m}-{s}" for m, s in KINDS])
@settings(max_examples=30)  # 33 kinds, each example a file written and read
@given(data=st.data())
def test_every_file_is_read_at_its_documented_level(mode, suffix, data, tmp_path_factory):
    """PNG, TIFF and PGM/PPM files as Pillow (or, at 16 bits a colour, the file's specification) writes them."""
    case, _, written = data.draw(files([(mode, suffix)], st.integers(1, 12)))
    path = tmp_path_factory.mktemp("file") / f"image.{suffix}"
    path.write_bytes(written)
    stored_as_documented(np.asarray(read_rgb(str(path))), case)


@pytest.mark.parametrize("mode", EIGHT_BIT)
@given(data=st.data())
def test_eight_bit_modes_convert_as_pillow_does(mode, data):
    """So an 8-bit folder prepares to the arrays (and digest) it did before the conversion by bit depth."""
    image, _ = data.draw(images(mode))
    assert np.array_equal(np.asarray(to_rgb(image, "x")), np.asarray(image.convert("RGB")))


def _folder(root: Path, images) -> Path:
    """train/ and val/ of one class holding the same files, named in the order they are stored."""
    for split in ("train", "val"):
        (root / split / "c").mkdir(parents=True)
        for i, (_, suffix, data) in enumerate(images):
            (root / split / "c" / f"{i:02d}.{suffix}").write_bytes(data)
    return root


@settings(max_examples=30)
@given(st.lists(files(), min_size=1, max_size=4))
def test_prepare_and_the_loaders_store_each_file_at_its_documented_level(images):
    """`hpstudy prepare` stores each file scaled by its bit depth; the worker and device loaders' validation
    images are the stored ones (the same conversion)."""
    from hpstudy.trainers.data import LoaderData
    from hpstudy.trainers.device_decode import DeviceDecodeData
    from hpstudy.trainers.prepared import PreparedData

    with tempfile.TemporaryDirectory() as tmp:
        root, out = _folder(Path(tmp) / "imgs", images), Path(tmp) / "prep"
        flags = ["--train-size", str(TRAIN), "--image-size", str(VAL), "--workers", "1"]
        assert hpstudy_main(["prepare", "--data", str(root), "--out", str(out), *flags]) == 0
        data = PreparedData(str(out), VAL)
        for (case, _, _), train, val in zip(images, data.train_x, data.val_x):
            stored_as_documented(train, case)
            stored_as_documented(val, Case(case.level[1:-1, 1:-1], case.within, case.mode))
        workers = LoaderData(str(root), VAL, 0, None).val_loader(len(images))
        on_device = DeviceDecodeData(str(root), VAL, 0, None).val_loader(len(images))
        for loader in (workers, on_device):
            (x, _), *_ = loader
            assert np.array_equal(x.permute(0, 2, 3, 1).numpy(), data.val_x)


@settings(max_examples=10)
@given(st.lists(files([kind for kind in KINDS if kind[0] in EIGHT_BIT]), min_size=1, max_size=4))
def test_an_eight_bit_folder_prepares_to_the_digest_of_its_images_converted_by_pillow(images):
    """Trial keys name a preparation's digest: 8-bit images prepare as Pillow's convert("RGB") of each did."""
    from hpstudy.trainers.prepared import prepare

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        converted = []
        for case, suffix, data in images:
            path = tmp / f"source.{suffix}"
            path.write_bytes(data)
            with Image.open(path) as img:
                img.convert("RGB").save(tmp / "rgb.png")
            converted.append((case, "png", (tmp / "rgb.png").read_bytes()))
        digests = []
        for name, folder in (("as_is", images), ("converted", converted)):
            prepare(str(_folder(tmp / name, folder)), str(tmp / f"{name}.prep"), TRAIN, VAL, progress=None)
            digests.append(json.loads((tmp / f"{name}.prep" / "meta.json").read_text())["digest"])
        assert digests[0] == digests[1]


def test_a_preparation_by_the_conversion_before_bit_depths_is_made_again_with_the_same_digest(tmp_path):
    """A folder prepared before the conversion by bit depth (no `conversion` in meta.json) is not reused: its 16-bit
    images were stored clipped. An 8-bit folder made again keeps its arrays, so its digest and trial keys."""
    from hpstudy.trainers.prepared import prepare

    grey = np.random.default_rng(0).integers(0, 256, (TRAIN, TRAIN), dtype=np.uint8)
    source = _folder(tmp_path / "imgs", [(None, "png", _png(Image.fromarray(grey)))])
    out = tmp_path / "prep"
    first = prepare(str(source), str(out), TRAIN, VAL, progress=None)
    assert prepare(str(source), str(out), TRAIN, VAL, progress=None)["reused"]
    meta = json.loads((out / "meta.json").read_text())
    del meta["conversion"]
    (out / "meta.json").write_text(json.dumps(meta))
    again = prepare(str(source), str(out), TRAIN, VAL, progress=None)
    assert not again["reused"] and again["digest"] == first["digest"]


def _png(image: Image.Image) -> bytes:
    written = io.BytesIO()
    image.save(written, "PNG")
    return written.getvalue()


# An I or F image with a value outside the range its mode is read on, and the values the message names
BEYOND = [
    ("I", np.array([[0, 65536]], np.int32), "0..65536"),
    ("I", np.array([[-1, 7]], np.int32), "-1..7"),
    ("F", np.array([[0.25, 1.5]], np.float32), "0.25..1.5"),
    ("F", np.array([[-0.5, 0.5]], np.float32), "-0.5..0.5"),
    ("F", np.array([[np.nan, 0.5]], np.float32), "nan..nan"),
]


@pytest.mark.parametrize("mode,values,shown", BEYOND, ids=[f"{m}-{s}" for m, _, s in BEYOND])
def test_an_image_without_a_scale_is_refused_naming_the_file_its_mode_and_values(mode, values, shown, tmp_path):
    from hpstudy.trainers.data import LoaderData
    from hpstudy.trainers.device_decode import DeviceDecodeData

    path = tmp_path / "scan.tif"
    Image.fromarray(values).save(path)
    message = rf"^'{path}': mode {mode} \(.*\) with values {shown}; allowed: values in 0\.\."
    with pytest.raises(DataError, match=message):
        read_rgb(str(path))
    root = _folder(tmp_path / "imgs", [(None, "tif", path.read_bytes())])
    with pytest.raises(DataError, match=rf"00.tif': mode {mode} "):
        next(iter(LoaderData(str(root), VAL, 0, None).val_loader(1)))
    with pytest.raises(DataError, match=rf"00.tif': mode {mode} "):
        next(iter(DeviceDecodeData(str(root), VAL, 0, None).val_loader(1)))


@given(st.lists(st.tuples(st.sampled_from(["JPEG", "png", "tif"]), st.integers(0, 12)), min_size=1, max_size=6))
def test_a_device_decoded_batch_keeps_jpegs_and_other_files_in_their_order(images):
    """decode: device decodes JPEGs on the device and other files in the workers; each keeps its place."""
    import torch

    from hpstudy.trainers.device_decode import DeviceDecodeData

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for split in ("train", "val"):
            (root / split / "c").mkdir(parents=True)
        for i, (suffix, step) in enumerate(images):  # uniform greys 20 levels apart: a JPEG keeps them within 1
            written = io.BytesIO()
            Image.new("L", (TRAIN, TRAIN), 20 * step).save(written, FORMATS[suffix])
            for split in ("train", "val"):
                (root / split / "c" / f"{i:02d}.{suffix}").write_bytes(written.getvalue())
        (x, _), *_ = DeviceDecodeData(str(root), VAL, 0, None).val_loader(len(images))
        levels = torch.tensor([20 * step for _, step in images], dtype=torch.float32)[:, None, None, None]
        assert (x.float() - levels).abs().max() <= 1
