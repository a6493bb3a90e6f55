"""python -m hpstudy.analysis report|query: a study's report, or the stored trials that match a filter.

    python -m hpstudy.analysis report --store results --study demo_digits --out report/ [--metric paper]
    python -m hpstudy.analysis query --store results "model == 'vit_c_tiny' and top1_err < 5"

This is the command-line layer: it loads from the store (hpstudy.study.store) and hands DataFrames to the
analysis library, which itself never reads a store. Exit codes are hpstudy's (hpstudy.study.cli.guarded):
2 for a user's mistake, 3 for a store fault, one `error:` line (and the traceback with --debug).
"""

import argparse
import sys
from typing import Optional

import pandas as pd
import pyarrow.fs as pafs

from hpstudy.analysis.query import MAX_LENGTH, QueryError, filter_rows
from hpstudy.study.cli import add_debug_arg, add_store_args, guarded, write_report
from hpstudy.study.store import StoreError, load_trials, open_root, store_io
from hpstudy.trainers.errors import exits_on_user_error, shown


def _stored_trials(store: str, study: Optional[str]) -> pd.DataFrame:
    """The store's trials (of `study` when given); StoreError if there is no store, or no row of the study."""
    fs, base = open_root(store)
    with store_io(f"read {store}"):
        if fs.get_file_info(f"{base}/trials").type == pafs.FileType.NotFound:
            raise StoreError(f"--store: no store at {shown(store)} ({base}/trials does not exist)")
    trials = load_trials(store, study)
    if study is not None and trials.empty:
        studies = sorted(set(load_trials(store, columns=["study"])["study"]))
        raise StoreError(f"--study: no trials of study {shown(study)} in store {shown(store)}; "
                         f"studies stored: {shown(studies)}")
    return trials


def query(store: str, study: Optional[str], expr: str, columns: str) -> str:
    """The `columns` of the stored trials that match the filter `expr` (hpstudy.analysis.query), as text."""
    trials = _stored_trials(store, study)
    wanted = columns.split(",")
    unknown = [name for name in wanted if name not in trials.columns]
    if unknown:
        raise QueryError(f"--columns: unknown column {shown(unknown[0])}; columns: {', '.join(trials.columns)}")
    rows = filter_rows(trials, expr)[wanted]
    if rows.empty:
        return f"no rows match {shown(expr)} (of {len(trials)} trials)"
    with pd.option_context("display.max_rows", 200, "display.width", 200):
        return rows.to_string(index=False)


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
    parser = argparse.ArgumentParser(prog="python -m hpstudy.analysis", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    report = add_store_args(sub.add_parser("report", help="figures, tables and index.html for a study"),
                            study_required=True, out=True)
    parsed = add_store_args(sub.add_parser("query", help="rows of the trials table that match a filter"))
    parsed.add_argument("expr", help="a filter over the trials' columns, e.g. \"model == 'vit_c_tiny' and "
                        "top1_err < 5\": column names, numbers, strings, True/False/None, == != < <= > >= "
                        "(chained: 1e-4 < lr < 1e-2), in / not in [literals], and / or / not (& | ~), "
                        "+ - * / // %% ** on numbers; nothing else (no calls, attributes or @ names): it is "
                        f"parsed, never run as code; at most {MAX_LENGTH} characters")
    parsed.add_argument("--columns", default="study,model,optimizer,epochs,lr,wd,status,top1_err",
                        help="the columns to print, comma-separated")
    for p in (report, parsed):
        add_debug_arg(p)
    return guarded(command, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
