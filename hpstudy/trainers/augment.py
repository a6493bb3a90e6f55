"""The paper's training augmentation applied to uint8 batches on the training device: random-resized
crop + horizontal flip (one grid_sample for the whole batch) and AutoAugment's ImageNet policy
(torchvision's operations, each computed for the whole batch with per-image magnitudes and kept
where an image drew it: no host sync, a fixed number of kernels per batch).

Every random number is drawn from the trial's CPU generator (the same draws on every device) and
moved to the device once per batch. Written here because timm's and torchvision's transforms work
on one image at a time on the CPU; the operations' arithmetic is torchvision's (tested pixel for pixel).
"""

import math
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from torchvision.transforms.v2 import AutoAugment, AutoAugmentPolicy

from hpstudy.trainers.config import DEVICE_AUTO_AUGMENT
from hpstudy.trainers.errors import ConfigError, shown

RRC_SCALE = (0.08, 1.0)  # timm's / torchvision's RandomResizedCrop defaults
RRC_RATIO = (3 / 4, 4 / 3)
RRC_ATTEMPTS = 10


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on `device`; to a GPU through pinned memory, so the copy does not wait for it."""
    if device.type == "cuda" and not t.is_cuda:
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def rrc_boxes(heights: torch.Tensor, widths: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """RandomResizedCrop boxes (top, left, height, width) per image, as torchvision draws them
    (10 attempts at a random area and log-uniform aspect ratio, then a centre crop), vectorised."""
    n = len(heights)
    area = (heights * widths).double()
    target = area[:, None] * torch.empty(n, RRC_ATTEMPTS, dtype=torch.float64).uniform_(*RRC_SCALE, generator=generator)
    log_ratio = torch.empty(n, RRC_ATTEMPTS, dtype=torch.float64).uniform_(
        math.log(RRC_RATIO[0]), math.log(RRC_RATIO[1]), generator=generator
    )
    w = torch.round(torch.sqrt(target * torch.exp(log_ratio)))
    h = torch.round(torch.sqrt(target / torch.exp(log_ratio)))
    ok = (w > 0) & (h > 0) & (w <= widths[:, None]) & (h <= heights[:, None])
    first = torch.where(ok.any(1), ok.double().argmax(1), torch.full((n,), -1))
    rows = torch.arange(n)
    crop_h = torch.where(first >= 0, h[rows, first.clamp(min=0)], torch.zeros(n, dtype=torch.float64))
    crop_w = torch.where(first >= 0, w[rows, first.clamp(min=0)], torch.zeros(n, dtype=torch.float64))
    # fallback: the whole image, its aspect ratio clamped into RRC_RATIO (a centre crop)
    in_ratio = widths.double() / heights.double()
    fb_w = torch.where(
        in_ratio < RRC_RATIO[0],
        widths.double(),
        torch.where(in_ratio > RRC_RATIO[1], torch.round(heights * RRC_RATIO[1]), widths.double()),
    )
    fb_h = torch.where(in_ratio < RRC_RATIO[0], torch.round(widths / RRC_RATIO[0]), heights.double())
    fallback = first < 0
    crop_h, crop_w = torch.where(fallback, fb_h, crop_h), torch.where(fallback, fb_w, crop_w)
    u = torch.rand(2, n, dtype=torch.float64, generator=generator)
    top = torch.where(fallback, (heights - crop_h) // 2, torch.floor(u[0] * (heights - crop_h + 1)))
    left = torch.where(fallback, (widths - crop_w) // 2, torch.floor(u[1] * (widths - crop_w + 1)))
    return torch.stack([top, left, crop_h, crop_w], 1)


def crop_resize_flip(x: torch.Tensor, boxes: torch.Tensor, flips: torch.Tensor, size: int) -> torch.Tensor:
    """Each image's box resized to size x size (bilinear) and mirrored where `flips`, as one
    grid_sample over the batch; uint8 in, uint8 out."""
    n, _, height, width = x.shape
    top, left, h, w = to_device(boxes.to(torch.float32), x.device).unbind(1)
    sign = 1.0 - 2.0 * to_device(flips.to(torch.float32), x.device)
    theta = torch.zeros(n, 2, 3, device=x.device)
    theta[:, 0, 0] = sign * w / width
    theta[:, 0, 2] = (2 * left + w) / width - 1
    theta[:, 1, 1] = h / height
    theta[:, 1, 2] = (2 * top + h) / height - 1
    grid = F.affine_grid(theta, [n, 3, size, size], align_corners=False)
    out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)
    return out.round_().clamp_(0, 255).to(torch.uint8)


GEOMETRIC_OPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
NUM_BINS = 10  # torchvision's AutoAugment: magnitude bins per operation

Ops = Tuple[Tuple[str, Optional[int], bool], ...]  # (operation, magnitude bin, negative) per applied op


class _Tables(NamedTuple):
    """Per image size and device: each variant's signed magnitude, the row of its pixel map
    (geometric operations), the pixel maps, and the sharpness kernel."""

    magnitudes: torch.Tensor  # float64 [variants]
    map_row: torch.Tensor  # int64 [variants]
    sources: torch.Tensor  # int64 [geometric variants, height * width]
    inside: torch.Tensor  # uint8 [geometric variants, height * width]
    sharpen: torch.Tensor  # float32 [3, 1, 3, 3]


class DeviceAutoAugment:
    """AutoAugment's ImageNet policy (timm's `original`) on a uint8 batch: each image draws a
    sub-policy, whether each of its two operations applies and the sign of its magnitude.

    Applied to the whole batch without a host sync and with a fixed number of kernels: for each
    slot of the sub-policies and each operation that can occupy it, the operation is computed for
    every image with that image's magnitude (a device tensor) and kept where the image drew it
    (`torch.where`). The kernels reproduce torchvision's pixel for pixel on the CPU: the
    geometric operations are pixel maps read off torchvision's own kernel; the blends do
    torchvision's fused multiply-add exactly in float64; Equalize and Invert are torchvision's."""

    def __init__(self, policy: str = DEVICE_AUTO_AUGMENT):
        if policy != DEVICE_AUTO_AUGMENT:
            raise ConfigError(
                f"auto_augment: bad value {shown(policy)} on a device pipeline; allowed: original "
                f"(or null), the ImageNet policy"
            )
        self.aa = AutoAugment(AutoAugmentPolicy.IMAGENET)
        policies = self.aa._policies
        self.ops = tuple(dict.fromkeys(op for sub in policies for op, _, _ in sub))
        self._slot_ops = [tuple(dict.fromkeys(sub[j][0] for sub in policies)) for j in range(2)]
        self._probs = torch.tensor([[sub[0][1], sub[1][1]] for sub in policies])
        self._op_ids = torch.tensor([[self.ops.index(op) for op, _, _ in sub] for sub in policies])
        self._bins = torch.tensor([[magnitude or 0 for _, _, magnitude in sub] for sub in policies])
        self._tables: Dict[Tuple[int, int, torch.device], _Tables] = {}

    def _draws(self, n: int, generator: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each image's sub-policy, whether each of its operations applies and each one's sign."""
        which = torch.randint(len(self._probs), (n,), generator=generator)
        applies = torch.rand(n, 2, generator=generator) <= self._probs[which]
        negative = torch.rand(n, 2, generator=generator) <= 0.5
        return which, applies, negative

    def draw(self, n: int, generator: torch.Generator) -> List[Ops]:
        """Each image's operations, drawn from `generator` (empty where neither applies)."""
        policies = self.aa._policies
        which, applies, negative = (t.tolist() for t in self._draws(n, generator))
        return [
            tuple((policies[w][j][0], policies[w][j][2], negative[i][j]) for j in range(2) if applies[i][j])
            for i, w in enumerate(which)
        ]

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The batch with each image's drawn operations applied."""
        which, applies, negative = self._draws(len(x), generator)
        op_ids = self._op_ids[which]
        variants = (op_ids * NUM_BINS + self._bins[which]) * 2 + negative
        op_ids, variants = to_device(torch.stack([torch.where(applies, op_ids, -1), variants]), x.device)
        for slot, ops in enumerate(self._slot_ops):
            for op in ops:
                drew = (op_ids[:, slot] == self.ops.index(op)).view(-1, 1, 1, 1)
                x = torch.where(drew, self._batch_op(x, op, variants[:, slot]), x)
        return x

    def apply(
        self,
        images: torch.Tensor,
        op: str,
        magnitude_idx: Union[Optional[int], torch.Tensor],
        negative: Union[bool, torch.Tensor],
    ) -> torch.Tensor:
        """One operation on every image of a uint8 batch, with one magnitude bin (None: none) and
        sign, or a bin and sign per image (tensors)."""
        bins = torch.as_tensor(0 if magnitude_idx is None else magnitude_idx)
        variants = (self.ops.index(op) * NUM_BINS + bins) * 2 + torch.as_tensor(negative)
        return self._batch_op(images, op, variants.expand(len(images)).to(images.device))

    def _batch_op(self, x: torch.Tensor, op: str, variants: torch.Tensor) -> torch.Tensor:
        """`op` on every image of `x`, each with its variant's magnitude (as torchvision's AutoAugment)."""
        n, channels, height, width = x.shape
        tables = self._table(height, width, x.device)
        if op in GEOMETRIC_OPS:
            rows = tables.map_row[variants]
            moved = x.flatten(2).gather(2, tables.sources[rows][:, None].expand(n, channels, -1))
            return (moved * tables.inside[rows][:, None]).view_as(x)
        magnitude = tables.magnitudes[variants].view(n, 1, 1, 1)
        if op == "Sharpness":
            return _sharpen(x, 1.0 + magnitude, tables.sharpen)
        return COLOUR_OPS[op](x, magnitude)

    def _table(self, height: int, width: int, device: torch.device) -> _Tables:
        """Built once per image size and device (variant = (op * NUM_BINS + bin) * 2 + negative)."""
        key = (height, width, device)
        if key not in self._tables:
            variants = [(op, b, neg) for op in self.ops for b in range(NUM_BINS) for neg in (False, True)]
            magnitudes = [self._magnitude(op, b, neg, height, width) for op, b, neg in variants]
            geometric = [i for i, (op, _, _) in enumerate(variants) if op in GEOMETRIC_OPS]
            map_row = torch.zeros(len(variants), dtype=torch.long)
            map_row[geometric] = torch.arange(len(geometric))
            maps = [self._pixel_map(variants[i][0], magnitudes[i], height, width) for i in geometric]
            a, b = 1.0 / 13.0, 5.0 / 13.0  # torchvision's adjust_sharpness kernel
            sharpen = torch.tensor([[a, a, a], [a, b, a], [a, a, a]]).expand(3, 1, 3, 3)
            self._tables[key] = _Tables(
                torch.tensor(magnitudes, dtype=torch.float64).to(device),
                map_row.to(device),
                torch.stack([source for source, _ in maps]).to(device),
                torch.stack([inside for _, inside in maps]).to(device),
                sharpen.to(device),
            )
        return self._tables[key]

    def _pixel_map(self, op: str, magnitude: float, height: int, width: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """For a geometric operation: each output pixel's source pixel (flat index) and whether it
        lies inside the image (else the fill, 0), read off torchvision's kernel applied on the CPU
        to an image of pixel coordinates (exact: nearest sampling of whole numbers)."""
        ys, xs = torch.meshgrid(
            torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32), indexing="ij"
        )
        probe = torch.stack([xs, ys, torch.ones_like(xs)])[None]
        mapped = self.aa._apply_image_or_video_transform(
            probe, op, magnitude, interpolation=self.aa.interpolation, fill=self.aa._fill
        )[0]
        inside = mapped[2] > 0.5
        source = torch.where(inside, mapped[1].round().long() * width + mapped[0].round().long(), 0)
        return source.flatten(), inside.flatten().to(torch.uint8)

    def _magnitude(self, op: str, index: Optional[int], negative: bool, height: int, width: int) -> float:
        magnitudes_fn, signed = self.aa._AUGMENTATION_SPACE[op]
        magnitudes = magnitudes_fn(NUM_BINS, height, width)
        if magnitudes is None:
            return 0.0
        value = float(magnitudes[index])
        return -value if signed and negative else value


