"""hpstudy's Ray session: a local Ray on loopback (or a cluster to connect to) with Tune's environment
set. It imports Ray alone (no torch, timm or Ray Tune).

Ray that cannot be started or reached stops the run in one line (ClusterFault, exit 3) and fast: a
cluster's address is probed (a TCP connection, then a GCS client, which a head with token
authentication answers at once) before `ray.init`, whose own connect loop waits 20 x 41 s on an
address nothing answers at and 20 s on a token it refuses, printing a warning a second. What Ray's
own processes print while a run goes on (a lost node's raylet dumps its state) goes to the driver's
terminal only with --debug (this module's logger at DEBUG); so does what the trials' workers print once
the run is stopping (workers_stopping): Ray ends them with SIGTERM, whose handler can print Python's
"Exception ignored ... SystemExit" traceback."""

import contextlib
import logging
import os
import socket
import tempfile
import threading
from typing import Any, Callable, Dict, Iterator, Optional, Protocol, Tuple, TypeGuard, cast

import ray

from hpstudy.study.store.layout import StoreFault
from hpstudy.trainers.errors import HpstudyError, shown

logger = logging.getLogger(__name__)

# set from the moment a run stops (workers_stopping) to the next ray_session: workers' lines at DEBUG only
_STOPPING = threading.Event()

# Read by Tune when a run starts (not at import): its JSON/CSV/TensorBoard loggers cost driver
# memory and files per trial (the store is the record), and our ProgressPrinter replaces its tables.
# Tune's own SIGINT handler is off: hpstudy's (Interruption) stops the run and says how to resume.
TUNE_ENV = {
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    "TUNE_MAX_PENDING_TRIALS_PG": "16",
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
}
CONNECT_TIMEOUT_S = 5.0  # a cluster's head answers a TCP connection and a GCS request within this, or is unreachable
NOTHING_RUN = "no trial was run"
TOKEN_HELP = (
    "give this driver the cluster's token: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token> (or the token file "
    "RAY_AUTH_TOKEN_PATH, default ~/.ray/auth_token; `ray get-auth-token` on the head prints it)"
)
START_HELP = "a machine under heavy load can be slower than Ray's start-up timeouts: rerun when it is less busy"
# Ray reads its start-up timeout from the environment from 2.57 on; before, it is a constant
START_TIMEOUT_SETTING = "RAY_gcs_server_port_wait_time_s"
START_TIMEOUT_SINCE = (2, 57)


def ray_start_timeout_is_settable() -> bool:
    """Whether the installed Ray reads START_TIMEOUT_SETTING (Ray 2.57 and later)."""
    return tuple(int(part) for part in ray.__version__.split(".")[:2]) >= START_TIMEOUT_SINCE


def start_help() -> str:
    """What to do when a local Ray did not start in time, with the timeout's setting where this Ray reads it."""
    if ray_start_timeout_is_settable():
        return f"{START_HELP}, or give Ray longer with {START_TIMEOUT_SETTING}=<seconds> (default 30)"
    return START_HELP


class ClusterFault(StoreFault):
    """Ray cannot be started here or the cluster cannot be reached or joined: an infrastructure fault.
    A StoreFault for now, because hpstudy.cli.guarded already turns a StoreFault into one `error:` line
    and exit 3 (with --debug, its traceback too); the message says what to do and that rerunning resumes."""


class AddressError(HpstudyError):
    """An --address that is not `auto` nor HOST:PORT (exit 2)."""


