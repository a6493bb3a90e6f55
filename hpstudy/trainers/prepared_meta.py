"""A prepared folder's meta.json as a study reads it: `read_meta` and `data_digest`, the digest a trial key
names for a preparation. No torch: reading a spec pins a prepared folder's digest with these
(hpstudy.trainers.data_spec.pin_data); writing and serving the arrays is hpstudy.trainers.prepared."""

import hashlib
import json
import os
from typing import Dict, Optional

from hpstudy.trainers.errors import DataError, shown

ARRAYS = ("train_x", "train_y", "val_x", "val_y")
MARK = ("version", "source", "train_size", "image_size", "files_digest", "classes", "sha256")  # in every meta.json


def data_digest(meta: Dict) -> str:
    """What a trial key names for a prepared folder: a sha256 over its classes and its arrays' sha256s."""
    return hashlib.sha256(json.dumps([meta["classes"], meta["sha256"]], sort_keys=True).encode()).hexdigest()


def own_meta(folder: str) -> Optional[Dict]:
    """`folder`'s meta.json when `hpstudy prepare` wrote it (its format fields are there), else None."""
    try:
        with open(os.path.join(folder, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError, RecursionError):  # missing, unreadable or not JSON
        return None
    ok = (
        isinstance(meta, dict)
        and all(k in meta for k in MARK)
        and isinstance(meta["sha256"], dict)
        and all(isinstance(meta["sha256"].get(name), str) for name in ARRAYS)
    )
    return meta if ok else None


def read_meta(path: str) -> Dict:
    """The meta.json of a folder written by `hpstudy prepare`; DataError naming the folder otherwise."""
    meta = own_meta(path)
    if meta is None:
        raise DataError(
            f"dataset 'prepared': {shown(path)} has no meta.json written by `hpstudy prepare`; "
            f"make it with `hpstudy prepare --data <image folder> --out {path}`"
        )
    return meta
