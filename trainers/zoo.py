"""The model catalogue: every registered model's name, family, size class and build recipe.

Importable without torch, so the analysis layer can look up a model's family, size and display
order; `trainers.models` turns a spec into a module (the recipe's `builder` names a function there).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from trainers.errors import ConfigError

FAMILIES = ("vit_p", "vit_c", "cnn")
SIZE_ORDER = ("tiny", "1gf", "4gf", "18gf", "36gf")   # compute classes, in panel order


@dataclass(frozen=True)
class ModelSpec:
    """A named model: its family, size class and how `trainers.models` builds it."""

    name: str
    family: str
    builder: str                # "vit", "timm" or "regnet" (see trainers.models.BUILDERS)
    image_size: int
    size: str = ""              # compute class for side-by-side panels: one of SIZE_ORDER
    description: str = ""
    kwargs: Dict = field(default_factory=dict)


_REGISTRY: Dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """Add a spec to the catalogue (names are unique, families and sizes known)."""
    if spec.family not in FAMILIES:
        raise ValueError(f"model {spec.name!r}: family {spec.family!r} is not one of {FAMILIES}")
    if spec.size not in SIZE_ORDER:
        raise ValueError(f"model {spec.name!r}: size {spec.size!r} is not one of {SIZE_ORDER}")
    if spec.name in _REGISTRY:
        raise ValueError(f"model {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def list_models(family: Optional[str] = None) -> List[str]:
    """Names of registered models in display order, optionally of one family."""
    return [name for name, spec in _REGISTRY.items() if family is None or spec.family == family]


def get_spec(name: str) -> ModelSpec:
    """The spec of a registered model; ConfigError naming the registered ones otherwise."""
    if name not in _REGISTRY:
        raise ConfigError(f"model: unknown model {name!r}; allowed: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def _register_vit_twins(size: str, image_size: int, dim: int, depth: int, heads: int, mlp: int,
                        patch: int, stem_strides: Sequence[int], stem_channels: Sequence[int]) -> None:
    """Register ViT-P and its ViT-C twin (conv stem, one block fewer)."""
    common = dict(dim=dim, heads=heads, mlp=mlp, patch=patch)
    register(ModelSpec(f"vit_p_{size}", "vit_p", "vit", image_size, size,
                       f"ViT-P {size}: patchify stem, {depth} blocks", dict(common, depth=depth)))
    register(ModelSpec(f"vit_c_{size}", "vit_c", "vit", image_size, size,
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
    register(ModelSpec(f"regnety_{_gf}", "cnn", "timm", 224, _size, f"timm {_timm_name}",
                       dict(timm_name=_timm_name)))
register(ModelSpec("resnet50", "cnn", "timm", 224, "4gf", "timm resnet50", dict(timm_name="resnet50")))
register(ModelSpec("cnn_tiny", "cnn", "regnet", 32, "tiny", "RegNetY-style CNN for small images (4 stages, SE)",
                   dict(depth=6, w0=24, wa=24.0, wm=2.0, group_size=8, se_ratio=0.25, stem_width=24)))
