"""Model builders: ViT-P / ViT-C of Xiao et al. 2021 on timm's VisionTransformer, any model of timm's registry
(the catalogue's RegNetY and ResNet-50, and `timm:<name>`), and CoAtNet (Dai et al. 2021) and its ViT_REL on
timm's MaxxVit and VisionTransformerRelPos.

The catalogue of names, families and recipes is `hpstudy.trainers.zoo` (torch-free); this module builds them.
"""

from difflib import get_close_matches
from functools import lru_cache, partial
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import timm
from timm.layers import PatchEmbed
from timm.models.maxxvit import MaxxVit
from timm.models.maxxvit import model_cfgs as maxxvit_cfgs
from timm.models.regnet import RegNet, RegNetCfg
from timm.models.vision_transformer import VisionTransformer
from timm.models.vision_transformer_relpos import VisionTransformerRelPos
from torch import nn

from hpstudy.trainers.errors import ConfigError, shown
from hpstudy.trainers.zoo import TIMM_MODELS, TIMM_PREFIX, get_spec, is_timm


class ConvStem(PatchEmbed):
    """Patch embedding by a stack of 3x3 conv-BN-ReLU layers and a final 1x1 conv (ViT-C stem).

    Subclasses timm's PatchEmbed so VisionTransformer's shape bookkeeping (grid, num_patches,
    flattening) is reused; only `proj` changes. The stride product must equal the patch size.
    """

    def __init__(
        self,
        strides: Sequence[int],
        channels: Sequence[int],
        img_size=224,
        patch_size=16,
        in_chans=3,
        embed_dim=768,
        bias=True,
        **kwargs,
    ):
        super().__init__(
            img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=embed_dim, bias=bias, **kwargs
        )
        stride_product = 1
        for s in strides:
            stride_product *= s
        if stride_product != patch_size:
            raise ValueError(
                f"conv stem strides {list(strides)} multiply to {stride_product}, but the patch size is {patch_size}"
            )
        layers: List[nn.Module] = []
        c_in = in_chans
        for stride, c_out in zip(strides, channels):
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
            ]
            c_in = c_out
        layers.append(nn.Conv2d(c_in, embed_dim, 1, bias=True))
        # timm's PatchEmbed leaves proj's type to be inferred as Conv2d; the stem replaces it
        self.proj = nn.Sequential(*layers)  # type: ignore[assignment]


def _vit(
    num_classes: int,
    image_size: int,
    dim: int,
    depth: int,
    heads: int,
    mlp: int,
    patch: int,
    stem: Optional[Tuple[Sequence[int], Sequence[int]]] = None,
) -> VisionTransformer:
    """Pre-LN ViT with class token, learned position embedding, LN eps 1e-6 and a linear head."""
    embed_layer = PatchEmbed if stem is None else partial(ConvStem, stem[0], stem[1])
    return VisionTransformer(
        img_size=image_size,
        patch_size=patch,
        num_classes=num_classes,
        embed_dim=dim,
        depth=depth,
        num_heads=heads,
        mlp_ratio=mlp / dim,
        class_token=True,
        global_pool="token",
        norm_layer=partial(nn.LayerNorm, eps=1e-6),
        embed_layer=embed_layer,
    )


def _timm(num_classes: int, image_size: int, timm_name: str) -> nn.Module:
    """A model of timm's registry built from its config (never pretrained weights: nothing downloads), for 3-channel
    images (every dataset's) and, where its input size is fixed when built (timm's `fixed_input_size`: ViTs,
    Swin, MaxViT), for `image_size`; a CNN takes any size as it is."""
    fixed = timm.get_pretrained_cfg_value(timm_name, "fixed_input_size")
    size: Dict[str, Any] = dict(img_size=image_size) if fixed else {}
    return timm.create_model(timm_name, pretrained=False, num_classes=num_classes, in_chans=3, **size)


@lru_cache(maxsize=None)
def _timm_names() -> FrozenSet[str]:
    return frozenset(timm.list_models())


def check_timm_name(model: str) -> None:
    """ConfigError naming `model` when it is a timm: model whose name timm.list_models() does not hold (the
    closest names as a hint); nothing for a registered model."""
    if is_timm(model):
        timm_name = get_spec(model).kwargs["timm_name"]
        if timm_name not in _timm_names():
            close = get_close_matches(timm_name, _timm_names(), n=4)
            raise ConfigError(
                f"model: unknown timm model {shown(model)}; allowed: {TIMM_MODELS} (timm {timm.__version__}); "
                f"close: {', '.join(TIMM_PREFIX + name for name in close) or 'none'}"
            )


def _regnet(num_classes: int, image_size: int, **cfg) -> nn.Module:
    """A RegNetY from an explicit timm RegNetCfg."""
    return RegNet(RegNetCfg(**cfg), num_classes=num_classes)


def _coatnet(num_classes: int, image_size: int, timm_cfg: str, stem_stride: int = 2, **overrides) -> MaxxVit:
    """A CoAtNet from timm's MaxxVitCfg `timm_cfg` with `overrides` (block_type, depths, widths; timm's
    keyword overlay), never pretrained.

    MBConv blocks down-sample by a stride-2 first 1x1 conv (timm's conv stride_mode '1x1'), as the paper's
    Eq. 5 and its Table 3 numbers; timm's default, a strided depthwise conv, is the paper's Table 9 variant
    (+0.4 GF for CoAtNet-0). `stem_stride` 1 (small images) builds the net for twice the image size and
    takes the stride out of the stem's first conv: the stages see the feature maps of a 2x larger image.
    """
    model = MaxxVit(
        maxxvit_cfgs[timm_cfg],
        img_size=image_size * 2 // stem_stride,
        num_classes=num_classes,
        conv_stride_mode="1x1",
        **overrides,
    )
    model.stem.conv1.stride = (stem_stride, stem_stride)
    return model


def _vit_rel(num_classes: int, image_size: int, dim: int, depth: int, patch: int) -> VisionTransformerRelPos:
    """ViT_REL of the CoAtNet paper on timm's VisionTransformerRelPos: a ViT stem, one learned relative
    position bias per head (as CoAtNet's attention), heads 32 wide, no LayerScale, average pooling."""
    return VisionTransformerRelPos(
        img_size=image_size,
        patch_size=patch,
        num_classes=num_classes,
        embed_dim=dim,
        depth=depth,
        num_heads=dim // 32,
        init_values=None,
        rel_pos_type="bias",
    )


BUILDERS: Dict[str, Callable[..., nn.Module]] = {
    "vit": _vit,
    "timm": _timm,
    "regnet": _regnet,
    "coatnet": _coatnet,
    "vit_rel": _vit_rel,
}


def build_model(name: str, num_classes: int = 1000, image_size: Optional[int] = None) -> nn.Module:
    """Build a registered or timm: model with fresh (seeded by the caller) weights; ConfigError naming `model`
    for a name neither the catalogue nor timm knows."""
    check_timm_name(name)
    spec = get_spec(name)
    return BUILDERS[spec.builder](num_classes=num_classes, image_size=image_size or spec.image_size, **spec.kwargs)


def set_fused_attention(model: nn.Module, enabled: bool) -> nn.Module:
    """Switch timm attention modules between fused SDPA and explicit softmax(QK^T)V."""
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            # torch types Module.__setattr__'s value as Tensor | Module; timm's fused_attn is a plain bool
            module.fused_attn = enabled  # type: ignore[assignment]
    return model
