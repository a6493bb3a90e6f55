"""CoAtNet (Dai et al. 2021), its conv/attention layouts and ViT_REL: counted against the paper."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from hpstudy.analysis.metric import LeftOutWarning
from hpstudy.trainers.flops import count_flops, model_profile
from hpstudy.trainers.zoo import get_spec, list_models
from tests.helpers import make_trials

if TYPE_CHECKING:
    from timm.models.maxxvit import MaxxVit

# Tables 3/4 of the paper (ImageNet-1K, 224 px): (GFLOPs, M params).
PAPER = {"coatnet_0": (4.2, 25), "coatnet_1": (8.4, 42), "coatnet_2": (15.7, 75), "coatnet_3": (34.7, 168)}
# Table 9: the same nets down-sampling in the depthwise conv (timm's default stride_mode 'dw'), GFLOPs.
STRIDED_DCONV = {"coatnet_0": 4.6, "coatnet_1": 8.8, "coatnet_2": 16.6}
LAYOUTS = ("cccc", "ccct", "cctt", "cttt")


def _within_table_tolerance(counted_gflops: float, published: float) -> bool:
    """Table 1 of Xiao et al.'s tolerance, as tests/trainers/test_models.py: 3% plus rounding to 0.1 GF."""
    return abs(counted_gflops - published) <= 0.03 * published + 0.05


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[] if n == "coatnet_0" else pytest.mark.slow) for n in sorted(PAPER)]
)
def test_coatnet_counts_match_the_paper(name):
    gflops, mparams = PAPER[name]
    flops, params = model_profile(name, 1000, 224)
    assert _within_table_tolerance(flops / 1e9, gflops), flops
    assert abs(params / 1e6 - mparams) <= 0.02 * mparams, params


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STRIDED_DCONV))
def test_timms_default_down_sampling_is_the_papers_table_9_variant(name):
    # why the zoo sets stride_mode '1x1': timm's coatnet_N configs count as the paper's "Strided DConv" rows
    import torch
    from timm.models.maxxvit import MaxxVit, model_cfgs

    with torch.device("meta"):
        model = MaxxVit(model_cfgs[name], img_size=224, num_classes=1000)
    flops = count_flops(model, 224)
    assert _within_table_tolerance(flops / 1e9, STRIDED_DCONV[name])
    assert flops > model_profile(name, 1000, 224)[0]


def _stage_kinds(model: MaxxVit) -> str:
    from timm.models.maxxvit import TransformerBlock2d

    kinds = [{type(block) for block in stage.blocks} for stage in model.stages]
    assert all(len(k) == 1 for k in kinds), kinds  # a stage is all conv or all attention
    return "".join("t" if k == {TransformerBlock2d} else "c" for k in kinds)


# The largest FLOPs ratio between the layouts and ViT_REL per image size (px), as the README states.
SPREAD = {224: 1.10, 32: 1.10, 16: 1.09}


@pytest.mark.parametrize(
    "prefix, vit_rel, sizes",
    [
        pytest.param("coatnet_0", "vit_rel", (224,), marks=pytest.mark.slow),
        ("coatnet_tiny", "vit_rel_tiny", (32, 16)),  # the tiny twins' size, and digits'
    ],
)
def test_layouts_have_their_blocks_and_flops_within_ten_percent(prefix, vit_rel, sizes):
    import torch

    from hpstudy.trainers.models import build_model

    names = [f"{prefix}_{layout}" for layout in LAYOUTS] + [vit_rel]
    classes = 1000 if prefix == "coatnet_0" else 10
    for layout, name in zip(LAYOUTS, names):
        with torch.device("meta"):
            assert _stage_kinds(build_model(name, classes)) == layout
    assert {get_spec(name).image_size for name in names} == {sizes[0]}
    for size in sizes:
        flops = {name: model_profile(name, classes, size)[0] for name in names}
        assert max(flops.values()) / min(flops.values()) < SPREAD[size], (size, flops)
    assert {get_spec(name).size for name in names} == {"4gf" if prefix == "coatnet_0" else "tiny"}


def test_the_cctt_layout_is_coatnet_0():
    import torch

    from hpstudy.trainers.models import build_model

    with torch.device("meta"):
        layout, coatnet = build_model("coatnet_0_cctt"), build_model("coatnet_0")
    assert {k: v.shape for k, v in layout.state_dict().items()} == {k: v.shape for k, v in coatnet.state_dict().items()}


def test_feature_maps_shrink_to_7_px_at_224_and_2_px_for_the_32_px_twins():
    import torch

    from hpstudy.trainers.models import build_model

    with torch.device("meta"):
        assert build_model("coatnet_0").forward_features(torch.zeros(1, 3, 224, 224)).shape[-2:] == (7, 7)
        tiny = build_model("coatnet_tiny_cctt", 10, 32)
        assert tiny.forward_features(torch.zeros(1, 3, 32, 32)).shape[-2:] == (2, 2)


def test_vit_rel_is_a_vit_stem_with_relative_attention():
    import torch
    from torch import nn

    from hpstudy.trainers.models import build_model

    with torch.device("meta"):
        model = build_model("vit_rel")
    block = model.blocks[0]
    assert model.cls_token is None and model.global_pool == "avg"
    assert model.patch_embed.grid_size == (14, 14)  # CoAtNet-0's S3 grid
    assert block.attn.head_dim == 32 and block.attn.rel_pos is not None
    assert isinstance(block.ls1, nn.Identity)  # no LayerScale, as CoAtNet's blocks


def test_families_have_their_own_line_styles_and_panels_distinct_colours():
    from hpstudy.analysis.figures import model_style

    assert {get_spec(n).family for n in list_models()} >= {"coatnet", "vit_rel"}
    lines = {
        family: model_style(list_models(family)[0])["linestyle"]
        for family in ("vit_p", "vit_c", "cnn", "coatnet", "vit_rel")
    }
    assert len({str(style) for style in lines.values()}) == 5
    for size in ("tiny", "4gf"):
        panel = [n for n in list_models() if get_spec(n).size == size]
        assert len({model_style(n)["color"] for n in panel if get_spec(n).family in ("coatnet", "vit_rel")}) == len(
            [n for n in panel if get_spec(n).family in ("coatnet", "vit_rel")]
        )
    for layout in LAYOUTS:  # a tiny twin is drawn in its 224 px twin's colour
        assert model_style(f"coatnet_tiny_{layout}")["color"] == model_style(f"coatnet_0_{layout}")["color"]


def test_the_generalization_figure_leaves_out_diverged_trials_and_says_so():
    from hpstudy.analysis.figures import generalization_figure, generalization_table

    trials = make_trials(models=("coatnet_tiny_cctt", "vit_rel_tiny"), optimizers=("adamw",), n=10, seed=3)
    trials = trials.assign(
        family=trials["model"].map(lambda m: get_spec(m).family), train_loss=np.linspace(0.01, 1.0, len(trials))
    )
    diverged = int((trials["status"] == "diverged").sum())
    assert diverged
    with pytest.warns(LeftOutWarning, match=f"generalization_table: left out {diverged} of 20 counted rows"):
        points = generalization_table(trials)
    caption = generalization_figure(points).caption
    assert len(points) == 20 - diverged and set(points["n_left_out"]) == {diverged}
    assert set(points["family"]) == {"coatnet", "vit_rel"} and "paper = best" in caption
    assert f"{diverged} left out" in caption
