"""GPU code paths checked on the CPU: batches reach the training device, nothing is kept between
trials, no host sync per step, the recipe reaches the loader, CUDA settings, memory options."""

import dataclasses
import gc
import logging
import weakref

import pytest

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.memory import activation_bytes_per_image, peak_memory_gb
from tests.helpers import image_folder

SYNTH = {"name": "synthetic", "image_size": 8, "n_train": 64, "n_val": 16, "num_classes": 4}


def test_image_folder_batches_reach_the_training_device(tmp_path):
    """Folder loaders yield CPU batches; train and validation batches must both be moved (the CUDA
    crash at the first evaluation). The meta device stands in for a GPU."""
    import torch

    from hpstudy.trainers.data import DeviceBatches, load_data

    data = load_data(DataSpec("imagefolder", path=image_folder(tmp_path), image_size=32), num_workers=0)
    view = DeviceBatches(data, torch.device("meta"), torch.float32)
    x, y = next(view.train(4, torch.Generator().manual_seed(0)))
    vx, vy = next(view.val(8))
    assert {t.device.type for t in (x, y, vx, vy)} == {"meta"}
    assert x.dtype == vx.dtype == torch.float32


def test_auto_augment_reaches_the_image_folder_transforms(tmp_path):
    from hpstudy.trainers.trial import Trainer

    root = image_folder(tmp_path)
    cfg = dict(
        model="vit_p_tiny",
        optimizer="adamw",
        epochs=1,
        lr=1e-3,
        wd=0.0,
        batch_size=4,
        device="cpu",
        num_workers=0,
        dataset={"name": "imagefolder", "path": root, "image_size": 32},
    )
    with_aa = Trainer(TrialConfig.from_dict(dict(cfg, auto_augment="original")))
    without = Trainer(TrialConfig.from_dict(cfg))
    assert "AutoAugment" in repr(with_aa.batches.data.train_set.transform)
    assert "AutoAugment" not in repr(without.batches.data.train_set.transform)


def test_a_finished_trial_keeps_no_model_optimizer_or_loader_alive():
    from hpstudy.trainers.loop import fit
    from hpstudy.trainers.trial import Trainer

    trainer = Trainer(
        TrialConfig.from_dict(
            dict(
                model="cnn_tiny",
                optimizer="adamw",
                epochs=1,
                lr=1e-3,
                wd=0.0,
                batch_size=16,
                ema_decay=0.9,
                dataset=SYNTH,
                device="cpu",
            )
        )
    )
    refs = [weakref.ref(o) for o in (trainer.model, trainer.optimizer, trainer.ema, trainer.batches)]
    fit(trainer)
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


def test_loaders_are_built_once_per_trial_and_the_model_and_its_ema_share_each_validation_pass(monkeypatch):
    """Persistent DataLoader workers serve every epoch only if the loaders outlive the epoch; the
    EMA must not decode the validation set a second time."""
    from hpstudy.trainers.data import TensorData
    from hpstudy.trainers.loop import fit
    from hpstudy.trainers.trial import Trainer

    built, passes = [], []
    train_loader, val_loader = TensorData.train_loader, TensorData.val_loader

    class Passes:
        """The validation batches, counting the passes over them."""

        def __init__(self, batches):
            self.batches = batches

        def __iter__(self):
            passes.append(len(passes) + 1)
            return iter(self.batches)

    monkeypatch.setattr(
        TensorData, "train_loader", lambda self, *a, **k: (built.append("train"), train_loader(self, *a, **k))[1]
    )
    monkeypatch.setattr(
        TensorData, "val_loader", lambda self, *a, **k: (built.append("val"), Passes(val_loader(self, *a, **k)))[1]
    )
    (row,) = fit(
        Trainer(
            TrialConfig.from_dict(
                dict(
                    model="cnn_tiny",
                    optimizer="sgd",
                    epochs=3,
                    lr=0.05,
                    wd=0.0,
                    batch_size=16,
                    ema_decay=0.9,
                    dataset=SYNTH,
                    device="cpu",
                )
            )
        )
    )
    assert row["epochs_done"] == 3 and None not in [e["ema_top1_err"] for e in row["epoch_log"]]
    assert built == ["train", "val"] and passes == [1, 2, 3]


