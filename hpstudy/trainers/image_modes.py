"""Every image a dataset decodes, as 8-bit RGB by its bit depth: the one conversion of `hpstudy prepare` and of
the image-folder loaders (decoded in the DataLoader workers, and files other than JPEGs under `decode: device`).

- 8 bits or fewer (Pillow's modes 1, L, P, RGB, RGBA, CMYK, YCbCr, LAB, HSV, LA, PA, RGBX): Pillow's
  `convert("RGB")`, as before this conversion existed, so a folder of 8-bit images prepares to the same arrays
  and digest. Alpha is dropped, not composited.
- 16-bit grey (I;16, I;16B, I;16L, I;16N): the full 16-bit range onto 0..255, v -> round(v * 255 / 65535), so a
  mid-grey stays mid-grey and intensities stay comparable across images. Pillow's own conversion clips every
  value above 255 to white.
- 32-bit integer (I) and float (F) have no fixed range. I is read as 16-bit when every value lies in 0..65535:
  Pillow opens 16-bit PGM (and, before Pillow 10.3, 16-bit PNG) as I. F is read on 0..1, the range of float
  images in scikit-image and torchvision, v -> round(v * 255). An image with any other value (negative, above
  the range, NaN) is refused (DataError naming the file, its mode and its values): a per-image min..max would
  stretch each image on a scale of its own, so a dim and a bright image of the same thing become alike, one hot
  pixel darkens the rest and a blank image becomes amplified noise; the scale such data needs (a CT window, an
  asinh stretch) is the user's to choose.
- Multi-channel 16-bit images (RGB, RGBA and grey+alpha PNG, 16-bit PPM) Pillow opens as 8-bit RGB or RGBA
  itself, keeping each sample's high byte (PNG) or scaling by the file's maximum (PPM): within one level of
  round(v * 255 / 65535).
"""

import io
from typing import Optional, Union

import numpy as np
from PIL import Image

from hpstudy.trainers.errors import DataError, shown

SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")  # unsigned 16-bit grey, read on 0..65535
# The modes without a fixed range: the values each is read on (onto 0..255), and what it holds.
OPEN_RANGE = {"I": (65535, "32-bit integer"), "F": (1.0, "float")}
# Stored in a preparation's meta.json (`conversion`; absent: 1, Pillow's convert("RGB") for every mode): a
# preparation made by another conversion is not reused.
CONVERSION = 2


def value_range(img: Image.Image, path: str) -> Optional[Union[int, float]]:
    """The value `img`'s grey level 255 stands for; None for 8-bit modes; DataError naming `path` for an I or F
    image holding a value outside the range it is read on."""
    if img.mode in SIXTEEN_BIT:
        return 65535
    if img.mode not in OPEN_RANGE:
        return None
    top, kind = OPEN_RANGE[img.mode]
    values = np.asarray(img)
    lo, hi = float(values.min()), float(values.max())  # NaN when any value is
    if not 0 <= lo <= hi <= top:
        raise DataError(
            f"{shown(path)}: mode {img.mode} ({kind}) with values {lo:g}..{hi:g}; allowed: values in 0..{top:g} "
            f"(read as 0..255), or 8- and 16-bit images: convert it with the scale your data needs"
        )
    return top


def to_rgb(img: Image.Image, path: str) -> Image.Image:
    """`img` as 8-bit RGB by its bit depth (the rules above); DataError naming `path` where it has no scale."""
    top = value_range(img, path)
    if top is None:
        return img.convert("RGB")
    grey = np.rint(np.asarray(img, dtype=np.float64) * (255 / top)).astype(np.uint8)
    return Image.fromarray(grey).convert("RGB")


def read_rgb(path: str, data: Optional[bytes] = None) -> Image.Image:
    """The image file at `path` (or its bytes `data`, already read) as 8-bit RGB (`to_rgb`)."""
    with Image.open(io.BytesIO(data) if data is not None else path) as img:
        return to_rgb(img, path)
