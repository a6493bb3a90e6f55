"""One error type for everything a user can get wrong: each entry point turns it into exit code 2.

`HpstudyError` is the base; each layer raises its own subclass with a one-line message that names
the field (or path), the bad value and what is allowed. Anything else is a bug or an
infrastructure fault and keeps its traceback.
"""

import functools
import sys
from typing import Callable


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
