"""What a trial promises, alone and fused, on tiny 4-class data: divergence by threshold, chance
errors with fewer than 5 classes, linear lr scaling, and each recipe option having its effect."""

import contextlib
import math
from datetime import datetime, timezone

import pytest

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from tests.helpers import TINY_DATA as DATA
from tests.helpers import TINY_TRIAL as BASE
from tests.helpers import image_folder
from tests.helpers import tiny_trainer as trainer


def _params(model):
    import torch

    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.fixture(scope="module")
def plain():
    """One epoch of BASE alone (2 steps): the numbers every recipe option is compared with."""
    return trainer().train_epoch()


def test_chance_errors_are_top_k_of_uniform_guessing():
    from hpstudy.trainers.loop import chance_error

    assert chance_error(10) == pytest.approx(90.0) and chance_error(10, 5) == pytest.approx(50.0)
    assert chance_error(4) == pytest.approx(75.0) and chance_error(4, 5) == 0.0
    assert chance_error(3, 2) == pytest.approx(100 / 3) and chance_error(100, 5) == pytest.approx(95.0)


def test_diverged_mask_is_non_finite_or_strictly_above_the_threshold():
    import torch

    from hpstudy.trainers.loop import diverged_mask

    losses = torch.tensor([float("nan"), float("inf"), -float("inf"), 5.0, 100.0, 100.5, 0.0])
    cfg = TrialConfig.from_dict(dict(BASE, divergence_loss=100.0))
    assert diverged_mask(losses, cfg).tolist() == [True, True, True, False, False, True, False]
    low = TrialConfig.from_dict(dict(BASE, divergence_loss=4.0))
    assert diverged_mask(losses, low).tolist() == [True, True, True, True, True, True, False]


def test_a_finite_loss_above_divergence_loss_ends_the_trial_at_chance():
    """The first loss (about ln 4 = 1.39) is finite but above 0.5: diverged at once, EMA at chance too."""
    from hpstudy.trainers.trial import train_trial

    row = train_trial(dict(BASE, divergence_loss=0.5, ema_decay=0.9))
    assert row["status"] == "diverged" and row["epochs_done"] == 0 and row["epoch_log"] == []
    # 4 classes: top-1 chance is 75%, and every label is among the top 5
    assert (row["top1_err"], row["best_top1_err"], row["top5_err"]) == (75.0, 75.0, 0.0)
    assert (row["ema_top1_err"], row["best_ema_top1_err"]) == (75.0, 75.0)


def test_fused_members_above_divergence_loss_end_at_chance():
    from hpstudy.trainers.fused import train_fused

    ten = dict(DATA, num_classes=10)
    rows = train_fused(
        [dict(BASE, divergence_loss=0.5, dataset=ten), dict(BASE, divergence_loss=0.5, dataset=ten, seed=4)]
    )
    for row in rows:
        assert row["status"] == "diverged" and row["epochs_done"] == 0
        assert (row["top1_err"], row["top5_err"], row["best_top1_err"]) == (90.0, 50.0, 90.0)
        assert (row["ema_top1_err"], row["best_ema_top1_err"]) == (None, None)  # fused training has no EMA


def test_evaluate_counts_top1_and_top5_hits_over_all_batches():
    import torch

    from hpstudy.trainers.trial import evaluate

    class _Fixed(torch.nn.Module):
        """A model whose logits are its input."""

        def forward(self, x):
            return x

    scores = torch.eye(6)[[0, 1, 2, 3]] + torch.linspace(0, 0.1, 6)  # class i first; class 5 second
    batches = [(scores[:2], torch.tensor([0, 5])), (scores[2:], torch.tensor([2, 4]))]
    errors = evaluate({"m": _Fixed()}, batches, contextlib.nullcontext)["m"]
    # top-1 hits: samples 0 and 2; top-5 (classes i, 5, 4, 3, 2): samples 0, 1, 2 and 3
    assert errors == {"top1_err": 50.0, "top5_err": 0.0}
    three = [(torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]]), torch.tensor([2, 1]))]
    assert evaluate({"m": _Fixed()}, three, contextlib.nullcontext)["m"] == {"top1_err": 100.0, "top5_err": 0.0}


