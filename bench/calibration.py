"""Measured false-decision rate and power of every verdict rule, at the n users run.

    python -m bench.calibration [--studies 2000] [--markdown FILE] [--rules a,b] [--ns 3,8,24,64]

Prints one JSON object per (rule, n, null, effect) with the share of simulated studies the rule
decided and its Monte-Carlo standard error (`hpstudy.analysis.calibration.measure`); with --markdown,
also writes the tables docs/calibration.md quotes: the false-decision rate under every null each rule
is measured on (continuous, errors on grids of validation images, diverged trials, equal expected
bests with unequal spreads), and the power under the stated effects. The slow test
tests/analysis/test_calibration.py asserts the rates under each rule's own nulls (`HELD`).
"""

import argparse
import json
import os
import platform
import time
from typing import Dict, List

from hpstudy.analysis.calibration import HELD, NULLS, RULES_MEASURED, measure
from hpstudy.analysis.inference import ALPHA

NS = (3, 8, 24, 64)
# the effects behind the power columns: a shift in sd (Welch, bests) or a spread factor (Δ-EDFs)
EFFECTS = {
    "welch": (2.0,),
    "welch_pair": (2.0,),
    "best": (1.0,),
    "best_pair": (1.0,),
    "delta": (2.0, 4.0),
    "delta_oracle": (2.0, 4.0),
    "median_ks": (2.0, 4.0),
    "plain_ks": (2.0,),
    "naive_best": (1.0,),
    "naive_best_pair": (1.0,),
}
# the nulls a rule is measured on: its own (HELD), and for the rules before, the ones that show why
MEASURED = {
    **HELD,
    "best": (*HELD["best"], "equal_best"),
    "best_pair": (*HELD["best_pair"], "unequal", "equal_best"),
    "median_ks": HELD["delta"],
    "plain_ks": ("normal", "shifted", "grid360_between"),
    "naive_best": ("normal", "grid360_between"),
    "naive_best_pair": ("normal", "unequal"),
}


def rows(studies: int, rules: List[str], ns: List[int]):
    """Every measurement of the tables, in order (the ceiling `delta_oracle` is measured for power only)."""
    for rule in rules:
        for n in ns:
            for null in MEASURED.get(rule, ()):
                yield measure(rule, n, studies, null=null)
            for effect in EFFECTS[rule]:
                yield measure(rule, n, studies, effect=effect)


def _cell(r: Dict) -> str:
    return f"{r['rate']:.3f} ± {r['mc_se']:.3f}"


def markdown(results: List[Dict]) -> str:
    """Two tables: false decisions per rule, n and null (each ± its MC se); power per rule, n and effect."""
    nulls = [name for name in NULLS if any(r["null"] == name and not r["effect"] for r in results)]
    size: Dict = {}
    power: Dict = {}
    for r in results:
        if r["effect"]:
            power.setdefault((r["rule"], r["n"]), {})[r["effect"]] = _cell(r)
        else:
            size.setdefault((r["rule"], r["n"]), {})[r["null"]] = _cell(r)
    lines = [
        "| rule | n | " + " | ".join(nulls) + " |",
        "|---|---|" + "---|" * len(nulls),
    ]
    for (rule, n), got in size.items():
        lines.append(f"| {rule} | {n} | " + " | ".join(got.get(k, "–") for k in nulls) + " |")
    effects = sorted({e for got in power.values() for e in got})
    lines += ["", "| rule | n | " + " | ".join(f"power, effect {e:g}" for e in effects) + " |"]
    lines.append("|---|---|" + "---|" * len(effects))
    for (rule, n), got in power.items():
        lines.append(f"| {rule} | {n} | " + " | ".join(got.get(e, "–") for e in effects) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--markdown", help="write the markdown tables to this file")
    parser.add_argument("--rules", default=",".join(RULES_MEASURED), help="comma-separated rules (default: all)")
    parser.add_argument("--ns", default=",".join(map(str, NS)), help="comma-separated n per group")
    args = parser.parse_args()
    rules = args.rules.split(",")
    unknown = [r for r in rules if r not in RULES_MEASURED]
    if unknown:
        parser.error(f"--rules: unknown rule {unknown[0]!r}; allowed: {', '.join(RULES_MEASURED)}")
    started = time.perf_counter()
    results = []
    for result in rows(args.studies, rules, [int(n) for n in args.ns.split(",")]):
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
