"""Model builders: ViT-P / ViT-C of Xiao et al. 2021 on timm's VisionTransformer, timm CNNs, and CoAtNet
(Dai et al. 2021) and its ViT_REL on timm's MaxxVit and VisionTransformerRelPos.

The catalogue of names, families and recipes is `hpstudy.trainers.zoo` (torch-free); this module builds them.
"""

from functools import partial
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import timm
from timm.layers import PatchEmbed
from timm.models.maxxvit import MaxxVit
from timm.models.maxxvit import model_cfgs as maxxvit_cfgs
from timm.models.regnet import RegNet, RegNetCfg
from timm.models.vision_transformer import VisionTransformer
from timm.models.vision_transformer_relpos import VisionTransformerRelPos
from torch import nn

from hpstudy.trainers.zoo import get_spec


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


def _timm_cnn(num_classes: int, image_size: int, timm_name: str) -> nn.Module:
    """A timm CNN built from its config (never pretrained weights: nothing downloads)."""
    return timm.create_model(timm_name, pretrained=False, num_classes=num_classes)


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
    "timm": _timm_cnn,
    "regnet": _regnet,
    "coatnet": _coatnet,
    "vit_rel": _vit_rel,
}


def build_model(name: str, num_classes: int = 1000, image_size: Optional[int] = None) -> nn.Module:
    """Build a registered model with fresh (seeded by the caller) weights."""
    spec = get_spec(name)
    return BUILDERS[spec.builder](num_classes=num_classes, image_size=image_size or spec.image_size, **spec.kwargs)


def set_fused_attention(model: nn.Module, enabled: bool) -> nn.Module:
    """Switch timm attention modules between fused SDPA and explicit softmax(QK^T)V."""
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            # torch types Module.__setattr__'s value as Tensor | Module; timm's fused_attn is a plain bool
            module.fused_attn = enabled  # type: ignore[assignment]
    return model
