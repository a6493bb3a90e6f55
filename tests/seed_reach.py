"""A pytest plugin that fails a test whose varied seed reaches nothing (on for every run: tests/conftest.py).

A test that passes an hpstudy function more than one seed (parametrized, drawn by Hypothesis, or in a
loop) claims something across seeds: "no verdict depends on the seed", "the band is the loop's band
for this seed". It cannot fail on the seed's account when the function's result does not depend on
the seed it is given: a seed ignored, or one that decides nothing on the test's data. Every function of
hpstudy with a `seed` or `seeds` parameter is wrapped as its module is imported (an import hook: the plugin
imports nothing of hpstudy itself); where a call from outside hpstudy passes one,
and the test has passed that function another seed before, the plugin calls the function again with
another seed (every integer in it + 1) and compares the results by content. A test whose seeds took two
or more values, none of whose calls gave another result under another seed, is named at the end and
fails the session. Under pytest-xdist each worker sends what it saw to the controller, which decides.

Only seeds a test passes count (a default is not varied by the test), and only integer seeds (also
inside dataclasses and tuples: `Seeds`); a generator passed as a seed is not probed.
`-p no:tests.seed_reach` turns the plugin off (the mutation bench does: a probe would run mutants twice).
"""

import dataclasses
import functools
import hashlib
import importlib
import importlib.abc
import inspect
import json
import os
import sys
from collections import defaultdict
from typing import Any, Callable, Dict, Optional, Set

import numpy as np
import pandas as pd
import pytest

SEED_NAMES = ("seed", "seeds")
PROBES = 3  # calls re-run with another seed, per test and function, before the seed counts as reaching nothing


def fingerprint(value: Any) -> str:
    """A digest of a value's content: arrays and frames by their data, dataclasses and containers by their items."""
    digest = hashlib.sha256()

    def feed(v: Any) -> None:
        if isinstance(v, np.ndarray):
            digest.update(repr((v.dtype.str, v.shape)).encode())
            digest.update(repr(v.tolist()).encode() if v.dtype == object else np.ascontiguousarray(v).tobytes())
        elif isinstance(v, (pd.DataFrame, pd.Series)):
            digest.update(repr((list(v.columns) if isinstance(v, pd.DataFrame) else v.name, v.shape)).encode())
            digest.update(pd.util.hash_pandas_object(v, index=True).to_numpy().tobytes())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            digest.update(type(v).__name__.encode())
            for field in dataclasses.fields(v):
                feed(getattr(v, field.name))
        elif isinstance(v, dict):
            for key, item in v.items():
                feed(key)
                feed(item)
        elif isinstance(v, (list, tuple)):
            digest.update(b"[")
            for item in v:
                feed(item)
            digest.update(b"]")
        else:
            digest.update(repr(v).encode())

    feed(value)
    return digest.hexdigest()


def another(seed: Any) -> Any:
    """The same kind of seed, every integer in it one higher, in dataclasses and tuples too (None: no other seed)."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return seed + 1
    if dataclasses.is_dataclass(seed) and not isinstance(seed, type):
        changed = {f.name: another(getattr(seed, f.name)) for f in dataclasses.fields(seed)}
        kept = {name: value for name, value in changed.items() if value is not None}
        return dataclasses.replace(seed, **kept) if kept else None
    if isinstance(seed, tuple):
        changed = [another(v) for v in seed]
        if all(v is None for v in changed):
            return None
        items = [old if new is None else new for new, old in zip(changed, seed)]
        return type(seed)(*items) if hasattr(seed, "_fields") else tuple(items)
    return None


class WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds hpstudy's modules as the other finders do and, once a module has run, hands it to `loaded`."""

    def __init__(self, loaded: Callable) -> None:
        self.loaded = loaded

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] != "hpstudy":
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = LoadThenWrap(spec.loader, self.loaded)
                    return spec
        return None


class LoadThenWrap(importlib.abc.Loader):
    """A module loader that runs the module as `loader` does, then hands it to `loaded`."""

    def __init__(self, loader, loaded: Callable) -> None:
        self.loader, self.loaded = loader, loaded

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.loaded(module)

    def __getattr__(self, name):  # get_source, is_package, ...: the loader's own
        return getattr(self.loader, name)


