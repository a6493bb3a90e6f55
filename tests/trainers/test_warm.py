"""Warm workers (trainers/warm.py): a trial restarted on the last trial's trainer gives a fresh trainer's row,
exactly, and compiles nothing new; another shape, or a trial that raises, frees the resident trainer."""

import pytest

from hpstudy.trainers.config import TrialConfig

DATA = {"name": "synthetic", "image_size": 16, "n_train": 16, "n_val": 8}
A = dict(model="cnn_tiny", optimizer="adamw", epochs=2, lr=1e-3, wd=0.05, dataset=DATA, batch_size=8, seed=3)
A = dict(A, dtype="float64", device="cpu", warmup_epochs=0.5, ema_decay=0.9, mixup=0.8, cutmix=1.0, grad_clip=1.0)
# B shares A's shape: all that differs is set in place (trial.RESTARTABLE), mixing and the EMA staying on
B = dict(A, seed=8, lr=3e-3, wd=0.2, reference_batch_size=16, warmup_epochs=0, mixup=0.0, ema_decay=0.5)
TIMES = ("wall_s", "finished_at")


@pytest.fixture(autouse=True)
def no_resident():
    """Each test starts and ends with no resident trainer, on one torch thread (a fixed summation order)."""
    import torch

    from hpstudy.trainers.warm import drop_resident

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    drop_resident()
    yield
    drop_resident()
    torch.set_num_threads(threads)


def untimed(row):
    """A row without its clock readings: every metric of the trial and of each epoch."""
    log = [{k: v for k, v in epoch.items() if k != "seconds"} for epoch in row["epoch_log"]]
    return dict({k: v for k, v in row.items() if k not in TIMES}, epoch_log=log)


def trained(trainer):
    """What training the trial of `trainer` leaves: its row and the model's (and EMA's) weights and buffers."""
    import torch

    from hpstudy.trainers.trial import run_trial

    row = untimed(run_trial(trainer))
    modules = [trainer.model, *([trainer.ema.module] if trainer.ema is not None else [])]
    return row, torch.cat([v.double().flatten() for m in modules for v in m.state_dict().values()]).tolist()


def fresh(config):
    """`trained` on a new trainer of `config`."""
    from hpstudy.trainers.warm import ResidentTrainer

    trainer = ResidentTrainer(TrialConfig.from_dict(config))  # a new Trainer, which `fit` leaves to read
    try:
        return trained(trainer)
    finally:
        trainer.free()


def warm(*configs):
    """`trained` for each of `configs` in turn on the warm trainer, checking that they all train on the first's."""
    from hpstudy.trainers.warm import warm_trainer

    trainers, results = [], []
    for config in configs:
        trainers.append(warm_trainer(TrialConfig.from_dict(config)))
        results.append(trained(trainers[-1]))
    assert all(trainer is trainers[0] for trainer in trainers)
    return results


def test_a_warm_trial_trains_as_a_fresh_one_in_float64():
    """Another seed, lr (peak and warmup), wd, mixup and EMA decay on the warm trainer, after a trial that
    diverged, then the first trial again: each row, epoch log included, and the weights it leaves equal its
    fresh trainer's."""
    a, b = fresh(A), fresh(B)
    assert a[0]["epoch_log"] != b[0]["epoch_log"]
    after_a, diverged, after_diverged, again = warm(A, dict(A, lr=1e200), B, A)  # it leaves inf and nan
    assert diverged[0]["status"] == "diverged"
    assert [after_a, after_diverged, again] == [a, b, a]


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe",
    [
        dict(model="vit_c_tiny", optimizer="sgd", lr=0.05, ema_decay=None, mixup=0.0, cutmix=0.0),
        dict(model="cnn_tiny", optimizer="sgd", lr=0.05, accum_steps=2, label_smoothing=0.1, channels_last=True),
    ],
)
def test_warm_trials_of_other_models_and_recipes_train_as_fresh_ones(recipe):
    first, second = dict(A, **recipe), dict(B, **dict(recipe, lr=0.1))
    a, b = fresh(first), fresh(second)
    assert warm(first, second, first) == [a, b, a]


@pytest.mark.slow
@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adamw", 1e-3)])
def test_a_warm_compiled_trial_compiles_nothing_new_and_trains_as_a_fresh_one(aot_eager, optimizer, lr):
    """The lr and the weight decay (a float a compiled step would guard on) change without a recompile."""
    from torch._dynamo.utils import counters

    from hpstudy.trainers.warm import warm_trainer

    first = dict(A, optimizer=optimizer, lr=lr, epochs=1, compile="inductor")
    second = dict(B, optimizer=optimizer, lr=2 * lr, epochs=1, compile="inductor")
    b = fresh(second)
    trainer = warm_trainer(TrialConfig.from_dict(first))  # new: it compiles its step
    a = trained(trainer)
    graphs = counters["stats"]["unique_graphs"]
    assert warm(second, first) == [b, a]
    assert warm_trainer(TrialConfig.from_dict(first)) is trainer
    assert counters["stats"]["unique_graphs"] == graphs
    assert dict(counters["graph_break"]) == {}


def test_a_trial_of_another_shape_frees_the_resident_trainer():
    from hpstudy.trainers.warm import warm_trainer

    resident = warm_trainer(TrialConfig.from_dict(A))
    other = warm_trainer(TrialConfig.from_dict(dict(A, label_smoothing=0.1)))
    assert other is not resident and not hasattr(resident, "model")
    with pytest.raises(ValueError, match="of its shape"):
        other.restart(TrialConfig.from_dict(A))


def test_a_fine_tuning_trial_is_never_restarted(tmp_path):
    import torch

    from hpstudy.trainers.models import build_model
    from hpstudy.trainers.warm import warm_trainer

    path = tmp_path / "init.pt"
    torch.save(build_model("cnn_tiny", num_classes=3, image_size=16).state_dict(), path)
    tuned = TrialConfig.from_dict(dict(A, init=str(path)))
    resident = warm_trainer(tuned)
    assert warm_trainer(tuned) is not resident and not hasattr(resident, "model")


def test_a_trial_that_raises_frees_the_resident_trainer():
    from hpstudy.trainers.warm import train_warm, warm_trainer

    def stop(record):
        raise RuntimeError("stopped")

    first = train_warm(A)
    resident = warm_trainer(TrialConfig.from_dict(A))
    with pytest.raises(RuntimeError, match="stopped"):
        train_warm(B, on_epoch=stop)
    assert not hasattr(resident, "model")
    assert warm_trainer(TrialConfig.from_dict(A)) is not resident
    assert untimed(train_warm(A)) == untimed(first)
