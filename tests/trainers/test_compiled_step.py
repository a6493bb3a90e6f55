"""The capturable training step (trainers/trial.py): the same rows as the eager step it replaced, and
`compile:` modes that compile it whole, once per trainer."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError

if TYPE_CHECKING:
    from hpstudy.trainers.trial import Trainer

BASE = dict(
    model="cnn_tiny",
    epochs=2,
    lr=1e-3,
    wd=0.05,
    dtype="float64",
    device="cpu",
    batch_size=8,
    seed=3,
    dataset={"name": "synthetic", "image_size": 16, "n_train": 32, "n_val": 16},
)
CASES = {
    "adamw": dict(optimizer="adamw"),
    "adamw_warmup_ema_mixup_cutmix": dict(
        optimizer="adamw",
        warmup_epochs=0.5,
        ema_decay=0.9,
        mixup=0.8,
        cutmix=1.0,
        label_smoothing=0.1,
        grad_clip=1.0,
    ),
    "sgd": dict(optimizer="sgd", lr=0.05),
    "sgd_warmup_ema_cutmix_accum": dict(
        optimizer="sgd",
        lr=0.05,
        warmup_epochs=1,
        min_lr_ratio=0.1,
        ema_decay=0.5,
        cutmix=1.0,
        label_smoothing=0.1,
        accum_steps=2,
    ),
    "adamw_mixup_ema": dict(optimizer="adamw", mixup=0.4, ema_decay=0.99),
}
# Written by the code before the capturable step (commit a4f4101: the lr set on the host by timm's
# scheduler, timm's Mixup and ModelEmaV3.update called per step), running `epochs_and_sums` on CASES.
HEAD_ROWS = {
    "adamw": {
        "epochs": [
            {
                "train_loss": 2.30963653844136,
                "train_top1_err": 90.625,
                "lr": 0.000691341716182545,
                "top1_err": 87.5,
                "top5_err": 56.25,
            },
            {
                "train_loss": 2.1388266173565404,
                "train_top1_err": 56.25,
                "lr": 3.806023374435663e-05,
                "top1_err": 87.5,
                "top5_err": 50.0,
            },
        ],
        "sums": {"model": 2849.431770623237},
    },
    "adamw_warmup_ema_mixup_cutmix": {
        "epochs": [
            {
                "train_loss": 2.3181662180678204,
                "train_top1_err": 90.625,
                "lr": 0.0009330127018922195,
                "top1_err": 87.5,
                "top5_err": 68.75,
                "ema_top1_err": 87.5,
            },
            {
                "train_loss": 2.2488763799835434,
                "train_top1_err": 81.25,
                "lr": 6.698729810778065e-05,
                "top1_err": 87.5,
                "top5_err": 62.5,
                "ema_top1_err": 87.5,
            },
        ],
        "sums": {"model": 2851.003130433289, "ema": 3002.6697674703755},
    },
    "sgd": {
        "epochs": [
            {
                "train_loss": 2.175309198031626,
                "train_top1_err": 78.125,
                "lr": 0.03456708580912725,
                "top1_err": 87.5,
                "top5_err": 43.75,
            },
            {
                "train_loss": 1.3177785860695308,
                "train_top1_err": 43.75,
                "lr": 0.0019030116872178317,
                "top1_err": 87.5,
                "top5_err": 43.75,
            },
        ],
        "sums": {"model": 2845.9939709585506},
    },
    "sgd_warmup_ema_cutmix_accum": {
        "epochs": [
            {
                "train_loss": 2.301616832683479,
                "train_top1_err": 93.75,
                "lr": 0.037500000000000006,
                "top1_err": 87.5,
                "top5_err": 56.25,
                "ema_top1_err": 87.5,
            },
            {
                "train_loss": 2.1992041145515806,
                "train_top1_err": 71.875,
                "lr": 0.011590097423302682,
                "top1_err": 87.5,
                "top5_err": 43.75,
                "ema_top1_err": 87.5,
            },
        ],
        "sums": {"model": 2709.1319849475053, "ema": 2787.503795573173},
    },
    "adamw_mixup_ema": {
        "epochs": [
            {
                "train_loss": 2.3166995410886555,
                "train_top1_err": 90.625,
                "lr": 0.000691341716182545,
                "top1_err": 87.5,
                "top5_err": 56.25,
                "ema_top1_err": 87.5,
            },
            {
                "train_loss": 2.204755873184625,
                "train_top1_err": 84.375,
                "lr": 3.806023374435663e-05,
                "top1_err": 87.5,
                "top5_err": 56.25,
                "ema_top1_err": 87.5,
            },
        ],
        "sums": {"model": 2850.262094561641, "ema": 3001.012734065198},
    },
}


# float64 kernels sum in an order that a library release or a CPU's vector width may change: the same step
# then differs in the last bits (seen: train_loss 2.3096365384413597 against 2.30963653844136 from the rows
# below); a step that changed what it computes differs by 1e-6 of a value or more
FLOAT64_ROUNDING = 1e-12


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as HEAD_ROWS were written with (two threads sum in another order)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def epochs_and_sums(trainer: Trainer):
    """Each epoch's train_epoch and evaluate results, and the sums of the model's (and EMA's) state after them."""
    epochs = []
    for _ in range(trainer.cfg.epochs):
        train = trainer.train_epoch()
        assert train.pop("diverged") is False
        epochs.append({**train, **trainer.evaluate()})
    modules = {"model": trainer.model, **({"ema": trainer.ema.module} if trainer.ema is not None else {})}
    sums = {name: sum(v.double().sum().item() for v in m.state_dict().values()) for name, m in modules.items()}
    return epochs, sums


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_the_capturable_step_trains_as_the_eager_step_did_in_float64(case):
    from hpstudy.trainers.trial import Trainer

    epochs, sums = epochs_and_sums(Trainer(TrialConfig.from_dict(dict(BASE, **CASES[case]))))
    want = HEAD_ROWS[case]["epochs"]
    assert len(epochs) == len(want)
    for got, row in zip(epochs, want):
        assert got == pytest.approx(row, rel=FLOAT64_ROUNDING, abs=0)
    assert sums == pytest.approx(HEAD_ROWS[case]["sums"], rel=FLOAT64_ROUNDING, abs=0)


# The traced AdamW (torch's capturable form) computes its bias corrections from a float32 step count,
# the fused kernel in float64: updates differ by ~1e-5 of a step, and where a gradient is near 0 an
# element's update can flip sign; SGD's agree to float32 rounding (5e-5 of the state after 8 steps).
STATE_TOLERANCE = {"sgd": 1e-4, "adamw": 1e-2}


@pytest.mark.slow
@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adamw", 1e-3)])
def test_the_step_compiles_whole_once_and_trains_as_eager_in_float32(aot_eager, optimizer, lr):
    """Two graphs (forward-backward, update), no graph break and no recompile over two epochs with
    every per-step value in use (lr warmup and cosine, EMA, mixup and CutMix, clipping)."""
    import torch
    from torch._dynamo.utils import counters

    from hpstudy.trainers.trial import Trainer

    recipe = dict(CASES["adamw_warmup_ema_mixup_cutmix"], optimizer=optimizer, lr=lr)
    cfg = TrialConfig.from_dict(dict(BASE, **recipe, dtype="float32"))
    compiled = Trainer(dataclasses.replace(cfg, compile="inductor"))
    step = compiled._gradients, compiled._update
    runs = [epochs_and_sums(compiled)]
    eager = Trainer(cfg)  # after the compiled run: a trainer seeds numpy's generator, which mixup draws from
    runs.append(epochs_and_sums(eager))
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 2  # a recompile would add a graph
    assert (compiled._gradients, compiled._update) == step
    for got, want in zip(*(run[0] for run in runs)):
        assert got["lr"] == want["lr"]
        assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-4)
    for mine, theirs in ((compiled.model, eager.model), (compiled.ema.module, eager.ema.module)):
        a, b = (torch.cat([v.double().flatten() for v in m.state_dict().values()]) for m in (mine, theirs))
        assert (a - b).norm() < STATE_TOLERANCE[optimizer] * b.norm()


