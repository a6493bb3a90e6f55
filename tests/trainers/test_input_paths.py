"""The three image-folder input paths: workers (exact), decode on the device, prepared arrays."""

import json

import numpy as np
import pytest
from PIL import Image

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.errors import ConfigError, DataError


@pytest.fixture
def folder(tmp_path):
    """Two classes of distinct, non-square JPEGs in train/ and val/."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c, cls in enumerate(("cat", "dog")):
            (tmp_path / "imgs" / split / cls).mkdir(parents=True)
            for i in range(6):
                pixels = np.clip(rng.normal(60 + 120 * c, 30, (40 + 2 * i, 56, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(tmp_path / "imgs" / split / cls / f"{i}.JPEG", quality=95)
    return tmp_path / "imgs"


def test_rrc_boxes_follow_torchvision_bounds():
    import torch

    from hpstudy.trainers.augment import rrc_boxes

    g = torch.Generator().manual_seed(0)
    heights, widths = torch.full((4000,), 300), torch.full((4000,), 400)
    top, left, h, w = rrc_boxes(heights, widths, g).unbind(1)
    area = h * w / (300 * 400)
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 300).all() and (left + w <= 400).all()
    assert area.min() >= 0.079 and area.max() <= 1.0 and (w / h).min() >= 0.74 and (w / h).max() <= 1.34
    # the same distribution of areas and aspect ratios as torchvision's own RandomResizedCrop draws
    from scipy import stats
    from torchvision.transforms import RandomResizedCrop

    torch.manual_seed(0)
    ref = torch.tensor(
        [RandomResizedCrop.get_params(torch.empty(3, 300, 400), [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(4000)],
        dtype=torch.float64,
    )
    assert stats.ks_2samp(area, ref[:, 2] * ref[:, 3] / (300 * 400)).pvalue > 1e-3
    assert stats.ks_2samp(w / h, ref[:, 3] / ref[:, 2]).pvalue > 1e-3
    assert stats.ks_2samp(top / (300 - h + 1), ref[:, 0] / (300 - ref[:, 2] + 1)).pvalue > 1e-3
    # a very flat image cannot fit most boxes: the centre-crop fallback clamps its ratio to 4/3
    flat = rrc_boxes(torch.tensor([10]), torch.tensor([400]), torch.Generator().manual_seed(1))[0]
    assert flat.tolist() == [0.0, (400 - 13) // 2, 10.0, 13.0]


def test_crop_resize_flip_is_exact_on_whole_boxes_and_mirrors():
    import torch

    from hpstudy.trainers.augment import crop_resize_flip

    x = torch.randint(0, 256, (3, 3, 8, 8), dtype=torch.uint8)
    whole = torch.tensor([[0, 0, 8, 8]] * 3)
    out = crop_resize_flip(x, whole, torch.tensor([False, True, False]), 8)
    assert torch.equal(out[0], x[0]) and torch.equal(out[1], x[1].flip(-1)) and torch.equal(out[2], x[2])
    quarter = crop_resize_flip(x, torch.tensor([[4, 2, 4, 4]] * 3), torch.zeros(3, dtype=torch.bool), 4)
    assert torch.equal(quarter, x[:, :, 4:8, 2:6])


def test_device_auto_augment_changes_some_images_and_is_reproducible():
    import torch

    from hpstudy.trainers.augment import DeviceAutoAugment

    x = torch.randint(0, 256, (64, 3, 16, 16), dtype=torch.uint8)
    aa = DeviceAutoAugment("original")
    a, b = aa(x, torch.Generator().manual_seed(0)), aa(x, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.dtype == torch.uint8 and a.shape == x.shape
    changed = (a != x).flatten(1).any(1).float().mean()
    assert 0.3 < changed < 1.0  # most sub-policies change an image; some draw no operation
    with pytest.raises(Exception, match="auto_augment: bad value 'rand-m9'"):
        DeviceAutoAugment("rand-m9")


def _torchvision_ops(aa, image, ops):
    """An image's drawn operations applied one after another by torchvision's AutoAugment itself."""
    for op, magnitude_idx, negative in ops:
        magnitude = aa._magnitude(op, magnitude_idx, negative, *image.shape[-2:])
        image = aa.aa._apply_image_or_video_transform(
            image, op, magnitude, interpolation=aa.aa.interpolation, fill=aa.aa._fill
        )
    return image


def test_geometric_operations_as_pixel_maps_match_torchvision_exactly():
    import torch

    from hpstudy.trainers.augment import GEOMETRIC_OPS, DeviceAutoAugment

    aa = DeviceAutoAugment("original")
    x = torch.randint(0, 256, (2, 3, 20, 28), dtype=torch.uint8)  # not square: no rot90 shortcut
    geometric = {(op, magnitude_idx) for sub in aa.aa._policies for op, _, magnitude_idx in sub if op in GEOMETRIC_OPS}
    assert {op for op, _ in geometric} >= {"Rotate", "ShearX"}
    for op, magnitude_idx in geometric:
        for negative in (False, True):
            expected = _torchvision_ops(aa, x, [(op, magnitude_idx, negative)])
            assert torch.equal(aa.apply(x, op, magnitude_idx, negative), expected), (op, magnitude_idx, negative)


def test_device_auto_augment_equals_torchvision_image_by_image():
    import torch

    from hpstudy.trainers.augment import DeviceAutoAugment

    aa = DeviceAutoAugment("original")
    x = torch.randint(0, 256, (48, 3, 16, 16), dtype=torch.uint8)
    drawn = aa.draw(len(x), torch.Generator().manual_seed(5))
    out = aa(x, torch.Generator().manual_seed(5))
    for i, ops in enumerate(drawn):
        assert torch.equal(out[i : i + 1], _torchvision_ops(aa, x[i : i + 1], ops)), (i, ops)


@pytest.mark.slow
def test_prepare_writes_once_checksummed_and_reuses(folder, tmp_path):
    """With a pool of decoding processes (spawned: seconds); one worker decodes in this process."""
    import torch

    from hpstudy.trainers.data import load_data
    from hpstudy.trainers.prepared import PreparedData, prepare

    out = str(tmp_path / "prep")
    meta = prepare(str(folder), out, train_size=32, image_size=24, workers=2, progress=None)
    assert not meta["reused"] and meta["n_train"] == 12 and meta["n_val"] == 12
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # written under a temp name, renamed
    again = prepare(str(folder), out, train_size=32, image_size=24, workers=1, progress=None)
    assert again["reused"] and again["sha256"] == meta["sha256"]
    data = PreparedData(out, 24)
    data.verify()
    assert data.train_x.shape == (12, 32, 32, 3) and data.val_x.shape == (12, 24, 24, 3)
    # validation images are exactly what the worker path's eval transform makes
    workers = load_data(DataSpec("imagefolder", path=str(folder), image_size=24), num_workers=0)
    vx, vy = next(iter(workers.val_loader(12)))
    px, py = next(iter(data.val_loader(12)))
    assert torch.equal(px, vx) and torch.equal(py, vy)
    # a damaged array fails its checksum
    with open(f"{out}/train_x.npy", "r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    with pytest.raises(DataError, match="train_x.npy fails its checksum"):
        PreparedData(out, 24).verify()
    with pytest.raises(DataError, match=f"train_x.npy fails its checksum; rebuild the folder: delete {out}"):
        prepare(str(folder), out, train_size=32, image_size=24, workers=2, progress=None)  # no silent reuse
    with pytest.raises(DataError, match="prepared for 24 px"):
        PreparedData(out, 32)


def test_prepared_validation_is_gathered_one_batch_at_a_time_on_every_pass(folder, tmp_path, monkeypatch):
    """The validation loader holds no copy of the set (7.5 GB for ImageNet at 224 px): each pass
    gathers its batches from the memory map as it goes, the same batches every pass."""
    import torch

    from hpstudy.trainers.prepared import PreparedData, prepare

    prepare(str(folder), str(tmp_path / "prep"), train_size=32, image_size=24, workers=1, progress=None)
    data = PreparedData(str(tmp_path / "prep"), 24)
    gathered, gather = [], data.gather
    monkeypatch.setattr(
        data, "gather", lambda index, split="train": (gathered.append(len(index)), gather(index, split))[1]
    )
    loader = data.val_loader(5)
    assert gathered == []  # building it copies nothing
    next(iter(loader))
    assert gathered == [5]  # a batch is gathered when it is reached
    first, second = list(loader), list(loader)
    assert [len(y) for _, y in first] == [5, 5, 2]
    assert all(torch.equal(a, b) for (xa, ya), (xb, yb) in zip(first, second) for a, b in ((xa, xb), (ya, yb)))
    assert torch.equal(torch.cat([x for x, _ in first]), torch.from_numpy(np.array(data.val_x)).permute(0, 3, 1, 2))
    assert not [v for v in vars(loader).values() if isinstance(v, (list, tuple, np.ndarray, torch.Tensor))]


def test_prepared_batches_are_augmented_crops_of_the_stored_squares(folder, tmp_path):
    import torch

    from hpstudy.trainers.data import DeviceBatches
    from hpstudy.trainers.prepared import PreparedData, prepare

    out = str(tmp_path / "prep")
    prepare(str(folder), out, train_size=32, image_size=24, workers=1, progress=None)
    data = PreparedData(out, 24, auto_augment=None)
    view = DeviceBatches(data, torch.device("cpu"), torch.float32)
    x, y = next(view.train(6, torch.Generator().manual_seed(0)))
    assert x.shape == (6, 3, 24, 24) and x.dtype == torch.float32
    # dark class 0 stays dark, bright class 1 stays bright after cropping and normalising
    brightness = x.mean(dim=(1, 2, 3))
    assert (brightness[y == 0].max() < brightness[y == 1].min()).item()


@pytest.mark.parametrize(
    "dataset", [pytest.param("prepared", marks=pytest.mark.slow), "imagefolder-device", "imagefolder"]
)
def test_a_trial_trains_on_each_input_path(dataset, folder, tmp_path):
    from hpstudy.trainers.prepared import prepare
    from hpstudy.trainers.trial import train_trial

    spec = {"name": "imagefolder", "path": str(folder), "image_size": 24}
    extra = {"decode": "workers", "num_workers": 0}
    if dataset == "prepared":
        prepare(str(folder), str(tmp_path / "prep"), 32, 24, 1, progress=None)
        spec = {"name": "prepared", "path": str(tmp_path / "prep"), "image_size": 24}
    elif dataset == "imagefolder-device":
        extra["decode"] = "device"
    row = train_trial(
        dict(
            model="cnn_tiny",
            optimizer="adamw",
            epochs=2,
            lr=3e-3,
            wd=0.0,
            batch_size=4,
            auto_augment="original",
            dataset=spec,
            device="cpu",
            **extra,
        )
    )
    assert row["status"] == "ok" and row["epochs_done"] == 2 and 0 <= row["top1_err"] <= 100
    assert json.loads(row["config_json"])["dataset"]["name"] == spec["name"]


def test_decode_is_left_out_of_the_key_at_auto_only():
    base = dict(model="cnn_tiny", optimizer="sgd", epochs=1, lr=0.1, wd=0.0)
    assert TrialConfig.from_dict(dict(base, decode="auto")).key == TrialConfig.from_dict(base).key
    assert TrialConfig.from_dict(dict(base, decode="device")).key != TrialConfig.from_dict(base).key


@pytest.mark.parametrize(
    "dataset,decode,where", [("prepared", "auto", "dataset prepared"), ("imagefolder", "device", "decode: device")]
)
@pytest.mark.parametrize("policy", ["rand-m9-mstd0.5", "v0"])
def test_a_policy_the_device_pipeline_cannot_run_is_refused_at_validation(dataset, decode, where, policy):
    config = dict(
        model="cnn_tiny",
        optimizer="sgd",
        epochs=1,
        lr=0.1,
        wd=0.0,
        auto_augment=policy,
        decode=decode,
        dataset={"name": dataset, "path": "/nowhere", "image_size": 32},
    )
    with pytest.raises(
        ConfigError, match=f"^auto_augment: bad value '{policy}' with {where}; allowed: null or original"
    ):
        TrialConfig.from_dict(config)
    assert TrialConfig.from_dict(dict(config, auto_augment="original")).auto_augment == "original"


def test_decode_auto_on_cuda_decodes_on_the_device_only_for_a_policy_it_can_run(folder):
    """The same spec trains on CPU and CUDA: a policy the device pipeline cannot run is decoded and
    augmented by the workers (timm's transforms) on CUDA too. Builds no CUDA tensor."""
    import torch

    from hpstudy.trainers.data import LoaderData
    from hpstudy.trainers.device_decode import DeviceDecodeData
    from hpstudy.trainers.loop import data_for

    cfg = lambda policy: TrialConfig.from_dict(
        dict(
            model="cnn_tiny",
            optimizer="sgd",
            epochs=1,
            lr=0.1,
            wd=0.0,
            auto_augment=policy,
            num_workers=0,
            dataset={"name": "imagefolder", "path": str(folder), "image_size": 24},
        )
    )
    cuda = torch.device("cuda")
    assert isinstance(data_for(cfg("original"), cuda), DeviceDecodeData)
    assert isinstance(data_for(cfg(None), cuda), DeviceDecodeData)
    workers = data_for(cfg("rand-m9-mstd0.5"), cuda)
    assert isinstance(workers, LoaderData) and "RandAugment" in repr(workers.train_set.transform)
    assert isinstance(data_for(cfg("original"), torch.device("cpu")), LoaderData)
