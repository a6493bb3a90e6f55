"""Ops dispatched and host reads per training step, counted on the CPU (bench/op_count.py): the
host's work per step must not grow with the number of parameter tensors beyond a fused
optimizer's, and the step reads nothing on the host but the divergence flag at its cadence. The
fused kernels that keep it so match foreach step for step."""

import copy

import pytest

from tests.helpers import tiny_trainer

STEPS = 20  # an epoch of 20 steps: one divergence check inside it (DIVERGENCE_CHECK_EVERY = 16), one at its end
DATA = {"name": "synthetic", "image_size": 8, "n_train": 4 * STEPS, "n_val": 8, "num_classes": 4}
# cnn_tiny and vit_c_tiny: 95 and 80 parameter tensors, in the same two groups (decay, no decay)
MODELS = ("cnn_tiny", "vit_c_tiny")


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: models this small gain nothing from two, and on a loaded machine the second
    thread's spin-waiting made these tests 30x slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def trainer_and_batch(model: str, optimizer: str, **changes):
    """A trainer of `model` on 8 px synthetic data (batch 4) after one step, and a training batch."""
    import torch

    trainer = tiny_trainer(model=model, optimizer=optimizer, batch_size=4, dataset=DATA, **changes)
    x, y = next(trainer.batches.train(4, torch.Generator().manual_seed(0)))
    trainer._train_step(x, y)  # the optimizer's state is created at its first step
    return trainer, x, y


def model_ops(trainer, x, y) -> int:
    """Ops of the model's own forward, loss and backward on the batch: what any step dispatches."""
    import torch.nn.functional as F

    from bench.op_count import OpCounter

    with OpCounter() as ops:
        F.cross_entropy(trainer.model(x), y).backward()
    trainer.model.zero_grad(set_to_none=True)
    return ops.total


def test_the_counter_sees_every_kind_of_host_read():
    import torch

    from bench.op_count import OpCounter

    x = torch.ones(3)
    with OpCounter() as ops:
        x.sum().item(), float(x[0]), bool(x[1]), x.tolist(), x.numpy(), x.cpu()
        x.add(1).mul_(2)
    assert ops.host_reads == 6
    assert ops.counts["aten.add"] == ops.counts["aten.mul_"] == 1
    assert torch.Tensor.tolist is torch._C.TensorBase.tolist  # the wrapped methods are restored


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_a_step_adds_the_same_few_ops_to_any_model_and_reads_nothing(optimizer):
    import torch

    from bench.op_count import OpCounter

    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14):
        pytest.skip("budget set on torch 2.14; torch 2.5's own step code dispatches one more op per parameter tensor")
    overhead, tensors = {}, {}
    for model in MODELS:
        trainer, x, y = trainer_and_batch(model, optimizer)
        tensors[model] = len(list(trainer.model.parameters()))
        with OpCounter() as step:
            trainer._train_step(x, y)
        assert step.host_reads == 0, step.counts
        with OpCounter() as update:
            trainer.optimizer.step()
        # torch's fused kernels: per parameter group one update (and for AdamW one step count)
        assert update.total <= 2 * len(trainer.optimizer.param_groups), update.counts
        overhead[model] = step.total - model_ops(trainer, x, y)
    assert tensors["cnn_tiny"] != tensors["vit_c_tiny"]
    # the optimizer and the loop's bookkeeping, the same for 95 and for 80 parameter tensors
    assert overhead["cnn_tiny"] == overhead["vit_c_tiny"] < min(tensors.values()) / 4


def test_the_budget_catches_a_per_parameter_optimizer():
    import torch

    from bench.op_count import OpCounter

    trainer, x, y = trainer_and_batch("cnn_tiny", "adamw")
    trainer.optimizer = torch.optim.AdamW(trainer.model.parameters(), foreach=False)  # one tensor at a time
    trainer._train_step(x, y)
    with OpCounter() as update:
        trainer.optimizer.step()
    tensors = len(list(trainer.model.parameters()))
    assert update.host_reads == tensors  # the step count read once per parameter
    assert update.total > 2 * tensors


def test_an_epoch_reads_the_host_only_at_the_divergence_checks():
    from bench.op_count import OpCounter
    from hpstudy.trainers import trial

    trainer, _, _ = trainer_and_batch("cnn_tiny", "adamw")
    assert trainer.steps_per_epoch == STEPS
    with OpCounter() as epoch:
        trainer.train_epoch()
    # every DIVERGENCE_CHECK_EVERY steps, then the flag with the epoch's sums
    assert epoch.host_reads == STEPS // trial.DIVERGENCE_CHECK_EVERY + 1


@pytest.mark.parametrize("optimizer,lr", [("adamw", 2e-3), ("sgd", 1e3)])  # the second diverges
def test_the_check_cadence_changes_no_row(monkeypatch, optimizer, lr):
    from hpstudy.trainers import trial

    def row():
        cfg = dict(model="cnn_tiny", optimizer=optimizer, lr=lr, epochs=1, batch_size=4, dataset=DATA)
        done = trial.train_trial(dict(cfg, device="cpu", dtype="float64", seed=5, wd=1e-4))
        timings = ("wall_s", "finished_at", "epoch_log")
        return {k: v for k, v in done.items() if k not in timings}, [
            {k: v for k, v in e.items() if k != "seconds"} for e in done["epoch_log"]
        ]

    every_16 = row()
    monkeypatch.setattr(trial, "DIVERGENCE_CHECK_EVERY", 1)  # a host read after every step
    assert row() == every_16
    assert every_16[0]["status"] == ("ok" if optimizer == "adamw" else "diverged")


@pytest.mark.parametrize("name,lr,wd", [("adamw", 2e-3, 0.05), ("sgd", 0.1, 1e-4)])
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-10), ("float32", 1e-5)])
def test_fused_steps_match_foreach_steps(name, lr, wd, dtype, rtol):
    import torch
    import torch.nn.functional as F

    from hpstudy.trainers.models import build_model
    from hpstudy.trainers.optim import build_optimizer

    dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    first = build_model("vit_c_tiny", 10, 8).to(dtype)
    models = [first, copy.deepcopy(first)]
    optimizers = [build_optimizer(name, m, lr, wd, fused=fused) for m, fused in zip(models, (True, False))]
    generator = torch.Generator().manual_seed(1)
    for step in range(5):
        x = torch.randn(4, 3, 8, 8, generator=generator, dtype=dtype)
        y = torch.randint(0, 10, (4,), generator=generator)
        losses = []
        for model, optimizer in zip(models, optimizers):
            for group in optimizer.param_groups:
                group["lr"] = lr * (step + 1) / 5  # a warmup, as the schedule sets it
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=rtol)
    if dtype == torch.float64:  # in float32, AdamW's rounding is amplified where a gradient is near eps
        for fused, foreach in zip(*(m.parameters() for m in models)):
            torch.testing.assert_close(fused, foreach, rtol=rtol, atol=1e-12)
