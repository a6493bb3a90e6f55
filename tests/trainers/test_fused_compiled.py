"""Fused trials with ViT attention through hpstudy::attention, and `compile:` modes that compile the fused step
whole, once per trainer."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from tests.helpers import REPO

if TYPE_CHECKING:
    from bench.op_count import OpCounter
    from hpstudy.trainers.fused import FusedTrainer

DATA = {"name": "synthetic", "image_size": 8, "n_train": 32, "n_val": 16, "num_classes": 4}
BASE = dict(epochs=2, batch_size=8, warmup_epochs=1, min_lr_ratio=0.1, device="cpu", dtype="float64", dataset=DATA)


def members(model, optimizer, lrs, **changes):
    return [
        TrialConfig.from_dict(dict(BASE, model=model, optimizer=optimizer, lr=lr, wd=0.05, seed=10 + i, **changes))
        for i, lr in enumerate(lrs)
    ]


def trained(trainer: FusedTrainer):
    """Each epoch's records (run_epoch) and the stacked parameters after them."""
    return [trainer.run_epoch() for _ in range(trainer.cfgs[0].epochs)], trainer.flat


def assert_same_training(got, want, rel):
    (got_epochs, got_flat), (want_epochs, want_flat) = got, want
    for mine, theirs in zip(got_epochs, want_epochs):
        assert mine.keys() == theirs.keys()
        for member, record in mine.items():
            unset = {
                name for name, value in theirs[member].items() if value is None
            }  # e.g. no EMA: approx takes no None
            assert {name: record[name] for name in unset} == dict.fromkeys(unset)
            numbers = {name: value for name, value in theirs[member].items() if name not in unset}
            assert {name: record[name] for name in numbers} == pytest.approx(numbers, rel=rel)
    assert (got_flat - want_flat).norm() <= rel * want_flat.norm()


def explicit_attention(model, vmapped):
    """Fused training's attention before hpstudy::attention: explicit softmax(QK^T)V under vmap."""
    from hpstudy.trainers.models import set_fused_attention

    return set_fused_attention(model, not vmapped)


def sdpa_kernel_calls(ops: OpCounter) -> int:
    return sum(n for name, n in ops.counts.items() if "scaled_dot_product" in name)


@pytest.mark.slow
@pytest.mark.filterwarnings("error:.*batching rule")  # no vmap fallback to a loop over members
@pytest.mark.parametrize("optimizer,lrs", [("adamw", [1e-3, 4e-3, 2e-4]), ("sgd", [0.05, 0.2, 0.01])])
def test_vit_attention_through_the_op_trains_as_the_explicit_attention_did(monkeypatch, optimizer, lrs):
    from bench.op_count import OpCounter
    from hpstudy.trainers import fused
    from hpstudy.trainers.fused import FusedTrainer

    cfgs = members("vit_c_tiny", optimizer, lrs)
    with OpCounter() as ops:
        through_op = trained(FusedTrainer(cfgs))
    assert sdpa_kernel_calls(ops) > 0
    monkeypatch.setattr(fused, "set_vmapped_attention", explicit_attention)
    monkeypatch.setattr(fused, "routes_attention", lambda model: False)
    with OpCounter() as ops:
        explicit = trained(FusedTrainer(cfgs))
    assert sdpa_kernel_calls(ops) == 0
    assert_same_training(through_op, explicit, rel=1e-10)


IN_FRESH_PROCESS = "HPSTUDY_TEST_IN_FRESH_PROCESS"


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,optimizer,lrs", [("vit_c_tiny", "adamw", [1e-3, 4e-3]), ("cnn_tiny", "sgd", [0.05, 0.2])]
)
def test_the_fused_step_compiles_whole_once_and_trains_as_eager(request, aot_eager, model, optimizer, lrs):
    """One graph (gradients of every member, divergence, update), no graph break and no recompile over a
    trial: the step count, lrs and bias corrections are read on the device. In a fresh process: in one that
    compiled a trial alone before, torch 2.14 raises a KeyError inside the compiled fused step
    (docs/fused-trials.md#compiled)."""
    from torch._dynamo.utils import counters

    from hpstudy.trainers.fused import FusedTrainer

    if not os.environ.get(IN_FRESH_PROCESS):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-m", "", request.node.nodeid],
            cwd=REPO,
            env={**os.environ, IN_FRESH_PROCESS: "1"},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        return
    cfgs = members(model, optimizer, lrs)
    trainer = FusedTrainer([dataclasses.replace(cfg, compile="inductor") for cfg in cfgs])
    step = trainer._train_step
    compiled = trained(trainer)
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1  # a recompile would add a graph
    assert trainer._train_step is step
    assert_same_training(compiled, trained(FusedTrainer(cfgs)), rel=1e-12)


def test_graph_on_a_device_that_resolves_to_the_cpu_is_refused_by_the_fused_trainer():
    import torch

    from hpstudy.trainers.fused import FusedTrainer

    if torch.cuda.is_available():
        pytest.skip("device auto is CUDA here")
    cfgs = members("cnn_tiny", "sgd", [0.05, 0.2], device="auto", compile="graph")
    with pytest.raises(ConfigError, match="compile: bad value 'graph' on device cpu"):
        FusedTrainer(cfgs)
