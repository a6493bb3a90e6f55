"""python -m analysis report|query: a study's report, or a pandas query over the store.

    python -m analysis report --store results --study demo_digits --out report/
    python -m analysis query --store results "model == 'vit_c_tiny' and top1_err < 5"
"""

import argparse
import sys

import pandas as pd

from study.cli import add_store_args


def main(argv=None) -> int:
    """Entry point; exit 2 on a bad store or study."""
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_store_args(sub.add_parser("report", help="figures, tables and index.html for a study"),
                   study_required=True, out=True)
    query = add_store_args(sub.add_parser("query", help="rows of the trials table matching a pandas query"))
    query.add_argument("expr", help="a DataFrame.query expression, e.g. \"status == 'diverged'\"")
    query.add_argument("--columns", default="study,model,optimizer,epochs,lr,wd,status,top1_err")
    args = parser.parse_args(argv)
    from study.store import load_trials
    try:
        if args.command == "report":
            from study.cli import write_report
            write_report(args.store, args.study, args.out)
            return 0
        frame = load_trials(args.store, args.study).query(args.expr)
        with pd.option_context("display.max_rows", 200, "display.width", 200):
            print(frame[args.columns.split(",")].to_string(index=False))
        return 0
    except (ValueError, KeyError, pd.errors.UndefinedVariableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
