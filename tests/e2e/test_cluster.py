"""cluster.yaml against the Ray package's own schema, and a study across two Ray nodes."""

import json
import os
import subprocess
import time

import jsonschema
import pytest
import yaml

from hpstudy.study.spec import parse_spec
from hpstudy.study.store.read import load_trials
from tests.helpers import REPO, run_edf_command, small_spec, write_spec


def _cluster_file(name):
    with open(os.path.join(REPO, name)) as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize("name", ["cluster.yaml", "examples/cluster-onprem.yaml"])
def test_cluster_files_match_rays_schema_ship_the_checkout_and_hold_no_credentials(name):
    import ray
    import ray.autoscaler

    config = _cluster_file(name)
    with open(os.path.join(os.path.dirname(ray.autoscaler.__file__), "ray-schema.json")) as f:
        schema = json.load(f)
    jsonschema.validate(config, schema)
    assert config["file_mounts"] == {"~/hpstudy-src": ".", "~/hpstudy-src.git": ".git"}
    assert config["setup_commands"][-1] == "python3 -m pip install -c ~/hpstudy-keep.txt -e ~/hpstudy-src"
    text = open(os.path.join(REPO, name)).read().lower()
    for secret in ("aws_secret_access_key", "aws_access_key_id", "password:", "private key-----"):
        assert secret not in text, secret


def test_the_on_prem_file_is_rays_local_provider_with_cluster_yamls_setup():
    aws, onprem = _cluster_file("cluster.yaml"), _cluster_file("examples/cluster-onprem.yaml")
    assert aws["head_node_type"] in aws["available_node_types"]
    assert onprem["provider"]["type"] == "local" and {"head_ip", "worker_ips"} <= set(onprem["provider"])
    assert "available_node_types" not in onprem  # the local provider makes its own node type
    assert "ssh_private_key" not in onprem["auth"] and "ssh_proxy_command" not in onprem["auth"]
    for key in ("file_mounts", "rsync_exclude", "setup_commands"):
        assert onprem[key] == aws[key], key


@pytest.fixture
def two_node_cluster():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, logging_level="WARNING")
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow
def test_study_spreads_over_two_nodes_and_stores_once(two_node_cluster, tmp_path):
    import ray

    from hpstudy.study.runner import run_study

    spec = parse_spec(small_spec(name="multi", models=["cnn_tiny"], samples=3))
    run_study(spec, str(tmp_path))
    rows = load_trials(str(tmp_path), "multi")
    assert len(rows) == 6 and rows["trial_key"].is_unique
    node_ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(node_ids) == 2
    assert set(rows["node"]) == node_ids  # trials ran on the head and on the worker node


@pytest.mark.slow  # two Ray nodes and a study whose second node is killed mid-trial (~1.5 min)
def test_a_worker_node_killed_mid_study_costs_one_line_and_every_trial_is_stored_once(tmp_path):
    """Issue #37 item 7: the trial on the lost node is retried on the head and stored once; the user sees
    one line for it, not the raylet's state dump (twice) nor Tune's traceback, which --debug shows."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1)
    try:
        # 8 epochs: a trial outlives the time it takes to see it running and kill its node
        spec = small_spec(name="lost", models=["cnn_tiny"], optimizers=["adamw"], samples=3, epochs=[8])
        config = write_spec(tmp_path, spec)
        command = run_edf_command(config, str(tmp_path / "store"), "--address", cluster.address)
        command.remove("--num-cpus")
        command.remove("2")  # a cluster's CPUs are its nodes'
        driver = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output, killed = [], False
        for line in driver.stdout:
            output.append(line)
            if not killed and " 2 running" in line:  # one trial on each node
                time.sleep(2)
                cluster.remove_node(worker, allow_graceful=False)  # SIGKILL: as a node that is lost
                killed = True
        assert driver.wait(timeout=600) == 0, "".join(output)
    finally:
        cluster.shutdown()
    text = "".join(output)
    assert killed, text
    rows = load_trials(str(tmp_path / "store"), "lost")
    assert len(rows) == 3 and rows["trial_key"].is_unique and set(rows["status"]) == {"ok"}
    retried = [line for line in output if "Ray runs it again" in line]
    assert len(retried) == 1 and retried[0].startswith("group-00000"), text
    assert "Traceback" not in text and "state-dump" not in text and "(raylet)" not in text, text
