import json

import pytest

from hpstudy.trainers.errors import ConfigError
from tests.helpers import tiny_trainer

BASE = dict(dataset={"name": "digits", "image_size": 16}, batch_size=64, warmup_epochs=1)


@pytest.mark.slow
def test_cnn_tiny_learns_digits():
    from hpstudy.trainers.trial import train_trial

    row = train_trial(dict(BASE, model="cnn_tiny", optimizer="adamw", epochs=5, lr=5e-3, wd=0.05))
    assert row["status"] == "ok" and row["epochs_done"] == 5
    assert row["top1_err"] < 15.0, row["top1_err"]
    assert row["best_top1_err"] <= row["top1_err"]
    losses = [e["train_loss"] for e in row["epoch_log"]]
    assert losses[-1] < losses[0] * 0.6


def test_huge_lr_diverges_at_chance_without_raising():
    from hpstudy.trainers.loop import chance_error
    from hpstudy.trainers.trial import train_trial

    seen = []
    row = train_trial(dict(BASE, model="vit_p_tiny", optimizer="sgd", epochs=3, lr=1e3, wd=1e-4), on_epoch=seen.append)
    assert row["status"] == "diverged"
    assert row["top1_err"] == pytest.approx(chance_error(10)) == pytest.approx(90.0)
    assert row["best_top1_err"] == pytest.approx(90.0)
    assert row["epochs_done"] == len(seen) < 3


@pytest.mark.slow
def test_same_seed_same_errors_and_different_seed_differs():
    from hpstudy.trainers.trial import train_trial

    cfg = dict(BASE, model="vit_c_tiny", optimizer="adamw", epochs=2, lr=1e-3, wd=0.05, seed=7)
    a, b = train_trial(cfg), train_trial(cfg)
    c = train_trial(dict(cfg, seed=8))
    assert [e["top1_err"] for e in a["epoch_log"]] == [e["top1_err"] for e in b["epoch_log"]]
    assert a["train_loss"] == b["train_loss"]
    assert a["train_loss"] != c["train_loss"]


def test_row_has_design_fields_and_epoch_callback():
    from hpstudy.trainers.trial import train_trial

    seen = []
    row = train_trial(dict(BASE, model="cnn_tiny", optimizer="sgd", epochs=2, lr=0.1, wd=1e-4), on_epoch=seen.append)
    for field in (
        "model",
        "family",
        "flops",
        "params",
        "optimizer",
        "epochs",
        "lr",
        "wd",
        "seed",
        "dataset",
        "batch_size",
        "status",
        "top1_err",
        "top5_err",
        "best_top1_err",
        "ema_top1_err",
        "train_loss",
        "epochs_done",
        "wall_s",
        "device",
        "hostname",
        "versions",
        "config_json",
        "finished_at",
    ):
        assert field in row, field
    assert row["family"] == "cnn" and row["flops"] > 0 and row["params"] > 0
    assert set(json.loads(row["versions"])) >= {"torch", "timm", "ray", "hpstudy", "git_sha"}
    assert json.loads(row["config_json"])["lr"] == 0.1
    assert [e["epoch"] for e in seen] == [1, 2] and seen == row["epoch_log"]
    assert {"train_loss", "train_top1_err", "top1_err", "lr", "seconds"} <= set(seen[0])


@pytest.mark.slow  # trains with every recipe option on (~1.3 s)
def test_recipe_options_run_on_cpu():
    """EMA, mixup/CutMix, label smoothing, bf16 autocast, channels_last and clipping all reach the
    trainer and run together (each one's effect: tests/contracts/test_trainer.py)."""
    import torch

    from hpstudy.trainers.config import TrialConfig
    from hpstudy.trainers.loop import fit
    from hpstudy.trainers.trial import Trainer

    trainer = Trainer(
        TrialConfig.from_dict(
            dict(
                BASE,
                model="vit_c_tiny",
                optimizer="adamw",
                epochs=1,
                warmup_epochs=0.5,
                lr=1e-3,
                wd=0.05,
                ema_decay=0.99,
                mixup=0.8,
                cutmix=1.0,
                label_smoothing=0.1,
                amp=True,
                channels_last=True,
                grad_clip=1.0,
                device="cpu",
            )
        )
    )
    mixup = trainer.mixup
    assert (mixup.mixup_alpha, mixup.cutmix_alpha, mixup.label_smoothing, mixup.num_classes) == (0.8, 1.0, 0.1, 10)
    assert trainer.amp and trainer.ema.decay == 0.99
    stem = next(p for p in trainer.model.parameters() if p.ndim == 4)
    assert stem.is_contiguous(memory_format=torch.channels_last) and not stem.is_contiguous()
    row = fit(trainer)[0]
    assert row["status"] == "ok" and row["ema_top1_err"] == row["epoch_log"][0]["ema_top1_err"] is not None


