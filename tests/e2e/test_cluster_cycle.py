"""`ray up` / `ray submit` / `ray down` as users run them (slow tier), with examples/cluster-onprem.yaml
(Ray's on-prem `local` provider) pointed at a "machine" on this one: an sshd on 127.0.0.1 with a
throwaway key, in its own PID namespace (`ray stop`, which `ray up` and `ray down` run, ends every
Ray process it can see), whose sessions have their own HOME and TMPDIR (nothing lands in the real
home or /tmp/ray). Nothing listens on anything but loopback."""

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import yaml

from hpstudy.study.store.read import load_trials
from tests.helpers import REPO, free_port, in_terminal, require_programs, small_spec

pytestmark = pytest.mark.slow

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
SPEC = small_spec(
    name="cycle",
    models=["cnn_tiny"],
    optimizers=["adamw"],
    samples=4,
    epochs=[1],
    space={"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]}},
)


def _node_venv(base: Path) -> Path:
    """A virtual environment for the node that sees this one's packages (torch, Ray, ...) but not
    its hpstudy, so the node installs and imports the copy `ray up` ships; its `ray` runs on it."""
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # a path, its .pth files unread
    ray_cli = venv / "bin" / "ray"
    ray_cli.write_text(f"#!{venv}/bin/python\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n")
    ray_cli.chmod(0o755)
    return venv


def _wait_for_ssh(node, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert node.sshd.poll() is None, node.log.read_text()
        if (
            subprocess.run(
                [
                    "ssh",
                    "-i",
                    str(node.key),
                    "-p",
                    str(node.port),
                    "-o",
                    "StrictHostKeyChecking=no",
                    "-o",
                    f"UserKnownHostsFile={os.devnull}",
                    "-o",
                    "BatchMode=yes",
                    "root@127.0.0.1",
                    "true",
                ],
                capture_output=True,
                timeout=30,
            ).returncode
            == 0
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"sshd did not answer: {node.log.read_text()}")


@pytest.fixture
def node():
    """sshd on 127.0.0.1:<free port> in its own PID namespace, a key to log in as root."""
    require_programs(
        **{"/usr/sbin/sshd": "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client"},
        rsync="rsync",
        nc="netcat-openbsd",
        unshare="util-linux",
    )
    base = Path(tempfile.mkdtemp(prefix="hpc", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    home, ssh = base / "home", base / "ssh"
    for folder in (home, ssh, base / "tmp", base / "client"):
        folder.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh / "host")], check=True)
    venv = _node_venv(base)
    (home / ".bashrc").write_text(f"export PATH={venv}/bin:$PATH\ncd ~\n")  # /etc/profile resets PATH
    port = free_port()
    (ssh / "sshd_config").write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {ssh / 'host'}",
                f"PidFile {ssh / 'sshd.pid'}",
                f"AuthorizedKeysFile {ssh / 'key.pub'}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "PrintMotd no",
                "Subsystem sftp internal-sftp",
                # Ray's files in the node's own temp folder; every Ray socket on loopback
                f"SetEnv HOME={home} TMPDIR={base / 'tmp'} RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0",
                "",
            ]
        )
    )
    os.makedirs("/run/sshd", exist_ok=True)
    log = base / "sshd.log"
    sshd = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--mount-proc",
            "--kill-child",
            "sh",
            "-c",
            f"exec /usr/sbin/sshd -D -f {ssh / 'sshd_config'} -E {log}",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    node = SimpleNamespace(base=base, port=port, key=ssh / "key", sshd=sshd, log=log, home=home)
    try:
        _wait_for_ssh(node)
        yield node
    finally:
        os.killpg(sshd.pid, signal.SIGKILL)  # its namespace's first process dies: so does all in it
        sshd.wait(30)
        shutil.rmtree(base, ignore_errors=True)


