"""How fast the command line answers: wall time and peak memory of `hpstudy --help`, each subcommand's
`--help` and `--version` in a fresh interpreter (median of --reps), against the raw interpreter start
(`python -c pass`) as the baseline. Prints one JSON object.

    python -m bench.cli [--reps 5]
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "hpstudy --help": ["-m", "hpstudy", "--help"],
    "hpstudy --version": ["-m", "hpstudy", "--version"],
    **{
        f"hpstudy {name} --help": ["-m", "hpstudy", name, "--help"]
        for name in ("run", "status", "report", "query", "compact", "prepare", "suggest")
    },
}


def measure(argv: list) -> dict:
    """Wall seconds and the child's peak RSS (MiB) of one run of `python argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True, capture_output=True)
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # max over the children so far (KiB)
    return {"wall_s": wall, "peak_rss_mib": max(peak, before) / 1024}


def main() -> None:
    """Print {command: {wall_s median, peak_rss_mib, ratio to the baseline}}."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    out = {}
    for name, argv in COMMANDS.items():
        runs = [measure(argv) for _ in range(args.reps)]
        out[name] = {
            "wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
            "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs), 1),
        }
    baseline = out["python -c pass"]["wall_s"]
    for row in out.values():
        row["x_interpreter_start"] = round(row["wall_s"] / baseline, 2)
    print(json.dumps({"reps": args.reps, "python": sys.version.split()[0], "commands": out}, indent=1))


if __name__ == "__main__":
    main()
