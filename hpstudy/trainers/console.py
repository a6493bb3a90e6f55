"""What hpstudy shows in a terminal: every module logs through its own logger (`logging.getLogger(__name__)`,
under the `hpstudy` logger) and prints nothing itself; the command line's entry points (`hpstudy`,
run_edf.py, `python -m hpstudy.trainers.train`) install the console handler here for the command
(`console`), and the Python API installs it only when asked (`show_output`, as `hpstudy.show_output`).

The handler writes an INFO record's message alone on stdout and any other record's (a warning, --debug's
lines) on stderr, each flushed at once: what a print(..., flush=True) wrote before. Here, in the bottom
layer, so `python -m hpstudy.trainers.train` can install it too; torch-free."""

import contextlib
import logging
import sys
from typing import Iterator

from hpstudy.trainers.errors import ConfigError, shown

ROOT = "hpstudy"  # every module's logger is below it


class ConsoleHandler(logging.Handler):
    """An INFO record's message on stdout, every other record's on stderr, as print writes them: the
    streams looked up at each record (so a redirected or captured sys.stdout gets it), flushed at once."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if record.levelno == logging.INFO else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


HANDLER = ConsoleHandler()
_BEFORE: list = []  # the hpstudy logger's (level, propagate) before show_output(True), to restore


def _install(level: int) -> None:
    """The console handler on the hpstudy logger at `level`, not propagated (so a root handler prints nothing twice)."""
    hpstudy = logging.getLogger(ROOT)
    if HANDLER not in hpstudy.handlers:
        hpstudy.addHandler(HANDLER)
    hpstudy.setLevel(level)
    hpstudy.propagate = False


@contextlib.contextmanager
def console(debug: bool = False) -> Iterator[None]:
    """For a command: hpstudy's lines on the terminal (ConsoleHandler) while the block runs; with `debug`
    (--debug) its DEBUG lines too, on stderr. The hpstudy logger is as before afterwards."""
    hpstudy = logging.getLogger(ROOT)
    before = (hpstudy.level, hpstudy.propagate, HANDLER in hpstudy.handlers)
    _install(logging.DEBUG if debug else min(logging.INFO, hpstudy.level or logging.INFO))
    try:
        yield
    finally:
        hpstudy.setLevel(before[0])
        hpstudy.propagate = before[1]
        if not before[2]:
            hpstudy.removeHandler(HANDLER)


def show_output(on: bool = True) -> None:
    """Show (`on`) or stop showing what the command line would print of the Python API's calls: the plan,
    notes, status lines and warnings of hpstudy.run, the report's location, ... (ConsoleHandler: stdout,
    warnings on stderr). Off by default: the API prints nothing (warnings reach Python's logging, which shows
    them on stderr unless configured otherwise), and logging's own configuration (logging.basicConfig, a
    handler on the `hpstudy` logger) gets every line either way, while this is off."""
    if not isinstance(on, bool):
        raise ConfigError(f"show_output: bad value {shown(on)}; allowed: True or False")
    hpstudy = logging.getLogger(ROOT)
    if on:
        if HANDLER not in hpstudy.handlers:
            _BEFORE[:] = [hpstudy.level, hpstudy.propagate]
        _install(min(logging.INFO, hpstudy.level or logging.INFO))
    elif HANDLER in hpstudy.handlers:
        hpstudy.removeHandler(HANDLER)
        if _BEFORE:
            hpstudy.setLevel(_BEFORE[0])
            hpstudy.propagate = _BEFORE[1]
            _BEFORE.clear()
