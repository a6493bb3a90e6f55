"""`hpstudy train`: a stored trial replayed from its row's config_json (the same result on a CPU), one trial of a
spec (its recipe and dataset), one-line errors for a bad key or flag; and the one-trial trainer's defaults are
a spec's."""

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpstudy.cli import hpstudy_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data_spec import DataSpec
from tests.helpers import small_spec, stored_row, write_spec

TINY = {"name": "synthetic", "image_size": 8, "n_train": 32, "n_val": 16, "num_classes": 4}


def _stored(tmp_path):
    """A store whose study 's' holds one trial trained here; (store, its key, its row)."""
    from hpstudy.trainers.trial import train_trial

    store = str(tmp_path / "store")
    config = TrialConfig.from_dict(
        dict(model="cnn_tiny", optimizer="adamw", epochs=2, lr=2e-3, wd=0.05, batch_size=16, dataset=TINY, device="cpu")
    )
    row = train_trial(config.to_dict())
    row.pop("epoch_log")
    write_trial(store, "s", stored_row(**row, trial_key=config.key))
    return store, config.key, row


def test_a_stored_trial_replays_with_its_stored_config_to_the_same_result(tmp_path, capsys):
    store, key, row = _stored(tmp_path)
    for prefix in (key, key[:8]):  # the key, or the prefix TensorBoard's run names show
        assert hpstudy_main(["train", "--store", store, "--key", prefix, "--json"]) == 0
        again = json.loads(capsys.readouterr().out)
        assert again["config_json"] == row["config_json"]
        assert (again["status"], again["top1_err"], again["top5_err"]) == (
            row["status"],
            row["top1_err"],
            row["top5_err"],
        )
    assert hpstudy_main(["train", "--store", store, "--study", "s", "--key", key[:6]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        f"replaying trial {key} of study 's'; stored {row['status']}: top-1 {row['top1_err']:.2f}%"
    )
    assert out[1].startswith("epoch   1/2  loss ") and out[-1].startswith(
        f"{row['status']}: top-1 {row['top1_err']:.2f}%"
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.text("0123456789abcdef", min_size=20, max_size=20), min_size=2, max_size=6, unique=True),
    asked=st.text("0123456789abcdefg", min_size=1, max_size=21),
)
def test_a_key_that_names_no_trial_or_several_is_one_line_naming_it(tmp_path_factory, capsys, keys, asked):
    """`asked` names exactly one stored key (it is run: not here), none (the nearest offered) or several."""
    store = str(tmp_path_factory.mktemp("store"))
    for key in keys:
        write_trial(
            store, "s", stored_row(trial_key=key, model="cnn_tiny", optimizer="adamw", status="ok", top1_err=5.0)
        )
    starting = [k for k in keys if k.startswith(asked)]
    if len(starting) == 1:
        return
    assert hpstudy_main(["train", "--store", store, "--key", asked]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    if starting:
        assert err.startswith(f"error: --key: '{asked}' begins {len(starting)} trial keys (")
        assert err.endswith("; allowed: a longer prefix that only one of them begins with\n")
    else:
        assert err.startswith(f"error: --key: bad value '{asked}'; allowed: the key of one of the {len(keys)} trials ")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--key", "ab", "--model", "cnn_tiny"], "--model: not allowed with --key (a stored trial is replayed with"),
        (["--key", "ab", "--config", "demo_digits"], "--config: not allowed with --key"),
        (["--study", "s"], "--study: given without --key; allowed: --key KEY with it"),
        (
            ["--model", "vit_c_tiy"],
            "--model: bad value 'vit_c_tiy'; allowed (in spec 'demo_digits'): vit_p_tiny, "
            "vit_c_tiny; did you mean 'vit_c_tiny'?",
        ),
        (["--optimizer", "sgd"], "--optimizer: bad value 'sgd'; allowed (in spec 'demo_digits'): adamw"),
        (["--epochs", "7"], "--epochs: bad value 7; allowed (in spec 'demo_digits'): 6"),
        (["--lr", "-1"], "--lr: bad value -1.0; allowed: > 0"),
        (["--wd", "nan"], "--wd: bad value nan"),
        (["--seed", "-3"], "--seed: bad value -3; allowed: an integer"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(argv, message, capsys):
    assert hpstudy_main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


def test_a_trial_of_a_spec_takes_its_recipe_dataset_and_first_cell_and_sample(tmp_path, monkeypatch, capsys):
    """Flags left out: the spec's first model, optimizer, length, sample and seed; the recipe's batch size.
    The command prints the result line of the row trained (train_and_show returns it)."""
    raw = small_spec(name="t", recipe={"batch_size": 16, "warmup_epochs": 0.5, "device": "cpu"}, seeds=[3, 4])
    path = write_spec(tmp_path, raw)
    trained = []
    row = dict(status="ok", top1_err=12.5, best_top1_err=None, top5_err=1.0, wall_s=1.5, device="cpu")

    def train_and_show(config, as_json):
        trained.append(config)
        return row

    monkeypatch.setattr("hpstudy.trainers.train.train_and_show", train_and_show)
    first = expand(parse_spec(raw))[0].config
    assert hpstudy_main(["train", "--config", path]) == 0
    assert trained[-1] == first and first["batch_size"] == 16 and first["seed"] == 3
    assert capsys.readouterr().out == "ok: top-1 12.50% (best -), top-5 1.00%, 1.5s on cpu\n"
    assert hpstudy_main(["train", "--config", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == row
    assert hpstudy_main(["train", "--config", path, "--model", "cnn_tiny", "--lr", "0.01", "--device", "cuda"]) == 0
    cnn = next(t.config for t in expand(parse_spec(raw)) if t.model == "cnn_tiny")
    assert trained[-1] == dict(cnn, lr=0.01, device="cuda")


MODELS = st.sampled_from(["vit_c_tiny", "vit_p_tiny", "cnn_tiny"])


@settings(max_examples=30, deadline=None)
@given(
    model=MODELS,
    optimizer=st.sampled_from(["adamw", "sgd"]),
    epochs=st.integers(1, 300),
    lr=st.floats(1e-5, 1.0),
    wd=st.floats(1e-6, 1.0),
    seed=st.integers(0, 1000),
)
def test_the_one_trial_trainers_defaults_are_those_of_a_spec_without_a_recipe(model, optimizer, epochs, lr, wd, seed):
    """python -m hpstudy.trainers.train and a spec that sets no recipe train the same config (batch size,
    warmup, image size, ...): only what a spec's recipe sets differs."""
    from hpstudy.trainers.train import build_parser, config_from_args

    argv = [
        "--model",
        model,
        "--optimizer",
        optimizer,
        "--epochs",
        str(epochs),
        "--lr",
        repr(lr),
        "--wd",
        repr(wd),
        "--seed",
        str(seed),
    ]
    trainer = TrialConfig.from_dict(config_from_args(build_parser().parse_args(argv))).to_dict()
    spec = parse_spec(
        {
            "name": "d",
            "dataset": {"name": "digits"},
            "models": [model],
            "optimizers": [optimizer],
            "epochs": [epochs],
            "samples": 1,
            "seeds": [seed],
            "space": {optimizer: {"lr": lr, "wd": wd}},
        }
    )
    (trial,) = expand(spec)
    assert {**trial.config, "lr": trainer["lr"], "wd": trainer["wd"]} == trainer
    assert (trial.config["lr"], trial.config["wd"]) == (pytest.approx(lr, rel=1e-5), pytest.approx(wd, rel=1e-5))


def test_the_one_trial_trainers_help_names_its_command_and_shows_every_fields_doc():
    """`python -m hpstudy.trainers.train --help`: the usage line names the command to type, and each flag's
    help is its TrialConfig field's doc (the one place a field is described)."""
    from hpstudy.trainers.train import build_parser

    parser = build_parser()
    text = " ".join(parser.format_help().split())
    assert text.startswith("usage: python -m hpstudy.trainers.train ")
    flagged = [f for f in dataclasses.fields(TrialConfig) if f.name != "dataset"]  # dataset: --dataset, --data-*
    for field in flagged + [f for f in dataclasses.fields(DataSpec) if f.name != "name"]:
        doc = " ".join(field.metadata.get("doc", "").split())
        assert doc, f"{field.name} has no doc"
        assert doc[:60] in text, (field.name, doc)
