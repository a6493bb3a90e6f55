"""Fused training: exactness against the same trial alone, and isolation of a diverging member."""

import logging
import warnings
from types import SimpleNamespace

import pytest

from hpstudy.trainers.config import ConfigError, TrialConfig

DATA = {"name": "synthetic", "image_size": 8, "n_train": 64, "n_val": 32, "num_classes": 4}
BASE = dict(epochs=3, batch_size=16, warmup_epochs=1, min_lr_ratio=0.1, device="cpu", dtype="float64", dataset=DATA)


@pytest.fixture(autouse=True)
def vmap_fallbacks_are_errors():
    """A vmap fallback to a per-member loop (e.g. fused attention on CPU) must fail the test."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*batching rule.*")
        yield


def members(model, optimizer, lrs, wds):
    return [
        dict(BASE, model=model, optimizer=optimizer, lr=lr, wd=wd, seed=10 + i)
        for i, (lr, wd) in enumerate(zip(lrs, wds))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["vit_p_tiny", "vit_c_tiny", "cnn_tiny"])
@pytest.mark.parametrize(
    "optimizer,lrs,wds",
    [("adamw", [1e-3, 4e-3, 2e-4], [0.05, 0.3, 0.0]), ("sgd", [0.05, 0.2, 0.01], [1e-4, 1e-5, 0.0])],
)
def test_each_member_matches_its_trial_alone(model, optimizer, lrs, wds):
    import torch

    from hpstudy.trainers.fused import FusedTrainer
    from hpstudy.trainers.trial import Trainer

    configs = members(model, optimizer, lrs, wds)
    fused = FusedTrainer([TrialConfig.from_dict(c) for c in configs])
    for _ in range(2):  # 2 epochs x 4 steps: through warmup into the cosine
        fused.train_epoch()
    fused_eval = fused.evaluate()
    for k, config in enumerate(configs):
        alone = Trainer(TrialConfig.from_dict(config))
        for _ in range(2):
            alone.train_epoch()
        for name, param in alone.model.named_parameters():
            torch.testing.assert_close(fused.params[name][k], param.detach(), rtol=1e-5, atol=1e-9)
        for name, buffer in alone.model.named_buffers():  # BatchNorm statistics, per member
            torch.testing.assert_close(fused.buffers[name][k], buffer, rtol=1e-5, atol=1e-9)
        assert fused_eval["top1_err"][k] == pytest.approx(alone.evaluate()["top1_err"])


def test_diverging_member_is_masked_and_others_are_bit_identical():
    import torch

    from hpstudy.trainers.fused import FusedTrainer

    keep = members("vit_c_tiny", "sgd", [0.05, 0.1], [1e-4, 1e-5])
    bad = dict(keep[0], lr=1e6, seed=99)
    with_bad = FusedTrainer([TrialConfig.from_dict(c) for c in (keep[0], bad, keep[1])])
    without = FusedTrainer([TrialConfig.from_dict(c) for c in keep])
    for _ in range(2):
        with_bad.train_epoch(), without.train_epoch()
    assert with_bad.alive.tolist() == [True, False, True] and with_bad.diverged_at[1] is not None
    for name in without.params:
        assert torch.equal(with_bad.params[name][[0, 2]], without.params[name]), name
    for name in without.buffers:
        assert torch.equal(with_bad.buffers[name][[0, 2]], without.buffers[name]), name


def test_train_fused_returns_one_row_per_member():
    from hpstudy.trainers.fused import train_fused

    configs = members("cnn_tiny", "adamw", [1e-3, 1e6], [0.05, 0.05])
    seen = []
    rows = train_fused(configs, on_epoch=lambda records: seen.append(sorted(records)))
    assert [r["status"] for r in rows] == ["ok", "diverged"]
    assert rows[1]["top1_err"] == pytest.approx(75.0)  # chance error for 4 classes
    assert rows[0]["epochs_done"] == 3 and seen == [[0], [0], [0]]
    assert [r["lr"] for r in rows] == [1e-3, 1e6] and rows[0]["config_json"] != rows[1]["config_json"]


def test_unfusable_members_are_rejected():
    from hpstudy.trainers.fused import FusedTrainer

    configs = members("cnn_tiny", "adamw", [1e-3, 2e-3], [0.05, 0.05])
    with pytest.raises(ConfigError, match=r"differ in \['batch_size'\]"):
        FusedTrainer([TrialConfig.from_dict(configs[0]), TrialConfig.from_dict(dict(configs[1], batch_size=8))])
    with pytest.raises(ConfigError, match="mixup: 0.8 is not supported"):
        FusedTrainer([TrialConfig.from_dict(dict(c, mixup=0.8)) for c in configs])


def test_a_diverged_member_leaves_the_stack_and_the_others_keep_their_numbers():
    import torch

    from hpstudy.trainers.fused import FusedTrainer

    keep = members("cnn_tiny", "adamw", [1e-3, 4e-3], [0.05, 0.3])
    bad = dict(keep[0], lr=1e6, seed=99)
    trainer = FusedTrainer([TrialConfig.from_dict(c) for c in (keep[0], bad, keep[1])])
    reference = FusedTrainer([TrialConfig.from_dict(c) for c in keep])
    first, ref_first = trainer.run_epoch(), reference.run_epoch()
    assert sorted(first) == [0, 2] and trainer.k == 2 and trainer.members == [0, 2]  # out of the stack
    assert trainer.diverged(1) and not trainer.diverged(0) and not trainer.diverged(2)
    second, ref_second = trainer.run_epoch(), reference.run_epoch()
    for member, ref in ((0, 0), (2, 1)):
        assert first[member]["top1_err"] == ref_first[ref]["top1_err"]
        assert second[member]["train_loss"] == pytest.approx(ref_second[ref]["train_loss"], rel=1e-12)
    for name in reference.params:  # a stack of 3 then 2 against one of 2: the same up to rounding
        torch.testing.assert_close(trainer.params[name], reference.params[name], rtol=1e-10, atol=1e-13)


def _no_vmap(*args, **kwargs):
    raise AssertionError("a stack of one member must not go through vmap")


@pytest.mark.parametrize("model", ["vit_c_tiny", "cnn_tiny"])
def test_a_stack_of_one_trains_without_vmap_as_its_trial_alone(model, monkeypatch):
    """K=1 (a cell's last trial, or a group whose other members diverged) skips vmap (which made it
    0.6x its trial alone on CPU) and uses torch's fused attention; its numbers are its trial's."""
    import torch

    from hpstudy.trainers.fused import FusedTrainer
    from hpstudy.trainers.trial import Trainer

    config = members(model, "adamw", [2e-3], [0.05])[0]
    fused, alone = FusedTrainer([TrialConfig.from_dict(config)]), Trainer(TrialConfig.from_dict(config))
    monkeypatch.setattr("hpstudy.trainers.fused.vmap", _no_vmap)
    for _ in range(2):
        fused.train_epoch(), alone.train_epoch()
    for name, param in alone.model.named_parameters():
        torch.testing.assert_close(fused.params[name][0], param.detach(), rtol=1e-5, atol=1e-9)
    for name, buffer in alone.model.named_buffers():
        torch.testing.assert_close(fused.buffers[name][0], buffer, rtol=1e-5, atol=1e-9)
    assert fused.evaluate()["top1_err"][0] == pytest.approx(alone.evaluate()["top1_err"])


def test_a_group_left_with_one_member_goes_on_without_vmap_and_keeps_its_numbers(monkeypatch):
    import torch

    from hpstudy.trainers.fused import FusedTrainer
    from hpstudy.trainers.trial import Trainer

    keep = members("cnn_tiny", "sgd", [0.05], [1e-4])[0]
    trainer = FusedTrainer([TrialConfig.from_dict(c) for c in (keep, dict(keep, lr=1e6, seed=99))])
    alone = Trainer(TrialConfig.from_dict(keep))
    assert sorted(trainer.run_epoch()) == [0] and trainer.k == 1  # the other diverged
    alone.train_epoch()
    monkeypatch.setattr("hpstudy.trainers.fused.vmap", _no_vmap)
    second = trainer.run_epoch()[0]
    assert second["train_loss"] == pytest.approx(alone.train_epoch()["train_loss"], rel=1e-6)
    for name, param in alone.model.named_parameters():
        torch.testing.assert_close(trainer.params[name][0], param.detach(), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("model", ["cnn_tiny", "vit_c_tiny"])
def test_bf16_autocast_under_vmap_runs_each_member_as_its_bf16_trial_alone(model):
    """amp: true fused trains the members in bf16 under vmap (CPU autocast here, as CUDA's): the
    linear layers compute in bf16, BatchNorm included in the model, the loss in float32; each
    member's epoch loss is its bf16 trial's alone up to bf16 rounding (the batched and the single
    kernels round differently)."""
    import torch

    from hpstudy.trainers.fused import FusedTrainer
    from hpstudy.trainers.trial import Trainer

    configs = [dict(c, dtype="float32") for c in members(model, "sgd", [0.05, 0.1], [1e-4, 1e-5])]
    fused = FusedTrainer([TrialConfig.from_dict(dict(c, amp=True)) for c in configs])
    seen = []
    head = [m for m in fused.base.modules() if isinstance(m, torch.nn.Linear)][-1]
    head.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    losses = fused.train_epoch()["train_loss"]
    assert seen and set(seen) == {torch.bfloat16}
    for k, config in enumerate(configs):
        alone = Trainer(TrialConfig.from_dict(dict(config, amp=True))).train_epoch()["train_loss"]
        assert losses[k] == pytest.approx(alone, rel=2e-2)
    assert set(fused.evaluate()) == {"top1_err", "top5_err"}  # evaluation runs (in float32)
    off = FusedTrainer([TrialConfig.from_dict(dict(c, amp=False)) for c in configs])
    seen.clear()
    head = [m for m in off.base.modules() if isinstance(m, torch.nn.Linear)][-1]
    head.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    off.train_epoch()
    assert set(seen) == {torch.float32}


def test_fuse_auto_takes_an_out_of_memory_while_measuring_as_no_fusion(monkeypatch, caplog):
    """A model whose K fused members do not fit the GPU trains alone; the study goes on (no Ray
    started here: the measuring task and its RayTaskError are stand-ins)."""
    import ray
    import torch

    from hpstudy.study.fusion import fusion_sizes
    from hpstudy.study.sampling import expand
    from hpstudy.study.spec import parse_spec
    from tests.helpers import SMALL, logged, small_spec

    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    error = ray.exceptions.RayTaskError(
        "_probe_on_worker", f"Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: {oom}", oom
    ).as_instanceof_cause()
    asked, probes = [], []

    def remote(**resources):
        asked.append(resources)
        return lambda fn: SimpleNamespace(remote=lambda probe, cached: probes.append(probe) or probe)

    def get(probe):
        if probe.model == "vit_c_tiny":
            raise error
        key = {"machine": {"host": "worker-1"}}
        return {"key": key, "result": {"speedup": 2.0}, "measured": "2026-12-03T10:00:00+00:00"}, True

    monkeypatch.setattr(ray, "remote", remote)
    monkeypatch.setattr(ray, "get", get)
    spec = parse_spec(small_spec(fuse="auto", recipe=dict(SMALL["recipe"], compile="inductor")))
    with caplog.at_level("INFO", logger="hpstudy.study.fusion"):
        assert fusion_sizes(spec, expand(spec), {"cpu": 1, "gpu": 1}) == {"cnn_tiny": 3}
    assert asked == [{"num_cpus": 1, "num_gpus": 1}]
    assert [p.compile for p in probes] == ["inductor"] * 2  # timed in the trials' compile mode
    assert logged(caplog) == [
        "fuse auto: cnn_tiny: 3 fused run 2.00x the speed of 3 alone -> fuse 3 "
        "(measured 2026-12-03T10:00:00+00:00, cached on worker-1)",
    ]
    assert logged(caplog, logging.WARNING) == [
        "fuse auto: vit_c_tiny: no fusion: measuring 3 fused failed (torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB)"
    ]
