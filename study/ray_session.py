"""hpstudy's Ray session: a local Ray on loopback (or a cluster to connect to) with Tune's environment
set. It imports Ray alone (no torch, timm or Ray Tune)."""

import contextlib
import os
from typing import Iterator, Optional

import ray

# Read by Tune when a run starts (not at import): its JSON/CSV/TensorBoard loggers cost driver
# memory and files per trial (the store is the record), and our ProgressPrinter replaces its tables.
# Tune's own SIGINT handler is off: hpstudy's (Interruption) stops the run and says how to resume.
TUNE_ENV = {
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    "TUNE_MAX_PENDING_TRIALS_PG": "16",
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
}


@contextlib.contextmanager
def ray_session(address: Optional[str], num_cpus: Optional[int]) -> Iterator[None]:
    """Connect to a cluster, or start a local Ray on loopback only (shut down on exit); reuse a
    Ray that is already initialised."""
    for name, value in TUNE_ENV.items():
        os.environ.setdefault(name, value)
    if ray.is_initialized():
        yield
        return
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=True,
            configure_logging=True,
            logging_level="WARNING",
        )
    try:
        yield
    finally:
        ray.shutdown()
