"""Input pipelines for image folders, in images/s per CPU core, against plain torchvision on the
same JPEGs and the same training transforms (random-resized crop to 224, flip, normalise):

    python -m bench.data [--images 512] [--size 500x375] [--workers 1,2]

- `torchvision`: ImageFolder + RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize in
  DataLoader workers (the baseline);
- `workers` (path a): hpstudy's loader: timm's transforms in workers, uint8 batches, normalised by
  the trainer (here on the CPU);
- `device_decode` (path b): workers read bytes; decode_jpeg + crops on the "device" (here the CPU:
  on a GPU this work leaves the CPU);
- `prepared` (path c): `hpstudy prepare` once, then per batch a memory gather on the CPU and the
  crops on the device. `prepared_cpu_side` is what the CPU does per image when the device is a GPU:
  the gather and one copy of the batch into pinned memory (`pin_memory`; without CUDA, pinning is
  impossible and a plain `contiguous` copy stands in: `prepared_cpu_side_copy` names the one
  measured); `prepared_on_cpu` runs the device half on the CPU too.

    python -m bench.data --augment [--batches 3] [--device cpu]

prints only the device augmentation's rate on `--device` (default the CPU): crop + flip + AutoAugment
of uint8 batches of 128 squares of 256 px cropped to 224 (`train_augment`), and AutoAugment alone on
224 px batches.

    python -m bench.data --prepared [--images 512] [--size 500x375] [--batch 128] [--device cpu]

prints only the prepared path's rate on `--device`, memory-mapped (`prepared_mapped`: gathered on the
CPU, copied per batch) and resident (`prepared_resident`: the arrays held on the device, gathered
there), without (`plain`) and with AutoAugment (`aa`): one epoch of normalised training batches as
a trainer receives them, after a warm-up epoch.
"""

import argparse
import json
import os
import platform
import tempfile
import time

import numpy as np
import torch
from PIL import Image

from hpstudy.trainers.augment import DeviceAutoAugment, train_augment
from hpstudy.trainers.data import DeviceBatches, LoaderData
from hpstudy.trainers.device_decode import DeviceDecodeData
from hpstudy.trainers.prepared import IMAGENET_MEAN, IMAGENET_STD, PreparedData, prepare
from hpstudy.trainers.prepared_meta import read_meta

BATCH = 32


def make_folder(root: str, n: int, width: int, height: int) -> None:
    """n random-texture JPEGs (quality 90) in train/ and a few in val/, two classes."""
    rng = np.random.default_rng(0)
    for split, count in (("train", n), ("val", 2 * BATCH)):
        for i in range(count):
            folder = os.path.join(root, split, f"c{i % 2}")
            os.makedirs(folder, exist_ok=True)
            noise = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8)
            Image.fromarray(noise).resize((width, height), Image.BILINEAR).save(f"{folder}/{i}.JPEG", quality=90)


def rate(batches, n_images: int) -> float:
    """Images per second of one pass over `batches` (after one warm-up batch)."""
    iterator = iter(batches)
    next(iterator)
    start, seen = time.perf_counter(), 0
    for x, _ in iterator:
        seen += len(x)
    return seen / (time.perf_counter() - start)


def torchvision_loader(root: str, workers: int):
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    return torch.utils.data.DataLoader(
        ImageFolder(os.path.join(root, "train"), tf),
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
    )


def augment_rates(batches: int, device: torch.device, batch: int = 128, size: int = 224) -> dict:
    """Images/s on `device` of `train_augment` (256 px squares to `size`) and of AutoAugment alone."""
    g = torch.Generator().manual_seed(0)
    squares = torch.randint(0, 256, (batch, 3, 256, 256), dtype=torch.uint8, generator=g).to(device)
    crops = squares[:, :, :size, :size].contiguous()
    aa = DeviceAutoAugment()
    steps = {
        "train_augment": lambda: train_augment(squares, size, g, aa),
        "auto_augment": lambda: aa(crops, g),
    }
    wait = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    rates = {}
    for name, step in steps.items():
        step()  # warm-up: the geometric pixel maps are built once per size
        wait()
        start = time.perf_counter()
        for _ in range(batches):
            step()
        wait()
        rates[f"{name}_images_per_s"] = round(batches * batch / (time.perf_counter() - start), 1)
    return {"bench": "augment", "device": str(device), "batch": batch, "size": size, **rates}