def test_lr_is_scaled_linearly_from_the_reference_batch(plain):
    """lr 0.1 given for batch 16 trains at batch 8 exactly as lr 0.05 given for batch 8."""
    scaled = trainer(lr=0.1, reference_batch_size=16).train_epoch()
    assert scaled == plain
    # 2 steps of a cosine from the peak: the last step's lr is peak * (1 + cos(pi / 2)) / 2
    assert scaled["lr"] == pytest.approx(0.05 * (1 + math.cos(math.pi / 2)) / 2)
    assert trainer(lr=0.1).train_epoch()["train_loss"] != plain["train_loss"]


def test_fused_lr_is_scaled_linearly_from_the_reference_batch():
    from hpstudy.trainers.fused import FusedTrainer

    def epoch(*configs):
        fused = FusedTrainer([TrialConfig.from_dict(dict(BASE, seed=i, **c)) for i, c in enumerate(configs)])
        result = fused.train_epoch()
        return result["train_loss"].tolist(), result["lr"].tolist()

    scaled = epoch({"lr": 0.1, "reference_batch_size": 16}, {"lr": 0.4, "reference_batch_size": 16})
    assert scaled == epoch({"lr": 0.05}, {"lr": 0.2})
    assert scaled[1] == pytest.approx([peak * (1 + math.cos(math.pi / 2)) / 2 for peak in (0.05, 0.2)])


@pytest.mark.parametrize(
    "option", [{"mixup": 0.8}, {"cutmix": 1.0}, {"label_smoothing": 0.3}, {"amp": True}, {"grad_clip": 0.01}]
)
def test_each_recipe_option_changes_training(option, plain):
    changed = trainer(**option).train_epoch()
    assert changed["diverged"] is False and changed["lr"] == plain["lr"]
    assert changed["train_loss"] != plain["train_loss"]


def test_gradient_clipping_bounds_every_step():
    """SGD-Nesterov with wd 0 and clipped gradients moves the weights at most lr * clip * (1 + m / (1 - m))
    a step (the momentum buffer's norm is at most clip / (1 - m)): 2 steps here."""
    moved = {}
    for clip in (1e-4, None):
        run = trainer(lr=0.5, grad_clip=clip)
        before = _params(run.model)
        run.train_epoch()
        moved[clip] = (_params(run.model) - before).norm().item()
    bound = 2 * 0.5 * 1e-4 * (1 + 0.9 / (1 - 0.9))
    assert 0 < moved[1e-4] <= bound < moved[None] / 10


def test_ema_weights_follow_the_model_with_a_lag_and_leave_training_alone():
    """timm's EMA warmup copies the weights for 2 steps and averages from the third: 4 steps here."""
    import torch

    longer = dict(DATA, n_train=32)
    run = trainer(ema_decay=0.5, dataset=longer)
    start = _params(run.model)
    assert run.train_epoch() == trainer(dataset=longer).train_epoch()  # the weights trained are the same
    raw, ema = _params(run.model), _params(run.ema.module)
    assert not torch.equal(ema, raw) and not torch.equal(ema, start)
    assert (ema - raw).norm() < (start - raw).norm()  # an average of the steps, nearer the last
    # an EMA that is the model with its logits negated: it picks each image's least likely class
    run.ema.module.load_state_dict(run.model.state_dict())
    head = run.ema.module.get_classifier()
    with torch.no_grad():
        head.weight.neg_()
        head.bias.neg_()
        run.model.eval()
        x, y = (torch.cat(t) for t in zip(*run.batches.val(256)))
        logits = run.model(x)
    top1, last = (
        100.0 * (logits.argmax(1) != y).double().mean().item(),
        100.0 * (logits.argmin(1) != y).double().mean().item(),
    )
    assert top1 != last
    metrics = run.evaluate()
    assert (metrics["top1_err"], metrics["ema_top1_err"]) == (pytest.approx(top1), pytest.approx(last))
    assert set(metrics) == {"top1_err", "top5_err", "ema_top1_err"} and metrics["top5_err"] == 0.0
    assert set(trainer().evaluate()) == {"top1_err", "top5_err"}


