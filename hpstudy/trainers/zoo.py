"""The model catalogue: every registered model's name, family, size class and build recipe, and
`timm:<name>`, any model of timm's own registry, resolved from its name alone.

Importable without torch, so the analysis layer can look up a model's family, size and display
order; `hpstudy.trainers.models` turns a spec into a module (the recipe's `builder` names a function there).
Whether timm knows a `timm:` name is checked where timm is imported (`hpstudy.trainers.models.check_timm_name`).
"""

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import version
from typing import Dict, Iterable, List, Optional, Sequence

from hpstudy.trainers.errors import ConfigError, shown

FAMILIES = ("vit_p", "vit_c", "cnn", "coatnet", "vit_rel")
SIZE_ORDER = ("tiny", "1gf", "4gf", "8gf", "18gf", "36gf")  # compute classes, in panel order
TIMM_PREFIX = "timm:"
TIMM_MODELS = "timm:<a name in timm.list_models()>"  # what a message allows for a timm model
TIMM_NAME = re.compile(r"timm:[A-Za-z0-9_.-]{1,128}")
TIMM_IMAGE_SIZE = 224  # a timm: model's size when none is given (timm's usual); a trial builds it at its data's
FAMILY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")


@dataclass(frozen=True)
class ModelSpec:
    """A named model: its family, size class and how `hpstudy.trainers.models` builds it."""

    name: str
    family: str
    builder: str  # "vit", "timm", "regnet", "coatnet" or "vit_rel" (hpstudy.trainers.models.BUILDERS)
    image_size: int
    size: str = ""  # compute class for side-by-side panels: one of SIZE_ORDER
    description: str = ""
    kwargs: Dict = field(default_factory=dict)
    label: str = ""  # the name a figure or a table shows (ViT-C 4GF); the name stays in the data


_REGISTRY: Dict[str, ModelSpec] = {}


MAX_NEAR = 200  # characters: a longer value is no typo of a name (and would cost seconds to compare)


def _typo_distance(a: str, b: str) -> int:
    """Edits (delete, insert or replace a character, or swap two neighbours) that turn `a` into `b`
    (optimal string alignment distance)."""
    previous2: List[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], previous2[j - 2] + 1)
        previous2, previous = previous, row
    return previous[-1]


