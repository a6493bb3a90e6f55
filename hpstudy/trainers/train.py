"""Train one trial from the command line and print per-epoch progress and the result row.

    python -m hpstudy.trainers.train --model vit_c_tiny --dataset digits --epochs 10 \
        --optimizer adamw --lr 1e-3 --wd 0.05

Every flag comes from a field of `TrialConfig` (and `DataSpec`, as --data-*): same names, same
defaults, help from the field's doc. Flags left out take the config's default: TrialConfig's, which a
spec's recipe may change (the demo trains at batch 64, this at 128). `hpstudy train --config SPEC` is one
trial with a spec's recipe and dataset, and `hpstudy train --store S --key KEY` replays a stored trial.
"""

import argparse
import dataclasses
import json
import logging
import typing
from typing import Any, Callable, Dict, Optional

from hpstudy.trainers.config import OPTIMIZERS, TrialConfig
from hpstudy.trainers.console import console
from hpstudy.trainers.data_spec import DATASETS, DataSpec
from hpstudy.trainers.errors import exit_with, exits_on_user_error
from hpstudy.trainers.trial import train_trial

# named, not __name__: run as `python -m hpstudy.trainers.train` this module is __main__, outside the hpstudy logger
logger = logging.getLogger("hpstudy.trainers.train")
# --model is any registered name or timm:<name>, which TrialConfig checks (a choice list would refuse timm:)
CHOICES = {"optimizer": OPTIMIZERS, "dataset": DATASETS}


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"bad value {text!r}; allowed: true or false")


def _parser_of(annotation) -> Callable[[str], Any]:
    """A flag parser for a field type; Optional[T] also takes 'none'."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if args else annotation
    parse = _bool if base is bool else base
    if not args:
        return parse
    return lambda text: None if text.lower() == "none" else parse(text)


def _add_field(parser: argparse.ArgumentParser, field: dataclasses.Field, flag: str, hints: Dict) -> None:
    required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    default = "" if required else f" (default: {field.default})"
    parser.add_argument(
        flag,
        dest=flag[2:].replace("-", "_"),
        required=required,
        type=_parser_of(hints[field.name]),
        choices=CHOICES.get(field.name),
        default=argparse.SUPPRESS,
        help=(field.metadata.get("doc", "") + default).replace("%", "%%"),
    )


def build_parser() -> argparse.ArgumentParser:
    """Flags for every TrialConfig field (dataset as --dataset NAME plus --data-* options)."""
    parser = argparse.ArgumentParser(prog="python -m hpstudy.trainers.train", description=__doc__.splitlines()[0])
    hints = typing.get_type_hints(TrialConfig)
    for field in dataclasses.fields(TrialConfig):
        if field.name != "dataset":
            _add_field(parser, field, "--" + field.name.replace("_", "-"), hints)
    parser.add_argument("--dataset", default="digits", choices=DATASETS, help="dataset name (default: digits)")
    data_hints = typing.get_type_hints(DataSpec)
    for field in dataclasses.fields(DataSpec):
        if field.name != "name":
            _add_field(parser, field, "--data-" + field.name.replace("_", "-"), data_hints)
    parser.add_argument("--json", action="store_true", help="print only the result row as JSON")
    return parser


def config_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """The trial config dict the flags describe (flags not given are left to the config's defaults)."""
    values = vars(args).copy()
    values.pop("json")
    data_fields = {f.name for f in dataclasses.fields(DataSpec)}
    dataset = {"name": values.pop("dataset")}
    for name in list(values):
        if name.startswith("data_") and name[5:] in data_fields:
            dataset[name[5:]] = values.pop(name)
    return dict(values, dataset=dataset)


def _show_epoch(epochs: int) -> Callable[[Dict[str, Any]], None]:
    """An on_epoch that logs each epoch's line (this module's logger, at INFO: stdout in a terminal)."""

    def show(epoch: Dict[str, Any]) -> None:
        logger.info(
            "%s",
            f"epoch {epoch['epoch']:>3}/{epochs}  loss {epoch['train_loss']:.4f}  "
            f"train err {epoch['train_top1_err']:6.2f}%  val top-1 {epoch['top1_err']:6.2f}%  "
            f"top-5 {epoch['top5_err']:6.2f}%  lr {epoch['lr']:.3g}  {epoch['seconds']:.1f}s",
        )

    return show


def train_and_show(config: Dict[str, Any], as_json: bool = False) -> Dict[str, Any]:
    """Train one trial of `config` showing each epoch (not when `as_json`); returns the row without its epoch log,
    whose result_text the caller prints."""
    row = train_trial(config, on_epoch=None if as_json else _show_epoch(config["epochs"]))
    row.pop("epoch_log")
    return row


def result_text(row: Dict[str, Any], as_json: bool = False) -> str:
    """What the one-trial trainers print of a trained row: its result_line, or (`as_json`) the row as JSON."""
    return json.dumps(row) if as_json else result_line(row)


def result_line(row: Dict[str, Any]) -> str:
    """A trial row in one line: status, final and best top-1, top-5, wall time and device."""
    best = "-" if row.get("best_top1_err") is None else f"{row['best_top1_err']:.2f}%"
    return (
        f"{row['status']}: top-1 {row['top1_err']:.2f}% (best {best}), "
        f"top-5 {row['top5_err']:.2f}%, {row['wall_s']:.1f}s on {row['device']}"
    )


@exits_on_user_error
def main(argv: Optional[list] = None) -> int:
    """Run one trial; exit 2 on a bad config or data path. The command line's edge: it prints the result and
    shows the library's lines (the epochs) on the terminal (console)."""
    args = build_parser().parse_args(argv)
    with console():
        row = train_and_show(config_from_args(args), args.json)
    print(result_text(row, args.json), flush=True)
    return 0


if __name__ == "__main__":
    exit_with(main)
