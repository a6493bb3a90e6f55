import pytest

from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.flops import model_profile
from hpstudy.trainers.zoo import get_spec, list_models

# Table 1 of Xiao et al. 2021: (GFLOPs, M params).
TABLE_1 = {
    "vit_p_1gf": (1.1, 4.8),
    "vit_c_1gf": (1.1, 4.6),
    "vit_p_4gf": (3.9, 18.5),
    "vit_c_4gf": (4.0, 17.8),
    "vit_p_18gf": (17.5, 86.7),
    "vit_c_18gf": (17.7, 81.6),
    "vit_p_36gf": (35.9, 178.4),
    "vit_c_36gf": (35.0, 167.8),
}


@pytest.mark.parametrize("name", sorted(TABLE_1))
def test_paper_models_match_table_1(name):
    gflops, mparams = TABLE_1[name]
    flops, params = model_profile(name, 1000, 224)
    # Table 1 rounds to 0.1 GF; 3% (plus rounding) on FLOPs, 2% on params.
    assert abs(flops / 1e9 - gflops) <= 0.03 * gflops + 0.05, flops
    assert abs(params / 1e6 - mparams) <= 0.02 * mparams, params


@pytest.mark.parametrize("size", ["1gf", "4gf", "18gf", "36gf", "tiny"])
def test_vit_c_has_one_block_fewer_and_a_conv_stem(size):
    import torch

    from hpstudy.trainers.models import ConvStem, build_model

    with torch.device("meta"):
        p, c = build_model(f"vit_p_{size}"), build_model(f"vit_c_{size}")
    assert len(c.blocks) == len(p.blocks) - 1
    assert isinstance(c.patch_embed, ConvStem) and not isinstance(p.patch_embed, ConvStem)
    layers = list(c.patch_embed.proj)
    convs = [m for m in layers if isinstance(m, torch.nn.Conv2d)]
    assert all(m.kernel_size == (3, 3) and m.bias is None for m in convs[:-1])
    assert convs[-1].kernel_size == (1, 1) and convs[-1].bias is not None
    norms = [m for m in layers if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == len(convs) - 1
    strides = 1
    for m in convs:
        strides *= m.stride[0]
    assert strides == p.patch_embed.patch_size[0]


def test_tiny_twin_flops_within_ten_percent():
    p, _ = model_profile("vit_p_tiny", 10, 32)
    c, _ = model_profile("vit_c_tiny", 10, 32)
    assert abs(c - p) / p < 0.10


def test_vit_recipe_details():
    import torch

    from hpstudy.trainers.models import build_model

    with torch.device("meta"):
        model = build_model("vit_p_1gf")
    assert model.cls_token is not None and model.pos_embed.shape == (1, 197, 192)
    assert model.blocks[0].norm1.eps == 1e-6
    assert isinstance(model.head, torch.nn.Linear)


def test_families_are_recorded():
    assert {get_spec(n).family for n in list_models()} == {"vit_p", "vit_c", "cnn", "coatnet", "vit_rel"}
    assert set(list_models("cnn")) >= {
        "regnety_1gf",
        "regnety_4gf",
        "regnety_16gf",
        "regnety_32gf",
        "resnet50",
        "cnn_tiny",
    }


@pytest.mark.parametrize("name", list_models())
def test_every_model_runs_forward_at_its_resolution(name):
    import torch

    from hpstudy.trainers.models import build_model

    spec = get_spec(name)
    small = spec.image_size <= 32
    device = "cpu" if small else "meta"
    with torch.device(device):
        model = build_model(name, num_classes=7)
        out = model.eval()(torch.zeros(2, 3, spec.image_size, spec.image_size))
    assert out.shape == (2, 7)
    if small:
        assert torch.isfinite(out).all()


def test_unknown_model_names_the_choices():
    from hpstudy.trainers.models import build_model

    with pytest.raises(ConfigError, match="unknown model 'vit_x'.*vit_p_1gf"):
        build_model("vit_x")


def test_conv_stem_rejects_wrong_stride_product():
    from hpstudy.trainers.models import ConvStem

    with pytest.raises(ValueError, match="multiply to 8"):
        ConvStem([2, 2, 2], [8, 8, 8], img_size=32, patch_size=4, embed_dim=16)
