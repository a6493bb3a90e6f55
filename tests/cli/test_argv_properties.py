"""Every command line given hostile values (any text: empty, line breaks, NUL-free control characters, lone
surrogates as a non-UTF-8 argv reads, huge numbers, names one letter off) in each of its value flags: it
exits 0 or 2, and a refusal is exactly one printable `error:` line on stderr naming what it refused; nothing
is written into the working folder."""

import contextlib
import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpstudy.cli import hpstudy_main

# the commands that read a store (a missing store, study or a bad value: exit 2), and `run` with a bad value
# in a flag argparse checks (refused before any spec is read)
COMMANDS = {
    "status": ["--store", "--study"],
    "report": ["--store", "--study", "--metric", "--out"],
    "findings": ["--store", "--study", "--metric"],
    "query": ["--store", "--study", "--columns", "--metric"],
    "suggest": ["--store", "--study", "--model", "--optimizer", "--metric"],
    "run": ["--max-concurrent", "--num-cpus", "--progress-interval", "--compact-every", "--progress"],
}
VALUES = st.one_of(
    st.text(st.characters(blacklist_characters="\x00"), max_size=20),
    st.sampled_from(["", "-1", "0", "nan", "1e400", str(10**30), "\udcff", "a\nb", "s", "stauts", "-x"]),
)


def _run(argv):
    """(exit code, stderr lines) of `hpstudy <argv>` in this process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = hpstudy_main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, err.getvalue().splitlines()


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), command=st.sampled_from(sorted(COMMANDS)))
def test_a_hostile_value_in_any_flag_is_refused_in_one_line_or_accepted(tmp_path, data, command):
    flag = data.draw(st.sampled_from(COMMANDS[command]), label="flag")
    value = data.draw(VALUES, label="value")
    store = str(tmp_path / "no-store")
    # run: a spec that is not there, so a value argparse accepts stops at the spec (exit 2), never trains
    argv = {"--store": store, "--study": "s"} if command != "run" else {"--config": str(tmp_path / "no-spec.yaml")}
    argv[flag] = value
    if command == "query":
        argv_list = [command, *[x for pair in argv.items() for x in pair], "top1_err < 5"]
    else:
        argv_list = [command, *[x for pair in argv.items() for x in pair]]
    with contextlib.chdir(tmp_path):
        code, err = _run(argv_list)
    assert code == 2, (argv_list, code, err)  # no store there, or a bad value: a user's mistake either way
    assert len(err) == 1 and err[0].isprintable() and "error:" in err[0], err
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)  # nothing written


@pytest.mark.parametrize("argv", [["run", "--max-concurrent", "x"], ["status", "--store"], ["bogus"], ["report"]])
def test_an_argument_error_is_one_line_that_points_to_the_help(argv):
    code, err = _run(argv)
    assert code == 2 and len(err) == 1 and err[0].endswith("--help"), err
