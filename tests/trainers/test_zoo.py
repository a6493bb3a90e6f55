"""The model catalogue: the names figures and tables show, and what registering a model gives."""

import pytest

from hpstudy.trainers import zoo
from hpstudy.trainers.zoo import ModelSpec, display_name, get_spec, list_models, register


@pytest.mark.parametrize(
    "name,label",
    [
        ("vit_p_1gf", "ViT-P 1GF"),
        ("vit_c_4gf", "ViT-C 4GF"),
        ("vit_c_36gf", "ViT-C 36GF"),
        ("vit_p_tiny", "ViT-P tiny"),
    ],
)
def test_vit_display_names_write_the_compute_class_as_the_paper_does(name, label):
    """The paper's panels read "ViT-C 4GF"; the CPU-sized twins keep "tiny" in lower case."""
    assert display_name(name) == label


def test_a_registered_spec_is_what_the_catalogue_returns_and_a_name_is_registered_once(monkeypatch):
    monkeypatch.setattr(zoo, "_REGISTRY", {})
    spec = ModelSpec("toy", "cnn", "timm", 32, "tiny", label="Toy")
    assert register(spec) is spec
    assert get_spec("toy") is spec and list_models() == ["toy"] and display_name("toy") == "Toy"
    with pytest.raises(ValueError, match="^model 'toy' is registered twice$"):
        register(ModelSpec("toy", "cnn", "timm", 32, "tiny"))
