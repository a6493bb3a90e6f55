"""Measured false-decision rate and power of every verdict rule, at the n users run.

    python -m bench.calibration [--studies 2000] [--markdown docs/calibration.md]

Prints one JSON object per (rule, n, null distribution, effect) with the share of simulated studies
the rule decided and its Monte-Carlo standard error (`hpstudy.analysis.calibration.measure`); with
--markdown, also writes the table docs/calibration.md quotes. The rules and effects are stated in
that table; the slow test tests/analysis/test_calibration.py asserts the rates without an effect.
"""

import argparse
import json
import os
import platform
import time

from hpstudy.analysis.calibration import RULES_MEASURED, measure
from hpstudy.analysis.inference import ALPHA

NS = (3, 8, 24, 64)
EFFECT = {"welch": 2.0, "welch_pair": 2.0, "best": 1.0, "best_pair": 1.0, "ks": 2.0, "plain_ks": 2.0}
EFFECT.update(naive_best=1.0, naive_best_pair=1.0)
SKEWED = ("welch", "welch_pair", "best", "best_pair", "ks")
SHIFTED = ("ks", "plain_ks")  # the Δ-EDF null: one shape, the models at different locations
UNEQUAL = ("welch", "welch_pair", "best_pair", "naive_best_pair")  # nulls with unequal spreads


def rows(studies: int):
    """Every measurement of the table, in order."""
    for rule in RULES_MEASURED:
        for n in NS:
            yield measure(rule, n, studies)
            for null, rules in (("skewed", SKEWED), ("shifted", SHIFTED), ("unequal", UNEQUAL)):
                if rule in rules:
                    yield measure(rule, n, studies, null=null)
            yield measure(rule, n, studies, effect=EFFECT[rule])


def markdown(results) -> str:
    """The table: one row per rule and n, size (normal and skewed null) and power, each ± its MC se."""
    cells = {}
    for r in results:
        kind = "power" if r["effect"] else r["null"]
        cells.setdefault((r["rule"], r["n"]), {})[kind] = f"{r['rate']:.3f} ± {r['mc_se']:.3f}"
    lines = [
        "| rule | n per group | false decisions: normal | skewed | shifted | unequal sd | power |",
        "|---|---|---|---|---|---|---|",
    ]
    for (rule, n), got in cells.items():
        nulls = " | ".join(got.get(k, "–") for k in ("normal", "skewed", "shifted", "unequal"))
        lines.append(f"| {rule} | {n} | {nulls} | {got.get('power', '–')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--markdown", help="write the markdown table to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    results = []
    for result in rows(args.studies):
        results.append(result)
        print(json.dumps({"bench": "calibration", "alpha": ALPHA, **result}), flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(results) + "\n")
    print(
        json.dumps(
            {
                "bench": "calibration",
                "total_s": round(time.perf_counter() - started, 1),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            }
        )
    )


if __name__ == "__main__":
    main()
