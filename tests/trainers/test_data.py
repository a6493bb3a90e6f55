import pickle

import numpy as np
import pytest
from PIL import Image

from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.errors import DataError


def _write_fake_cifar10(folder, n_per_batch=20):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {
            b"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
            b"labels": rng.integers(0, 10, n_per_batch).tolist(),
            b"batch_label": name.encode(),
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    return batch


def test_digits_is_a_fixed_stratified_split():
    import torch

    from hpstudy.trainers.data import load_data

    data = load_data(DataSpec("digits", image_size=16))
    assert data.num_train + len(data.val_y) == 1797
    assert data.train_x.shape[1:] == (3, 16, 16) and data.train_x.dtype == torch.uint8
    counts = torch.bincount(data.val_y, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # ~20% of each ~180-image class
    again = load_data.__wrapped__(DataSpec("digits", image_size=16))
    assert torch.equal(again.val_y, data.val_y) and torch.equal(again.train_x, data.train_x)


def test_cifar10_reads_the_real_pickle_format(tmp_path):
    import torch

    from hpstudy.trainers.data import DeviceBatches, load_data

    last = _write_fake_cifar10(tmp_path / "cifar-10-batches-py")
    data = load_data(DataSpec("cifar10", path=str(tmp_path)))
    assert data.num_train == 100 and len(data.val_y) == 20 and data.num_classes == 10
    expected = torch.from_numpy(last[b"data"].reshape(-1, 3, 32, 32))
    assert torch.equal(data.val_x, expected)
    assert data.val_y.tolist() == last[b"labels"]
    x, y = next(DeviceBatches(data, torch.device("cpu"), torch.float32).train(8, torch.Generator().manual_seed(0)))
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (8,)


@pytest.mark.parametrize(
    "name,layout",
    [("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python"), ("imagefolder", "train/<class>")],
)
def test_missing_path_names_path_and_layout(name, layout, tmp_path):
    from hpstudy.trainers.data import load_data

    missing = tmp_path / "nowhere"
    with pytest.raises(DataError) as info:
        load_data(DataSpec(name, path=str(missing)))
    assert str(missing) in str(info.value) and layout in str(info.value)


def test_cifar_folder_missing_a_batch_is_named(tmp_path):
    from hpstudy.trainers.data import load_data

    _write_fake_cifar10(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DataError, match=r"lacks \['test_batch'\]"):
        load_data(DataSpec("cifar10", path=str(tmp_path)))


def test_corrupt_cifar_batch_is_a_clear_error(tmp_path):
    from hpstudy.trainers.data import load_data

    _write_fake_cifar10(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3"):
        load_data(DataSpec("cifar10", path=str(tmp_path)))


def test_imagefolder_loads_with_paper_transforms(tmp_path):
    import torch

    from hpstudy.trainers.data import load_data

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for cls in ("cat", "dog"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / split / cls / f"{i}.JPEG")
    data = load_data(DataSpec("imagefolder", path=str(tmp_path), image_size=32), num_workers=0)
    assert data.num_classes == 2 and data.num_train == 8
    x, y = next(iter(data.train_loader(4, torch.Generator().manual_seed(0))))
    assert x.shape == (4, 3, 32, 32)
    vx, _ = next(iter(data.val_loader(8)))
    assert vx.shape == (8, 3, 32, 32)
    assert x.dtype == torch.uint8 and vx.dtype == torch.uint8  # workers send uint8, not float32
    assert load_data(DataSpec("imagefolder", path=str(tmp_path), image_size=32), num_workers=0) is data


def test_synthetic_is_seeded():
    import torch

    from hpstudy.trainers.data import load_data

    a = load_data.__wrapped__(DataSpec("synthetic", num_classes=5, n_train=40, n_val=10, seed=3))
    b = load_data.__wrapped__(DataSpec("synthetic", num_classes=5, n_train=40, n_val=10, seed=3))
    c = load_data.__wrapped__(DataSpec("synthetic", num_classes=5, n_train=40, n_val=10, seed=4))
    assert torch.equal(a.train_x, b.train_x) and not torch.equal(a.train_x, c.train_x)
    assert a.num_classes == 5 and a.train_y.max() < 5


def test_unknown_dataset_and_keys_are_rejected():
    with pytest.raises(DataError, match="unknown dataset 'mnist'"):
        DataSpec.from_config("mnist")
    with pytest.raises(DataError, match=r"unknown key\(s\) \['img_size'\]"):
        DataSpec.from_config({"name": "digits", "img_size": 8})


def test_random_crop_takes_the_window_at_each_samples_offset():
    import torch
    import torch.nn.functional as F

    from hpstudy.trainers.data import random_crop

    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).view(2, 1, 4, 4)
    out = random_crop(x, 1, torch.tensor([0, 2]), torch.tensor([2, 1]))
    padded = F.pad(x, (1, 1, 1, 1))
    assert torch.equal(out[0], padded[0, :, 0:4, 2:6]) and torch.equal(out[1], padded[1, :, 2:6, 1:5])


def test_epochs_flip_each_sample_independently_and_reproducibly():
    import torch

    from hpstudy.trainers.data import TensorData, TensorEpochs

    n = 64
    x = torch.randint(0, 256, (n, 3, 6, 6), dtype=torch.uint8)
    y = torch.arange(n)  # the label names the image
    data = TensorData(x, y, x[:4], y[:4], n, (0.5,) * 3, (0.25,) * 3, flip=True)
    batches = list(TensorEpochs(data, 16, torch.Generator().manual_seed(0)))
    assert len(batches) == 4 and sorted(torch.cat([b[1] for b in batches]).tolist()) == list(range(n))
    flipped = []
    for xb, yb in batches:
        for image, label in zip(xb, yb):
            same, mirrored = torch.equal(image, x[label]), torch.equal(image, x[label].flip(2))
            assert same or mirrored
            flipped.append(mirrored and not same)
    assert 16 < sum(flipped) < 48  # about half, drawn per sample
    again = list(TensorEpochs(data, 16, torch.Generator().manual_seed(0)))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))


