"""Stopping a run on a signal: SIGINT or SIGTERM stops it cleanly (a second one at once), and
RunStopped, the error of a run that ended before every trial was stored."""

import contextlib
import signal
import threading
from typing import Dict, Iterator, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunStopped(Exception):
    """The run ended before every trial was stored: interrupted by a signal, or stopped because a
    node cannot run the trials. The message is the line to print; `exit_code` the command's status."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class Interruption:
    """SIGINT or SIGTERM during a run. The first one stops it: no new trial starts, running trials
    are cancelled (a rerun trains them again), what finished stays stored. A second one raises
    KeyboardInterrupt at once, except while a trial is being written to the store."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.noted = False
        self._before: Optional[Dict] = None
        self._writing = False
        self._pending = False

    def arm(self) -> None:
        """Install the handlers (again after ray.init, which sets its own SIGTERM handler); only
        the main thread can."""
        if threading.current_thread() is not threading.main_thread():
            return
        before = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        if self._before is None:
            self._before = before

    def __enter__(self) -> "Interruption":
        self.arm()
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in (self._before or {}).items():
            signal.signal(s, handler)
        self._before = None

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
        elif self._writing:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A block a second signal does not cut short (it takes effect at the block's end)."""
        self._writing = True
        try:
            yield
        finally:
            self._writing = False
        if self._pending:
            raise KeyboardInterrupt
