"""The paper's training augmentation applied to uint8 batches on the training device: random-resized
crop + horizontal flip (one grid_sample for the whole batch) and AutoAugment's ImageNet policy
(torchvision's implementation, applied to groups of images that drew the same operations).

Every random number is drawn from the trial's CPU generator (the same draws on every device) and
moved to the device once per batch. Written here because timm's and torchvision's transforms work
on one image at a time on the CPU; the per-operation kernels are torchvision's.
"""

import math
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
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

Ops = Tuple[Tuple[str, Optional[int], bool], ...]  # (operation, magnitude bin, negative) per applied op


class DeviceAutoAugment:
    """AutoAugment's ImageNet policy (timm's `original`) on a uint8 batch: each image draws a
    sub-policy, whether each of its two operations applies and the sign of its magnitude; images
    that drew the same are transformed together by torchvision's kernels.

    No step waits for the GPU: the batch is gathered in group order with one index copy, and the
    geometric operations (whose torchvision kernels copy their matrix from the host, a sync per
    call) are applied as a pixel map that torchvision's own kernel computes once on the CPU."""

    def __init__(self, policy: str = DEVICE_AUTO_AUGMENT):
        if policy != DEVICE_AUTO_AUGMENT:
            raise ConfigError(
                f"auto_augment: bad value {shown(policy)} on a device pipeline; allowed: original "
                f"(or null), the ImageNet policy"
            )
        self.aa = AutoAugment(AutoAugmentPolicy.IMAGENET)
        self._maps: Dict[Tuple[str, float, int, int, torch.device], Tuple[torch.Tensor, torch.Tensor]] = {}

    def draw(self, n: int, generator: torch.Generator) -> List[Ops]:
        """Each image's operations, drawn from `generator` (empty where neither applies)."""
        policies = self.aa._policies
        which = torch.randint(len(policies), (n,), generator=generator).tolist()
        applies = (
            torch.rand(n, 2, generator=generator) <= torch.tensor([[p[0][1], p[1][1]] for p in policies])[which]
        ).tolist()
        signs = (torch.rand(n, 2, generator=generator) <= 0.5).tolist()
        return [
            tuple((policies[which[i]][j][0], policies[which[i]][j][2], signs[i][j]) for j in range(2) if applies[i][j])
            for i in range(n)
        ]

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The batch with each image's drawn operations applied."""
        groups = defaultdict(list)
        for i, ops in enumerate(self.draw(len(x), generator)):
            if ops:
                groups[ops].append(i)
        out = x.clone()
        if not groups:
            return out
        index = to_device(torch.tensor([i for members in groups.values() for i in members]), x.device)
        images, pieces, start = x[index], [], 0
        for ops, members in groups.items():
            part = images[start : start + len(members)]
            for op, magnitude_idx, negative in ops:
                part = self.apply(part, op, magnitude_idx, negative)
            pieces.append(part)
            start += len(members)
        out[index] = torch.cat(pieces)
        return out

    def apply(self, images: torch.Tensor, op: str, magnitude_idx: Optional[int], negative: bool) -> torch.Tensor:
        """One operation on a uint8 batch, as torchvision's AutoAugment applies it."""
        height, width = images.shape[-2:]
        magnitude = self._magnitude(op, magnitude_idx, negative, height, width)
        if op not in GEOMETRIC_OPS:
            return self.aa._apply_image_or_video_transform(
                images, op, magnitude, interpolation=self.aa.interpolation, fill=self.aa._fill
            )
        source, inside = self._pixel_map(op, magnitude, height, width, images.device)
        moved = images.flatten(-2).index_select(-1, source).view(images.shape)
        return moved * inside

    def _pixel_map(self, op: str, magnitude: float, height: int, width: int, device: torch.device):
        """For a geometric operation: each output pixel's source pixel (flat index) and whether it
        lies inside the image (else the fill, 0), read off torchvision's kernel applied on the CPU
        to an image of pixel coordinates (exact: nearest sampling of whole numbers)."""
        key = (op, magnitude, height, width, device)
        if key not in self._maps:
            ys, xs = torch.meshgrid(
                torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32), indexing="ij"
            )
            probe = torch.stack([xs, ys, torch.ones_like(xs)])[None]
            mapped = self.aa._apply_image_or_video_transform(
                probe, op, magnitude, interpolation=self.aa.interpolation, fill=self.aa._fill
            )[0]
            inside = mapped[2] > 0.5
            source = torch.where(inside, mapped[1].round().long() * width + mapped[0].round().long(), 0)
            self._maps[key] = (source.flatten().to(device), inside.to(device, torch.uint8))
        return self._maps[key]

    def _magnitude(self, op: str, index: Optional[int], negative: bool, height: int, width: int) -> float:
        magnitudes_fn, signed = self.aa._AUGMENTATION_SPACE[op]
        magnitudes = magnitudes_fn(10, height, width)
        if magnitudes is None:
            return 0.0
        value = float(magnitudes[index])
        return -value if signed and negative else value


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
