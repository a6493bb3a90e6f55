"""The GPU code paths on a real CUDA device: bf16 autocast, channels_last, pinned host batches and
GPU shares through a real local Ray. Skipped without CUDA (the tests hide it unless
CUDA_VISIBLE_DEVICES is set: bench/gpu_check.sh runs this file with it set)."""

import time

import pytest

from tests.helpers import tiny_trainer

CUDA_DATA = {"name": "synthetic", "image_size": 32, "n_train": 64, "n_val": 32, "num_classes": 4}


@pytest.fixture(autouse=True)
def cuda():
    """Skips each test here where torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def test_a_cuda_trial_trains_in_bf16_autocast_and_keeps_fp32_weights():
    import torch

    trainer = tiny_trainer(device="cuda", model="vit_c_tiny", dataset=CUDA_DATA, batch_size=16)
    seen = []
    trainer.model.head.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    stats = trainer.train_epoch()
    assert trainer.amp and seen and set(seen) == {torch.bfloat16}
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert torch.isfinite(torch.tensor(stats["train_loss"]))


def test_amp_off_on_cuda_trains_in_fp32():
    import torch

    trainer = tiny_trainer(device="cuda", model="vit_c_tiny", dataset=CUDA_DATA, batch_size=16, amp=False)
    seen = []
    trainer.model.head.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    trainer.train_epoch()
    assert seen and set(seen) == {torch.float32}


def test_cuda_batches_and_convolution_weights_are_channels_last():
    import torch

    trainer = tiny_trainer(device="cuda", dataset=CUDA_DATA, batch_size=16)
    x, y = next(iter(trainer.batches.train(16, torch.Generator().manual_seed(0))))
    assert x.is_cuda and y.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
    convs = [m.weight for m in trainer.model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)
    assert trainer.train_epoch()["train_loss"] > 0


def test_prepared_batches_are_pinned_on_the_host_before_the_copy(tmp_path, monkeypatch):
    import torch

    from hpstudy.trainers.data import DeviceBatches
    from hpstudy.trainers.prepared import PreparedData, prepare
    from tests.helpers import image_folder

    root = image_folder(tmp_path / "imgs", n=8)
    out = str(tmp_path / "prepared")
    prepare(root, out, train_size=32, image_size=24, workers=1, progress=None)
    pinned = []
    pin_memory = torch.Tensor.pin_memory

    def spy(tensor, *args, **kwargs):
        copy = pin_memory(tensor, *args, **kwargs)
        pinned.append((tensor.dim(), tensor.dtype, copy.is_pinned()))
        return copy

    monkeypatch.setattr(torch.Tensor, "pin_memory", spy)
    view = DeviceBatches(PreparedData(out, 24), torch.device("cuda"), torch.float32)
    x, y = next(iter(view.train(4, torch.Generator().manual_seed(0))))
    assert x.is_cuda and y.is_cuda and x.shape == (4, 3, 24, 24)
    assert (4, torch.uint8, True) in pinned and (1, torch.int64, True) in pinned  # images and labels


def test_gpu_shares_through_ray_no_gpu_for_gpu_0_and_quarters_four_at_once_each_capped():
    import ray
    import torch

    from hpstudy.study.trainable import use_assigned_gpus

    ray.init(address="local", num_cpus=4, num_gpus=1, include_dashboard=False, logging_level="WARNING")
    try:

        @ray.remote(num_gpus=0, max_calls=1)  # its worker, CUDA hidden, exits after it
        def no_share():
            use_assigned_gpus()
            return torch.cuda.is_available()

        @ray.remote(num_gpus=0.25)
        def share():
            use_assigned_gpus()
            start = time.time()
            total = torch.cuda.get_device_properties(0).total_memory
            small = torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")
            del small
            try:
                torch.empty(int(total * 0.3), dtype=torch.uint8, device="cuda")
                over = True
            except torch.OutOfMemoryError:
                over = False
            time.sleep(3)
            return start, time.time(), over

        sees_gpu = ray.get(no_share.remote())
        spans = ray.get([share.remote() for _ in range(4)])
    finally:
        ray.shutdown()
    assert sees_gpu is False
    assert not any(over for _, _, over in spans)  # 30% of the GPU is over a quarter share
    assert max(start for start, _, _ in spans) < min(end for _, end, _ in spans)  # all four at once
