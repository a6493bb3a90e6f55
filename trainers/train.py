"""Train one trial from the command line and print per-epoch progress and the result row.

    python -m trainers.train --model vit_c_tiny --dataset digits --epochs 10 \
        --optimizer adamw --lr 1e-3 --wd 0.05
"""

import argparse
import json
import sys

from trainers.config import ConfigError, TrialConfig
from trainers.data import DATASETS, DataError
from trainers.models import list_models
from trainers.trial import train_trial


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line flags for one trial; recipe flags default to TrialConfig's defaults."""
    p = argparse.ArgumentParser(prog="python -m trainers.train", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=list_models())
    p.add_argument("--dataset", default="digits", choices=DATASETS)
    p.add_argument("--data-path", default=None, help="folder of cifar/imagefolder data")
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--wd", type=float, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--reference-batch-size", type=int, default=None)
    p.add_argument("--warmup-epochs", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--mixup", type=float, default=0.0)
    p.add_argument("--cutmix", type=float, default=0.0)
    p.add_argument("--ema-decay", type=float, default=None)
    p.add_argument("--grad-clip", type=float, default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print only the result row as JSON")
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> dict:
    """The trial config dict the flags describe."""
    dataset = {"name": args.dataset, "path": args.data_path, "image_size": args.image_size}
    return {
        "model": args.model, "dataset": dataset, "optimizer": args.optimizer, "epochs": args.epochs,
        "lr": args.lr, "wd": args.wd, "seed": args.seed, "batch_size": args.batch_size,
        "reference_batch_size": args.reference_batch_size, "warmup_epochs": args.warmup_epochs,
        "label_smoothing": args.label_smoothing, "mixup": args.mixup, "cutmix": args.cutmix,
        "ema_decay": args.ema_decay, "grad_clip": args.grad_clip, "device": args.device,
    }


def main(argv=None) -> int:
    """Run one trial; exit 2 on a bad config or data path."""
    args = parse_args(argv)
    config = config_from_args(args)
    try:
        TrialConfig.from_dict(config)
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def show(epoch):
        if not args.json:
            print(f"epoch {epoch['epoch']:>3}/{args.epochs}  loss {epoch['train_loss']:.4f}  "
                  f"train err {epoch['train_top1_err']:6.2f}%  val top-1 {epoch['top1_err']:6.2f}%  "
                  f"top-5 {epoch['top5_err']:6.2f}%  lr {epoch['lr']:.3g}  {epoch['seconds']:.1f}s",
                  flush=True)

    try:
        row = train_trial(config, on_epoch=show)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    row.pop("epoch_log")
    if args.json:
        print(json.dumps(row))
    else:
        print(f"{row['status']}: top-1 {row['top1_err']:.2f}% (best {row['best_top1_err']:.2f}%), "
              f"top-5 {row['top5_err']:.2f}%, {row['wall_s']:.1f}s on {row['device']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
