"""A JSON file replaced whole (a temporary file beside it, then os.replace): readers and concurrent writers never
see half a file. The caches of hpstudy (model counts, fusion measurements) are written this way."""

import contextlib
import json
import os
import tempfile
from typing import Any


def replace_json(path: str, data: Any, **dump: Any) -> None:
    """Write `data` as JSON to `path` through a temporary file in its folder (made if missing), synced and renamed
    over it; OSError if it cannot be written, with no temporary file left behind. `dump`: json.dump's options."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    temp = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=folder, prefix=f".{os.path.basename(path)}.", delete=False
        ) as f:
            temp = f.name
            json.dump(data, f, **dump)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except OSError:
        if temp:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        raise
