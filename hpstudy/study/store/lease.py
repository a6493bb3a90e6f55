"""One writer per study: a lease in the store, <root>/leases/<study>.json, that a driver (`hpstudy run`,
`hpstudy compact`, hpstudy.run) takes before it writes anything of the study, renews from a background
thread while it holds it and deletes when it ends. Another driver of the study is refused (StudyBusy,
exit 2) or, with `wait`, waits; it takes a lease over only once it is stale: no heartbeat for the
holder's stale limit (HPSTUDY_LEASE_STALE_S, default 180 s), as a SIGKILLed driver leaves it.

Taking it is a create-if-absent. On a local disk: os.link of a complete temporary file, which fails if
the lease exists, and every take, renewal and release under an flock of <root>/leases/.<study>.guard,
so two of them never interleave. On an object store (s3://, gs://) pyarrow has no conditional write (its
S3FileSystem sends no If-None-Match), so a driver writes its lease, waits HPSTUDY_LEASE_SETTLE_S (2 s)
and reads it back: it holds the lease only if its own token is there (docs/store.md: the race left).
"""

import contextlib
import errno
import json
import logging
import math
import os
import signal
import socket
import stat
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pyarrow.fs as pafs

from hpstudy.study.interruption import RunStopped
from hpstudy.study.store.layout import Location, StoreError, StoreFault, StoreLike, check_study_name, store_io
from hpstudy.trainers.errors import shown

logger = logging.getLogger(__name__)
LEASES = "leases"  # <root>/leases/<study>.json: the lease of the driver writing the study now
KIND = "hpstudy-study-lease"  # the `kind` of every lease hpstudy writes
STALE_ENV, SETTLE_ENV = "HPSTUDY_LEASE_STALE_S", "HPSTUDY_LEASE_SETTLE_S"
STALE_S = 180.0
SETTLE_S = 2.0
BEATS_PER_STALE = 6  # heartbeats per stale limit: a few may fail (a slow store) before the lease goes stale
GUARD_WAIT_S = 10.0  # the longest a local driver waits for another's take, renewal or release (ms, unless stopped)
MAX_LEASE_BYTES = 64 << 10
FIELDS = {
    "kind": str,
    "study": str,
    "command": str,
    "host": str,
    "pid": int,
    "started_at": str,
    "token": str,
    "heartbeat_at": float,
    "stale_after_s": float,
}


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def _clock() -> float:
    """Seconds on a clock that also counts the time a machine was asleep (Linux's CLOCK_BOOTTIME; where
    there is none, time.monotonic), so a driver that slept sees how long."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


class StudyBusy(StoreError):
    """Another driver holds the study's lease: refused with exit code 2, naming that driver."""


class ForeignLease(StoreFault):
    """A file at a study's lease path that is not a lease hpstudy wrote: never deleted (exit code 3)."""


