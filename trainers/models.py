"""Model zoo: ViT-P / ViT-C of Xiao et al. 2021 on timm's VisionTransformer, and timm CNN baselines."""

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Dict, List, Sequence, Tuple

import timm
import torch
from timm.layers import PatchEmbed
from timm.models.regnet import RegNet, RegNetCfg
from timm.models.vision_transformer import VisionTransformer
from torch import nn

FAMILIES = ("vit_p", "vit_c", "cnn")


class ConvStem(PatchEmbed):
    """Patch embedding by a stack of 3x3 conv-BN-ReLU layers and a final 1x1 conv (ViT-C stem).

    Subclasses timm's PatchEmbed so VisionTransformer's shape bookkeeping (grid, num_patches,
    flattening) is reused; only `proj` changes. The stride product must equal the patch size.
    """

    def __init__(self, strides: Sequence[int], channels: Sequence[int], img_size=224, patch_size=16,
                 in_chans=3, embed_dim=768, bias=True, **kwargs):
        super().__init__(img_size=img_size, patch_size=patch_size, in_chans=in_chans,
                         embed_dim=embed_dim, bias=bias, **kwargs)
        stride_product = 1
        for s in strides:
            stride_product *= s
        if stride_product != patch_size:
            raise ValueError(f"conv stem strides {list(strides)} multiply to {stride_product}, "
                             f"but the patch size is {patch_size}")
        layers: List[nn.Module] = []
        c_in = in_chans
        for stride, c_out in zip(strides, channels):
            layers += [nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                       nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            c_in = c_out
        layers.append(nn.Conv2d(c_in, embed_dim, 1, bias=True))
        self.proj = nn.Sequential(*layers)


@dataclass(frozen=True)
class ModelSpec:
    """A named model: its family and how to build it for (num_classes, image_size)."""

    name: str
    family: str
    builder: Callable[..., nn.Module]
    image_size: int
    size: str = ""              # compute class for side-by-side panels: tiny, 1gf, 4gf, 18gf, 36gf
    description: str = ""
    kwargs: Dict = field(default_factory=dict)

    def build(self, num_classes: int, image_size: int) -> nn.Module:
        return self.builder(num_classes=num_classes, image_size=image_size, **self.kwargs)


def _vit(num_classes: int, image_size: int, dim: int, depth: int, heads: int, mlp: int,
         patch: int, stem: Tuple[Sequence[int], Sequence[int]] = None) -> VisionTransformer:
    """Pre-LN ViT with class token, learned position embedding, LN eps 1e-6 and a linear head."""
    embed_layer = PatchEmbed if stem is None else partial(ConvStem, stem[0], stem[1])
    return VisionTransformer(
        img_size=image_size, patch_size=patch, num_classes=num_classes, embed_dim=dim, depth=depth,
        num_heads=heads, mlp_ratio=mlp / dim, class_token=True, global_pool="token",
        norm_layer=partial(nn.LayerNorm, eps=1e-6), embed_layer=embed_layer)


def _timm_cnn(num_classes: int, image_size: int, timm_name: str) -> nn.Module:
    """A timm CNN built from its config (never pretrained weights: nothing downloads)."""
    return timm.create_model(timm_name, pretrained=False, num_classes=num_classes)


def _regnet(num_classes: int, image_size: int, **cfg) -> nn.Module:
    """A RegNetY from an explicit timm RegNetCfg."""
    return RegNet(RegNetCfg(**cfg), num_classes=num_classes)


_REGISTRY: Dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """Add a spec to the registry (names are unique)."""
    if spec.family not in FAMILIES:
        raise ValueError(f"model {spec.name!r}: family {spec.family!r} is not one of {FAMILIES}")
    if spec.name in _REGISTRY:
        raise ValueError(f"model {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def _register_vit_twins(size: str, image_size: int, dim: int, depth: int, heads: int, mlp: int,
                        patch: int, stem_strides: Sequence[int], stem_channels: Sequence[int]):
    """Register ViT-P and its ViT-C twin (conv stem, one block fewer)."""
    common = dict(dim=dim, heads=heads, mlp=mlp, patch=patch)
    register(ModelSpec(f"vit_p_{size}", "vit_p", _vit, image_size, size,
                       f"ViT-P {size}: patchify stem, {depth} blocks",
                       dict(common, depth=depth)))
    register(ModelSpec(f"vit_c_{size}", "vit_c", _vit, image_size, size,
                       f"ViT-C {size}: conv stem {list(stem_channels)}, {depth - 1} blocks",
                       dict(common, depth=depth - 1, stem=(tuple(stem_strides), tuple(stem_channels)))))


_STEM_SMALL = [2, 2, 2, 2]
_STEM_LARGE = [2, 2, 1, 2, 1, 2]
_STEM_LARGE_CHANNELS = [64, 128, 128, 256, 256, 512]
_register_vit_twins("1gf", 224, 192, 12, 3, 576, 16, _STEM_SMALL, [24, 48, 96, 192])
_register_vit_twins("4gf", 224, 384, 12, 6, 1152, 16, _STEM_SMALL, [48, 96, 192, 384])
_register_vit_twins("18gf", 224, 768, 12, 12, 3072, 16, _STEM_LARGE, _STEM_LARGE_CHANNELS)
_register_vit_twins("36gf", 224, 1024, 14, 16, 4096, 16, _STEM_LARGE, _STEM_LARGE_CHANNELS)
# CPU-sized twins for 32 px data (patch 4); the stem's stride-1 convs bring its FLOPs up to about
# one transformer block, as in the paper's stems, so ViT-C stays within 10% of ViT-P.
_register_vit_twins("tiny", 32, 96, 6, 3, 288, 4, [2, 1, 2, 1], [24, 48, 48, 96])

# RegNetY 16/32 GF sit beside ViT 18/36 GF in the paper's panels.
for _gf, _size, _timm_name in (("1gf", "1gf", "regnety_016"), ("4gf", "4gf", "regnety_040"),
                               ("16gf", "18gf", "regnety_160"), ("32gf", "36gf", "regnety_320")):
    register(ModelSpec(f"regnety_{_gf}", "cnn", _timm_cnn, 224, _size, f"timm {_timm_name}",
                       dict(timm_name=_timm_name)))
register(ModelSpec("resnet50", "cnn", _timm_cnn, 224, "4gf", "timm resnet50", dict(timm_name="resnet50")))
register(ModelSpec("cnn_tiny", "cnn", _regnet, 32, "tiny", "RegNetY-style CNN for small images (4 stages, SE)",
                   dict(depth=6, w0=24, wa=24.0, wm=2.0, group_size=8, se_ratio=0.25,
                        stem_width=24)))


def list_models(family: str = None) -> List[str]:
    """Names of registered models, optionally of one family."""
    return [name for name, spec in _REGISTRY.items() if family is None or spec.family == family]


def get_spec(name: str) -> ModelSpec:
    """The spec of a registered model; a clear error for an unknown name."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown model {name!r}; registered models: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def build_model(name: str, num_classes: int = 1000, image_size: int = None) -> nn.Module:
    """Build a registered model with fresh (seeded by the caller) weights."""
    spec = get_spec(name)
    return spec.build(num_classes=num_classes, image_size=image_size or spec.image_size)


def set_fused_attention(model: nn.Module, enabled: bool) -> nn.Module:
    """Switch timm attention modules between fused SDPA and explicit softmax(QK^T)V."""
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = enabled
    return model
