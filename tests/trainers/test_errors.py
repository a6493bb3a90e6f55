"""The entry-point wrappers of hpstudy.trainers.errors: a user's error is exit code 2 and one line;
exit_with passes each way of ending on as the process's exit code and skips the exit-time collections."""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpstudy.trainers.errors import MAX_SHOWN, ConfigError, exits_on_user_error, printable, shown

ANY_TEXT = st.text(st.characters(codec=None), max_size=30)  # any code point: surrogates, line breaks, NUL


def test_a_users_error_is_exit_code_2_and_one_error_line(capsys):
    @exits_on_user_error
    def main() -> int:
        raise ConfigError("lr: bad value -1.0; allowed: > 0")

    assert main() == 2
    assert capsys.readouterr().err == "error: lr: bad value -1.0; allowed: > 0\n"


def test_any_other_error_keeps_its_traceback():
    @exits_on_user_error
    def main() -> int:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        main()


def test_a_huge_value_is_shown_abbreviated():
    text = shown(list(range(100_000)))
    assert len(text) < 100 and "..." in text


class Lines:
    def __repr__(self) -> str:  # as a DataFrame's repr: several lines
        return "a\nb\udcff"


@given(
    value=st.one_of(
        ANY_TEXT,
        st.recursive(
            ANY_TEXT | st.integers() | st.binary(), lambda inner: st.lists(inner) | st.dictionaries(ANY_TEXT, inner)
        ),
        st.just(Lines()),
    )
)
def test_shown_is_one_printable_line_of_at_most_the_limit_whatever_it_shows(value):
    text = shown(value)
    assert text.isprintable() and len(text) <= MAX_SHOWN + 3, text  # no line break, no surrogate
    text.encode("utf-8")  # what a UTF-8 stream can write


@given(text=ANY_TEXT)
def test_printable_escapes_exactly_the_characters_a_terminal_does_not_print(text):
    escaped = printable(text)
    assert escaped.isprintable() and (escaped == text) == text.isprintable()
    kept = [c for c in text if c.isprintable()]
    assert [c for c in escaped if not c.isascii()] == [c for c in kept if not c.isascii()]
    assert printable("a\nb\udcff\x07é") == "a\\nb\\udcff\\x07é"


def test_a_message_holding_text_that_is_not_utf8_prints_as_one_error_line(capsys):
    @exits_on_user_error
    def main() -> int:
        raise ConfigError(f"query {shown(chr(0xDCFF))}: {printable('not' + chr(10) + 'UTF-8')}")

    assert main() == 2
    assert capsys.readouterr().err == "error: query '\\udcff': not\\nUTF-8\n"


@pytest.mark.parametrize(
    "main, code",
    [("lambda: 0", 0), ("lambda: 3", 3), ("lambda: sys.exit(2)", 2), ("lambda: sys.exit(None)", 0)],
)
def test_exit_with_exits_with_the_entry_points_code_and_frozen_objects(main, code):
    # atexit handlers run after exit_with has frozen the heap and before the exit-time collections
    probe = (
        "import atexit, gc, sys\n"
        "from hpstudy.trainers.errors import exit_with\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        f"exit_with({main})\n"
        "print('not reached')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (code, "frozen True\n")
