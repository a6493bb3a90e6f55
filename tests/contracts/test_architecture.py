"""The layering of docs/architecture.md, and one error type turned into exit code 2 everywhere."""

import ast
import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from datetime import timezone

import pytest

import hpstudy.commands
from hpstudy.analysis.metric import METRIC_COLUMNS
from hpstudy.cli import hpstudy_main, run_edf_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_trials
from hpstudy.trainers.schema import FAILED, RESULT_FIELDS, TRIAL_FIELDS
from tests.helpers import PACKAGES, REPO, module_files, small_spec

TESTS = os.path.join(REPO, "tests")
SHARED_TEST_MODULES = {"tests.helpers", "tests.conftest", "tests.seed_reach"}  # helpers, fixtures, the seed plugin
PARTITION_COLUMN = "study"  # added by the store's readers from the study=<name> folder, not stored in a row
TORCH_FREE_TRAINERS = {"hpstudy.trainers.errors", "hpstudy.trainers.schema", "hpstudy.trainers.zoo"}


def layer_of(module: str) -> str:
    """The package (trainers, study, analysis) of an hpstudy module, `cli` for the command line above them
    (hpstudy.cli, hpstudy.commands, ...), else the module's top-level name."""
    parts = module.split(".")
    if parts[0] != "hpstudy":
        return parts[0]
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "cli"