def test_device_batches_normalise_on_the_device_and_leave_the_data_alone():
    import torch

    from hpstudy.trainers.data import DeviceBatches, TensorData

    x = torch.randint(0, 256, (32, 3, 8, 8), dtype=torch.uint8)
    y = torch.arange(32)  # the label names the image
    data = TensorData(x, y, x[:8], y[:8], 32, (0.4, 0.5, 0.6), (0.2, 0.25, 0.3))
    view = DeviceBatches(data, torch.device("cpu"), torch.float64)
    xb, yb = next(view.train(8, torch.Generator().manual_seed(0)))
    mean = torch.tensor(data.mean, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(data.std, dtype=torch.float64).view(1, -1, 1, 1)
    assert xb.dtype == torch.float64
    torch.testing.assert_close(xb, (x[yb].double() / 255 - mean) / std)
    assert torch.equal(data.train_x, x) and data.train_x.dtype == torch.uint8


def test_moving_cached_data_to_a_device_leaves_the_cached_load_alone():
    """Trials reusing a Ray actor share one load per process: moving it to a trial's device gives a
    new object (the meta device stands in for a GPU) and never changes the cached one."""
    import torch

    from hpstudy.trainers.data import load_data

    spec = DataSpec("synthetic", num_classes=3, n_train=8, n_val=4, image_size=4)
    data = load_data(spec)
    pixels = data.train_x.clone()
    moved = data.to("meta")
    assert moved is not data and {t.device.type for t in (moved.train_x, moved.train_y, moved.val_x, moved.val_y)} == {
        "meta"
    }
    assert (moved.mean, moved.std, moved.num_classes) == (data.mean, data.std, data.num_classes)
    assert load_data(spec) is data and data.train_x.device.type == "cpu" and torch.equal(data.train_x, pixels)
    assert data.to("cpu") is data  # already there: nothing to copy


class _Hostile:
    """What a crafted pickle does to run code: a global (builtins.eval) called as it loads."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return eval, (f"open({str(self.marker)!r}, 'w')",)


def test_a_cifar_batch_naming_a_global_it_does_not_need_is_refused_by_name_before_it_runs(tmp_path):
    from hpstudy.trainers.data import load_data

    _write_fake_cifar10(tmp_path / "cifar-10-batches-py")
    marker = tmp_path / "ran"
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(pickle.dumps({b"data": _Hostile(marker)}))
    with pytest.raises(DataError, match=r"data_batch_2: .*\(refused global 'builtins\.eval': a CIFAR batch holds only"):
        load_data.__wrapped__(DataSpec("cifar10", path=str(tmp_path)))
    assert not marker.exists()


def test_random_crop_stays_on_the_batchs_device():
    """The meta device stands in for a GPU: every index is made where the images are."""
    import torch

    from hpstudy.trainers.data import random_crop

    x = torch.zeros(2, 3, 4, 4, device="meta")
    offsets = torch.tensor([0, 2], device="meta")
    assert random_crop(x, 1, offsets, offsets).device.type == "meta"


def test_device_batches_ask_the_dataset_for_training_batches_on_the_training_device():
    import torch

    from hpstudy.trainers.data import DeviceBatches, TensorData

    class _DeliveredOnTheDevice(TensorData):
        """Tensor data whose loaders record the device they are asked to deliver on, as the datasets that
        augment or decode on the device (prepared, device-decoded) deliver their batches there."""

        def train_loader(self, batch_size, generator, pin_memory=False, device=None):
            self.asked = device
            return super().train_loader(batch_size, generator, pin_memory, device)

    x = torch.zeros(8, 3, 4, 4, dtype=torch.uint8)
    data = _DeliveredOnTheDevice(x, torch.arange(8), x, torch.arange(8), 8, (0.5,) * 3, (0.5,) * 3)
    xb, _ = next(DeviceBatches(data, torch.device("meta"), torch.float32).train(4, torch.Generator().manual_seed(0)))
    assert data.asked == torch.device("meta") and xb.device.type == "meta"
