"""TEST HOOK: fault injection for the recovery tests. Does nothing unless $HPSTUDY_CRASH_DIR is set.

With HPSTUDY_CRASH_DIR=<dir>, a worker about to train trial <key> kills its own process (as an OOM
kill or a lost node would) while <dir>/<key> holds a count above zero, decrementing it each time.
"""

import os

CRASH_DIR_ENV = "HPSTUDY_CRASH_DIR"


def crash_if_asked(key: str) -> None:
    """Kill this worker process if the crash budget file of `key` holds a count N > 0 (writes N - 1)."""
    folder = os.environ.get(CRASH_DIR_ENV)
    if not folder:
        return
    budget = os.path.join(folder, key)
    if not os.path.exists(budget):
        return
    with open(budget) as f:
        left = int(f.read() or 0)
    if left > 0:
        with open(budget, "w") as f:
            f.write(str(left - 1))
        os._exit(1)