def test_bad_config_names_the_field():
    from hpstudy.trainers.trial import train_trial

    with pytest.raises(ConfigError, match="unknown key"):
        train_trial(dict(BASE, model="cnn_tiny", optimizer="adamw", epochs=1, lr=1e-3, wd=0, lrr=1))
    with pytest.raises(ConfigError, match="optimizer: bad value 'adam'"):
        train_trial(dict(BASE, model="cnn_tiny", optimizer="adam", epochs=1, lr=1e-3, wd=0))
    with pytest.raises(ConfigError, match="model: unknown model"):
        train_trial(dict(BASE, model="vit", optimizer="adamw", epochs=1, lr=1e-3, wd=0))


def test_cli_prints_progress_and_result(capsys):
    from hpstudy.trainers.train import main as train_cli

    assert (
        train_cli(
            [
                "--model",
                "cnn_tiny",
                "--optimizer",
                "adamw",
                "--epochs",
                "1",
                "--lr",
                "5e-3",
                "--wd",
                "0.05",
                "--batch-size",
                "64",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "epoch   1/1" in out and out.strip().splitlines()[-1].startswith("ok: top-1")
    assert (
        train_cli(
            [
                "--model",
                "cnn_tiny",
                "--dataset",
                "cifar10",
                "--data-path",
                "/no/such",
                "--optimizer",
                "sgd",
                "--epochs",
                "1",
                "--lr",
                "1",
                "--wd",
                "0",
            ]
        )
        == 2
    )
    assert "/no/such" in capsys.readouterr().err


def test_cli_flags_are_the_config_fields_with_their_defaults():
    import dataclasses

    from hpstudy.trainers.config import TrialConfig
    from hpstudy.trainers.data_spec import DataSpec
    from hpstudy.trainers.train import build_parser, config_from_args

    parser = build_parser()
    flags = {a.dest for a in parser._actions}
    assert {f.name for f in dataclasses.fields(TrialConfig)} <= flags
    assert {f"data_{f.name}" for f in dataclasses.fields(DataSpec) if f.name != "name"} <= flags
    required = ["--model", "cnn_tiny", "--optimizer", "sgd", "--epochs", "3", "--lr", "0.1", "--wd", "0"]
    # flags left out take exactly TrialConfig's defaults
    assert TrialConfig.from_dict(config_from_args(parser.parse_args(required))) == TrialConfig(
        model="cnn_tiny", optimizer="sgd", epochs=3, lr=0.1, wd=0.0
    )
    # every recipe field can be set, including the optional and boolean ones
    cfg = TrialConfig.from_dict(
        config_from_args(
            parser.parse_args(
                required
                + [
                    "--batch-size",
                    "32",
                    "--warmup-epochs",
                    "0",
                    "--min-lr-ratio",
                    "0.1",
                    "--amp",
                    "false",
                    "--channels-last",
                    "true",
                    "--dtype",
                    "float64",
                    "--ema-decay",
                    "none",
                    "--grad-clip",
                    "2",
                    "--reference-batch-size",
                    "256",
                    "--data-image-size",
                    "24",
                ]
            )
        )
    )
    assert (
        cfg.batch_size,
        cfg.warmup_epochs,
        cfg.min_lr_ratio,
        cfg.amp,
        cfg.channels_last,
        cfg.dtype,
        cfg.ema_decay,
        cfg.grad_clip,
        cfg.reference_batch_size,
        cfg.dataset.image_size,
    ) == (32, 0.0, 0.1, False, True, "float64", None, 2.0, 256, 24)
    assert "training batch size (default: 128)" in " ".join(parser.format_help().split())


@pytest.mark.parametrize("weight,target_weight,smoothing", [(0.7, 0.6, 0.1), (0.25, 0.8, 0.0), (1.0, 0.35, 0.3)])
def test_a_mixed_batch_is_timms_blend_and_its_targets_timms_smoothed_mix(weight, target_weight, smoothing):
    """With a step's draws set (image weight, target weight, no CutMix box): the images are weight x + (1 -
    weight) x flipped, and the targets target_weight y + (1 - target_weight) y flipped, each one-hot row
    smoothed to (1 - s) + s / C on its class and s / C elsewhere (timm's mixup_target)."""
    import torch

    run = tiny_trainer(mixup=0.8, label_smoothing=smoothing)
    run.per_step.mix_weights.copy_(torch.tensor([weight, target_weight], dtype=torch.float64))
    run.per_step.mix_boxes.zero_()
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 3])
    mixed, target = run._mixed(x, y)
    torch.testing.assert_close(mixed, x * weight + x.flip(0) * (1 - weight))
    classes = run.mixup.num_classes
    smooth = lambda labels: torch.nn.functional.one_hot(labels, classes) * (1 - smoothing) + smoothing / classes
    expected = target_weight * smooth(y) + (1 - target_weight) * smooth(y.flip(0))
    torch.testing.assert_close(target, expected.to(target.dtype))
