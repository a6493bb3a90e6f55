"""tests.helpers.require_programs: a test that needs a system program skips on a machine without it,
naming the Debian package, and fails where CI requires every program (HPSTUDY_REQUIRE_SYSTEM_PROGRAMS=1)."""

import sys

import pytest

from tests.helpers import REQUIRE_PROGRAMS, require_programs

ABSENT = "hpstudy-no-such-program-7f3a"


@pytest.mark.parametrize("required", [None, "0", "1"])
def test_a_missing_program_skips_naming_its_package_or_fails_where_required(monkeypatch, required):
    if required is None:
        monkeypatch.delenv(REQUIRE_PROGRAMS, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_PROGRAMS, required)
    outcome = pytest.fail.Exception if required == "1" else pytest.skip.Exception
    with pytest.raises(outcome) as raised:
        require_programs(**{ABSENT: "pkg-b", f"/usr/sbin/{ABSENT}": "pkg-a", sys.executable: "python3"})
    message = str(raised.value)
    assert "needs pkg-a, pkg-b (apt-get install pkg-a pkg-b)" in message and "python3" not in message
    assert "\n" not in message
    assert (REQUIRE_PROGRAMS in message) == (required == "1")


@pytest.mark.parametrize("required", [None, "1"])
def test_programs_that_exist_neither_skip_nor_fail(monkeypatch, required):
    monkeypatch.delenv(REQUIRE_PROGRAMS, raising=False)
    if required:
        monkeypatch.setenv(REQUIRE_PROGRAMS, required)
    assert require_programs(**{sys.executable: "python3", "sh": "dash"}) is None