def _cluster_file(node, spec_path: Path) -> Path:
    """examples/cluster-onprem.yaml, pointed at the node: head 127.0.0.1 reached through the port
    (Ray has no ssh port setting), no workers, the spec shipped beside the checkout."""
    with open(os.path.join(REPO, "examples", "cluster-onprem.yaml")) as f:
        config = yaml.safe_load(f)
    config["cluster_name"] = f"hpstudy-test-{node.port}"
    config["provider"].update(head_ip="127.0.0.1", worker_ips=[])
    config["auth"] = {
        "ssh_user": "root",
        "ssh_private_key": str(node.key),
        "ssh_proxy_command": f"nc 127.0.0.1 {node.port}",
    }
    config["file_mounts"]["~/specs/cycle.yaml"] = str(spec_path)
    ray_port = free_port()
    config["head_start_ray_commands"] = [
        c.replace("--port=6379", f"--port={ray_port} --num-cpus=1") for c in config["head_start_ray_commands"]
    ]
    assert any(f"--port={ray_port}" in c for c in config["head_start_ray_commands"])
    path = node.base / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _ray(*args, timeout=900):
    """A `ray` cluster-launcher command from the checkout's root, as a user runs it."""
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ray"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _listening(root_pid):
    """Addresses that the namespace's processes listen on (seen from outside it)."""
    pids = {p.pid for p in psutil.Process(root_pid).children(recursive=True)}
    return {c.laddr.ip for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.pid in pids}


def test_ray_up_submit_interrupt_resume_and_down_on_an_on_prem_cluster(node, monkeypatch):
    started = time.time()
    monkeypatch.setenv("TMPDIR", str(node.base / "client"))  # the launcher's own files (cluster state)
    spec_path = node.base / "cycle.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    cluster, store = _cluster_file(node, spec_path), node.base / "store"
    up = _ray("up", "-y", "--no-config-cache", str(cluster))
    assert up.returncode == 0, (up.stdout + up.stderr)[-5000:]
    # the node kept the torch it had: nothing of torch was installed into its environment
    assert not list((node.base / "venv" / "lib").glob("python3*/site-packages/torch"))
    checkout = node.home / "hpstudy-src"
    assert (checkout / "trainers" / "GIT_SHA").exists() and not (checkout / ".git").exists()
    submit = [
        os.path.join(os.path.dirname(sys.executable), "ray"),
        "submit",
        str(cluster),
        "study/run_edf.py",
        "--",
        "--config",
        "~/specs/cycle.yaml",
        "--store",
        str(store),
        "--address",
        "auto",
        "--progress-interval",
        "1",
    ]
    try:
        addresses = _listening(node.sshd.pid)
        assert addresses and addresses <= LOOPBACK, addresses
        # Ctrl-C in the terminal running `ray submit` reaches the driver on the head
        terminal, output = in_terminal(submit)
        trial_dir = store / "trials" / "study=cycle"
        deadline = time.time() + 900  # generous: a loaded 2-core machine
        while not (trial_dir.exists() and list(trial_dir.glob("*.parquet"))):
            assert terminal.poll() is None and time.time() < deadline, "".join(output)[-5000:]
            time.sleep(0.2)
        os.write(terminal.master, b"\x03")
        assert terminal.wait(600) != 0
        terminal.reader.join(10)
        os.close(terminal.master)
        text = "".join(output)
        stored = len(load_trials(str(store), "cycle"))
        assert 1 <= stored < 4, text[-5000:]
        assert f"interrupted: {stored}/4 stored; rerun the same command to resume" in text, text[-5000:]

        again = subprocess.run(submit, cwd=REPO, capture_output=True, text=True, timeout=1200)
        assert again.returncode == 0, (again.stdout + again.stderr)[-5000:]
        assert f"{stored} already stored, {4 - stored} to run" in again.stdout
        report = store / "reports" / "cycle"
        assert f"report: {report}/index.html" in again.stdout and (report / "index.html").exists()
        # the command the run prints fetches the report (our cluster file for `cluster.yaml`)
        hint = again.stdout.split("fetch it with: ")[1].split()
        assert hint[:4] == ["ray", "rsync-down", "cluster.yaml", f"{report}/"], hint
        fetched = node.base / "fetched"
        down = _ray(hint[1], str(cluster), hint[3], f"{fetched}/")
        assert down.returncode == 0 and (fetched / "index.html").exists(), down.stderr[-3000:]
    finally:
        gone = _ray("down", "-y", str(cluster))
    assert gone.returncode == 0, gone.stderr[-3000:]
    rows = load_trials(str(store), "cycle")
    assert len(rows) == 4 and rows["trial_key"].is_unique and set(rows["status"]) == {"ok"}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert {yaml.safe_load(v)["git_sha"] for v in rows["versions"]} == {head}  # from the shipped checkout
    assert set(rows["device"]) == {"cpu"}
    print(f"cluster cycle: {time.time() - started:.0f} s")
