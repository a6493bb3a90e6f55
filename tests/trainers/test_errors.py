"""The entry-point wrappers of hpstudy.trainers.errors: a user's error is exit code 2 and one line;
exit_with passes each way of ending on as the process's exit code and skips the exit-time collections."""

import subprocess
import sys

import pytest

from hpstudy.trainers.errors import ConfigError, exits_on_user_error, shown


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
