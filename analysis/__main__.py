"""python -m analysis report|query: a study's report, or a pandas query over the store.

    python -m analysis report --store results --study demo_digits --out report/ [--metric paper]
    python -m analysis query --store results "model == 'vit_c_tiny' and top1_err < 5"

This is the command-line layer: it loads from the store (study.store) and hands DataFrames to the
analysis library, which itself never reads a store. Exit codes are hpstudy's (study.cli.guarded):
2 for a user's mistake, 3 for a store fault, one `error:` line (and the traceback with --debug).
"""

import argparse
import sys

import pandas as pd

from study.cli import add_debug_arg, add_store_args, guarded, write_report
from study.store import load_trials
from trainers.errors import HpstudyError, exits_on_user_error


class QueryError(HpstudyError):
    """A query expression or column list that pandas cannot use on the trials table."""


def query(store: str, study: str, expr: str, columns: str) -> str:
    """The rows of the trials table matching a DataFrame.query expression, as text."""
    trials = load_trials(store, study)
    try:
        frame = trials.query(expr)[columns.split(",")]
    except Exception as exc:   # pandas raises many types for a bad expression; all are the user's
        raise QueryError(f"query: bad expression or column in {expr!r} / {columns!r} ({exc}); "
                         f"columns: {', '.join(trials.columns)}")
    with pd.option_context("display.max_rows", 200, "display.width", 200):
        return frame.to_string(index=False)


def command(args: argparse.Namespace) -> int:
    """Run the parsed subcommand: write the report, or print the query's rows."""
    if args.command == "report":
        write_report(args.store, args.study, args.out, args.metric)
    else:
        print(query(args.store, args.study, args.expr, args.columns))
    return 0


@exits_on_user_error
def main(argv=None) -> int:
    """Entry point; exit 2 on a bad store, study, path or query, 3 when the store cannot be used."""
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    report = add_store_args(sub.add_parser("report", help="figures, tables and index.html for a study"),
                            study_required=True, out=True)
    parsed = add_store_args(sub.add_parser("query", help="rows of the trials table matching a pandas query"))
    parsed.add_argument("expr", help="a DataFrame.query expression, e.g. \"status == 'diverged'\"")
    parsed.add_argument("--columns", default="study,model,optimizer,epochs,lr,wd,status,top1_err")
    for p in (report, parsed):
        add_debug_arg(p)
    return guarded(command, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
