"""The mutation bench's pools (bench.mutation.modules_of): every module of every package, subpackages included,
in exactly one pool, so a moved module is never silently left out of the draw."""

import configparser
import os

from bench.mutation import EXCLUDED, FOLDERS, modules_of, mutmut_config
from tests.helpers import module_files


def _as_path(module: str, path: str) -> str:
    """A module's path as the pools name it: from its top-level folder (study/, ...), or hpstudy/ for the
    command line's."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in ("trainers", "study", "analysis"):
        return os.path.join(*parts[1:-1], os.path.basename(path))
    return os.path.join("hpstudy", os.path.basename(path))


def test_every_module_of_every_package_is_in_exactly_one_pool():
    pooled = [path for package in FOLDERS if package != "presentation" for path in modules_of(package)]
    pooled += modules_of("presentation")
    assert len(pooled) == len(set(pooled))
    expected = {
        _as_path(module, path)
        for module, path in module_files().items()
        if not path.endswith("__init__.py") and module.count(".") >= 1
    } - set(EXCLUDED)
    assert set(pooled) == expected
    assert {"study/store/read.py", "study/tune/store_writer.py", "analysis/findings/text.py"} <= set(pooled)


def test_every_pytest_run_of_the_mutation_bench_is_one_process_without_seed_probes():
    """mutmut runs a mutant's tests with pytest_add_cli_args only (not the selection's), so both must turn
    pyproject.toml's xdist workers off (mutmut records which tests reach a function and switches the mutant
    on inside its own pytest process, which workers escape) and the seed-reach plugin (its probes would run
    a mutant's seeded calls twice)."""
    config = configparser.ConfigParser()
    config.read_string(mutmut_config(["analysis/edf.py"], ["docs"]))
    for key in ("pytest_add_cli_args", "pytest_add_cli_args_test_selection"):
        args = config["mutmut"][key].split()
        pairs = [args[i : i + 2] for i in range(len(args) - 1)]
        assert ["-n", "0"] in pairs and ["-p", "no:tests.seed_reach"] in pairs, (key, args)