def nearest(value: object, names: Iterable[str]) -> List[str]:
    """The valid `names` a mistyped `value` most likely meant: every name the fewest typing edits away
    (a character deleted, inserted, replaced, or two swapped; ties in difflib's order of similarity), when
    that is at most a third of the value; else difflib's closest match, if any. Empty for a value that is
    not a string or is one of `names`. (A message helper of every layer: it lives here, in the torch-free
    catalogue, because the spec layer imports it; trainers.errors would be its home.)"""
    names = list(dict.fromkeys(n for n in names if isinstance(n, str)))
    if not isinstance(value, str) or not value or value in names or len(value) > MAX_NEAR:
        return []
    ratio = lambda name: difflib.SequenceMatcher(None, value.lower(), name.lower()).ratio()  # noqa: E731
    distances = {name: _typo_distance(value.lower(), name.lower()) for name in names}
    fewest = min(distances.values(), default=None)
    if fewest is not None and fewest <= max(1, len(value) // 3):
        return sorted((n for n, d in distances.items() if d == fewest), key=ratio, reverse=True)
    return difflib.get_close_matches(value, names, n=1, cutoff=0.75)


def did_you_mean(value: object, names: Iterable[str]) -> str:
    """`; did you mean 'x'?` (or `'x' or 'y'`) to end an error message about `value`, naming nearest(value,
    names); empty when no name is near."""
    near = nearest(value, names)
    return f"; did you mean {' or '.join(map(repr, near))}?" if near else ""


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
    """Names of registered models in display order, optionally of one family (timm: models are not listed)."""
    return [name for name, spec in _REGISTRY.items() if family is None or spec.family == family]


def display_name(name: str) -> str:
    """The model's human name (ViT-P 1GF, RegNetY-4GF, CoAtNet-0), its identifier if it has none."""
    return get_spec(name).label or name


def is_timm(name: object) -> bool:
    """Whether `name` names a timm model directly (`timm:<name>`) rather than a registered one."""
    return isinstance(name, str) and name.startswith(TIMM_PREFIX)


@lru_cache(maxsize=None)
def installed_timm_version() -> str:
    """The installed timm's version (from its package metadata: timm is not imported)."""
    return version("timm")


def get_spec(name: str, family: Optional[str] = None, size: Optional[str] = None) -> ModelSpec:
    """The spec of a registered model, or of `timm:<name>`: family `family` (none: a family of its own, named
    `timm:<name>`), size class `size` (none: unknown, ""), built by timm at the data's size. ConfigError
    naming the field (model, family, size) otherwise; a registered model's family and size are its own."""
    if not is_timm(name):
        if name not in _REGISTRY:
            raise ConfigError(
                f"model: unknown model {shown(name)}; allowed: {', '.join(_REGISTRY)}, or {TIMM_MODELS}"
                + did_you_mean(name, _REGISTRY)
            )
        spec = _REGISTRY[name]
        for field_name, given, own in (("family", family, spec.family), ("size", size, spec.size)):
            if given is not None and given != own:
                raise ConfigError(
                    f"{field_name}: bad value {shown(given)} for {name}; allowed: {own!r} or none (a registered "
                    f"model's {field_name} is its own; {field_name} is for timm: models)"
                )
        return spec
    if not TIMM_NAME.fullmatch(name):
        raise ConfigError(f"model: bad value {shown(name)}; allowed: {TIMM_MODELS}")
    if family is not None and not (isinstance(family, str) and FAMILY_NAME.fullmatch(family)):
        raise ConfigError(
            f"family: bad value {shown(family)}; allowed: one of {', '.join(FAMILIES)} or a name of its own "
            f"(letters, digits, _ . : -, first a letter or digit; none: {name})"
        )
    if size is not None and size not in SIZE_ORDER:
        raise ConfigError(f"size: bad value {shown(size)}; allowed: one of {', '.join(SIZE_ORDER)} (none: unknown)")
    timm_name = name[len(TIMM_PREFIX) :]
    return ModelSpec(
        name, family or name, "timm", TIMM_IMAGE_SIZE, size or "", f"timm {timm_name}", dict(timm_name=timm_name)
    )


def _register_vit_twins(
    size: str,
    image_size: int,
    dim: int,
    depth: int,
    heads: int,
    mlp: int,
    patch: int,
    stem_strides: Sequence[int],
    stem_channels: Sequence[int],
) -> None:
    """Register ViT-P and its ViT-C twin (conv stem, one block fewer)."""
    common = dict(dim=dim, heads=heads, mlp=mlp, patch=patch)
    shown = size if size == "tiny" else size.upper()
    register(
        ModelSpec(
            f"vit_p_{size}",
            "vit_p",
            "vit",
            image_size,
            size,
            f"ViT-P {size}: patchify stem, {depth} blocks",
            dict(common, depth=depth),
            label=f"ViT-P {shown}",
        )
    )
    register(
        ModelSpec(
            f"vit_c_{size}",
            "vit_c",
            "vit",
            image_size,
            size,
            f"ViT-C {size}: conv stem {list(stem_channels)}, {depth - 1} blocks",
            dict(common, depth=depth - 1, stem=(tuple(stem_strides), tuple(stem_channels))),
            label=f"ViT-C {shown}",
        )
    )


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
for _gf, _size, _timm_name in (
    ("1gf", "1gf", "regnety_016"),
    ("4gf", "4gf", "regnety_040"),
    ("16gf", "18gf", "regnety_160"),
    ("32gf", "36gf", "regnety_320"),
):
    register(
        ModelSpec(
            f"regnety_{_gf}",
            "cnn",
            "timm",
            224,
            _size,
            f"timm {_timm_name}",
            dict(timm_name=_timm_name),
            label=f"RegNetY-{_gf.upper()}",
        )
    )
register(ModelSpec("resnet50", "cnn", "timm", 224, "4gf", "timm resnet50", dict(timm_name="resnet50"), "ResNet-50"))
register(
    ModelSpec(
        "cnn_tiny",
        "cnn",
        "regnet",
        32,
        "tiny",
        "RegNetY-style CNN for small images (4 stages, SE)",
        dict(depth=6, w0=24, wa=24.0, wm=2.0, group_size=8, se_ratio=0.25, stem_width=24),
        label="CNN tiny",
    )
)


def _register_layouts(
    prefix: str, shown: str, image_size: int, size: str, depths: Dict[str, Sequence[int]], **common
) -> None:
    """Register the conv/attention layouts of one CoAtNet (e.g. `cccc` -> block_type C, C, C, C), shown
    as `shown` and the layout (CoAtNet-0 C-C-C-C)."""
    for layout, stage_depths in depths.items():
        register(
            ModelSpec(
                f"{prefix}_{layout}",
                "coatnet",
                "coatnet",
                image_size,
                size,
                f"CoAtNet layout {'-'.join(layout.upper())}, stage depths {list(stage_depths)}",
                dict(common, block_type=tuple(layout.upper()), depths=tuple(stage_depths)),
                label=f"{shown} {'-'.join(layout.upper())}",
            )
        )


# The layouts of the paper's Sec. 2.2 at CoAtNet-0 size and, as the paper asks ("all models have similar
# parameter size and computational cost"), at CoAtNet-0's FLOPs: widths, stem and S4 as CoAtNet-0; a layout
# with a cheaper C stage in S3 gets more S3 blocks, C-T-T-T (attention over 28x28 in S2) fewer S2 blocks.
# `cctt` is CoAtNet-0 itself. Counted FLOPs are within 3% of CoAtNet-0 (tests/trainers/test_coatnet.py).
_register_layouts(
    "coatnet_0",
    "CoAtNet-0",
    224,
    "4gf",
    {"cccc": (2, 3, 9, 2), "ccct": (2, 3, 8, 2), "cctt": (2, 3, 5, 2), "cttt": (2, 1, 5, 2)},
    timm_cfg="coatnet_0",
)
# CoAtNet-0..3 from timm's MaxxVitCfg `coatnet_N`, CoAtNet-1/2/3 beside the 8/18/36 GF models (registered
# between the layouts and their tiny twins: figures colour a model by its place in its family).
for _n, _size in ((0, "4gf"), (1, "8gf"), (2, "18gf"), (3, "36gf")):
    register(
        ModelSpec(
            f"coatnet_{_n}",
            "coatnet",
            "coatnet",
            224,
            _size,
            f"CoAtNet-{_n} (C-C-T-T)",
            dict(timm_cfg=f"coatnet_{_n}"),
            label=f"CoAtNet-{_n}",
        )
    )
# Tiny twins for 32 px images, by the same rules: CoAtNet-0's widths / 3 (heads stay 32 wide), about half its
# blocks, and a stride-1 stem so S1..S4 see 16, 8, 4 and 2 px (224 px: 56..7); FLOPs within 5% of each other.
_register_layouts(
    "coatnet_tiny",
    "CoAtNet tiny",
    32,
    "tiny",
    {"cccc": (1, 2, 5, 1), "ccct": (1, 2, 4, 1), "cctt": (1, 2, 3, 1), "cttt": (1, 1, 3, 1)},
    timm_cfg="coatnet_0",
    embed_dim=(32, 64, 128, 256),
    stem_width=32,
    head_hidden_size=256,
    stem_stride=1,
)
# ViT_REL (the paper's fifth layout): a ViT stem at S3's stride and width, relative attention, heads 32 wide,
# as many blocks as match its CoAtNet's FLOPs (224 px: 11 blocks, 1.3% over CoAtNet-0; tiny: 9, 0.5% over).
register(
    ModelSpec(
        "vit_rel",
        "vit_rel",
        "vit_rel",
        224,
        "4gf",
        "ViT_REL: patch 16, 384 wide, 11 blocks",
        dict(dim=384, depth=11, patch=16),
        label="ViT-REL",
    )
)
register(
    ModelSpec(
        "vit_rel_tiny",
        "vit_rel",
        "vit_rel",
        32,
        "tiny",
        "ViT_REL tiny twin: patch 8, 128 wide, 9 blocks",
        dict(dim=128, depth=9, patch=8),
        label="ViT-REL tiny",
    )
)
