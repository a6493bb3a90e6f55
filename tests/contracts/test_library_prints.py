"""The library prints nothing itself (issue #40 item 3): every module of hpstudy.trainers, hpstudy.study and
hpstudy.analysis says what it has to say through its logger, so a notebook can silence or capture a run; only
the command line's edges print (their result, their `error:` line) and the console handler writes the logged
lines on a terminal."""

import ast

from tests.helpers import module_files

LIBRARY = ("hpstudy.trainers.", "hpstudy.study.", "hpstudy.analysis.")
# (module, function): the command line's edges, which print what the command answers
EDGES = {
    ("hpstudy.trainers.train", "main"),  # `python -m hpstudy.trainers.train`: the result line (or JSON)
    ("hpstudy.trainers.errors", "wrapped"),  # exits_on_user_error's wrapper of each entry point: `error: ...`
}
CONSOLE = "hpstudy.trainers.console"  # the handler that writes the logged lines on stdout and stderr


def _writes(tree: ast.AST):
    """(enclosing function, line, what) of each print() call and sys.stdout/sys.stderr use in a module."""

    def walk(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "print":
                yield inner, child.lineno, "print("
            if (
                isinstance(child, ast.Attribute)
                and child.attr in ("stdout", "stderr", "__stdout__", "__stderr__")
                and isinstance(child.value, ast.Name)
                and child.value.id == "sys"
            ):
                yield inner, child.lineno, f"sys.{child.attr}"
            yield from walk(child, inner)

    return walk(tree, None)


def test_no_library_module_prints_or_writes_to_stdout_or_stderr():
    found, edges = [], set()
    for module, path in module_files().items():
        if not module.startswith(LIBRARY) or module == CONSOLE:
            continue
        for function, line, what in _writes(ast.parse(open(path).read())):
            if (module, function) in EDGES:
                edges.add((module, function))
            else:
                found.append(f"{path}:{line}: {what} in {function or 'the module'}")
    assert found == [], "log through the module's logger (logging.getLogger(__name__)) instead:\n" + "\n".join(found)
    assert edges == EDGES  # each exemption is still an edge that prints (none left stale)


def test_the_check_finds_a_print_and_a_stream_write():
    tree = ast.parse("import sys\ndef f():\n    print('x')\n    sys.stderr.write('y')\nprint(1)\n")
    assert sorted(_writes(tree), key=lambda w: w[1]) == [
        ("f", 3, "print("),
        ("f", 4, "sys.stderr"),
        (None, 5, "print("),
    ]


def test_a_module_run_as_a_script_names_its_logger_under_hpstudy():
    """getLogger(__name__) in a module that `python -m` runs (`if __name__ == "__main__"`) would be the logger
    `__main__`, outside `hpstudy`, whose console handler the command installs: its lines would not show."""
    wrong, scripts = [], set()
    for module, path in module_files().items():
        tree = ast.parse(open(path).read())
        if not any(isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'" for n in tree.body):
            continue
        scripts.add(module)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node) == "logging.getLogger(__name__)":
                wrong.append(f"{path}:{node.lineno}: name the logger (e.g. {module!r}), not __name__")
    assert wrong == [] and "hpstudy.trainers.train" in scripts