# torchvision's kernels (transforms.v2.functional) with a magnitude per image: `m` is float64
# [n, 1, 1, 1], the signed magnitude AutoAugment passes; the float steps are torchvision's, in its order.


def _blend(x: torch.Tensor, other: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """torchvision's `_blend`: x * ratio + other * (1 - ratio), clamped and truncated to uint8. Its
    `add_(other, alpha=1 - ratio)` is a fused multiply-add; in float64 the sum is exact, so one
    rounding to float32 gives the same value."""
    alpha = (1.0 - ratio).float().double()
    scaled = (x * ratio.float()).double()
    return (scaled + alpha * other.double()).float().clamp_(0, 255).to(torch.uint8)


def _grey(x: torch.Tensor) -> torch.Tensor:
    """torchvision's floored luma of a uint8 batch, as float32 [n, 1, h, w]."""
    return TF.rgb_to_grayscale(x).float()


def _sharpen(x: torch.Tensor, factor: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """torchvision's `adjust_sharpness`: the inner pixels blended with their rounded 3x3 blur."""
    if x.shape[-1] <= 2 or x.shape[-2] <= 2:
        return x
    out = x.float()
    blurred = F.conv2d(out, kernel, groups=x.shape[1]).round_()
    inner = out[..., 1:-1, 1:-1]
    alpha = (1.0 - factor).float().double()  # torchvision's add_(blurred - inner, alpha=1 - factor), fused
    inner.copy_((inner.double() + alpha * (blurred - inner).double()).float())
    return out.clamp_(0, 255).to(torch.uint8)


def _autocontrast(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """torchvision's `autocontrast` with `torch.where` for its masked assignments (which sync)."""
    f = x.float()
    low, high = f.amin((-2, -1), keepdim=True), f.amax((-2, -1), keepdim=True)
    flat = high == low
    inv_scale = torch.where(flat, 1.0, (high - low) * (1.0 / 255))
    return ((f - torch.where(flat, 0.0, low)) / inv_scale).clamp_(0, 255).to(torch.uint8)


def _posterize(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    shift = 8 - m.long()
    return x & ((255 >> shift) << shift).to(torch.uint8)


def _solarize(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    # x >= threshold (compared in float32, as torchvision) is x >= its ceiling, for whole x
    return torch.where(x >= (255 * m).float().ceil().to(torch.uint8), x.bitwise_not(), x)


def _contrast(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return _blend(x, _grey(x).mean((-3, -2, -1), keepdim=True), 1.0 + m)


# the policy's operations that are neither geometric nor Sharpness (which needs its kernel)
COLOUR_OPS: Dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "AutoContrast": _autocontrast,
    "Color": lambda x, m: _blend(x, _grey(x), 1.0 + m),
    "Contrast": _contrast,
    "Equalize": lambda x, m: TF.equalize(x),
    "Invert": lambda x, m: TF.invert(x),
    "Posterize": _posterize,
    "Solarize": _solarize,
}


def train_augment(
    x: torch.Tensor, size: int, generator: torch.Generator, auto_augment: Optional[DeviceAutoAugment]
) -> torch.Tensor:
    """Random-resized crop to `size`, flip and (optionally) AutoAugment of a same-size uint8 batch."""
    n, _, height, width = x.shape
    boxes = rrc_boxes(torch.full((n,), height), torch.full((n,), width), generator)
    flips = torch.rand(n, generator=generator) < 0.5
    x = crop_resize_flip(x, boxes, flips, size)
    return auto_augment(x, generator) if auto_augment is not None else x


def center_crop_box(height: int, width: int, crop_pct: float = 0.875) -> Tuple[int, int, int]:
    """(top, left, side) of the centre square that timm's eval transform keeps (crop_pct of the short side)."""
    side = round(min(height, width) * crop_pct)
    return (height - side) // 2, (width - side) // 2, side
