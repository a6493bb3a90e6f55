"""One command of bench.scale in a fresh process, under a memory cap; prints its JSON (bench.scale reads it).

    python -m bench.scale_child {status,query,load_study,report,compact} STORE OUT LIMIT_GB

A module of its own so that the process imports what the command imports and nothing of the bench's planner:
its wall is what a user of that command waits for.
"""

import json
import resource
import sys
import time

from bench.store_files import _command, _peak_mb

STUDY = "bench_scale"  # the study bench.scale builds


def _call(name: str, root: str, out: str):
    """The command `name` on the study, ready to run: a function of no arguments returning its rows."""
    if name == "load_study":  # the library's read: without the command line's imports
        from hpstudy.study.store.read import load_study

        return lambda: len(load_study(root, STUDY)[0])
    from hpstudy.cli import hpstudy_main

    argv = {
        "status": ["status", "--store", root, "--study", STUDY],
        "query": ["query", "--store", root, "--study", STUDY, "--columns", "trial_key,top1_err", "top1_err < 9.5"],
        "report": ["report", "--store", root, "--study", STUDY, "--out", out],
        "compact": ["compact", "--store", root, "--study", STUDY],
    }[name]
    return lambda: _command(hpstudy_main, argv, name)


def child(name: str, root: str, out: str, limit_bytes: int) -> None:
    """In a fresh process: one command under the memory cap; prints its JSON."""
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    call = _call(name, root, out)
    start = time.perf_counter()
    rows = call()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # the report's worker (hpstudy.analysis.report_jobs)
    print(
        json.dumps(
            {
                "call_s": round(time.perf_counter() - start, 2),
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                "peak_rss_mb": _peak_mb(),
                "worker_cpu_s": round(workers.ru_utime + workers.ru_stime, 2),
                "worker_peak_rss_mb": round(workers.ru_maxrss / 1024),
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3], int(float(sys.argv[4]) * 2**30))
