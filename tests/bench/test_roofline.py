import json
import subprocess
import sys

import pytest

from hpstudy.trainers.zoo import get_spec, list_models


@pytest.fixture(scope="module")
def roofline():
    """bench/roofline.py, imported as a test needs it: it imports torch and the trainers' models."""
    from bench import roofline

    return roofline


def test_flops_are_torch_counters_on_a_model_without_grouped_convolutions(roofline):
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from hpstudy.trainers.models import build_model, set_fused_attention

    batch, size = 2, get_spec("vit_c_tiny").image_size
    model = set_fused_attention(build_model("vit_c_tiny", 1000, size), False)
    with FlopCounterMode(display=False) as torch_count:  # a real forward and backward on the CPU
        F.cross_entropy(model(torch.randn(batch, 3, size, size)), torch.zeros(batch, dtype=torch.long)).backward()
    assert roofline.step_counts("vit_c_tiny", batch)["train_flops"] == torch_count.get_total_flops()


@pytest.mark.parametrize("groups", [1, 8, 32])
def test_a_convolutions_backward_counts_twice_its_forward_whatever_its_groups(groups, roofline):
    import torch

    conv = torch.nn.Conv2d(32, 64, 3, groups=groups, bias=False)
    x = torch.randn(2, 32, 8, 8, requires_grad=True)
    with roofline.flop_count_mode() as forward:
        out = conv(x)
    with roofline.flop_count_mode() as backward:  # the input's gradient and the weight's: one forward each
        out.sum().backward()
    assert forward.get_total_flops() == 2 * 2 * 64 * (32 // groups) * 9 * 6 * 6
    assert backward.get_total_flops() == 2 * forward.get_total_flops()


def test_bytes_are_each_touched_tensors_size_and_views_move_none(roofline):
    import torch

    a, b = torch.zeros(3, 4), torch.zeros(4, 5)
    with roofline.ByteCounter() as matmul:
        a @ b
    assert matmul.bytes == 4 * (3 * 4 + 4 * 5 + 3 * 5)
    with roofline.ByteCounter() as views:
        a.view(2, 6).t(), a[:1]
    assert views.bytes == 0
    with roofline.ByteCounter() as inplace:
        a.add_(a)  # one tensor, read and written: counted once
    assert inplace.bytes == 4 * 12


def test_bounds_are_ordered_and_the_parameters_alone_fit_below_them(roofline):
    row = roofline.roofline("cnn_tiny", 8, roofline.GPUS["H200"])
    assert row["bytes_no_fusion"] > row["bytes_ideal_fusion"] > 4 * row["params"]
    assert row["ceiling_images_per_s_no_fusion"] <= row["ceiling_images_per_s_ideal_fusion"]
    compute = roofline.GPUS["H200"].bf16_tflops * 1e12 / row["train_flops_per_image"]
    assert row["ceiling_images_per_s_ideal_fusion"] <= round(compute)


def test_an_unknown_model_is_refused(capsys, roofline):
    with pytest.raises(SystemExit) as stop:
        roofline.main(["--models", "vit_c_tiny,no_such_model"])
    assert stop.value.code == 2
    assert "--models: unknown no_such_model; allowed:" in capsys.readouterr().err


@pytest.mark.slow
def test_the_json_has_every_registered_model_and_size_class():
    done = subprocess.run(
        [sys.executable, "-m", "bench.roofline", "--batch", "32"], capture_output=True, text=True, timeout=300
    )
    result = json.loads(done.stdout)
    assert set(result["models"]) == set(list_models())
    assert set(result["by_size"]) == {get_spec(name).size for name in list_models()}
    for row in result["models"].values():
        assert 0 < row["ceiling_images_per_s_no_fusion"] <= row["ceiling_images_per_s_ideal_fusion"]