class SeedReach:
    """What one process saw: per test, the seeds each function was passed and the functions a seed reached."""

    def __init__(self) -> None:
        self.seen: Dict[str, Dict[str, Set[str]]] = defaultdict(lambda: defaultdict(set))
        self.reached: Dict[str, Set[str]] = defaultdict(set)
        self.probed: Dict[str, Dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.test: Optional[str] = None
        self.probing = False
        self.wrapped = 0
        self.wrappers: Dict[int, Callable] = {}  # by the id of the function wrapped
        self.wrapper_ids: Set[int] = set()

    def wrap(self, fn: Callable, name: str, package: str) -> Callable:
        """`fn` recording and probing the seed passed as `name` by calls from outside `package` (hpstudy's folder)."""
        signature = inspect.signature(fn)
        label = f"{fn.__module__}.{fn.__qualname__}"

        @functools.wraps(fn)
        def probed(*args, **kwargs):
            out = fn(*args, **kwargs)
            if self.probing or self.test is None or sys._getframe(1).f_code.co_filename.startswith(package):
                return out
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return out
            other = another(bound.arguments.get(name))
            if other is None:
                return out
            seen = self.seen[self.test][label]
            seen.add(fingerprint(bound.arguments[name]))
            if len(seen) < 2 or label in self.reached[self.test] or self.probed[self.test][label] >= PROBES:
                return out
            self.probed[self.test][label] += 1
            bound.arguments[name] = other
            self.probing = True
            try:
                again: Any = fn(*bound.args, **bound.kwargs)
            except Exception:  # a seed under which the call fails where the first did not reaches its outcome
                again = object()
            finally:
                self.probing = False
            if fingerprint(again) != fingerprint(out):
                self.reached[self.test].add(label)
            return out

        return probed

    def install(self) -> None:
        """Wraps every function hpstudy defines with a seed parameter, wherever a module holds it: in the hpstudy
        modules imported so far now, and in each one imported later as soon as it has run (an import hook: the
        plugin imports nothing itself, so a run imports only what its tests do)."""
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] == "hpstudy":
                self.wrap_module(module)
        if not any(isinstance(finder, WrapOnImport) for finder in sys.meta_path):  # one hook, whoever installs
            sys.meta_path.insert(0, WrapOnImport(self.wrap_module))

    def wrap_module(self, module) -> None:
        """Wraps the seeded functions `module` defines, then points every loaded hpstudy and test module that holds
        one of them (imported by name, or in an import cycle) at its wrapper."""
        package = os.path.dirname(sys.modules["hpstudy"].__file__)  # a package runs before its modules
        added = {}
        for value in list(vars(module).values()):
            if (
                inspect.isfunction(value)
                and (value.__module__ or "").startswith("hpstudy")  # a factory's function too
                and id(value) not in self.wrappers
                and id(value) not in self.wrapper_ids
            ):
                name = next((p for p in SEED_NAMES if p in inspect.signature(value).parameters), None)
                if name is not None:
                    added[id(value)] = self.wrap(value, name, package)
        if not added:
            return
        self.wrappers.update(added)
        self.wrapper_ids.update(id(wrapper) for wrapper in added.values())
        for held_name, held in list(sys.modules.items()):
            if held_name.split(".")[0] in ("hpstudy", "tests"):
                for attr, value in list(vars(held).items()):
                    if id(value) in added:
                        setattr(held, attr, added[id(value)])
        self.wrapped = len(self.wrappers)

    def as_json(self) -> str:
        """What this process saw, for the controller of an xdist run."""
        seen = {
            test: {label: sorted(seeds) for label, seeds in functions.items()} for test, functions in self.seen.items()
        }
        reached = {test: sorted(labels) for test, labels in self.reached.items()}
        return json.dumps({"wrapped": self.wrapped, "seen": seen, "reached": reached})

    def merge(self, text: str) -> None:
        """Adds what a worker saw."""
        data = json.loads(text)
        self.wrapped = max(self.wrapped, data["wrapped"])
        for test, functions in data["seen"].items():
            for label, seeds in functions.items():
                self.seen[test][label].update(seeds)
        for test, labels in data["reached"].items():
            self.reached[test].update(labels)

    def unreached(self) -> Dict[str, list]:
        """The tests whose seeds took several values and reached no function's result, with those functions."""
        return {
            test: sorted(label for label, seeds in functions.items() if len(seeds) > 1)
            for test, functions in self.seen.items()
            if any(len(seeds) > 1 for seeds in functions.values()) and not self.reached[test]
        }

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        self.test = item.nodeid.split("[")[0]  # a parametrized test's items are one test across their seeds
        try:
            return (yield)
        finally:
            self.test = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        if "seed_reach" in getattr(node, "workeroutput", {}):
            self.merge(node.workeroutput["seed_reach"])

    def pytest_sessionfinish(self, session, exitstatus):
        if hasattr(session.config, "workeroutput"):
            session.config.workeroutput["seed_reach"] = self.as_json()
        elif self.unreached() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        found = self.unreached()
        varied = sum(any(len(s) > 1 for s in functions.values()) for functions in self.seen.values())
        terminalreporter.write_line(
            f"seed_reach: {self.wrapped} seeded functions; {varied} tests vary a seed; {len(found)} reach nothing"
        )
        for test, labels in sorted(found.items()):
            terminalreporter.write_line(
                f"SEED REACHES NOTHING {test}: its seeds change no result of {', '.join(labels)}"
            )


def pytest_configure(config):
    config.pluginmanager.register(SeedReach(), "seed_reach_state")


def pytest_sessionstart(session):
    # wrapped before collection imports the test modules; not on an xdist controller, which runs no test
    if not session.config.pluginmanager.hasplugin("dsession"):
        session.config.pluginmanager.get_plugin("seed_reach_state").install()
