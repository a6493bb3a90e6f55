import math

import pytest

from hpstudy.trainers.config import scaled_lr


def test_no_weight_decay_on_norm_gains_and_biases():
    from hpstudy.trainers.models import build_model
    from hpstudy.trainers.optim import param_groups

    model = build_model("vit_c_tiny", 10, 32)
    decay, no_decay = param_groups(model, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    ids = lambda ps: {id(p) for p in ps}
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[i] for i in ids(no_decay["params"])} == {n for n, p in model.named_parameters() if p.ndim == 1}
    assert any(".bias" in names[i] for i in ids(no_decay["params"]))
    assert any("norm" in names[i] for i in ids(no_decay["params"]))
    assert any("bn" in names[i] or "proj.1" in names[i] for i in ids(no_decay["params"]))
    assert {names[i] for i in ids(decay["params"])} >= {"cls_token", "pos_embed", "head.weight"}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


@pytest.mark.parametrize("name,cls", [("adamw", "AdamW"), ("sgd", "SGD")])
def test_optimizer_settings(name, cls):
    import torch

    from hpstudy.trainers.models import build_model
    from hpstudy.trainers.optim import build_optimizer

    opt = build_optimizer(name, build_model("cnn_tiny", 10, 32), lr=0.1, weight_decay=1e-4)
    assert isinstance(opt, getattr(torch.optim, cls))
    group = opt.param_groups[0]
    if name == "adamw":
        assert group["betas"] == (0.9, 0.999)
    else:
        assert group["momentum"] == 0.9 and group["nesterov"]
    assert [g["weight_decay"] for g in opt.param_groups] == [1e-4, 0.0]


def test_lr_is_scaled_linearly_with_batch():
    assert scaled_lr(0.1, 512, 256) == pytest.approx(0.2)
    assert scaled_lr(8e-3, 64, 2048) == pytest.approx(2.5e-4)


def test_warmup_then_cosine_to_floor():
    import torch

    from hpstudy.trainers.optim import build_schedule

    steps_per_epoch, epochs, warmup_epochs, lr, floor = 10, 20, 5, 0.4, 0.1
    param = torch.nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.SGD([param], lr=lr)
    schedule = build_schedule(opt, epochs * steps_per_epoch, warmup_epochs * steps_per_epoch, floor)

    def at(epoch):
        schedule.step_update(round(epoch * steps_per_epoch))
        return opt.param_groups[0]["lr"]

    assert at(0) == 0.0
    assert at(2.5) == pytest.approx(lr * 0.5)  # halfway through linear warmup
    assert at(5) == pytest.approx(lr)  # peak at the end of warmup
    cosine_mid = floor * lr + (lr - floor * lr) * 0.5 * (1 + math.cos(math.pi * 0.5))
    assert at(12.5) == pytest.approx(cosine_mid)  # half-way through the cosine
    assert at(20) == pytest.approx(floor * lr)  # ends at the floor


def test_fused_kernels_where_the_device_has_them():
    import torch

    from hpstudy.trainers.models import build_model
    from hpstudy.trainers.optim import build_optimizer, fused_kernels

    cpu = [torch.nn.Parameter(torch.zeros(2))]
    with torch.device("meta"):
        meta = [torch.nn.Parameter(torch.zeros(2))]
    assert fused_kernels(cpu) == {"fused": True}
    assert fused_kernels(meta) == {"foreach": True}  # no fused kernels on the meta device
    model = build_model("cnn_tiny", 10, 32)
    assert build_optimizer("adamw", model, 1e-3, 0.05).defaults["fused"]
    foreach = build_optimizer("sgd", model, 0.1, 1e-4, fused=False).defaults
    assert foreach["foreach"] and not foreach["fused"]