@pytest.mark.parametrize("fused", [False, pytest.param(True, marks=pytest.mark.slow)])  # fused: ~2 s
def test_training_reads_the_device_only_every_few_steps(fused, monkeypatch):
    import torch

    from hpstudy.trainers.fused import FusedTrainer
    from hpstudy.trainers.trial import DIVERGENCE_CHECK_EVERY, Trainer

    data = dict(SYNTH, n_train=512)
    cfgs = [
        TrialConfig.from_dict(
            dict(
                model="cnn_tiny",
                optimizer="sgd",
                epochs=1,
                lr=0.05 * (i + 1),
                wd=0.0,
                batch_size=8,
                seed=i,
                dataset=data,
                device="cpu",
            )
        )
        for i in range(2)
    ]
    trainer = FusedTrainer(cfgs) if fused else Trainer(cfgs[0])
    syncs = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda self, *a, _o=original, _n=name, **k: (syncs.append(_n), _o(self, *a, **k))[1]
        )
    trainer.train_epoch()
    assert 512 // 8 >= 4 * DIVERGENCE_CHECK_EVERY
    assert len(syncs) <= 8, syncs  # 64 steps: a check every 16 and the epoch's results, not one per step


def test_cuda_settings_are_made_for_cuda_only():
    import torch

    from hpstudy.trainers.loop import configure_device

    flags = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cudnn.benchmark = torch.backends.cuda.matmul.allow_tf32 = False
        configure_device(torch.device("cpu"))
        assert not torch.backends.cudnn.benchmark and not torch.backends.cuda.matmul.allow_tf32
        configure_device(torch.device("cuda"))
        assert (
            torch.backends.cudnn.benchmark and torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        )
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def test_fused_trials_configure_their_device_and_refuse_channels_last(monkeypatch):
    """The fused trainer sets up its device as a trial alone does, through the same trial_setup
    (cuDNN autotuning and TF32 on CUDA), and refuses the channels_last layout, which vmap's stacked
    tensors cannot have."""
    import torch

    import hpstudy.trainers.loop
    from hpstudy.trainers.config import ConfigError
    from hpstudy.trainers.fused import FusedTrainer
    from hpstudy.trainers.trial import Trainer

    seen = []
    monkeypatch.setattr(hpstudy.trainers.loop, "configure_device", seen.append)
    cfgs = [
        TrialConfig.from_dict(
            dict(
                model="cnn_tiny",
                optimizer="sgd",
                epochs=1,
                lr=0.1,
                wd=0.0,
                batch_size=16,
                seed=i,
                dataset=SYNTH,
                device="cpu",
            )
        )
        for i in range(2)
    ]
    FusedTrainer(cfgs)
    assert seen == [torch.device("cpu")]
    Trainer(cfgs[0])
    assert seen == [torch.device("cpu")] * 2
    with pytest.raises(
        ConfigError, match="channels_last: True is not supported in fused training .*no channels_last layout"
    ):
        FusedTrainer([dataclasses.replace(c, channels_last=True) for c in cfgs])
    assert FusedTrainer([dataclasses.replace(c, channels_last=False) for c in cfgs]).batches.channels_last is False


