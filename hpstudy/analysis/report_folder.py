"""Report folders: hpstudy writes into a folder only when it is new, empty or an earlier report of its own,
and overwrites or deletes only the files that report's manifest lists.

A report folder holds MANIFEST, the names of the files hpstudy wrote there. A file the manifest does not
name (a user's notes.md, a hand-made figure) is never overwritten or deleted: a report that would
overwrite one is refused, naming it. Inside a store, a report folder (or the folder above it) that is a
symbolic link is refused, so nothing outside the store is written or deleted through it; only regular
files are ever replaced or deleted (a listed name that has become a link, a folder or a FIFO is left as
it is, and a report that would replace it is refused). The folder is flat (reports write no subfolders).
"""

import json
import os
import re
import stat
import tempfile
import uuid
from typing import Callable, Dict, Optional, Set

import pyarrow.fs as pafs

from hpstudy.trainers.errors import HpstudyError, shown

MANIFEST = ".hpstudy-report.json"
ALLOWED = "a new or empty folder, or one holding an hpstudy report"
# The files a report wrote before reports had a manifest (hpstudy 0.1): such a folder (its report.json is
# hpstudy's) is taken as a report whose manifest lists the files of these names that it holds.
UNLISTED_REPORT_FILE = re.compile(
    r"index\.html|report\.json|(delta_edf_[a-z]+_[0-9]+ep|hp_scatter_[a-z]+|error_vs_epochs"
    r"|delta_error_vs_epochs|generalization|expected_best)\.(pdf|svg|png|csv|json)"
)


class ReportError(HpstudyError):
    """A report folder that cannot be created, written or used: a bad path the user gave (exit code 2)."""


def _is_link(fs: pafs.FileSystem, path: str) -> bool:
    """Whether `path` is a symbolic link (only a local filesystem has them)."""
    return isinstance(fs, pafs.LocalFileSystem) and os.path.islink(path)


MAX_RECORD_BYTES = 1 << 20  # a manifest or report.json hpstudy reads: a report's are a few kB


def _entries(fs: pafs.FileSystem, folder: str) -> Dict[str, pafs.FileInfo]:
    """The entries directly in `folder`, by name."""
    return {info.base_name: info for info in fs.get_file_info(pafs.FileSelector(folder))}


def _is_regular_file(fs: pafs.FileSystem, info: pafs.FileInfo) -> bool:
    """Whether an entry is a plain file (not a folder, link, FIFO or device): the only kind hpstudy writes."""
    return (
        info.type == pafs.FileType.File
        and not _is_link(fs, info.path)
        and (not isinstance(fs, pafs.LocalFileSystem) or stat.S_ISREG(os.stat(info.path).st_mode))
    )


def _read_record(fs: pafs.FileSystem, info: pafs.FileInfo):
    """The JSON value of a small regular file; ValueError for anything else (a link, a FIFO, a device,
    a file over MAX_RECORD_BYTES, text that is not JSON or nests too deeply)."""
    if not _is_regular_file(fs, info):
        raise ValueError("not a regular file")
    if (info.size or 0) > MAX_RECORD_BYTES:
        raise ValueError(f"larger than {MAX_RECORD_BYTES} bytes")
    with fs.open_input_stream(info.path) as f:
        data = f.read(MAX_RECORD_BYTES + 1)
    try:
        return json.loads(data.decode())
    except RecursionError:
        raise ValueError("nested too deeply") from None


def owned(fs: pafs.FileSystem, folder: str, what: str, root: Optional[str] = None) -> Set[str]:
    """The names of the files in `folder` that an earlier hpstudy report wrote (so may be replaced or
    deleted: regular files its manifest lists); ReportError naming `what` when hpstudy may not write
    `folder`: a file, a folder holding anything without hpstudy's manifest, or (below `root`, a store)
    a symbolic link."""
    if root is not None:
        below = folder[len(root) :].strip("/").split("/")
        for depth in range(1, len(below) + 1):
            link = f"{root}/{'/'.join(below[:depth])}"
            if _is_link(fs, link):
                raise ReportError(
                    f"{what}: {link!r} is a symbolic link; allowed: a folder inside the store "
                    f"(hpstudy writes nothing through a link out of it)"
                )
    info = fs.get_file_info(folder)
    if info.type == pafs.FileType.NotFound:
        return set()
    if info.type != pafs.FileType.Directory:
        raise ReportError(f"{what}: {folder!r} is a file; allowed: {ALLOWED}")
    present = _entries(fs, folder)
    if not present:
        return set()
    files = {name for name, entry in present.items() if _is_regular_file(fs, entry)}
    if MANIFEST not in present:
        if _is_unlisted_report(fs, present):
            return {name for name in files if UNLISTED_REPORT_FILE.fullmatch(name)}
        example = sorted(present)[0]
        raise ReportError(
            f"{what}: {folder!r} holds files hpstudy did not write ({example!r}"
            f"{f' and {len(present) - 1} more' if len(present) > 1 else ''}); allowed: {ALLOWED}"
        )
    try:
        listed = _read_record(fs, present[MANIFEST])["files"]
        return {name for name in listed if isinstance(name, str)} & files - {MANIFEST}
    except (ValueError, KeyError, TypeError) as exc:
        raise ReportError(
            f"{what}: {present[MANIFEST].path!r} is not an hpstudy report manifest ({exc}); "
            f"allowed: {ALLOWED} (delete the folder's files you do not need and the manifest)"
        )