class _Scripted:
    """An EpochTrainer of 2 members that reports scripted metrics: member 1 diverges in epoch 2."""

    def __init__(self, device="cpu", epochs=3):
        import torch

        self.cfgs = [TrialConfig.from_dict(dict(BASE, epochs=epochs, seed=s)) for s in (0, 1)]
        self.device, self.num_classes, self.epoch, self.released = torch.device(device), 4, 0, 0

    def run_epoch(self):
        self.epoch += 1
        live = [0] if self.epoch >= 2 else [0, 1]
        return {
            k: {
                "train_loss": 1.0 / self.epoch,
                "train_top1_err": None,
                "lr": 0.1,
                "top1_err": 50.0 - self.epoch - k,
                "top5_err": 0.0,
                "ema_top1_err": None,
            }
            for k in live
        }

    def diverged(self, member):
        return member == 1 and self.epoch >= 2

    def release(self):
        self.released += 1


def test_fit_builds_each_members_log_and_row():
    from hpstudy.trainers.loop import fit

    scripted, seen = _Scripted(), []
    rows = fit(scripted, lambda records: seen.append(sorted(records)))
    assert seen == [[0, 1], [0], [0]] and scripted.released == 1
    ok, diverged = rows
    assert [e["epoch"] for e in ok["epoch_log"]] == [1, 2, 3] and [e["epoch"] for e in diverged["epoch_log"]] == [1]
    assert (ok["status"], ok["top1_err"], ok["best_top1_err"], ok["train_loss"], ok["epochs_done"]) == (
        "ok",
        47.0,
        47.0,
        pytest.approx(1 / 3),
        3,
    )
    assert (diverged["status"], diverged["top1_err"], diverged["epochs_done"]) == ("diverged", 75.0, 1)
    assert diverged["train_loss"] == 1.0 and ok["wall_s"] == diverged["wall_s"] >= 0
    finished = datetime.fromisoformat(ok["finished_at"])
    assert finished.tzinfo is not None and abs((datetime.now(timezone.utc) - finished).total_seconds()) < 600


def test_fit_waits_for_a_cuda_device_before_timing_an_epoch(monkeypatch):
    """On CUDA an epoch's seconds include the queued device work: one synchronize per epoch (no GPU
    is needed to check the call; none happens on the CPU)."""
    import torch

    from hpstudy.trainers.loop import fit

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    monkeypatch.setattr("hpstudy.trainers.loop.trial_row", lambda cfg, log, diverged, trainer, wall_s: log)
    fit(_Scripted("cuda", epochs=2))
    assert calls == [torch.device("cuda")] * 2
    fit(_Scripted("cpu", epochs=2))
    assert len(calls) == 2


def test_a_rows_flops_are_counted_at_the_datasets_image_size():
    from hpstudy.trainers.loop import trial_row

    flops = [
        trial_row(TrialConfig.from_dict(dict(BASE, dataset=dict(DATA, image_size=size))), [], True, _Scripted(), 1.0)[
            "flops"
        ]
        for size in (8, 32)
    ]
    assert flops[0] < flops[1]


def test_image_folders_decode_where_the_config_says(tmp_path):
    import torch

    from hpstudy.trainers.data import LoaderData
    from hpstudy.trainers.device_decode import DeviceDecodeData
    from hpstudy.trainers.loop import data_for

    folder = {"name": "imagefolder", "path": image_folder(tmp_path), "image_size": 32}
    cfg = lambda decode: TrialConfig.from_dict(dict(BASE, dataset=folder, decode=decode, num_workers=0))
    cpu = torch.device("cpu")
    assert isinstance(data_for(cfg("device"), cpu), DeviceDecodeData)
    assert isinstance(data_for(cfg("auto"), cpu), LoaderData) and isinstance(data_for(cfg("workers"), cpu), LoaderData)


