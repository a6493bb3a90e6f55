"""The model catalogue: the names figures and tables show, and what registering a model gives."""

import ast

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hpstudy.trainers import zoo
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.zoo import ModelSpec, did_you_mean, display_name, get_spec, list_models, nearest, register


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


TYPO_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


@st.composite
def typo_of(draw, names):
    """(intended, typo): one of `names` with one character deleted, inserted or two neighbours swapped,
    the result none of `names`."""
    name = draw(st.sampled_from(sorted(names)))
    at = draw(st.integers(0, len(name)))
    edit = draw(st.sampled_from(["delete", "insert", "swap"]))
    if edit == "delete":
        at = min(at, len(name) - 1)
        typo = name[:at] + name[at + 1 :]
    elif edit == "insert":
        typo = name[:at] + draw(st.sampled_from(TYPO_CHARS)) + name[at:]
    else:
        at = min(at, len(name) - 2)
        typo = name[:at] + name[at + 1] + name[at] + name[at + 2 :]
    assume(typo not in names)
    return name, typo


@settings(max_examples=300)
@given(typo_of(list_models()))
def test_a_model_name_typed_one_character_wrong_is_named_back(intended_typo):
    """`python -m hpstudy.trainers.train --model vit_c_tiyn` and a trial config: the error names the
    catalogue's nearest models, the one meant among them."""
    intended, typo = intended_typo
    with pytest.raises(ConfigError) as info:
        get_spec(typo)
    message = str(info.value)
    assert message.startswith(f"model: unknown model {typo!r}; allowed: ") and "\n" not in message
    hint = message.rpartition("; did you mean ")[2]
    assert hint.endswith("?") and repr(intended) in hint[:-1].split(" or "), message
    assert nearest(typo, list_models()) == [ast.literal_eval(name) for name in hint[:-1].split(" or ")]


def test_the_hint_names_every_name_as_near_and_nothing_for_a_far_or_odd_value():
    assert nearest("vit_c_tiyn", list_models()) == ["vit_c_tiny"]
    assert set(nearest("vit__1gf", list_models())) == {"vit_p_1gf", "vit_c_1gf"}  # a tie: both are named
    assert nearest("EPOCH", ["epochs", "seeds"]) == ["epochs"]  # case does not count
    assert nearest("optimiser", ["optimizers", "epochs"]) == ["optimizers"]  # two edits in nine characters
    for far in ("banana", "", "x" * 10_000, 3, None, "cnn_tiny"):  # far, empty, huge, not text, valid
        assert nearest(far, list_models()) == [] and did_you_mean(far, list_models()) == ""
    assert did_you_mean("sdg", ["adamw", "sgd"]) == "; did you mean 'sgd'?"