def prepared_rates(prep: str, device: torch.device, batch: int) -> dict:
    """Images/s on `device` of an epoch of the prepared folder `prep`, memory-mapped and resident,
    without and with AutoAugment, after a warm-up epoch (AutoAugment's tables, cuDNN)."""
    size = read_meta(prep)["image_size"]
    wait = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    rates = {}
    for policy, augment in ((None, "plain"), ("original", "aa")):
        mapped = PreparedData(prep, size, policy)
        for mode, data in (("mapped", mapped), ("resident", mapped.hold(device, mapped.nbytes))):
            view = DeviceBatches(data, device, torch.float32, channels_last=device.type == "cuda")
            g = torch.Generator().manual_seed(0)
            for _ in view.train(batch, g):
                pass
            wait()
            start, seen = time.perf_counter(), 0
            for x, _ in view.train(batch, g):
                seen += len(x)
            wait()
            rates[f"prepared_{mode}_{augment}_images_per_s"] = round(seen / (time.perf_counter() - start), 1)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--size", default="500x375", help="JPEG width x height (ImageNet's typical size)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--augment", action="store_true", help="only the device augmentation's rate on the CPU")
    parser.add_argument("--prepared", action="store_true", help="only the prepared path's rates on --device")
    parser.add_argument("--batches", type=int, default=3, help="timed batches of --augment")
    parser.add_argument("--batch", type=int, default=128, help="images per batch of --augment and --prepared")
    parser.add_argument("--device", default="cpu", help="where --augment and --prepared run (cpu, cuda)")
    args = parser.parse_args()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads"
    if args.augment:
        rates = augment_rates(args.batches, torch.device(args.device), args.batch)
        print(json.dumps({**rates, "machine": machine}))
        return
    width, height = (int(v) for v in args.size.split("x"))
    if args.prepared:
        with tempfile.TemporaryDirectory() as tmp:
            root, prep = os.path.join(tmp, "imgs"), os.path.join(tmp, "prep")
            make_folder(root, args.images, width, height)
            prepare(root, prep, 256, 224, workers=os.cpu_count() or 1, progress=None)
            rates = prepared_rates(prep, torch.device(args.device), args.batch)
        info = {"bench": "prepared", "device": args.device, "images": args.images, "batch": args.batch}
        print(json.dumps({**info, **rates, "machine": machine}))
        return
    cpu = torch.device("cpu")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root, prep = os.path.join(tmp, "imgs"), os.path.join(tmp, "prep")
        make_folder(root, args.images, width, height)
        start = time.perf_counter()
        prepare(root, prep, 256, 224, workers=1, progress=None)
        results["prepare_images_per_s_1_core"] = round((args.images + 2 * BATCH) / (time.perf_counter() - start), 1)
        for workers in (int(w) for w in args.workers.split(",")):
            torch.set_num_threads(workers)  # the device half of paths b and c gets the same cores
            g = lambda: torch.Generator().manual_seed(0)
            paths = {
                "torchvision": torchvision_loader(root, workers),
                "workers": DeviceBatches(LoaderData(root, 224, workers, None), cpu, torch.float32).train(BATCH, g()),
                "device_decode": DeviceBatches(DeviceDecodeData(root, 224, workers, None), cpu, torch.float32).train(
                    BATCH, g()
                ),
                "prepared_on_cpu": DeviceBatches(PreparedData(prep, 224), cpu, torch.float32).train(BATCH, g()),
            }
            for name, batches in paths.items():
                results[f"{name}_images_per_s_per_core_{workers}w"] = round(rate(batches, args.images) / workers, 1)
        data = PreparedData(prep, 224)
        order = np.random.default_rng(0).permutation(data.num_train)
        torch.set_num_threads(1)
        copy = "pin_memory" if torch.cuda.is_available() else "contiguous"
        start = time.perf_counter()
        for s in range(0, len(order) - BATCH + 1, BATCH):
            x, y = data.gather(order[s : s + BATCH])
            getattr(x, copy)()
        results["prepared_cpu_side_images_per_s_per_core"] = round(
            (len(order) // BATCH * BATCH) / (time.perf_counter() - start), 1
        )
        results["prepared_cpu_side_copy"] = copy
    base = results["torchvision_images_per_s_per_core_1w"]
    results["prepared_cpu_side_vs_torchvision_per_core"] = round(
        results["prepared_cpu_side_images_per_s_per_core"] / base, 1
    )
    print(
        json.dumps(
            {
                "bench": "data",
                "images": args.images,
                "jpeg": args.size,
                "batch": BATCH,
                **results,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            }
        )
    )


if __name__ == "__main__":
    main()
