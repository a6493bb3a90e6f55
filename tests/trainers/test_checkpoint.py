"""Fine-tuning from a local checkpoint: trial keys, loading, head re-initialisation, freezing, errors."""

import logging

import pytest

from hpstudy.study.sampling import expand
from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.study.store.read import load_trials
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.fused_spec import check_fusable
from hpstudy.trainers.init_file import file_sha256
from tests.helpers import logged, small_spec

MODEL = "coatnet_tiny_cctt"
HEAD = ("head.fc.weight", "head.fc.bias")


def _config(classes: int = 4, image_size: int = 16, **changes) -> dict:
    return {
        "model": MODEL,
        "optimizer": "adamw",
        "epochs": 1,
        "lr": 1e-3,
        "wd": 0.05,
        "device": "cpu",
        "batch_size": 32,
        "dataset": dict(name="synthetic", image_size=image_size, num_classes=classes, n_train=32, n_val=32),
        **changes,
    }


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A 4-class CoAtNet tiny twin's state dict at 16 px (seed 1), saved as torch and as safetensors."""
    import torch
    from safetensors.torch import save_file

    from hpstudy.trainers.models import build_model

    torch.manual_seed(1)
    state = build_model(MODEL, 4, 16).state_dict()
    folder = tmp_path_factory.mktemp("checkpoint")
    torch.save(state, folder / "tiny.pt")
    save_file(state, str(folder / "tiny.safetensors"))
    return state, str(folder / "tiny.pt"), str(folder / "tiny.safetensors")


def _equal(a: dict, b: dict, keys) -> bool:
    import torch

    return all(torch.equal(a[k], b[k]) for k in keys)


@pytest.mark.parametrize("kind", [1, 2])
def test_a_checkpoint_loads_and_the_head_is_reinitialised_only_for_another_class_count(checkpoint, kind):
    import torch

    from hpstudy.trainers.models import build_model
    from hpstudy.trainers.trial import Trainer

    state, path = checkpoint[0], checkpoint[kind]
    same = Trainer(TrialConfig.from_dict(_config(init=path)))
    assert same.head_reinit is False and _equal(same.model.state_dict(), state, state)
    other = Trainer(TrialConfig.from_dict(_config(classes=7, init=path)))
    torch.manual_seed(0)  # the trial's seed: its head is the one built for it
    fresh = build_model(MODEL, 7, 16).state_dict()
    body = [k for k in state if k not in HEAD]
    assert other.head_reinit is True and _equal(other.model.state_dict(), state, body)
    assert _equal(other.model.state_dict(), fresh, HEAD)
    assert other.cfg.init_sha256 == file_sha256(path)
    larger = Trainer(TrialConfig.from_dict(_config(image_size=32, init=path)))  # timm resizes the 16 px tables
    assert larger.head_reinit is False and _equal(larger.model.state_dict(), state, HEAD)


def test_rows_say_which_checkpoint_and_whether_the_head_was_reinitialised(checkpoint):
    from hpstudy.trainers.trial import Trainer, train_trial

    row = train_trial(_config(classes=7, init=checkpoint[2]))
    assert row["status"] == "ok" and row["head_reinit"] is True
    assert row["init_sha256"] == file_sha256(checkpoint[2]) and row["init_sha256"] in row["config_json"]
    scratch = TrialConfig.from_dict(_config())
    assert Trainer(scratch).head_reinit is None and scratch.row_fields()["init_sha256"] is None
    assert "init" not in scratch.to_json()  # trial keys of stores without fine-tuning stay


def test_freeze_keeps_the_leading_groups_and_their_batchnorm_statistics(checkpoint):
    from hpstudy.trainers.trial import Trainer

    state, path = checkpoint[0], checkpoint[1]
    trainer = Trainer(TrialConfig.from_dict(_config(init=path, freeze=2)))  # the stem and stage S1
    trainer.train_epoch()
    after = trainer.model.state_dict()
    kept = [k for k in state if k.startswith(("stem.", "stages.0.")) and not k.endswith("num_batches_tracked")]
    assert any("running_mean" in k for k in kept) and _equal(after, state, kept)
    assert not _equal(after, state, [k for k in state if k.startswith("stages.1.") and k.endswith("weight")])
    assert not any(p.requires_grad for n, p in trainer.model.named_parameters() if n.startswith("stem."))


def test_a_checkpoint_that_does_not_fit_names_the_first_mismatched_keys(checkpoint, tmp_path):
    from hpstudy.trainers.trial import Trainer

    with pytest.raises(
        ConfigError,
        match=r"init: '.*tiny.pt' does not fit model coatnet_tiny_cttt: missing "
        r"stages\.1\.blocks\.0\.norm1.*\(\+\d+ more\); unexpected stages\.1",
    ):
        Trainer(TrialConfig.from_dict(_config(model="coatnet_tiny_cttt", init=checkpoint[1])))
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    with pytest.raises(ConfigError, match=r"init: cannot read '.*junk.pt' .*allowed: a local torch state dict"):
        Trainer(TrialConfig.from_dict(_config(init=str(junk))))
    with pytest.raises(ConfigError, match=r"init: '/no/such.pt' is not a file"):
        Trainer(TrialConfig.from_dict(_config(init="/no/such.pt")))
    with pytest.raises(ConfigError, match=r"has sha256 [0-9a-f]{64}, not the 0{64} this trial was planned with"):
        Trainer(TrialConfig.from_dict(_config(init=checkpoint[1], init_sha256="0" * 64)))


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(freeze=1), r"freeze: bad value 1 for model coatnet_tiny_cctt; allowed: 0 without init"),
        (dict(init="/x.pt", freeze=6), r"freeze: bad value 6 .*allowed: an integer in \[0, 5\]"),
        (dict(init=""), r"init: bad value ''; allowed: null \(from scratch\) or the path"),
        (dict(init_sha256="ab" * 32), r"init_sha256: bad value .*allowed: null, or 64 lower-case hex digits with init"),
    ],
)
def test_bad_fine_tuning_fields_are_named(changes, message):
    with pytest.raises(ConfigError, match=message):
        TrialConfig.from_dict(_config(**changes))


