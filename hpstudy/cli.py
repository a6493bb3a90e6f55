"""The command line: `hpstudy <command>` and `run_edf.py` (= `hpstudy run`).

The parsers import nothing heavy (no torch, timm, ray, pandas): `--help` and `--version` answer at once,
and a command's own modules (hpstudy.commands) load only after its flags are read. Exit codes: 0 done,
1 some trials failed or were not stored, 2 a user's mistake (one `error:` line naming the field, the
value and what is allowed), 3 the store cannot be used (fix it, rerun to resume), 130/143 stopped by
SIGINT/SIGTERM; `--debug` prints the traceback of an error too.
"""

import argparse
import os
import sys
import traceback
from typing import List, NoReturn, Optional

from hpstudy import __version__
from hpstudy.analysis.metric_names import DEFAULT_METRIC, METRIC_DOCS, METRICS
from hpstudy.trainers.console import console
from hpstudy.trainers.errors import HpstudyError, exit_with, exits_on_user_error, printable

DEFAULT_CONFIG = "demo_digits"
EXIT_STORE_FAULT = 3  # the store is full, unwritable or unreachable: fix it and rerun to resume
QUERY_LANGUAGE = (
    "column names, numbers, strings, True/False/None, == != < <= > >= (chained: 1e-4 < lr < 1e-2), "
    "in / not in [literals], and / or / not (& | ~), + - * / // %% ** on numbers; nothing else (no "
    "calls, attributes or @ names): it is parsed, never run as code"
)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`<prog>: error: <what>; see <prog> --help`), exit 2: as
    every other input error of hpstudy's, not argparse's usage block and a second line."""

    def error(self, message: str) -> NoReturn:
        """Print the one line and exit 2."""
        self.exit(2, f"{self.prog}: error: {printable(message)}; see {self.prog} --help\n")


def _parser(prog: str, description: str, example: str, **kwargs) -> argparse.ArgumentParser:
    """A parser whose help ends with an example."""
    return OneLineParser(
        prog=prog,
        description=description,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


def add_debug_arg(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--debug: print the traceback of an error too (by default: one `error:` line), and what a run keeps out of
    the way (Ray's own processes' output, Tune's traceback of a failed trial: hpstudy's loggers at DEBUG, console)."""
    p.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error too, and Ray's and Tune's own output of a failed trial or node",
    )
    return p