def test_ema_copies_two_steps_then_averages_with_timms_warmup_decay():
    """timm's EMA copies the weights at updates 0 and 1, then decays by min(decay, 1 - t^(-2/3)) at
    update t + 1: after 3 steps it is d w2 + (1 - d) w3 with d = 1 - 2^(-2/3) = 0.37 (below the 0.5 asked)."""
    import torch

    run = trainer(ema_decay=0.5, dataset=dict(DATA, n_train=24), min_lr_ratio=1.0)
    weights = []
    run.optimizer.register_step_post_hook(lambda *_: weights.append(_params(run.model)))
    run.train_epoch()
    d = 1 - 2 ** (-2 / 3)
    torch.testing.assert_close(_params(run.ema.module), d * weights[1] + (1 - d) * weights[2])


def test_train_loss_and_error_are_the_means_over_the_epochs_batches():
    """Recomputed in float64 from the logits the model gave each micro-batch (2 per step, accumulated)."""
    import torch
    import torch.nn.functional as F

    run = trainer(dtype="float64", accum_steps=2)
    replay = torch.Generator()
    replay.set_state(run.generator.get_state())
    targets = [y for _, y in run.batches.train(8, replay)]
    logits = []
    run.model.register_forward_hook(lambda module, args, out: logits.append(out.detach()))
    result = run.train_epoch()
    per_step = [
        (F.cross_entropy(logits[2 * s], y[:4]) + F.cross_entropy(logits[2 * s + 1], y[4:])).item() / 2
        for s, y in enumerate(targets)
    ]
    hits = sum((torch.cat(logits[2 * s : 2 * s + 2]).argmax(1) == y).sum().item() for s, y in enumerate(targets))
    assert result["train_loss"] == pytest.approx(sum(per_step) / len(targets), rel=1e-12, abs=0)
    assert result["train_top1_err"] == pytest.approx(100.0 * (1 - hits / 16))


def test_a_diverged_trial_stops_at_the_next_check():
    """Diverged at its first step, a trial reads the flag after 16 steps, not at every step."""
    from hpstudy.trainers.trial import DIVERGENCE_CHECK_EVERY

    run = trainer(batch_size=2, dataset=dict(DATA, n_train=2 * 40), divergence_loss=1e-3)
    assert run.train_epoch() == {"diverged": True}
    assert run.step == DIVERGENCE_CHECK_EVERY - 1


def test_seeds_beyond_32_bits_train_with_mixup():
    big = trainer(seed=2**63 - 1, mixup=0.8)
    assert big.train_epoch()["diverged"] is False


def test_the_loss_is_float32_under_bf16_and_soft_targets_are_not_smoothed_twice():
    import torch

    run = trainer(label_smoothing=0.3)
    logits = torch.tensor([[2.0, 0.0, -1.0, 0.5], [0.0, 1.0, 0.0, 0.0]])
    assert run._loss(logits.bfloat16(), torch.tensor([0, 1])).dtype == torch.float32
    soft = torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.4, 0.4]])  # mixup's targets, smoothed already
    expected = -(soft * torch.log_softmax(logits, 1)).sum(1).mean()
    torch.testing.assert_close(run._loss(logits, soft), expected)


def test_warmup_longer_than_the_trial_still_reaches_the_peak_at_its_last_step():
    import torch

    from hpstudy.trainers.optim import build_schedule

    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.3)
    schedule = build_schedule(opt, total_steps=4, warmup_steps=10, min_lr_ratio=0.0)
    lrs = []
    for step in range(4):
        schedule.step_update(step)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_an_unknown_optimizer_is_named_with_the_allowed_ones():
    import torch

    from hpstudy.trainers.optim import build_optimizer

    with pytest.raises(ConfigError, match=r"^optimizer: unknown 'adam'; allowed: adamw, sgd$"):
        build_optimizer("adam", torch.nn.Linear(2, 2), 0.1, 0.0)