def test_compile_is_in_the_key_only_when_on():
    off = TrialConfig.from_dict(dict(BASE, optimizer="adamw"), check_model=False)
    on = dataclasses.replace(off, compile="inductor")
    assert off == TrialConfig.from_dict(dict(BASE, optimizer="adamw", compile="off"), check_model=False)
    assert "compile" not in off.to_json() and '"compile":"inductor"' in on.to_json()
    assert on.key != off.key and on.row_fields()["config_json"] == on.to_json()


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(compile="fast"), "compile: bad value 'fast'; allowed: off, graph, inductor"),
        (dict(compile="graph"), "compile: bad value 'graph' on device cpu; allowed: off or inductor"),
    ],
)
def test_bad_compile_modes_are_refused_naming_the_field(changes, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        TrialConfig.from_dict(dict(BASE, optimizer="adamw", **changes), check_model=False)


def test_graph_on_a_device_that_resolves_to_the_cpu_is_refused_by_the_trainer():
    import torch

    from hpstudy.trainers.trial import Trainer

    if torch.cuda.is_available():
        pytest.skip("device auto is CUDA here")
    cfg = TrialConfig.from_dict(dict(BASE, optimizer="adamw", device="auto", compile="graph"), check_model=False)
    with pytest.raises(ConfigError, match="compile: bad value 'graph' on device cpu"):
        Trainer(cfg)