def _params_after_one_epoch(**changes):
    from hpstudy.trainers.trial import Trainer

    cfg = dict(
        model="vit_c_tiny",
        optimizer="adamw",
        epochs=1,
        lr=1e-3,
        wd=0.05,
        batch_size=16,
        seed=3,
        dataset=dict(SYNTH, image_size=32),
        device="cpu",
        dtype="float64",
        **changes,
    )
    trainer = Trainer(TrialConfig.from_dict(cfg))
    batches = []
    trainer.model.register_forward_pre_hook(lambda module, args: batches.append(len(args[0])))
    trainer.train_epoch()
    assert set(batches) == {16 // cfg.get("accum_steps", 1)}  # the micro-batches really ran
    assert trainer.model.grad_checkpointing == cfg.get("grad_checkpointing", False)
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.parametrize("option", [{"accum_steps": 4}, {"grad_checkpointing": True}])
def test_memory_options_take_the_same_steps(option, monkeypatch):
    """Accumulating 4 micro-batches, or recomputing activations, trains the same weights (float64;
    the conv stem's BatchNorm held in eval mode, since batch statistics depend on the micro-batch)."""
    import torch

    monkeypatch.setattr(torch.nn.BatchNorm2d, "train", lambda self, mode=True: torch.nn.Module.train(self, False))
    plain, other = _params_after_one_epoch(), _params_after_one_epoch(**option)
    for name in plain:
        torch.testing.assert_close(other[name], plain[name], rtol=1e-9, atol=1e-12)


def test_new_recipe_fields_leave_old_trial_keys_alone():
    base = dict(model="cnn_tiny", optimizer="sgd", epochs=2, lr=0.1, wd=1e-4)
    cfg = TrialConfig.from_dict(base)
    assert "accum_steps" not in cfg.to_json() and "grad_checkpointing" not in cfg.to_json()
    assert TrialConfig.from_dict(dict(base, accum_steps=1)).key == cfg.key
    assert TrialConfig.from_dict(dict(base, batch_size=128, accum_steps=2)).key != cfg.key


def test_activation_estimate_matches_measured_regnety_and_scales_with_the_micro_batch():
    # measured on an H200 (bf16, per image): RegNetY-1GF 36 MB, -16GF 101 MB (the GPU-ready issue)
    assert activation_bytes_per_image("regnety_1gf", 1000, 224) / 1e6 == pytest.approx(36, rel=0.1)
    assert activation_bytes_per_image("regnety_16gf", 1000, 224) / 1e6 == pytest.approx(101, rel=0.1)
    paper = dict(
        model="vit_p_18gf",
        optimizer="adamw",
        epochs=50,
        lr=1e-3,
        wd=0.05,
        batch_size=2048,
        ema_decay=0.9999,
        dataset={"name": "imagefolder", "path": "/x", "image_size": 224},
    )
    full = peak_memory_gb(TrialConfig.from_dict(paper), 1000)
    quarter = peak_memory_gb(TrialConfig.from_dict(dict(paper, accum_steps=4)), 1000)
    assert full > 141 > quarter  # does not fit an H200 whole; fits in 4 micro-batches
    assert full - quarter == pytest.approx(0.75 * activation_bytes_per_image("vit_p_18gf", 1000, 224) * 2048 / 1e9)


def test_unfusable_recipe_is_never_measured_and_fuse_k_is_refused(caplog):
    import ray

    from hpstudy.study.fusion import fusion_sizes
    from hpstudy.study.sampling import expand
    from hpstudy.study.spec import SpecError, parse_spec
    from tests.helpers import SMALL, logged, small_spec

    recipe = dict(SMALL["recipe"], mixup=0.8)
    auto = parse_spec(small_spec(name="mix", models=["cnn_tiny"], recipe=recipe, fuse="auto"))
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        assert fusion_sizes(auto, expand(auto), {"cpu": 1, "gpu": 0}) == {}
    assert "fuse auto: no fusion: mixup: 0.8 is not supported" in logged(caplog)[0]
    assert not ray.is_initialized()  # nothing was measured
    fixed = parse_spec(small_spec(name="mix", models=["cnn_tiny"], recipe=recipe, fuse=2))
    with pytest.raises(SpecError, match="fuse: bad value 2 for this recipe"):
        fusion_sizes(fixed, expand(fixed), {"cpu": 1, "gpu": 0})


@pytest.mark.slow
def test_a_trial_without_a_gpu_sees_none_even_if_the_node_sets_cuda_visible_devices():
    """Ray leaves CUDA_VISIBLE_DEVICES as it is for workers that hold no GPU."""
    import os

    import ray

    from hpstudy.study.trainable import use_assigned_gpus

    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="WARNING")
    try:

        @ray.remote(num_cpus=1, num_gpus=0, runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "0"}})
        def probe():
            before = os.environ.get("CUDA_VISIBLE_DEVICES")
            use_assigned_gpus()
            return before, os.environ["CUDA_VISIBLE_DEVICES"]

        assert ray.get(probe.remote()) == ("0", "")
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_the_gpu_check_script_runs_on_the_cpu_and_prints_one_json_object():
    """bench/gpu_check.py at its smallest settings: every check runs (CUDA-only ones say skipped) and
    none fails; on the CPU no trial, alone or fused, turns the CUDA flags on."""
    import json
    import subprocess
    import sys

    from tests.helpers import REPO

    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--device", "cpu", "--images", "32", "--batch", "16"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    checks = {name: value for name, value in results.items() if isinstance(value, dict)}
    assert results["bench"] == "gpu_check" and results["device"] == "cpu" and len(checks) >= 15
    assert {name: value["error"] for name, value in checks.items() if "error" in value} == {}
    assert {"syncs_per_epoch_device_decode", "syncs_per_epoch_prepared"} <= set(checks)
    flags = checks["cuda_flags_after_trial"]
    assert flags["expected"] is False and not any({**flags["solo"], **flags["fused"]}.values())
    assert {checks[name]["status"] for name in ("imagefolder_trial_decode_device", "prepared_trial")} == {"ok"}


def test_gpu_check_runs_only_the_named_checks_keeps_errors_and_rewrites_out_after_each(tmp_path):
    import json

    from bench.gpu_check import checker

    results, out = {}, tmp_path / "results.json"
    check = checker(results, str(out), only="first,broken")

    @check("first")
    def _():
        return {"value": 1}

    assert json.loads(out.read_text())["first"]["value"] == 1  # written before the next check runs

    @check("broken")
    def _():
        raise ValueError("boom")

    @check("skipped")
    def _():
        raise AssertionError("a check not named in `only` must not run")

    assert set(results) == {"first", "broken"} and check.names == {"first", "broken", "skipped"}
    assert results["broken"]["error"] == "ValueError: boom"
    assert set(json.loads(out.read_text())) == {"bench", "first", "broken"}
