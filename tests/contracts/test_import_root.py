"""One import root that tools follow (docs/architecture.md#one-import-root): every module lives in hpstudy/
on disk, trainers/, study/ and analysis/ at the top level are links into it, an editor's go-to-definition
reaches each public name's file and line, and Python started in the checkout imports the files it imports
anywhere else."""

import ast
import functools
import json
import os
import subprocess
import sys

import jedi
import pytest

from tests.helpers import REPO, module_files

LINKS = ("trainers", "study", "analysis")


@pytest.mark.parametrize("name", LINKS)
def test_the_top_level_folders_are_links_into_the_package(name):
    path = os.path.join(REPO, name)
    assert os.path.islink(path) and os.readlink(path) == os.path.join("hpstudy", name)
    package = os.path.join(REPO, "hpstudy", name)
    assert os.path.isdir(package) and not os.path.islink(package)


def _public_names(path):
    """(name, line) of each public function and class a module defines at its top level."""
    tree = ast.parse(open(path).read())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [(node.name, node.lineno) for node in tree.body if isinstance(node, kinds) and not node.name.startswith("_")]


@functools.lru_cache(maxsize=None)
def _environment():
    """The interpreter running the tests, as jedi's environment: the install under test (by default jedi takes
    an activated virtualenv's, which may hold another checkout's install)."""
    return jedi.create_environment(sys.executable, safe=False)


def _definition(module, name):
    """(file, line) where jedi's go-to-definition takes `name` imported from `module`, from a file outside
    the checkout."""
    script = jedi.Script(
        f"from {module} import {name}\n{name}\n", path="/tmp/hpstudy_goto.py", environment=_environment()
    )
    found = script.goto(2, 0, follow_imports=True)
    return [(os.path.realpath(str(d.module_path)), d.line) for d in found]


def test_go_to_definition_reaches_every_public_name_of_every_module():
    missed = []
    for module, path in module_files().items():
        for name, line in _public_names(path):
            got = _definition(module, name)
            if (os.path.realpath(path), line) not in got:
                missed.append(f"{module}.{name}: {got}")
    assert not missed, missed


def _imported_files(cwd):
    """{module: file} of the packages' modules as a fresh interpreter started in `cwd` imports them."""
    modules = ["hpstudy.trainers.schema", "hpstudy.study.spec", "hpstudy.analysis.metric", "hpstudy.cli"]
    files = f"{{m: importlib.import_module(m).__file__ for m in {modules!r}}}"
    script = f"import importlib, json; print(json.dumps({files}))"
    out = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return {module: os.path.realpath(file) for module, file in json.loads(out.stdout).items()}


def test_python_started_in_the_checkout_imports_the_files_it_imports_elsewhere(tmp_path):
    inside, outside = _imported_files(REPO), _imported_files(tmp_path)
    assert inside == outside
    assert all(file.startswith(os.path.join(os.path.realpath(REPO), "hpstudy") + os.sep) for file in inside.values())