def _is_unlisted_report(fs: pafs.FileSystem, present: Dict[str, pafs.FileInfo]) -> bool:
    """Whether a folder holds a report written before manifests: index.html and hpstudy's report.json."""
    if not {"index.html", "report.json"} <= set(present):
        return False
    try:
        record = _read_record(fs, present["report.json"])
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and {"study", "edf_convention", "findings"} <= set(record)


def _write(fs: pafs.FileSystem, folder: str, name: str, data: bytes) -> None:
    """Write folder/name through a dot-prefixed temporary file and a rename (a link there is replaced,
    not written through)."""
    tmp = f"{folder}/.{name}.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, f"{folder}/{name}")


def _write_manifest(fs: pafs.FileSystem, folder: str, names: Set[str]) -> None:
    text = json.dumps({"written_by": "hpstudy report", "files": sorted(names)}, indent=1)
    _write(fs, folder, MANIFEST, text.encode())


def publish(fs: pafs.FileSystem, folder: str, source: str, what: str, root: Optional[str] = None) -> None:
    """Copy the files of the local folder `source` into `folder` on `fs`, each atomically, and delete the
    files of the earlier report there that this one lacks; ReportError (before anything is written) when
    hpstudy may not write `folder` (see `owned`) or a file would replace one hpstudy did not write.
    OSError when the filesystem fails; the manifest always lists every file hpstudy may have left."""
    mine = owned(fs, folder, what, root)
    new = {name for name in os.listdir(source) if name != MANIFEST and os.path.isfile(os.path.join(source, name))}
    if mine or fs.get_file_info(folder).type == pafs.FileType.Directory:
        clash = sorted((new & set(_entries(fs, folder))) - mine)
        if clash:
            raise ReportError(
                f"{what}: {folder}/{clash[0]} was not written by hpstudy; allowed: {ALLOWED} (move that file away)"
            )
    fs.create_dir(folder, recursive=True)
    _write_manifest(fs, folder, mine | new)  # first: a run killed part way leaves nothing unlisted
    for name in sorted(new):
        with open(os.path.join(source, name), "rb") as f:
            _write(fs, folder, name, f.read())
    for name in sorted(mine - new):
        fs.delete_file(f"{folder}/{name}")
    _write_manifest(fs, folder, new)


FOLDER_RULE = f"a folder that can be written (created if missing): {ALLOWED}"


def check_report_path(path: str, what: str = "report folder") -> None:
    """Raise ReportError naming `what` (the flag), the path and why when `path` cannot be a report
    folder as it stands (a URI, a file, a folder hpstudy may not write: report_folder.owned);
    creates nothing."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a command line's byte that is not UTF-8, read as a lone surrogate
        raise ReportError(f"{what}: bad value {shown(path)}; allowed: a folder path of UTF-8 text") from None
    if "://" in path:
        raise ReportError(
            f"{what}: {path!r} is a URI; allowed: a local folder (a study's report goes into a "
            f"store given as a URI by default, at <store>/reports/<study>/)"
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise ReportError(f"{what}: {path!r} is a file; allowed: {FOLDER_RULE}")
    try:
        owned(pafs.LocalFileSystem(), os.path.abspath(path), what)
    except OSError as exc:
        raise ReportError(
            f"{what}: cannot write {path!r} ({exc.strerror or type(exc).__name__}: "
            f"{exc.filename or path}); allowed: {FOLDER_RULE}"
        ) from exc


def check_report_dir(path: str, what: str = "report folder") -> None:
    """check_report_path, then create the folder `path` and write and delete a probe file in it, or
    raise ReportError naming `what` (the flag), the path and why; run before a study, so a bad
    --report stops nothing late."""
    check_report_path(path, what)
    probe = os.path.join(path, f".probe-{uuid.uuid4().hex}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(probe, "w") as f:
            f.write("hpstudy")
        os.remove(probe)
    except OSError as exc:
        raise ReportError(
            f"{what}: cannot write {path!r} ({exc.strerror or type(exc).__name__}: "
            f"{exc.filename or path}); allowed: {FOLDER_RULE}"
        ) from exc


def build_into(out: str, write: Callable[[str], None]) -> str:
    """Make a report with `write(folder)` in a new temporary folder and publish it into the local folder `out`
    (only files of an earlier report are replaced or deleted); ReportError if `out` cannot be written or is not
    hpstudy's to write. Returns the path of its index.html."""
    check_report_dir(out)
    with tempfile.TemporaryDirectory(prefix="hpstudy-report-") as made:
        write(made)
        try:
            publish(pafs.LocalFileSystem(), os.path.abspath(out), made, "report folder")
        except OSError as exc:
            raise ReportError(f"report folder: cannot write {out!r} ({exc}); allowed: {FOLDER_RULE}") from exc
    return os.path.join(out, "index.html")
