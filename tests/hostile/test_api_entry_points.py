"""Hostile values through the entry points of `import hpstudy`: `load`, `report`, `suggest` and `run`, each
argument given values of every wrong type and size (the hostile values of test_api_inputs: huge ints,
complex, bytes, NaN, containers, text that is not UTF-8, spans lines or holds NUL). Each call returns
what it should or raises an HpstudyError whose message is one printable line naming the argument; `run`
never gets as far as a trial (nor starts Ray) on a bad argument."""

import contextlib
import os
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpstudy
from hpstudy.study.store.layout import write_trial
from hpstudy.trainers.errors import HpstudyError
from tests.helpers import epoch_row, hostile_values, row, small_spec

HOSTILE = st.one_of(*hostile_values())
PATHS = st.one_of(HOSTILE, st.sampled_from(["", "a\x00b", "\ud800", b"/tmp", bytearray(b"x")]))
FUNCTION_SCOPED = [HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding study `s`: three finished trials of one cell."""
    root = str(tmp_path_factory.mktemp("api") / "store")
    for i in range(3):
        write_trial(root, "s", row(f"t{i}", "ok", 10.0 + i), [epoch_row(epoch=1)])
    return root


def _one_line(error: BaseException, names: tuple) -> None:
    """The message is one printable line that starts by naming the argument (or its command-line flag)."""
    text = str(error)
    assert text.isprintable(), repr(text)
    assert text.startswith(names), (names, text)


def _refused_or(call, names: tuple):
    """The call's result, or None when it raised an HpstudyError naming `names` in one line."""
    try:
        return call()
    except HpstudyError as error:
        _one_line(error, names)
        return None


@settings(max_examples=150, suppress_health_check=FUNCTION_SCOPED)
@given(value=PATHS)
def test_a_bad_store_is_one_line_naming_store(store, value):
    for call in (
        lambda: hpstudy.load(value, "s"),
        lambda: hpstudy.suggest(value, "s"),
    ):
        # a text that happens to name a folder without the study is refused too, naming what is missing
        assert _refused_or(call, ("store", "study", "no store", "no trials")) is None


@settings(max_examples=150, suppress_health_check=FUNCTION_SCOPED)
@given(value=PATHS.filter(lambda value: not (isinstance(value, str) and value == "s")))  # the stored study: CI drew it
def test_a_bad_study_is_one_line_naming_study(store, value):
    assert _refused_or(lambda: hpstudy.load(store, value), ("study",)) is None


@settings(max_examples=60, suppress_health_check=FUNCTION_SCOPED)
@given(
    field=st.sampled_from(["models", "optimizers", "metric"]), value=st.one_of(HOSTILE, st.lists(HOSTILE, max_size=3))
)
def test_every_argument_of_suggest_is_a_result_or_one_line_naming_it(store, field, value):
    flag = {"models": ("models", "--model"), "optimizers": ("optimizers", "--optimizer"), "metric": ("metric",)}
    got = _refused_or(lambda: hpstudy.suggest(store, "s", **{field: value}), flag[field])
    assert got is None or set(got) == {"points", "space"}


@settings(max_examples=40, deadline=None, suppress_health_check=FUNCTION_SCOPED)
@given(field=st.sampled_from(["out", "metric"]), value=PATHS)
def test_every_argument_of_report_is_a_folder_or_one_line_naming_it(store, tmp_path, field, value):
    if field == "out" and isinstance(value, str) and value and "\x00" not in value:
        value = str(tmp_path / "elsewhere" / "x")  # a text path is a folder it may write: not a hostile value
    got = _refused_or(lambda: hpstudy.report(store, "s", **{field: value}), (field,))
    assert got is None or os.path.isfile(os.path.join(got, "index.html"))


class Started(Exception):
    """Raised where `run` would start the study: its arguments were all accepted."""


def _start(*args, **kwargs):
    raise Started()


RUN_ARGUMENTS = ["spec", "store", "max_concurrent", "num_cpus", "resume", "report", "wait", "progress", "trackers"]
NAMES = {
    "max_concurrent": ("--max-concurrent", "max_concurrent"),
    "num_cpus": ("--num-cpus", "num_cpus"),
    "spec": ("spec", "--config", "config"),  # a text is read as a path or a bundled spec's name
    "trackers": ("trackers", "--track"),
}


@settings(max_examples=150, suppress_health_check=FUNCTION_SCOPED)
@given(
    field=st.sampled_from(RUN_ARGUMENTS),
    value=st.one_of(HOSTILE, PATHS),
)
def test_every_argument_of_run_is_accepted_or_refused_in_one_line_naming_it_before_any_trial(tmp_path, field, value):
    """A value `run` accepts reaches the study's start (where this test stops it: no Ray needed to check
    validation); any other is one line naming the argument, and nothing was stored."""
    store = tmp_path / "store"
    arguments = {"spec": small_spec(), "store": str(store), field: value}
    # a relative store text is a folder here: in the test's own folder, never the checkout
    with contextlib.chdir(tmp_path), mock.patch("hpstudy.study.runner.run_study", _start):
        try:
            hpstudy.run(**arguments)
        except Started:
            assert field not in ("spec",) or isinstance(value, str), value  # only a path/name text can be a spec
            return
        except HpstudyError as refused:
            _one_line(refused, NAMES.get(field, (field,)))
    assert not (store / "trials").exists()
