"""Issue #23, `hpstudy prepare`: it deletes only what it wrote, reuses a folder only for the same source
bytes, names a bad input in one line, and a prepared trial key names the preparation it trains on."""

import json
import os
from dataclasses import asdict

import numpy as np
import pytest
from PIL import Image

from hpstudy.cli import hpstudy_main
from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.errors import DataError
from tests.helpers import image_folder, small_spec

SIZES = ["--train-size", "16", "--image-size", "12"]


def run_prepare(source, out, *flags, workers=1):
    return hpstudy_main(
        ["prepare", "--data", str(source), "--out", str(out), *SIZES, "--workers", str(workers), *flags]
    )


def tree(root) -> dict:
    """Every entry under root (links not followed): a file's bytes, a link's target, or 'dir'."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = (
                f"-> {os.readlink(path)}"
                if os.path.islink(path)
                else "dir"
                if os.path.isdir(path)
                else open(path, "rb").read()
            )
    return found


def one_error(capsys) -> str:
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def source(tmp_path):
    return image_folder(tmp_path / "imgs", n=2, size=(20, 24))


def _user_folder(path):
    path.mkdir()
    (path / "thesis.tex").write_text("\\chapter{Four years}")
    (path / "sub").mkdir()
    (path / "sub" / "data.csv").write_text("1,2\n")


def _preparation(source, path):
    from hpstudy.trainers.prepared import prepare

    prepare(source, str(path), 16, 12, 1, progress=None)


# How each kind of --out is made (in tmp_path, given the source) and what is left: --out, and the folder
# whose bytes must stay as they were. Each returns (out, guarded folder, working directory or None).
def out_file(tmp, source):
    (tmp / "notes.txt").write_text("keep me")
    return tmp / "notes.txt", tmp, None


def out_link_to_folder(tmp, source):
    _user_folder(tmp / "mine")
    (tmp / "link").symlink_to(tmp / "mine")
    return tmp / "link", tmp, None


def out_link_to_preparation(tmp, source):
    _preparation(source, tmp / "prep")
    (tmp / "link").symlink_to(tmp / "prep")
    return tmp / "link", tmp, None


def out_user_folder(tmp, source):
    _user_folder(tmp / "mine")
    return tmp / "mine", tmp, None


def out_cwd(tmp, source):
    _user_folder(tmp / "mine")
    return ".", tmp, tmp / "mine"


def out_empty_cwd(tmp, source):
    (tmp / "here").mkdir()
    return os.path.abspath(tmp / "here"), tmp, tmp / "here"


def out_parent_of_cwd(tmp, source):
    _user_folder(tmp / "mine")
    return "..", tmp, tmp / "mine" / "sub"


def out_foreign_meta(tmp, source):
    (tmp / "other").mkdir()
    (tmp / "other" / "meta.json").write_text(json.dumps({"version": 1, "author": "someone else"}))
    return tmp / "other", tmp, None


def out_preparation_with_user_file(tmp, source):
    _preparation(source, tmp / "prep")
    (tmp / "prep" / "notes.md").write_text("my notes")
    return tmp / "prep", tmp, None


def out_preparation_with_linked_array(tmp, source):
    _preparation(source, tmp / "prep")
    (tmp / "precious.npy").write_bytes(b"user data")
    os.replace(tmp / "prep" / "val_x.npy", tmp / "moved.npy")
    (tmp / "prep" / "val_x.npy").symlink_to(tmp / "precious.npy")
    return tmp / "prep", tmp, None


OUTS = [
    out_file,
    out_link_to_folder,
    out_link_to_preparation,
    out_user_folder,
    out_cwd,
    out_empty_cwd,
    out_parent_of_cwd,
    out_foreign_meta,
    out_preparation_with_user_file,
    out_preparation_with_linked_array,
]
# what an out holds that prepare did not write, which the refusal names
FOREIGN = {out_preparation_with_user_file: ["notes.md"], out_preparation_with_linked_array: ["val_x.npy"]}


@pytest.mark.parametrize("make", OUTS, ids=[f.__name__[4:] for f in OUTS])
def test_an_out_that_prepare_did_not_write_is_refused_before_decoding(make, tmp_path, source, capsys, monkeypatch):
    guarded = tmp_path / "guarded"
    guarded.mkdir()
    out, _, cwd = make(guarded, source)
    if cwd is not None:
        monkeypatch.chdir(cwd)
    before = tree(guarded)
    monkeypatch.setattr("hpstudy.trainers.prepared._decode", lambda job: pytest.fail("decoding started"))
    assert run_prepare(source, out) == 2
    err = one_error(capsys)
    assert (
        err.startswith(f"error: --out: {str(out)!r} ")
        and "allowed: a path that does not exist, an empty folder, or a folder written by `hpstudy prepare`" in err
    )
    assert tree(guarded) == before
    if make in FOREIGN:  # what it holds that prepare did not write, named
        assert f"holds {FOREIGN[make]}, which `hpstudy prepare` did not write" in err, err


def test_a_preparation_is_replaced_deleting_only_its_own_files(tmp_path, source, capsys):
    from hpstudy.trainers.prepared import PREPARED_FILES

    out = tmp_path / "prep"
    out.mkdir()  # an empty folder is taken
    (tmp_path / "beside.txt").write_text("next to it")
    assert run_prepare(source, out) == 0 and capsys.readouterr().out.startswith(f"prepared {out}")
    first = json.loads((out / "meta.json").read_text())
    assert sorted(os.listdir(out)) == sorted(PREPARED_FILES)
    assert (
        hpstudy_main(
            [
                "prepare",
                "--data",
                source,
                "--out",
                str(out),
                "--train-size",
                "20",
                "--image-size",
                "12",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith(f"prepared {out}")  # other sizes: replaced
    assert sorted(os.listdir(out)) == sorted(PREPARED_FILES)
    assert json.loads((out / "meta.json").read_text())["digest"] != first["digest"]
    assert sorted(os.listdir(tmp_path)) == ["beside.txt", "imgs", "prep"]  # no temporary folder left


def _bmp_folder(root):
    """Two classes of 2 BMPs each (uncompressed: other pixels keep the byte size)."""
    rng = np.random.default_rng(1)
    for split in ("train", "val"):
        for cls in ("a", "b"):
            (root / split / cls).mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / split / cls / f"{i}.bmp")
    return root


def _repaint(path, mtime_shift_ns: int):
    """Other pixels in the same number of bytes, the modification time moved by `mtime_shift_ns`."""
    stat = os.stat(path)
    Image.fromarray(np.full((16, 16, 3), 7, dtype=np.uint8)).save(path)
    assert os.path.getsize(path) == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + mtime_shift_ns))


def test_reuse_needs_the_same_source_bytes(tmp_path, capsys):
    source, out = _bmp_folder(tmp_path / "imgs"), tmp_path / "prep"
    assert run_prepare(source, out) == 0
    digest = json.loads((out / "meta.json").read_text())["digest"]
    assert run_prepare(source, out, "--verify-content") == 0 and "reused" in capsys.readouterr().out
    _repaint(source / "train" / "a" / "0.bmp", 10**9)  # same size, another mtime
    assert run_prepare(source, out) == 0 and capsys.readouterr().out.startswith("prepared")
    replaced = json.loads((out / "meta.json").read_text())["digest"]
    assert replaced != digest
    _repaint(source / "val" / "b" / "1.bmp", 0)  # same size and mtime: only the bytes tell
    assert run_prepare(source, out) == 0 and capsys.readouterr().out.startswith("reused")
    assert run_prepare(source, out, "--verify-content") == 0 and capsys.readouterr().out.startswith("prepared")
    assert json.loads((out / "meta.json").read_text())["digest"] != replaced


def _zero_byte(root):
    (root / "train" / "cat" / "0.JPEG").write_bytes(b"")
    return root / "train" / "cat" / "0.JPEG", "cannot decode", "not an image PIL can read"


def _dangling_link(root):
    path = root / "train" / "dog" / "9.JPEG"  # a link whose image was moved away
    path.symlink_to(root / "moved-away.JPEG")
    return path, "cannot read", "No such file or directory"


def _truncated(root):
    path = root / "val" / "dog" / "1.JPEG"
    path.write_bytes(path.read_bytes()[:300])
    return path, "cannot decode", "truncated"


def _empty_class(root):
    (root / "train" / "bird").mkdir()
    return root / "train", "Found no valid file for the classes bird", "at least one image per class"


def _val_without_classes(root):
    for cls in ("cat", "dog"):
        for image in (root / "val" / cls).iterdir():
            image.rename(root / "val" / f"{cls}-{image.name}")
        (root / "val" / cls).rmdir()
    return root / "val", "Couldn't find any class folder", "expected train/<class>/*.JPEG"


def _beyond_sixteen_bits(root):
    path = root / "train" / "cat" / "scan.tif"
    Image.fromarray(np.array([[0, 70000]], dtype=np.int32)).save(path)
    return path, "mode I (32-bit integer) with values 0..70000", "allowed: values in 0..65535"


def _float_nan(root):
    path = root / "val" / "dog" / "scan.tif"
    Image.fromarray(np.array([[np.nan, 0.5]], dtype=np.float32)).save(path)
    return path, "mode F (float) with values nan..nan", "allowed: values in 0..1"


# a pool of 2 decoding processes (~2.5 s to start) in the slow tier
BAD_SOURCES = [
    (_zero_byte, 1),
    (_dangling_link, 1),
    (_truncated, 1),
    (_empty_class, 1),
    (_val_without_classes, 1),
    (_beyond_sixteen_bits, 1),
    (_float_nan, 1),
    pytest.param(_zero_byte, 2, marks=pytest.mark.slow),
    pytest.param(_beyond_sixteen_bits, 2, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(
    "damage,workers",
    BAD_SOURCES,
    ids=[
        "zero_byte-1",
        "dangling_link-1",
        "truncated-1",
        "empty_class-1",
        "val_without_classes-1",
        "beyond_sixteen_bits-1",
        "float_nan-1",
        "zero_byte-2",
        "beyond_sixteen_bits-2",
    ],
)
def test_a_bad_source_is_one_line_naming_it(damage, workers, tmp_path, source, capsys):
    named, *fragments = damage(tmp_path / "imgs")
    assert run_prepare(source, tmp_path / "prep", workers=workers) == 2
    err = one_error(capsys)
    assert str(named) in err and all(f.lower() in err.lower() for f in fragments), err
    assert sorted(os.listdir(tmp_path)) == ["imgs"]  # nothing written


# Issue #37: a mid-grey stored as 255, 255 and 0 (Pillow's convert("RGB") clips and truncates). The mode, the
# value the mode's white stands for, and a file format users keep it in.
DEEP_GREYS = [
    ("I;16", np.uint16, 65535, "png"),
    ("I;16B", ">u2", 65535, "tif"),
    ("I", np.int32, 65535, "pgm"),
    ("I", np.int32, 65535, "tif"),
    ("F", np.float32, 1.0, "tif"),
]


@pytest.mark.parametrize("mode,dtype,top,suffix", DEEP_GREYS, ids=[f"{m}-{s}" for m, _, _, s in DEEP_GREYS])
def test_a_mid_grey_of_any_bit_depth_is_stored_mid_grey(mode, dtype, top, suffix, tmp_path):
    from hpstudy.trainers.prepared import PreparedData

    source = image_folder(tmp_path / "imgs", n=1, size=(16, 16))
    grey = np.full((16, 16), top / 2, dtype=dtype)
    Image.frombytes(mode, (16, 16), grey.tobytes()).save(tmp_path / "imgs" / "train" / "cat" / f"grey.{suffix}")
    assert run_prepare(source, tmp_path / "prep") == 0
    stored = PreparedData(str(tmp_path / "prep"), 12).train_x[1]  # train/cat/0.JPEG, then train/cat/grey.*
    level = round(float(grey[0, 0]) * 255 / top)
    assert np.array_equal(stored, np.full((16, 16, 3), level, dtype=np.uint8)), (stored[0, 0], level)


def _study(path, **dataset) -> dict:
    return small_spec(
        models=["cnn_tiny"],
        optimizers=["adamw"],
        samples=1,
        dataset=dict(name="prepared", path=str(path), image_size=12, **dataset),
    )


def _keys(spec) -> set:
    return {
        TrialConfig.from_dict(
            dict(spec.recipe, model=m, optimizer="adamw", epochs=1, lr=1e-3, wd=0.01, dataset=asdict(spec.dataset))
        ).key
        for m in spec.models
    }


def test_a_prepared_trial_key_names_the_preparation(tmp_path, source):
    from hpstudy.trainers.data import load_data
    from hpstudy.trainers.prepared import prepare

    out = tmp_path / "prep"
    _preparation(source, out)
    planned = parse_spec(_study(out))
    meta = json.loads((out / "meta.json").read_text())
    assert planned.dataset.digest == meta["digest"]
    assert parse_spec(_study(out), check_paths=False).dataset.digest == meta["digest"]  # status sees the same keys
    (tmp_path / "imgs" / "train" / "cat" / "0.JPEG").unlink()  # other images, the same folder
    prepare(source, str(out), 16, 12, 1, progress=None)
    replanned = parse_spec(_study(out))
    assert not _keys(planned) & _keys(replanned)
    with pytest.raises(
        DataError,
        match=r"^dataset.digest: .* holds the preparation [0-9a-f]{64}, not the "
        r"[0-9a-f]{64} this trial was planned with; allowed: the same preparation "
        r"\(rerun the study",
    ):
        load_data(planned.dataset)
    assert load_data(replanned.dataset).num_train == 3
    with pytest.raises(SpecError, match=r"^dataset.digest: bad value '0+'; allowed: the digest of"):
        parse_spec(_study(out, digest="0" * 64))
    with pytest.raises(
        DataError,
        match=r"^dataset.digest: bad value '0+'; allowed: null, or 64 lower-case hex "
        r"digits with dataset prepared",
    ):
        DataSpec.from_config({"name": "imagefolder", "path": str(source), "digest": "0" * 64})


def test_a_prepared_study_needs_a_folder_prepare_wrote(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "meta.json").write_text("{}")
    with pytest.raises(
        SpecError,
        match=r"^dataset.path: dataset 'prepared': .*other' has no meta.json written by "
        r"`hpstudy prepare`",
    ):
        parse_spec(_study(tmp_path / "other"))


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_preparation_with_a_damaged_array_is_one_line_naming_it(tmp_path, source, damage):
    from hpstudy.trainers.prepared import PreparedData

    out = tmp_path / "prep"
    _preparation(source, out)
    array = out / "val_y.npy"
    if damage == "missing":
        array.unlink()
    else:
        array.write_bytes(array.read_bytes()[:20])
    with pytest.raises(DataError, match=r"^dataset 'prepared': cannot read .*val_y.npy.*; prepare it again"):
        PreparedData(str(out), 12)