def _first_line(exc: BaseException) -> str:
    """The error's type and the first line of its message."""
    text = (str(exc).strip().splitlines() or [""])[0].strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def _stderr_to_debug() -> Iterator[None]:
    """Keep what Ray's C++ core writes to this process's stderr (file descriptor 2) inside the block out
    of the terminal: it goes to this module's logger at DEBUG (--debug shows it) when the block ends."""
    with tempfile.TemporaryFile(mode="w+b") as kept:
        saved = os.dup(2)
        os.dup2(kept.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            kept.seek(0)
            for line in kept.read().decode(errors="replace").splitlines():
                logger.debug("ray: %s", line)


def _gcs_address(address: str) -> str:
    """HOST:PORT of a cluster's GCS for `address` (`auto`: the cluster on this machine, or RAY_ADDRESS);
    AddressError for one that is not HOST:PORT, ClusterFault when `auto` finds no cluster."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address(address)
    except ConnectionError as exc:
        raise ClusterFault(
            f"--address {address}: no running Ray cluster found on this machine ({_first_line(exc)}); start one "
            f"(`ray start --head`, or `ray up cluster.yaml` and run on its head) or pass --address HOST:PORT; "
            f"{NOTHING_RUN}"
        ) from exc
    except ValueError:
        found = None
    host, _, port = (found or "").rpartition(":")
    if not (found and host and port.isdigit() and 0 < int(port) < 65536):
        raise AddressError(
            f"--address: bad value {shown(address)}; allowed: auto or HOST:PORT of a Ray cluster's head (its GCS "
            f"port, 6379 by default)"
        )
    return found


def _in_thread(call: Callable[[], Any], timeout: float) -> Tuple[bool, Any, Optional[BaseException]]:
    """(finished, result, exception) of `call` run in a daemon thread for at most `timeout` seconds (Ray's
    GCS client waits 30 s on a port that is not a GCS, with the GIL released)."""
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="hpstudy-gcs-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive(), outcome.get("result"), outcome.get("error")


def probe_cluster(address: str) -> str:
    """The GCS address of the cluster at `address` once it has answered a TCP connection and a GCS
    request as `ray.init` will send it (with or without a token), each within CONNECT_TIMEOUT_S;
    ClusterFault saying what to do otherwise (nothing answers, something that is not Ray answers, the
    token is refused), AddressError for an address that is not HOST:PORT."""
    if address == "auto":  # what ray.init does for `auto`: a token on this machine turns token auth on
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    gcs = _gcs_address(address)
    where = f"--address {address}" + ("" if gcs == address else f" ({gcs})")
    host, _, port = gcs.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ClusterFault(
            f"{where}: no Ray cluster answers there ({_first_line(exc)}); start the cluster's head (`ray start "
            f"--head` or `ray up`) or fix --address; {NOTHING_RUN}"
        ) from exc
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # Ray's _raylet.pyi leaves out GcsClient
    from ray.exceptions import AuthenticationError

    with _stderr_to_debug():
        finished, client, error = _in_thread(lambda: GcsClient(address=gcs), 2 * CONNECT_TIMEOUT_S)
    if not finished:
        raise ClusterFault(
            f"{where}: something answers there, but no Ray GCS within {2 * CONNECT_TIMEOUT_S:g} s; pass the head's "
            f"GCS address (HOST:6379 by default, `ray status` on the head names it); {NOTHING_RUN}"
        )
    if isinstance(error, AuthenticationError):
        reason = str(getattr(error, "message", "") or _first_line(error)).strip().rstrip(".")
        raise ClusterFault(
            f"{where}: the cluster's token authentication refused this driver ({reason}; RAY_AUTH_MODE here: "
            f"{os.environ.get('RAY_AUTH_MODE', 'unset')}); {TOKEN_HELP}; {NOTHING_RUN}"
        ) from error
    if error is not None:
        raise ClusterFault(f"{where}: the Ray cluster does not answer ({_first_line(error)}); {NOTHING_RUN}") from error
    return gcs


class _Router(Protocol):
    """A printer _system_log_router made: it marks itself (hpstudy_router) and keeps the printer it routes."""

    hpstudy_router: bool
    routed: Callable[..., None]

    def __call__(self, data: Dict[str, Any], *args: Any, **kwargs: Any) -> None: ...


def _is_router(printer: Any) -> TypeGuard[_Router]:
    """Whether `printer` is one _system_log_router made."""
    return bool(getattr(printer, "hpstudy_router", False))


def workers_stopping() -> None:
    """Say that the run is stopping: from now to the next ray_session, the lines of the trials' workers
    (which Ray is ending) reach the terminal only with --debug, like Ray's own processes' lines."""
    _STOPPING.set()


def _system_log_router(show: Callable[..., None]) -> _Router:
    """Ray's printer of the lines its processes send the driver (`show(data, ...)`), except that lines of
    its own processes (pid `raylet`: a lost node's state dump and "marked dead", the cluster's error
    messages; `gcs_server`) are shown only when this module's logger is at DEBUG (--debug), and so are
    the trials' workers' lines (a numeric pid) once the run is stopping (workers_stopping); the
    autoscaler's always."""

    def route(data: Dict[str, Any], *args: Any, **kwargs: Any) -> None:
        pid = str(data.get("pid", ""))
        worker = pid.isdigit() and not _STOPPING.is_set()
        if worker or pid == "autoscaler" or logger.isEnabledFor(logging.DEBUG):
            show(data, *args, **kwargs)

    router = cast(_Router, route)  # a function with the two attributes set below
    router.hpstudy_router = True
    router.routed = show
    return router


def route_ray_system_logs() -> Callable[[], None]:
    """Put _system_log_router in front of the connected driver's two printers of Ray's lines: the log
    lines its processes print (the handler `ray_print_logs`) and the cluster's error messages (which
    ray._private.worker.listen_error_messages prints with its module's print_to_stdstream). Returns
    what puts them back."""
    import ray._private.worker as ray_worker
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    for name, handler in list(dispatcher.handlers):
        if name == "ray_print_logs" and not _is_router(handler):
            dispatcher.remove_handler(name)
            dispatcher.add_handler(name, _system_log_router(handler))
    printer = ray_worker.print_to_stdstream
    if not _is_router(printer):
        ray_worker.print_to_stdstream = _system_log_router(printer)

    def undo() -> None:
        routed = ray_worker.print_to_stdstream
        if _is_router(routed):
            ray_worker.print_to_stdstream = routed.routed

    return undo


@contextlib.contextmanager
def ray_session(address: Optional[str], num_cpus: Optional[int]) -> Iterator[None]:
    """Connect to a cluster, or start a local Ray on loopback only (shut down on exit); reuse a
    Ray that is already initialised. ClusterFault (exit 3, one line) when Ray cannot be started or
    the cluster cannot be reached or joined (probe_cluster)."""
    for name, value in TUNE_ENV.items():
        os.environ.setdefault(name, value)
    _STOPPING.clear()
    if ray.is_initialized():
        yield
        return
    try:
        if address:
            gcs = address if address.startswith("ray://") else probe_cluster(address)
            try:
                ray.init(address=gcs, log_to_driver=True, configure_logging=True, logging_level=logging.WARNING)
            except Exception as exc:
                raise ClusterFault(
                    f"--address {address}: cannot join the Ray cluster ({_first_line(exc)}); {NOTHING_RUN}"
                ) from exc
        else:
            try:
                ray.init(
                    address="local",  # a Ray of its own: never join another Ray running on this machine
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    log_to_driver=True,
                    configure_logging=True,
                    logging_level=logging.WARNING,
                )
            except Exception as exc:
                raise ClusterFault(
                    f"Ray did not start on this machine ({_first_line(exc)}); {start_help()}; {NOTHING_RUN}"
                ) from exc
    except ClusterFault:
        with contextlib.suppress(Exception):
            ray.shutdown()  # what a failed start began (its processes, the driver's half-made state)
        raise
    unroute = route_ray_system_logs()
    try:
        yield
    finally:
        workers_stopping()  # ray.shutdown ends the workers with SIGTERM
        ray.shutdown()
        unroute()