def seconds_from_env(name: str, default: float) -> float:
    """A number of seconds > 0 from the environment variable `name` (`default` when unset)."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise StoreError(f"{name}: bad value {shown(text)}; allowed: a number of seconds > 0")
    return value


def describe(holder: Dict) -> str:
    """Who holds a lease, for a message: command, host, pid and start time."""
    return f"{holder['command']} on host {holder['host']}, pid {holder['pid']}, started {holder['started_at']}"


class Lease:
    """A study's lease as this process takes, renews and releases it (see the module's docstring)."""

    def __init__(self, store: StoreLike, study: str, command: str):
        self.store = Location.of(store)
        self.fs, self.study = self.store.fs, check_study_name(study)
        self.directory = f"{self.store.base}/{LEASES}"
        self.path = f"{self.directory}/{study}.json"
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.stale_s = seconds_from_env(STALE_ENV, STALE_S)
        self.settle_s = 0.0 if self.local else seconds_from_env(SETTLE_ENV, SETTLE_S)
        self.record = {
            "kind": KIND,
            "study": study,
            "command": command,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "token": uuid.uuid4().hex,
            "heartbeat_at": time.time(),
            "stale_after_s": self.stale_s,
        }
        self.token = self.record["token"]
        self.lost: Optional[StoreFault] = None
        self._listeners: List[Callable[[StoreFault], None]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._seen: Optional[Tuple[Tuple[str, float], float]] = None  # another's lease, seen unchanged since (_clock)

    # ------------------------------------------------------------------ taking and giving back

    def acquire(self, wait: bool = False, how: str = "--wait") -> None:
        """Take the lease, or raise StudyBusy naming its holder and `how` to wait; with `wait`, poll until
        it is released or stale (Ctrl-C: RunStopped, exit 130). Then renew it in a background thread."""
        said = confirmed = False
        try:
            while True:
                taken, holder = self._attempt()
                if taken:
                    break
                if holder is None:  # released between two reads: try again
                    time.sleep(0.05)
                    continue
                if not wait and self.settle_s and not confirmed:
                    # an object store: a lease written less than settle_s ago may yet lose to another one;
                    # look again after that, so the refusal names the driver that holds it
                    time.sleep(self.settle_s)
                    confirmed = True
                    continue
                if not wait:
                    raise StudyBusy(self._busy(holder, how))
                if not said:
                    logger.info("%s", self._waiting(holder))
                    said = True
                time.sleep(min(5.0, max(0.05, holder["stale_after_s"] / 20)))
        except KeyboardInterrupt:
            with contextlib.suppress(StoreFault):
                self._delete_if_mine()
            raise RunStopped(
                f"interrupted: waiting for the lease of study {self.study!r}; nothing of it was written; "
                f"rerun the same command",
                130,
            ) from None
        except SystemExit:  # SIGTERM (hold_lease)
            with contextlib.suppress(StoreFault):
                self._delete_if_mine()
            raise
        except StoreFault as exc:
            with contextlib.suppress(StoreFault):
                self._delete_if_mine()
            if isinstance(exc, ForeignLease):
                raise
            raise StoreFault(f"{exc}; nothing of study {self.study!r} was written: fix that and rerun the same command")
        self._thread = threading.Thread(target=self._beat, name=f"hpstudy-lease-{self.study}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still this driver's (never another's)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            self._delete_if_mine()
        except StoreFault as exc:
            logger.warning(
                "warning: %s; the lease stays until it is stale: the next driver of study %r takes it over %s s "
                "after this one",
                exc,
                self.study,
                f"{self.stale_s:g}",
            )

    def _attempt(self) -> Tuple[bool, Optional[Dict]]:
        """One try at taking the lease: (True, None) if taken, else (False, the lease in the way or None)."""
        with self._guard():
            current = self._read()
            if current is not None and not self._takeable(current):
                return False, current
            self.record["heartbeat_at"] = time.time()
            if not self._write(create=current is None):
                return False, self._read()
        if self.settle_s:  # an object store: whoever wrote last in the meantime holds it
            time.sleep(self.settle_s)
            back = self._read()
            if back is None or back["token"] != self.token:
                return False, back
        return True, None

    def _takeable(self, current: Dict) -> bool:
        """Whether another's lease is stale: its heartbeat is older than its stale limit, by this host's
        clock or (a clock that runs ahead) by how long this driver has seen it unchanged."""
        if current["token"] == self.token or time.time() - current["heartbeat_at"] > current["stale_after_s"]:
            return True
        seen = (current["token"], current["heartbeat_at"])
        if self._seen is None or self._seen[0] != seen:
            self._seen = (seen, _clock())
        return _clock() - self._seen[1] > current["stale_after_s"]

    def _delete_if_mine(self) -> None:
        """Delete the lease if its token is this driver's: a lease another driver took over stays."""
        with self._guard():
            current = self._read()
            if current is not None and current["token"] == self.token:
                with store_io(f"delete {self.path}"):
                    self.fs.delete_file(self.path)

    # ------------------------------------------------------------------ holding

    def on_lost(self, listener: Callable[[StoreFault], None]) -> None:
        """Call `listener(fault)` once the lease is lost (at once if it is already)."""
        self._listeners.append(listener)
        if self.lost is not None:
            listener(self.lost)

    def check(self) -> None:
        """StoreFault unless this driver still holds the lease, read from the store now (before a step
        that deletes or rewrites files of the study)."""
        if self.lost is None:
            try:
                current = self._read()
            except ForeignLease:
                self._lose("a file hpstudy did not write replaced it")
            else:
                if current is None or current["token"] != self.token:
                    self._lose(_taken(current))
        if self.lost is not None:
            raise self.lost

    def _beat(self) -> None:
        """Renew the lease every stale limit / BEATS_PER_STALE until released; mark it lost when it is
        gone or another's, or when it could not be renewed for a whole stale limit."""
        interval = self.stale_s / BEATS_PER_STALE
        renewed = _clock()
        while not self._stop.wait(interval):
            try:
                with self._guard():
                    current = self._read()
                    read_at = _clock()
                    if current is None or current["token"] != self.token:
                        self._lose(_taken(current))
                        return
                    self.record["heartbeat_at"] = time.time()
                    # stopped (SIGSTOP, a machine asleep) since the read: another driver may have taken the
                    # lease over meanwhile, and writing now would overwrite its lease; read again first
                    if _clock() - read_at < interval:
                        self._write(create=False)
                        renewed = _clock()
            except ForeignLease:
                self._lose("a file hpstudy did not write replaced it")
                return
            except StoreFault as exc:
                if _clock() - renewed > self.stale_s:
                    self._lose(f"it could not be renewed for {self.stale_s:g} s ({exc})")
                    return

    def _lose(self, why: str) -> None:
        """Mark the lease lost, saying why, and tell the listeners."""
        self.lost = StoreFault(
            f"store: this driver no longer holds the lease of study {self.study!r} ({self.path}): {why} "
            f"(a driver paused for over {self.stale_s:g} s is taken over); it stopped writing the study"
        )
        for listener in self._listeners:
            listener(self.lost)

    # ------------------------------------------------------------------ the lease file

    def _read(self) -> Optional[Dict]:
        """The lease in the store now, or None; ForeignLease, naming it, when it is not one hpstudy wrote."""
        with store_io(f"read {self.path}"):
            data = self._read_local() if self.local else self._read_object()
        if data is None:
            return None
        try:
            record = json.loads(data.decode())
            if not isinstance(record, dict) or record.get("kind") != KIND:
                raise ValueError(f'no "kind": {KIND!r}')
            for name, kind in FIELDS.items():
                value = record.get(name)
                if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind):
                    raise ValueError(f"its {name!r} is {shown(value, 60)}")
            if record["study"] != self.study:
                raise ValueError(f"it names study {shown(record['study'], 60)}")
            if not (math.isfinite(record["heartbeat_at"]) and 0 < record["stale_after_s"] < math.inf):
                raise ValueError("its heartbeat_at or stale_after_s is not a finite time")
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise self._foreign(str(exc).splitlines()[0]) from None
        return record

    def _read_local(self) -> Optional[bytes]:
        """The lease file's bytes on a local disk (None if absent): a regular file only, never a link."""
        try:
            info = os.lstat(self.path)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_LEASE_BYTES:
                raise self._foreign(f"not a regular file of at most {MAX_LEASE_BYTES} bytes")
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(MAX_LEASE_BYTES + 1)

    def _read_object(self) -> Optional[bytes]:
        """The lease object's bytes (None if absent)."""
        info = self.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            return None
        if info.type != pafs.FileType.File or (info.size or 0) > MAX_LEASE_BYTES:
            raise self._foreign(f"not a file of at most {MAX_LEASE_BYTES} bytes")
        try:
            with self.fs.open_input_stream(self.path) as f:
                return f.read(MAX_LEASE_BYTES + 1)
        except FileNotFoundError:
            return None

    def _write(self, create: bool) -> bool:
        """Write this driver's lease whole: with `create` only if there is none (False if there is one;
        an object store cannot tell, see _attempt), else over the one there."""
        data = json.dumps(self.record, sort_keys=True, indent=1).encode()
        with store_io(f"write {self.path}"):
            if self.local:
                return _write_local(self.directory, self.path, data, create)
            if create:
                self.fs.create_dir(self.directory, recursive=True)
            # one PUT: an object appears whole or not at all
            with self.fs.open_output_stream(self.path) as out:
                out.write(data)
        return True

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """On a local disk, an flock of leases/.<study>.guard around a take, renewal or release, so two
        never interleave (it goes with the process, whatever ends it); an object store has no lock."""
        if not self.local:
            yield
            return
        import fcntl  # POSIX only: a local store's lock

        with store_io(f"write {self.directory}"):
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(f"{self.directory}/.{self.study}.guard", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = _clock() + GUARD_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if _clock() > deadline:  # its holder is stopped mid-step: the token checks decide
                        break
                    time.sleep(0.01)
                except OSError:  # a filesystem without locks: os.link and the token checks decide
                    break
            yield
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ messages

    def _foreign(self, why: str) -> ForeignLease:
        """The error of a file at the lease path that hpstudy did not write."""
        return ForeignLease(
            f"store: {self.path} is not a lease hpstudy wrote ({why}); hpstudy never deletes it and no "
            f"driver of study {self.study!r} starts while it is there: if none runs, delete it and rerun the "
            f"same command"
        )

    def _busy(self, holder: Dict, how: str) -> str:
        """Why this driver is refused: who holds the lease, and how to wait for it."""
        age = max(0.0, time.time() - holder["heartbeat_at"])
        return (
            f"study {self.study!r} in {self.store} is being written by {describe(holder)} (lease {self.path}, "
            f"last heartbeat {age:.0f} s ago); wait for it to end, or pass {how} (a driver that died without "
            f"releasing it is taken over {holder['stale_after_s']:g} s after its last heartbeat)"
        )

    def _waiting(self, holder: Dict) -> str:
        """What a waiting driver says once."""
        return (
            f"waiting: study {self.study!r} is being written by {describe(holder)}; this driver starts when "
            f"that one ends, or {holder['stale_after_s']:g} s after its last heartbeat"
        )


def _taken(current: Optional[Dict]) -> str:
    """What became of a lease that is no longer this driver's."""
    return "it was deleted" if current is None else f"it was taken over by {describe(current)}"


def _write_local(directory: str, path: str, data: bytes, create: bool) -> bool:
    """Write `data` to `path` on a local disk through a complete (fsynced) temporary file: with
    `create`, os.link, which fails if `path` exists (False), else os.replace."""
    os.makedirs(directory, exist_ok=True)
    tmp = f"{directory}/.{os.path.basename(path)}.tmp-{uuid.uuid4().hex}"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not create:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            return _create_exclusive(path, data)  # a filesystem without hard links
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _create_exclusive(path: str, data: bytes) -> bool:
    """Create `path` with O_CREAT | O_EXCL and write `data` (False if it exists)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return True


@contextlib.contextmanager
def hold_lease(store: StoreLike, study: str, command: str, wait: bool = False, how: str = "--wait") -> Iterator[Lease]:
    """Hold the study's lease for the block (Lease.acquire: refused, or waiting with `wait`); it is
    released however the block ends."""
    lease = Lease(store, study, command)
    with _exit_on_sigterm():
        lease.acquire(wait, how)
        try:
            yield lease
        finally:
            lease.release()


@contextlib.contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) in the block, so the lease is released (by default it ends the process
    on the spot and leaves the lease until stale); only where SIGTERM has no handler of its own (a run's
    Interruption installs one while its trials run)."""
    ours = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if ours:
        signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_exit(signum: int, frame) -> None:
    """A signal handler: exit with 128 + the signal's number, through every `finally`."""
    raise SystemExit(128 + signum)