def test_fused_training_refuses_a_checkpoint():
    with pytest.raises(ConfigError, match="init: '/x.pt' is not supported in fused training"):
        check_fusable([TrialConfig.from_dict(_config(init="/x.pt"))])


def test_the_trial_keys_name_the_checkpoints_bytes(tmp_path):
    import torch

    path = tmp_path / "ck.pt"
    torch.save({"w": torch.zeros(2)}, path)
    spec = small_spec(recipe=dict(small_spec()["recipe"], init=str(path)), models=["vit_c_tiny"])
    first = expand(parse_spec(spec))
    assert {t.config["init_sha256"] for t in first} == {file_sha256(str(path))}
    torch.save({"w": torch.ones(2)}, path)
    assert not {t.key for t in first} & {t.key for t in expand(parse_spec(spec))}
    missing = small_spec(recipe=dict(init="/no/such.pt"))
    with pytest.raises(SpecError, match=r"recipe.init: '/no/such.pt' is not a file"):
        parse_spec(missing)
    assert "init_sha256" not in parse_spec(missing, check_paths=False).recipe
    with pytest.raises(SpecError, match=r"recipe.init_sha256: bad value '0+'; allowed: the sha256 of"):
        parse_spec(small_spec(recipe=dict(init=str(path), init_sha256="0" * 64)))


@pytest.mark.parametrize("check_paths", [True, False])
def test_a_relative_init_is_refused_when_the_spec_is_read(tmp_path, monkeypatch, check_paths):
    """Ray runs trials in other working directories: a relative path that is a file here names nothing there."""
    import torch

    torch.save({"w": torch.zeros(2)}, tmp_path / "ck.pt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        SpecError,
        match=r"^recipe\.init: bad value 'ck\.pt' \(a relative path.*\); allowed: an "
        r"absolute path every worker can read",
    ):
        parse_spec(small_spec(recipe=dict(small_spec()["recipe"], init="ck.pt")), check_paths=check_paths)


@pytest.mark.slow
def test_a_fine_tuning_study_runs_from_a_checkpoint_trained_here(tmp_path, caplog):
    import ray
    from safetensors.torch import save_file

    from hpstudy.study.runner import run_study
    from hpstudy.trainers.trial import Trainer

    pretrain = Trainer(TrialConfig.from_dict(_config()))
    pretrain.run_epoch()  # a 4-class synthetic pretraining epoch
    path = str(tmp_path / "pretrained.safetensors")
    save_file(pretrain.model.state_dict(), path)
    spec = parse_spec(
        small_spec(
            name="finetune",
            models=[MODEL],
            optimizers=["adamw"],
            samples=2,
            fuse="auto",
            recipe={"batch_size": 64, "device": "cpu", "init": path, "freeze": 1},
        )
    )
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        with caplog.at_level(logging.INFO, logger="hpstudy"):
            run_study(spec, str(tmp_path / "store"), progress_interval=1)
    finally:
        ray.shutdown()
    assert any(line.startswith("fuse auto: no fusion: init") for line in logged(caplog))
    rows = load_trials(str(tmp_path / "store"), "finetune")
    assert set(rows["trial_key"]) == {t.key for t in expand(spec)} and len(rows) == 2
    assert (rows["status"] == "ok").all() and rows["head_reinit"].tolist() == [True, True]  # digits: 10 classes
    assert set(rows["init_sha256"]) == {file_sha256(path)}


def test_a_training_checkpoint_loads_its_ema_weights(tmp_path):
    """timm's train.py saves the raw weights under `state_dict` and their EMA beside them: fine-tuning
    starts from the EMA (and a DDP `module.` prefix is stripped)."""
    import torch

    from hpstudy.trainers.checkpoint import load_checkpoint
    from hpstudy.trainers.models import build_model

    torch.manual_seed(1)
    raw = build_model("cnn_tiny", 4, 16).state_dict()
    torch.manual_seed(2)
    ema = build_model("cnn_tiny", 4, 16).state_dict()
    path = tmp_path / "train.pth"
    torch.save({"state_dict": raw, "state_dict_ema": {f"module.{k}": v for k, v in ema.items()}}, path)
    model = build_model("cnn_tiny", 4, 16)
    assert load_checkpoint(model, str(path), "cnn_tiny") is False
    assert _equal(model.state_dict(), ema, ema)
    torch.save({"state_dict": raw}, path)  # no EMA saved: the raw weights
    assert load_checkpoint(model, str(path), "cnn_tiny") is False and _equal(model.state_dict(), raw, raw)
