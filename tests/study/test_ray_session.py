"""Ray start and join faults (issue #37 item 7), on real local Ray processes: an address nothing answers
at, a head whose token authentication refuses the driver, a local Ray that does not start in time. Each
is one ClusterFault (exit 3) within seconds; Ray's own output of a run is routed behind --debug."""

import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from hpstudy.study.store.layout import StoreFault
from tests.helpers import REPO, free_port

TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def no_ray():
    """This process connected to no Ray before the test (ray_session reuses one), nor after it."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_a_cluster_fault_is_a_store_fault_so_the_command_line_exits_3_in_one_line():
    from hpstudy.study.ray_session import ClusterFault

    assert issubclass(ClusterFault, StoreFault)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2"])
def test_an_address_nothing_answers_at_fails_in_seconds_saying_what_to_do(host, no_ray):
    import ray

    from hpstudy.study import ray_session as session
    from hpstudy.study.ray_session import ClusterFault, ray_session

    address = f"{host}:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ClusterFault) as info:
        with ray_session(address, None):
            pytest.fail("connected to nothing")
    assert time.monotonic() - started < session.CONNECT_TIMEOUT_S + 1  # ray.init alone: 20 x 41 s
    message = str(info.value)
    assert message.startswith(f"--address {address}") and "\n" not in message
    assert "no Ray cluster answers there (ConnectionRefusedError" in message
    assert "start the cluster's head (`ray start --head` or `ray up`) or fix --address; no trial was run" in message
    assert not ray.is_initialized()


@pytest.mark.parametrize("address", ["nohost", "127.0.0.1:notaport", "127.0.0.1:"])
def test_an_address_that_is_not_host_port_is_a_users_mistake(address, no_ray):
    from hpstudy.study.ray_session import AddressError, probe_cluster

    with pytest.raises(AddressError, match=f"^--address: bad value '{address}'; allowed: auto or HOST:PORT"):
        probe_cluster(address)


@pytest.mark.parametrize(
    "version,settable", [("2.41.0", False), ("2.56.1", False), ("2.57.0", True), ("2.60.0", True), ("3.0.0", True)]
)
def test_the_start_help_names_rays_timeout_setting_only_where_that_ray_reads_it(monkeypatch, version, settable):
    import ray

    from hpstudy.study.ray_session import start_help

    monkeypatch.setattr(ray, "__version__", version)
    assert ("RAY_gcs_server_port_wait_time_s=<seconds>" in start_help()) is settable
    assert start_help().startswith("a machine under heavy load") and "\n" not in start_help()


def test_a_local_ray_that_does_not_start_in_time_is_one_line_naming_the_setting(monkeypatch, no_ray):
    """Ray's own start-up timeout, set to nothing: the GCS never publishes its port in time (what a loaded
    machine does in 30 s; a traceback from ray/_private/node.py before)."""
    import ray

    from hpstudy.study.ray_session import ClusterFault, ray_session, ray_start_timeout_is_settable

    if not ray_start_timeout_is_settable():
        pytest.skip(f"Ray {ray.__version__} has no start-up timeout to set (Ray 2.57+)")

    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "0")
    started = time.monotonic()
    with pytest.raises(ClusterFault) as info:
        with ray_session(None, 1):
            pytest.fail("started")
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert message.startswith("Ray did not start on this machine (RuntimeError: Timed out waiting for file ")
    assert "RAY_gcs_server_port_wait_time_s=<seconds> (default 30); no trial was run" in message
    assert "\n" not in message and not ray.is_initialized()
    monkeypatch.delenv("RAY_gcs_server_port_wait_time_s")
    import ray._private.worker as ray_worker
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    printer = ray_worker.print_to_stdstream
    with ray_session(None, 1):  # the failed start left nothing that stops the next one
        assert ray.cluster_resources()["CPU"] == 1
        # both of Ray's printers of its processes' lines are routed (below), and put back after
        assert getattr(ray_worker.print_to_stdstream, "hpstudy_router", False)
        handlers = [handler for name, handler in dispatcher.handlers if name == "ray_print_logs"]
        assert len(handlers) == 1 and getattr(handlers[0], "hpstudy_router", False)
    assert ray_worker.print_to_stdstream is printer


def _system_line(pid, text):
    return {"pid": pid, "lines": [text], "is_err": True}


@pytest.mark.parametrize("stopping", [False, True])
@pytest.mark.parametrize("debug", [False, True])
def test_ray_system_lines_reach_the_terminal_only_with_debug(debug, stopping, request):
    """The router in front of Ray's printers: a raylet's state dump (pid `raylet`) and the GCS's lines
    only at DEBUG; a trial worker's own output (a numeric pid) until the run is stopping (then Ray's
    SIGTERM of the workers can make them print a traceback), after that only at DEBUG; the autoscaler's
    always."""
    from hpstudy.study import ray_session as session

    shown = []
    route = session._system_log_router(lambda data, *args: shown.append((data["pid"], args)))
    hpstudy_logger = logging.getLogger("hpstudy")  # what --debug sets to DEBUG
    before = hpstudy_logger.level
    hpstudy_logger.setLevel(logging.DEBUG if debug else logging.NOTSET)
    request.addfinalizer(lambda: hpstudy_logger.setLevel(before))
    session._STOPPING.clear()  # as a session starts (an earlier session's end set it)
    request.addfinalizer(session._STOPPING.clear)
    if stopping:
        session.workers_stopping()
    lines = [
        _system_line("raylet", "Raylet is terminated. Last 20 lines of the Raylet logs:"),
        _system_line("gcs_server", "Failed to remove 1 bundle(s)"),
        _system_line("4242", "a trial's print"),
        _system_line("autoscaler", "Adding 1 node(s)"),
    ]
    for data in lines:
        route(data, False)
    expected = ["raylet", "gcs_server", "4242", "autoscaler"] if debug else ["4242", "autoscaler"]
    if stopping and not debug:
        expected.remove("4242")
    assert shown == [(pid, (False,)) for pid in expected]


def test_a_new_session_shows_the_workers_lines_again(request, no_ray):
    """workers_stopping lasts until the next ray_session starts (a notebook's second run prints again)."""
    from hpstudy.study import ray_session as session
    from hpstudy.study.ray_session import ray_session

    request.addfinalizer(session._STOPPING.clear)
    session.workers_stopping()
    with ray_session(None, 1):
        shown = []
        session._system_log_router(lambda data, *args: shown.append(data["pid"]))(_system_line("4242", "a print"))
        assert shown == ["4242"]
    assert session._STOPPING.is_set()  # its end stops the workers again


HEAD = textwrap.dedent(
    """
    import sys
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "temp_dir": sys.argv[1]})
    print(cluster.address, flush=True)
    sys.stdin.read()  # until the test closes it
    cluster.shutdown()
    """
)
DRIVER = textwrap.dedent(
    """
    import sys, time
    import ray
    from hpstudy.study.ray_session import ClusterFault, ray_session

    started = time.monotonic()
    try:
        with ray_session(sys.argv[1], None):
            print("joined", ray.cluster_resources()["CPU"])
    except ClusterFault as exc:
        print("fault", exc)
    print("seconds", time.monotonic() - started)
    """
)


def _driver(address, **env):
    """(what the driver printed: `joined <CPUs>` or `fault <message>`, seconds) of ray_session(address) in a
    fresh process with the token settings `env` (RAY_AUTH_* of this process left out)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, address],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines[-1].startswith("seconds "), done.stdout + done.stderr
    return lines[0], float(lines[-1].split()[1]), done.stderr


@pytest.mark.slow  # a head node (~10 s) and three drivers
def test_a_head_with_token_authentication_refuses_a_driver_without_its_token_in_one_line_at_once():
    """A head started with RAY_AUTH_MODE=token: a driver that sends no token, or another one, gets one line
    saying how to give it the token, at once (ray.init: a warning a second for 20 s, then a traceback);
    the driver with the token joins."""
    temp = tempfile.mkdtemp(prefix="hpr-", dir="/tmp")  # Ray's socket paths must stay short
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD, temp],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN},
    )
    try:
        address = head.stdout.readline().strip()
        assert address, "the head did not start"
        for token_env, mode in (({}, "unset"), ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "f" * 32}, "token")):
            said, seconds, stderr = _driver(address, **token_env)
            assert said == (
                f"fault --address {address}: the cluster's token authentication refused this driver (RPC error: "
                f"InvalidAuthToken: Authentication token is missing or incorrect; RAY_AUTH_MODE here: {mode}); give "
                f"this driver the cluster's token: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token> (or the token file "
                f"RAY_AUTH_TOKEN_PATH, default ~/.ray/auth_token; `ray get-auth-token` on the head prints it); no "
                f"trial was run"
            )
            assert seconds < 5 and "Failed to get cluster ID" not in stderr  # Ray's C++ warning: --debug only
        said, seconds, _ = _driver(address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
        assert said == "joined 1.0"
    finally:
        head.stdin.close()
        head.wait(timeout=60)
