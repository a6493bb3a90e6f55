"""cluster.yaml against the Ray package's own schema, and a study across two Ray nodes."""

import json
import os

import jsonschema
import pytest
import ray
import ray.autoscaler
import yaml
from ray.cluster_utils import Cluster

from study.runner import run_study
from study.spec import parse_spec
from tests.helpers import REPO, small_spec


def test_cluster_yaml_matches_rays_schema_and_installs_hpstudy():
    with open(os.path.join(REPO, "cluster.yaml")) as f:
        config = yaml.safe_load(f)
    with open(os.path.join(os.path.dirname(ray.autoscaler.__file__), "ray-schema.json")) as f:
        schema = json.load(f)
    jsonschema.validate(config, schema)
    assert config["head_node_type"] in config["available_node_types"]
    mount = next(iter(config["file_mounts"]))
    assert config["file_mounts"][mount] == "."
    assert any("pip install" in c and mount in c for c in config["setup_commands"])
    text = open(os.path.join(REPO, "cluster.yaml")).read().lower()
    assert "aws_secret_access_key" not in text and "aws_access_key_id" not in text


@pytest.fixture
def two_node_cluster():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, logging_level="WARNING")
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow
def test_study_spreads_over_two_nodes_and_stores_once(two_node_cluster, tmp_path):
    spec = parse_spec(small_spec(name="multi", models=["cnn_tiny"], samples=3))
    rows = run_study(spec, str(tmp_path))
    assert len(rows) == 6 and rows["trial_key"].is_unique
    node_ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(node_ids) == 2
    assert set(rows["node"]) == node_ids  # trials ran on the head and on the worker node
