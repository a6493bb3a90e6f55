"""Which models a figure or a sentence shows, by what name and in what order (analysis/catalogue.py):
the catalogue's models by their human names in catalogue order, and any other name a table holds
(a user's own model, a Tune run's) by that name, after them, with a style of its own."""

import matplotlib.style
import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.catalogue import catalogue_order, model_family, model_label, model_size
from hpstudy.analysis.figures import STYLE, model_style
from hpstudy.analysis.findings import findings
from hpstudy.trainers.zoo import get_spec, list_models
from tests.analysis.test_figure_contract import FIGURES, STUDY, _colourless

pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")


def _series(fig) -> list:
    """Every labelled series of a figure, axes by axes, in drawing order (the legend's order)."""
    return [line.get_label() for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]


def _drawn(study: pd.DataFrame):
    """{figure name: its figure} of every figure drawn from `study`, in the house style."""
    out = {}
    with matplotlib.style.context(STYLE):
        for name, (_, figure, _) in FIGURES.items():
            # FIGURES' table functions read STUDY; rebuild them on this study
            out[name] = figure(_table(name, study)).fig
    return out


def _table(name: str, study: pd.DataFrame) -> pd.DataFrame:
    from hpstudy.analysis import figures

    table = getattr(figures, f"{name}_table")
    if name == "delta_edf":
        study = study[(study["optimizer"] == "adamw") & (study["epochs"] == 10)]
    return table(study, "final", n_boot=20) if name == "expected_best" else table(study, "final")


def test_the_catalogue_lookups_agree_with_the_zoo_and_take_any_other_name():
    for model in list_models():
        spec = get_spec(model)
        assert (model_label(model), model_family(model), model_size(model)) == (spec.label, spec.family, spec.size)
    assert (model_label("mine_a"), model_family("mine_a"), model_size("mine_a")) == ("mine_a", "mine_a", "")
    assert catalogue_order(["zeta", "cnn_tiny", "alpha", "vit_c_tiny", "cnn_tiny"]) == [
        "vit_c_tiny",
        "cnn_tiny",
        "alpha",
        "zeta",
    ]


def test_legends_list_models_in_catalogue_order_not_by_identifier():
    # the study holds vit_c_tiny and cnn_tiny: by identifier cnn_tiny would come first
    assert list_models().index("vit_c_tiny") < list_models().index("cnn_tiny")
    for name, fig in _drawn(STUDY).items():
        models = [label.split(" (")[0] for label in _series(fig) if label.split(" (")[0] in ("ViT-C tiny", "CNN tiny")]
        if name == "hp_scatter":  # one row of panels per model, labelled on the y axis
            models = [ax.get_ylabel().split("\n")[0] for ax in fig.axes if ax.get_ylabel()]
        assert models and models.index("ViT-C tiny") < models.index("CNN tiny"), (name, models)


def test_models_the_catalogue_does_not_know_are_drawn_by_name_each_in_a_style_of_its_own():
    study = STUDY.assign(model=STUDY["model"].map({"vit_c_tiny": "mine_b", "cnn_tiny": "mine_a"}))
    for name, fig in _drawn(study).items():
        text = " ".join(_series(fig) + [ax.get_ylabel() for ax in fig.axes])
        assert "mine_a" in text and "mine_b" in text and "tiny" not in text, (name, text)
        for ax in fig.axes:
            series = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
            styles = [_colourless(line) for line in series]
            assert len(styles) == len(set(styles)), (name, [s.get_label() for s in series])
        if name != "hp_scatter":
            labels = [label for label in _series(fig) if label.startswith("mine")]
            assert labels.index(next(x for x in labels if x.startswith("mine_a"))) == 0, (name, labels)
    styles = {model_style(m, ["mine_a", "mine_b", "mine_c"])["marker"] for m in ("mine_a", "mine_b", "mine_c")}
    assert len(styles) == 3


def test_known_and_unknown_models_share_a_figure_in_their_own_panels():
    study = STUDY.assign(model=STUDY["model"].replace({"cnn_tiny": "mine"}))
    fig = FIGURES["delta_edf"][1](_table("delta_edf", study)).fig
    assert [ax.get_title() for ax in fig.axes] == ["tiny", "other models"]
    only_mine = STUDY.assign(model="mine")
    fig = FIGURES["delta_edf"][1](_table("delta_edf", only_mine)).fig
    assert [ax.get_title() for ax in fig.axes] == [""]


def test_sentences_name_models_by_their_catalogue_names_and_others_by_theirs():
    rng = np.random.default_rng(0)
    rows = [
        {
            "model": model,
            "optimizer": "adamw",
            "epochs": 6,
            "seed": 0,
            "lr": 10 ** rng.uniform(-4, -2),
            "wd": 0.05,
            "status": "ok",
            "top1_err": float(err),
        }
        for model, errors in (("vit_p_tiny", rng.uniform(10, 60, 24)), ("mine", rng.uniform(10, 12, 24)))
        for err in errors
    ]
    (pair,) = [f for f in findings(pd.DataFrame(rows), "final") if f.kind == "edf_pair"]
    assert pair.models == ("vit_p_tiny", "mine")  # identifiers in the object and its table
    assert "ViT-P tiny" in pair.sentence and "mine" in pair.sentence and "vit_p_tiny" not in pair.sentence
