"""One error type for everything a user can get wrong: each entry point turns it into exit code 2.

`HpstudyError` is the base; each layer raises its own subclass with a one-line message that names
the field (or path), the bad value and what is allowed. Anything else is a bug or an
infrastructure fault and keeps its traceback. `exits_on_user_error` and `exit_with` wrap the
entry points.
"""

import functools
import gc
import reprlib
import sys
from typing import Any, Callable, NoReturn, Union

MAX_SHOWN = 200  # characters of a value a message prints (a spec value can be megabytes)
_SHORT = reprlib.Repr()  # stops early in large or deep containers: a message never formats a whole expansion
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, MAX_SHOWN, MAX_SHOWN, MAX_SHOWN
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8


def printable(text: str) -> str:
    """`text` with each character that a terminal would not print as itself escaped as Python writes
    it: a line break as `\\n`, a control character as `\\x07`, a lone surrogate (a byte that was not
    UTF-8 in a command line, read with surrogateescape) as `\\udcff`. The result is one line, and
    any stream can write it (UTF-8 cannot encode a surrogate)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """`repr(value)` for a message, at most about `limit` characters: a large or deep container (a YAML
    alias bomb, 100,000 nested lists) is abbreviated with `...`, and so is a long text. It is one
    printable line (`printable`), whatever the value's own repr holds (a DataFrame's spans lines)."""
    try:
        text = printable(_SHORT.repr(value))
    except (RecursionError, MemoryError):
        return f"<{type(value).__name__} too deep to show>"
    return text if len(text) <= limit else f"{text[:limit]}..."


class HpstudyError(Exception):
    """A user's mistake (bad spec, flag, config, path or store): one line, exit code 2."""


class ConfigError(HpstudyError):
    """A trial config field has a bad value."""


class DataError(HpstudyError):
    """A dataset path is missing or malformed."""


class SchemaError(HpstudyError):
    """A row has a key the schema does not define, or lacks one it requires."""


def exits_on_user_error(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap an entry point: an HpstudyError prints `error: <message>` to stderr and returns 2."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except HpstudyError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return wrapped


def exit_with(main: Callable[[], int]) -> NoReturn:
    """Run an entry point and exit the process with its code, without the interpreter's collections
    at exit: with torch, timm and Ray loaded they walk every object several times (~1.5 s of each
    command on 2 cores) to free memory the process gives back anyway. Every file hpstudy writes is
    closed before a command returns, and objects freed by reference counting still are."""
    code: Union[int, str, None]
    try:
        code = main()
    except SystemExit as stop:  # argparse's --help, --version and usage errors
        code = stop.code
    gc.freeze()
    sys.exit(code)