def add_run_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Flags of `run_edf.py` / `hpstudy run`."""
    p.add_argument(
        "--config", default=DEFAULT_CONFIG, help="study spec: a YAML path or a bundled name (default: demo_digits)"
    )
    p.add_argument("--store", default="./results", help="store root: a path or s3://, gs:// URI (default: ./results)")
    p.add_argument(
        "--address", default=None, help="Ray address ('auto' inside a cluster); default: start a local Ray on loopback"
    )
    p.add_argument(
        "--max-concurrent",
        type=int,
        default=None,
        help="cap on trials running at once (default: on a local Ray, as many as its CPUs and GPUs hold)",
    )
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs for a local Ray (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        dest="fresh",
        action="store_false",
        default=False,
        help="skip trials already stored as ok/diverged (default)",
    )
    mode.add_argument(
        "--fresh", dest="fresh", action="store_true", help="delete this study's stored rows first and run every trial"
    )
    p.add_argument(
        "--report", default=None, help="report folder (default: <store>/reports/<study>/, in the store); 'none' to skip"
    )
    p.add_argument(
        "--assume-tflops",
        type=float,
        default=None,
        help="effective TFLOP/s per trial for the dry-run time estimate "
        "(default: 100 with a GPU per trial, 0.02 on CPU)",
    )
    p.add_argument("--progress-interval", type=float, default=10.0, help="seconds between status lines (default: 10)")
    p.add_argument(
        "--compact-every",
        type=int,
        default=1000,
        help="merge the study's per-trial files into one every N stored trials during the run "
        "(it is also done before and after the run); 0: only before and after (default: 1000)",
    )
    p.add_argument(
        "--track",
        action="append",
        default=None,
        metavar="KIND:DIR",
        help="also log every trial the run stores to a tracker in folder DIR: mlflow:DIR (a SQLite database, "
        "no server), tensorboard:DIR (event files) or wandb:DIR (offline runs); repeatable (default: none)",
    )
    add_wait_arg(p, "run")
    p.add_argument(
        "--gpu-memory-gb",
        type=float,
        default=None,
        help="GPU memory for the dry run's memory plan (default: 40, the A100s of cluster.yaml)",
    )
    return add_debug_arg(p)


def add_wait_arg(p: argparse.ArgumentParser, what: str) -> argparse.ArgumentParser:
    """--wait: wait for another driver of the study (its lease in the store) instead of exiting 2."""
    p.add_argument(
        "--wait",
        action="store_true",
        help=f"if another driver (hpstudy run or compact) is writing this study, wait until it ends, then {what} "
        "(default: exit 2 naming it; the lease of a driver that died is taken over once stale, docs/store.md)",
    )
    return p


def add_store_args(p: argparse.ArgumentParser, study_required: bool = False) -> argparse.ArgumentParser:
    """--store and --study of the commands that read a store (and --debug)."""
    p.add_argument("--store", default="./results", help="store root: a path or a URI (default: ./results)")
    p.add_argument("--study", required=study_required, default=None, help="the study (its name in the spec)")
    return add_debug_arg(p)


def add_metric_arg(p: argparse.ArgumentParser, what: str) -> argparse.ArgumentParser:
    """--metric: the error every number is built on."""
    p.add_argument(
        "--metric",
        choices=METRICS,
        default=DEFAULT_METRIC,
        help=f"the error {what} built on: "
        + "; ".join(f"{m}: {doc}" for m, doc in METRIC_DOCS.items())
        + f" (default: {DEFAULT_METRIC})",
    )
    return p


def parser() -> argparse.ArgumentParser:
    """The `hpstudy` parser with every subcommand."""
    main = _parser(
        "hpstudy",
        "Hyperparameter-robustness studies of image classifiers on Ray.",
        "hpstudy run --config demo_digits --store ./results",
    )
    main.add_argument("--version", action="version", version=f"hpstudy {__version__}")
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, example: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help,
            description=help[0].upper() + help[1:] + ".",
            epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    add_run_args(
        command(
            "run",
            "run a study on Ray Tune (same flags as study/run_edf.py)",
            "hpstudy run --config demo_digits --store ./results --dry-run",
        )
    )
    status = add_store_args(
        command(
            "status",
            "what a store holds for a study, and how complete it is",
            "hpstudy status --store ./results --config demo_digits",
        )
    )
    status.add_argument("--config", default=None, help="spec to compare against (how complete)")
    report = add_debug_arg(
        command(
            "report",
            "write a study's report: figures, tables and index.html (several --study: one report over them, "
            "with aggregates across their cells)",
            "hpstudy report --store ./results --study demo_digits --out report/",
        )
    )
    report.add_argument("--store", default="./results", help="store root: a path or a URI (default: ./results)")
    report.add_argument(
        "--study",
        action="append",
        required=True,
        help="the study (its name in the spec); repeat it for one report over several studies",
    )
    report.add_argument(
        "--out",
        default=None,
        help="report folder (default: <store>/reports/<study>/ in the store; several studies: "
        "<store>/reports/<a>+<b>/)",
    )
    add_metric_arg(report, "every number is")
    findings = add_debug_arg(
        command(
            "findings",
            "print the findings of one study, or of one family declared over several (one Holm family; "
            "studies that share trials counted once)",
            "hpstudy findings --store ./results --study repro_digits_lr_wd --study repro_digits_optimizer",
        )
    )
    findings.add_argument("--store", default="./results", help="store root: a path or a URI (default: ./results)")
    findings.add_argument(
        "--study", action="append", required=True, help="a study of the family (repeatable: the family's studies)"
    )
    findings.add_argument("--json", action="store_true", help="print JSON: every finding and the claims table")
    add_metric_arg(findings, "every number is")
    query = add_store_args(
        command(
            "query",
            "print the stored trials that match a filter",
            "hpstudy query --store ./results \"model == 'vit_c_tiny' and top1_err < 5\"",
        )
    )
    query.add_argument("expr", help=f"a filter over the trials' columns: {QUERY_LANGUAGE}")
    columns = "study,model,optimizer,epochs,lr,wd,status,top1_err"
    query.add_argument("--columns", default=columns, help=f"the columns to print, comma-separated (default: {columns})")
    add_wait_arg(
        add_store_args(
            command(
                "compact",
                "merge a study's per-trial files into one",
                "hpstudy compact --store ./results --study demo_digits",
            ),
            study_required=True,
        ),
        "compact",
    )
    prepare = add_debug_arg(
        command(
            "prepare",
            "decode an image folder once into memory-mapped arrays (dataset `prepared`), on this node's local disk",
            "hpstudy prepare --data /data/imagenet --out /local/imagenet-256",
        )
    )
    prepare.add_argument("--data", required=True, help="image folder with train/<class>/ and val/<class>/")
    prepare.add_argument(
        "--out",
        required=True,
        help="output folder (local disk of the node): missing, empty or an earlier preparation (replaced)",
    )
    prepare.add_argument(
        "--train-size", type=int, default=256, help="side of the stored training squares (default: 256)"
    )
    prepare.add_argument(
        "--image-size",
        type=int,
        default=224,
        help="the trials' image size (validation images are stored at it; default: 224)",
    )
    prepare.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count(),
        help=f"decoding processes (default: {os.cpu_count()}, this machine's CPUs)",
    )
    prepare.add_argument(
        "--verify-content",
        action="store_true",
        help="reuse --out only after hashing every source image (by default: when their "
        "names, labels, sizes and modification times match)",
    )
    train = add_debug_arg(
        command(
            "train",
            "train one trial without Ray: a stored trial again (--store, --key), or a trial of a spec (--config, "
            "whose recipe and dataset fill every field not given)",
            "hpstudy train --store ./results --key e86a8740",
        )
    )
    replay = train.add_argument_group("replay a stored trial (its row's config_json, exactly)")
    replay.add_argument("--store", default=None, help="store root: a path or a URI")
    replay.add_argument("--study", default=None, help="the study of the trial (default: any study of the store)")
    replay.add_argument("--key", default=None, help="the trial's key, or a prefix of it that only it starts with")
    one = train.add_argument_group("a trial of a spec (every flag not given: the spec's first)")
    one.add_argument(
        "--config", default=None, help=f"study spec: a YAML path or a bundled name (default: {DEFAULT_CONFIG})"
    )
    train.set_defaults(default_config=DEFAULT_CONFIG)
    one.add_argument("--model", default=None, help="a model of the spec")
    one.add_argument("--optimizer", default=None, help="an optimizer of the spec")
    one.add_argument("--epochs", type=int, default=None, help="a training length of the spec")
    one.add_argument("--lr", type=float, default=None, help="learning rate (default: the cell's first sample)")
    one.add_argument("--wd", type=float, default=None, help="weight decay (default: the cell's first sample)")
    one.add_argument("--seed", type=int, default=None, help="seed (default: the spec's first)")
    train.add_argument("--device", default=None, help="train on this device instead: auto, cpu, cuda or cuda:N")
    train.add_argument("--json", action="store_true", help="print only the result row as JSON")
    suggest = add_store_args(
        command(
            "suggest",
            "spec lines (YAML) of a fixed lr/wd per model and length, from a stored lr/wd study's good ranges",
            "hpstudy suggest --store ./results --study repro_digits_lr_wd",
        ),
        study_required=True,
    )
    suggest.add_argument("--model", action="append", default=None, help="only this model (repeatable)")
    suggest.add_argument("--optimizer", action="append", default=None, help="only this optimizer (repeatable)")
    add_metric_arg(suggest, "the good ranges are")
    importance = add_store_args(
        command(
            "importance",
            "fANOVA importance of the sampled hyperparameters per cell, with bootstrap intervals and the forest "
            "seed's own effect (a table; with --out, its interval figure)",
            "hpstudy importance --store ./results --study repro_digits_lr_wd --out importance/",
        ),
        study_required=True,
    )
    # defaults: hpstudy.analysis.stats.IMPORTANCE_RESAMPLES and IMPORTANCE_SEEDS (not imported here: --help stays light)
    importance.add_argument("--resamples", type=int, default=None, help="bootstrap refits per cell (default: 20)")
    importance.add_argument("--seeds", type=int, default=None, help="forest seeds on all trials per cell (default: 5)")
    importance.add_argument("--out", default=None, help="a folder for the interval figure (pdf, svg, png, csv, json)")
    importance.add_argument("--json", action="store_true", help="print the table as JSON records")
    add_metric_arg(importance, "the importances are")
    return main


def guarded(args: argparse.Namespace) -> int:
    """Run the parsed command: a store fault prints one `error:` line and returns EXIT_STORE_FAULT (3); a
    user's error goes on to exits_on_user_error (2); with --debug both print their traceback first. What the
    library logs is shown on the terminal for the command (console: INFO on stdout, warnings on stderr; with
    --debug its DEBUG lines too, on stderr)."""
    from hpstudy.commands import COMMANDS
    from hpstudy.study.store.layout import StoreFault

    try:
        with console(args.debug):
            return COMMANDS[args.command](args)
    except HpstudyError as exc:
        if args.debug:
            traceback.print_exc()
        if not isinstance(exc, StoreFault):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_STORE_FAULT


def hpstudy_command() -> NoReturn:
    """The `hpstudy` console script and `python -m hpstudy`."""
    exit_with(hpstudy_main)


@exits_on_user_error
def hpstudy_main(argv: Optional[List[str]] = None) -> int:
    """`hpstudy` on `argv` (the command line's when None); returns the exit code."""
    return guarded(parser().parse_args(argv))


@exits_on_user_error
def run_edf_main(argv: Optional[List[str]] = None) -> int:
    """Entry point of study/run_edf.py and `python -m hpstudy.study.run_edf` (= `hpstudy run`)."""
    run_edf = add_run_args(
        _parser(
            "run_edf.py",
            "Run an hpstudy study on Ray Tune.",
            "python study/run_edf.py --config demo_digits --store ./results",
        )
    )
    return guarded(run_edf.parse_args(argv, namespace=argparse.Namespace(command="run")))