def is_entry_script(path: str) -> bool:
    """A file that only imports and calls an entry point under `if __name__ == "__main__":` (study/run_edf.py,
    which `ray submit` copies alone to the head node): it defines nothing and no module imports it."""
    body = ast.parse(open(path).read()).body
    return all(
        isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        or (isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'")
        for node in body
    )


def import_graph():
    """{module: (hpstudy modules it imports, other top-level packages it imports)}, counting imports
    inside functions too, not those only a type checker runs (`if TYPE_CHECKING:`)."""
    files = module_files()
    graph = {}
    for module, path in files.items():
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                node.body = []
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        graph[module] = ({n for n in names if n in files}, {n.split(".")[0] for n in names} - {"hpstudy"})
    return graph


def test_layers_point_one_way():
    """trainers <- analysis (its torch-free trainers modules only) and trainers <- study; the command line
    (hpstudy.cli, hpstudy.commands) above both; no exemptions but entry scripts, which define nothing."""
    allowed = {
        "trainers": {"trainers"},
        "study": {"trainers", "study"},
        "analysis": {"analysis"},
        "cli": {"trainers", "study", "analysis", "cli"},
    }
    graph, files = import_graph(), module_files()
    assert {"hpstudy.study.store.layout", "hpstudy.trainers.schema"} <= graph["hpstudy.study.tune.store_writer"][
        0
    ]  # edges are seen
    assert "hpstudy.cli" in graph["hpstudy.study.run_edf"][0] and is_entry_script(files["hpstudy.study.run_edf"])
    assert not is_entry_script(files["hpstudy.study.runner"])
    for module, (internal, external) in graph.items():
        if is_entry_script(files[module]):
            continue
        layer = layer_of(module)
        outside = {m for m in internal if layer_of(m) not in allowed[layer]}
        if layer == "analysis":  # the library: DataFrames in, tables and figures out
            outside -= TORCH_FREE_TRAINERS
            assert not external & {"torch", "timm", "ray"}, (module, external)
        assert not outside, f"{module} imports {sorted(outside)}"


def test_no_import_cycles():
    graph = {module: internal for module, (internal, _) in import_graph().items()}
    state = {}

    def visit(module, path):
        state[module] = "open"
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                raise AssertionError(f"import cycle: {' -> '.join(path + [dep])}")
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize(
    "modules,banned",
    [
        (
            [
                "hpstudy.analysis.edf",
                "hpstudy.analysis.stats",
                "hpstudy.analysis.gaps",
                "hpstudy.analysis.figures",
                "hpstudy.analysis.report",
            ],
            ["torch", "timm", "ray", "study"],
        ),
        (
            ["hpstudy.trainers.schema", "hpstudy.trainers.zoo", "hpstudy.trainers.errors"],
            ["torch", "timm", "ray", "study", "analysis"],
        ),
        pytest.param(
            ["hpstudy.trainers.trial", "hpstudy.trainers.fused", "hpstudy.trainers.train", "hpstudy.trainers.flops"],
            ["ray", "study", "analysis"],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_what_a_layer_loads_at_run_time(modules, banned):
    code = (
        f"import sys\nfor m in {modules!r}: __import__(m)\n"
        f"parts = [m.split('.') for m in sys.modules]\n"
        f"print(sorted({{p[1] if p[0] == 'hpstudy' and len(p) > 1 else p[0] for p in parts}} & {set(banned)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _store_without_study(tmp_path):
    return ["--store", str(tmp_path / "empty")]


def train_main(argv):
    """hpstudy.trainers.train.main, the one-trial trainer's command line (imported when called: it imports torch)."""
    from hpstudy.trainers.train import main

    return main(argv)


@pytest.mark.parametrize(
    "entry,argv,message",
    [
        (hpstudy_main, ["report", "--study", "nope"], "--store: no hpstudy store at"),
        (hpstudy_main, ["status", "--study", "nope"], "--store: no hpstudy store at"),
        (hpstudy_main, ["query", "no_such_column > 1"], "--store: no hpstudy store at"),
        (hpstudy_main, ["run", "--config", "/no/such.yaml"], "--config: '/no/such.yaml' is not a file"),
        (run_edf_main, ["--max-concurrent", "0", "--dry-run"], "--max-concurrent: bad value 0"),
        (
            train_main,
            ["--model", "cnn_tiny", "--optimizer", "adamw", "--epochs", "1", "--lr", "-1", "--wd", "0"],
            "lr: bad value -1.0; allowed: > 0",
        ),
        (
            train_main,
            [
                "--model",
                "cnn_tiny",
                "--optimizer",
                "adamw",
                "--epochs",
                "1",
                "--lr",
                "1",
                "--wd",
                "0",
                "--dataset",
                "cifar10",
                "--data-path",
                "/no/such",
            ],
            "/no/such",
        ),
    ],
)
def test_every_entry_point_turns_a_user_error_into_exit_2(entry, argv, message, tmp_path, capsys):
    if entry is not train_main:
        argv = argv + _store_without_study(tmp_path)
    assert entry(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", [["query", "x > 1"], ["report"], ["status"], ["compact"]])
def test_a_bad_study_name_is_named_before_a_bad_store(command, capsys):
    """Every command that takes both names a bad --study first (the store is never opened for it)."""
    assert hpstudy_main([*command, "--study", "../bad", "--store", "nosuch://x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --study: bad value '../bad'") and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["hpstudy", "report", "--study", "nope"],
        [sys.executable, os.path.join(REPO, "study", "run_edf.py"), "--config", "/no/such.yaml", "--dry-run"],
    ],
)
def test_installed_commands_exit_2_without_a_traceback(command, tmp_path):
    if command[0] == "hpstudy":
        command = [os.path.join(os.path.dirname(sys.executable), "hpstudy")] + command[1:]
    out = subprocess.run(command + ["--store", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.startswith("error: "), out.stderr


@pytest.mark.slow
def test_importing_the_study_runner_changes_no_environment():
    """hpstudy sets Tune's variables when Ray starts, not at import (Ray and torch set their own)."""
    from hpstudy.study.ray_session import TUNE_ENV

    code = (
        "import os\nimport hpstudy.study.runner, hpstudy.cli, hpstudy.commands, hpstudy.study.trainable\n"
        "print(sorted(k for k in hpstudy.study.ray_session.TUNE_ENV if k in os.environ))"
    )
    env = {k: v for k, v in os.environ.items() if k not in TUNE_ENV}  # a study run in this process set them
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]", out.stdout


def _test_files():
    """Every Python file below tests/, relative to it (tests/<package>/test_<module>.py and the rest)."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), TESTS)
        for folder, _, names in os.walk(TESTS)
        for name in names
        if name.endswith(".py")
    )


def _test_modules():
    """Every module below tests/, dotted (tests.study.test_store), and by its own name (test_store)."""
    dotted = {"tests." + name[:-3].replace(os.sep, ".") for name in _test_files()}
    return dotted, {name.rsplit(".", 1)[-1]: name for name in dotted}


def _imported_test_modules(path, package="tests"):
    """The modules of tests/ that a file of `package` imports (inside functions too), dotted."""
    dotted, by_name = _test_modules()
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(filter(None, [package if node.level else None, node.module]))
            modules = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for module in modules:
            if module.split(".")[0] == "tests" and module != "tests" and not module.endswith(".__init__"):
                found.add(module)
            elif module in by_name:  # a bare `import test_optim`
                found.add(by_name[module])
    return {m for m in found if m in dotted or m.rsplit(".", 1)[-1].startswith("test_") or m in SHARED_TEST_MODULES}


@pytest.mark.parametrize("name", _test_files())
def test_test_modules_import_shared_helpers_from_tests_helpers_only(name):
    """A helper two test modules use lives in tests/helpers.py (or is a conftest fixture): no test
    module imports another, so each can be moved, renamed or run alone."""
    package = ".".join(["tests", *os.path.dirname(name).split(os.sep)]).rstrip(".")
    others = _imported_test_modules(os.path.join(TESTS, name), package) - SHARED_TEST_MODULES
    assert not others, f"tests/{name} imports {sorted(others)}; move the helper to tests/helpers.py"


def test_the_import_check_sees_every_spelling_of_a_test_module_import(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text(
        "from tests.study.test_store import a\nimport tests.cli.test_commands\n"
        "from tests.trainers import test_data\nfrom tests import helpers\n"
        "from . import test_fused\nfrom .test_coatnet import b\nimport test_optim\n"
        "def f():\n    from tests.helpers import row\n    import numpy\n"
    )
    assert _imported_test_modules(path, "tests.trainers") - SHARED_TEST_MODULES == {
        "tests.study.test_store",
        "tests.cli.test_commands",
        "tests.trainers.test_data",
        "tests.trainers.test_fused",
        "tests.trainers.test_coatnet",
        "tests.trainers.test_optim",
    }


def test_every_test_file_sits_with_the_code_it_tests_or_in_a_suite_named_for_what_it_guards():
    """tests/<package>/test_<module>.py for unit tests (bench/'s scripts too), tests/<package>/<subpackage>/ for a
    subpackage's (tests/study/store/ for hpstudy/study/store/); contracts, parity, hostile and e2e for cross-cutting
    suites."""
    homes = {"trainers", "study", "analysis", "cli", "bench", "contracts", "parity", "hostile", "e2e"}
    for name in _test_files():
        folder = os.path.dirname(name)
        home, _, subpackage = folder.partition(os.sep)
        assert home in homes | {""}, name
        # the package as Python finds it (the checkout's, or an installed wheel's: .ci/wheel runs these tests so)
        assert not subpackage or importlib.util.find_spec(f"hpstudy.{folder.replace(os.sep, '.')}"), name
        assert folder or not os.path.basename(name).startswith("test_"), f"tests/{name}: not filed by module or suite"


def _by_defaults():
    """{function: its default `by` columns} for every analysis function that groups by default."""
    found = {}
    for module in (
        "hpstudy.analysis.edf",
        "hpstudy.analysis.gaps",
        "hpstudy.analysis.stats",
        "hpstudy.analysis.findings",
        "hpstudy.analysis.report",
    ):
        for name, function in inspect.getmembers(importlib.import_module(module), inspect.isfunction):
            by = inspect.signature(function).parameters.get("by")
            if function.__module__ == module and by is not None and by.default not in (inspect.Parameter.empty, ()):
                found[f"{module}.{name}"] = list(by.default)
    return found


def _query_default_columns(tmp_path, monkeypatch):
    """The columns `hpstudy query` shows when --columns is not given."""
    asked = []
    monkeypatch.setattr(hpstudy.commands, "query", lambda store, study, expr, columns: asked.append(columns) or "")
    assert hpstudy_main(["query", "status == 'ok'", "--store", str(tmp_path)]) == 0
    return asked[0].split(",")


def test_every_column_the_analysis_and_the_cli_ask_for_is_a_stored_trial_column(tmp_path, monkeypatch):
    """A column renamed or dropped in hpstudy.trainers.schema fails here, not as a KeyError in a user's report."""
    from hpstudy.analysis.report import CELL
    from hpstudy.study.runner import SUMMARY_COLUMNS

    asked = {
        "hpstudy.analysis.metric.METRIC_COLUMNS": list(METRIC_COLUMNS.values()),
        "hpstudy.analysis.report.CELL": CELL,
        "hpstudy.study.runner.SUMMARY_COLUMNS": SUMMARY_COLUMNS,
        "hpstudy query --columns": _query_default_columns(tmp_path, monkeypatch),
        **_by_defaults(),
    }
    assert {"hpstudy.analysis.edf.edf_table", "hpstudy.analysis.gaps.optimizer_gap"} <= set(
        asked
    )  # the `by` defaults were found
    unknown = {where: sorted(set(columns) - set(TRIAL_FIELDS) - {PARTITION_COLUMN}) for where, columns in asked.items()}
    assert not {where: names for where, names in unknown.items() if names}


def test_a_failed_trials_row_is_a_complete_schema_row_from_its_planned_trial(tmp_path):
    """failed_row: exactly the schema's keys, status failed, no result, the error's last 4000
    characters, and the config columns of the trial that was planned; the store takes it as is."""
    from hpstudy.study.tune.store_writer import failed_row

    trial = expand(parse_spec(small_spec(models=["cnn_tiny"], optimizers=["sgd"], samples=1)))[0]
    error = "Traceback (most recent call last):\n" + "x" * 5000 + "\nRuntimeError: boom"
    row = failed_row(trial, error)
    assert set(row) == set(TRIAL_FIELDS)
    assert row["status"] == FAILED and row["trial_key"] == trial.key
    assert row["error"] == error[-4000:] and row["error"].endswith("RuntimeError: boom") and len(row["error"]) == 4000
    assert failed_row(trial, "short")["error"] == "short"
    results = [name for name in RESULT_FIELDS if name != "status"]
    assert {name: row[name] for name in results} == dict.fromkeys(results)
    assert (row["model"], row["family"], row["optimizer"], row["epochs"], row["seed"]) == (
        trial.model,
        "cnn",
        trial.optimizer,
        trial.epochs,
        trial.seed,
    )
    assert (row["lr"], row["wd"], row["dataset"], row["batch_size"]) == (
        trial.config["lr"],
        trial.config["wd"],
        "digits",
        64,
    )
    assert json.loads(row["config_json"])["lr"] == trial.config["lr"] and row["finished_at"].tzinfo == timezone.utc
    write_trial(str(tmp_path), "s", row)
    stored = load_trials(str(tmp_path), "s")
    assert list(zip(stored["trial_key"], stored["status"], stored["error"])) == [(trial.key, FAILED, error[-4000:])]


@pytest.mark.slow  # two subprocesses that import torch and Ray (about 11 s): keeps the fast tier under 90 s
@pytest.mark.parametrize("entry", ["module", "script"])
def test_a_users_own_study_and_analysis_modules_do_not_shadow_hpstudys(tmp_path, entry):
    """Every import goes through the hpstudy root: a notebook folder with its own study.py, analysis.py and
    trainers.py (each failing on import) runs the commands as usual."""
    for name in ("study", "analysis", "trainers"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('the user\\'s own {name}.py was imported')\n")
    command = ["-m", "hpstudy.study.run_edf"] if entry == "module" else [os.path.join(REPO, "study", "run_edf.py")]
    out = subprocess.run(
        [sys.executable, *command, "--dry-run", "--store", str(tmp_path / "s")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "study demo_digits: 32 trials, 32 to run" in out.stdout
