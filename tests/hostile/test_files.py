"""Files hpstudy reads, as a bad file or an attacker leaves them (issue 23): a spec or spec record that
cannot be read fails with one line naming it (exit 2 for a spec, 3 for the store), never a traceback or a
hang; the store's fallback reader labels rows by their own partition; a trial's epochs come from its
newest file; and no code of the project can run code found in data."""

import ast
import contextlib
import json
import os
import time

import pytest
import yaml

from hpstudy.cli import hpstudy_main, run_edf_main
from hpstudy.study.spec import load_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.study.store.spec_record import write_spec_record
from hpstudy.trainers.errors import HpstudyError
from tests.helpers import REPO, epoch_row, row, small_spec, spec_text, write_spec


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def alias_bomb(levels: int = 9) -> str:
    """`samples:` as YAML's "billion laughs": 1 kB of text, 9**levels strings once expanded."""
    text = 'samples: [&a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
    for level in range(1, levels):
        text += f", &a{level} [" + ",".join([f"*a{level - 1}"] * 9) + "]"
    return text + "]\n"


# (bytes of a spec file, the fragment of the one error line, after "error: <path>" or "error: ")
BAD_SPEC_FILES = [
    (spec_text().replace("samples: 3\n", alias_bomb()).encode(), "samples: bad value [["),
    (("samples: " + "[" * 100_000 + "]" * 100_000 + "\n").encode(), ": nested too deeply to read"),
    (spec_text().replace("name: h", "name: caf\xe9").encode("latin-1"), ": not UTF-8 text (byte "),
    (b"name: h\n" + b"#" * (1 << 20), ": larger than 1048576 bytes"),
    (b"1: 2\nfoo: 3\n", "spec: bad value 1; allowed: the keys"),
    (
        b"\x00\x01\x02",
        ': not valid YAML (unacceptable character #x0000: special characters are not allowed in "<unicode string>", '
        "position 0)",
    ),
    (
        b"name: h\x07\n",
        ': not valid YAML (unacceptable character #x0007: special characters are not allowed in "<unicode string>", '
        "position 7)",
    ),
    (spec_text(resources="{cpu: 1" + "0" * 400 + "}").encode(), "resources.cpu: bad value 1000"),
    (
        spec_text(space="{adamw: {lr: [1.0e-4, 1" + "0" * 400 + "], wd: 0.1}}").encode(),
        "space.adamw.lr: bad value [0.0001, 1000",
    ),
    (spec_text(recipe="{warmup_epochs: 1" + "0" * 400 + "}").encode(), "recipe.warmup_epochs: bad value 1000"),
    (spec_text(samples="9" * 5000).encode(), ": a value YAML cannot read (Exceeds the limit"),
    (
        spec_text().replace("samples: 3\n", "samples: 3\nsamples: 5\n").encode(),
        ": not valid YAML at line 8, column 1: while reading a mapping, found the key 'samples' twice",
    ),
    (spec_text(name="2001-12-14").encode(), "name: bad value datetime.date(2001, 12, 14); allowed: 1 to 128 "),
]


@pytest.mark.parametrize(
    "data,fragment",
    BAD_SPEC_FILES,
    ids=[
        "alias_bomb",
        "nested",
        "latin1",
        "huge",
        "mixed_keys",
        "binary",
        "bell",
        "huge_int_cpu",
        "huge_int_lr",
        "huge_int_recipe",
        "int_digits",
        "duplicate_key",
        "date_name",
    ],
)
@pytest.mark.parametrize("command", ["dry_run", "status"])
def test_a_spec_file_that_cannot_be_a_spec_fails_fast_with_one_short_line(tmp_path, capsys, data, fragment, command):
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    started = time.monotonic()
    if command == "dry_run":
        code = run_edf_main(["--config", str(path), "--store", str(tmp_path / "s"), "--dry-run"])
    else:
        code = hpstudy_main(["status", "--store", str(tmp_path / "s"), "--config", str(path)])
    assert code == 2 and time.monotonic() - started < 10
    err = one_error_line(capsys)
    assert fragment in err and len(err) < 600


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "not_json",
        "not_a_record",
        "binary",
        "keys_not_a_list",
        "keys_not_text",
        "keys_a_string",
        "nested",
        "link_to_zero",
        "fifo",
    ],
)
def test_a_damaged_spec_record_is_named_and_a_run_of_the_spec_rewrites_it(tmp_path, capsys, damage):
    root = str(tmp_path / "store")
    write_trial(root, "s", row("a"))
    write_spec_record(root, "s", {"name": "s"}, 1, trial_keys=["a"])
    path = tmp_path / "store/specs/s.json"
    record = json.loads(path.read_bytes())
    path.unlink()
    if damage == "link_to_zero":
        path.symlink_to("/dev/zero")
    elif damage == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(
            {
                "truncated": json.dumps(record).encode()[:20],
                "not_json": b"[1, 2",
                "not_a_record": b"[1, 2]",
                "binary": b"\xff\xfe\x00",
                "keys_not_a_list": json.dumps(dict(record, trial_keys=5)).encode(),
                "keys_not_text": json.dumps(dict(record, trial_keys=[[1]])).encode(),
                "keys_a_string": json.dumps(dict(record, trial_keys="abc")).encode(),
                "nested": b"[" * 100_000 + b"]" * 100_000,
            }[damage]
        )
    for argv in (["status", "--store", root, "--study", "s"], ["report", "--store", root, "--study", "s"]):
        assert hpstudy_main(argv) == 3
        err = one_error_line(capsys)
        assert err.startswith(f"error: store: cannot read the spec record {path} (") and "rewrite it" in err
    spec = write_spec(tmp_path, small_spec(name="s", optimizers=["adamw"]))
    assert run_edf_main(["--config", spec, "--store", root, "--dry-run"]) == 0  # the plan does not need it
    assert "study s:" in capsys.readouterr().out


def test_the_fallback_reader_labels_rows_by_their_own_partition_not_the_stores_path(tmp_path):
    root = tmp_path / "study=2024" / "store"
    for study in ("a", "b"):
        for key in ("k1", "k2"):
            write_trial(str(root), study, row(f"{study}{key}"), [epoch_row(epoch=1, top1_err=1.0)])
    (root / "trials/study=b/corrupt.parquet").write_bytes(b"PAR1 not parquet")  # forces file-by-file reading
    with pytest.warns(UserWarning, match="skipping unreadable file .*corrupt.parquet"):
        trials = load_trials(str(root))
    assert sorted(zip(trials["study"], trials["trial_key"])) == [("a", "ak1"), ("a", "ak2"), ("b", "bk1"), ("b", "bk2")]
    (root / "epochs/study=a/corrupt.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.warns(UserWarning, match="skipping unreadable file"):
        assert sorted(set(load_epochs(str(root))["study"])) == ["a", "b"]


@pytest.mark.parametrize("newest", ["per_trial_file", "merged_file"])
@pytest.mark.parametrize("corrupt", [False, True])
def test_a_trials_epochs_in_two_files_come_from_the_newest(tmp_path, newest, corrupt):
    root = str(tmp_path / "store")
    folder = tmp_path / "store/epochs/study=s"
    write_trial(root, "s", row("a"), [epoch_row(epoch=e, top1_err=50.0) for e in (1, 2)])
    own = folder / "a.parquet"
    merged = folder / "compact-000000000000.parquet"  # sorts first, as compaction's names can
    os.replace(own, tmp_path / "old.parquet")
    write_trial(root, "s", row("a"), [epoch_row(epoch=e, top1_err=5.0) for e in (1, 2, 3)])
    os.replace(own, merged)
    os.replace(tmp_path / "old.parquet", own)
    older, newer = (merged, own) if newest == "per_trial_file" else (own, merged)
    if newest == "per_trial_file":  # the per-trial file (old epochs) is the newest: its rows win
        expected = {1: 50.0, 2: 50.0}
    else:
        expected = {1: 5.0, 2: 5.0, 3: 5.0}
    os.utime(older, ns=(10**18, 10**18))
    os.utime(newer, ns=(2 * 10**18, 2 * 10**18))
    if corrupt:
        (folder / "zz-corrupt.parquet").write_bytes(b"not parquet")
    with pytest.warns(UserWarning) if corrupt else contextlib.nullcontext():
        epochs = load_epochs(root, "s")
    assert dict(zip(epochs["epoch"], epochs["top1_err"])) == expected


SAFE_YAML_LOADERS = {"SpecLoader", "yaml.SafeLoader", "yaml.CSafeLoader"}
NEVER = (
    "pickle.load",
    "pickle.loads",
    "marshal.load",
    "marshal.loads",
    "pd.eval",
    "yaml.unsafe_load",
    "yaml.full_load",
    "shelve.open",
)


def code_from_data_calls(source: str) -> list:
    """(line, call) of each call in `source` that can run code found in data: eval/exec, unpickling,
    DataFrame.query/eval (a method .query(...), or .eval(...) with an expression: nn.Module.eval() takes
    none), yaml.load without a safe loader, torch.load or timm's load_state_dict without weights_only=True,
    np.load with allow_pickle."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        call = (
            func.id
            if isinstance(func, ast.Name)
            else f"{ast.unparse(func.value)}.{func.attr}"
            if isinstance(func, ast.Attribute)
            else ""
        )
        method = func.attr if isinstance(func, ast.Attribute) else None
        keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
        if (
            call in ("eval", "exec", "__import__")
            or call.endswith(NEVER)
            or method == "query"
            or (method == "eval" and (node.args or node.keywords))
            or (call == "yaml.load" and keywords.get("Loader") not in SAFE_YAML_LOADERS)
            or (
                call.endswith(("torch.load", "load_state_dict"))
                and method != "load_state_dict"
                and keywords.get("weights_only") != "True"
            )
            or (call in ("np.load", "numpy.load") and keywords.get("allow_pickle", "False") != "False")
        ):
            found.append((node.lineno, call))
    return found


def test_the_code_from_data_check_finds_each_kind_of_call():
    source = "\n".join(
        [
            "eval(x)",
            "exec(x)",
            "pickle.load(f)",
            "pickle.loads(b)",
            "frame.query(e)",
            "frame.eval('a + b')",
            "pd.eval(e)",
            "yaml.load(f)",
            "yaml.load(f, Loader=yaml.Loader)",
            "yaml.unsafe_load(f)",
            "torch.load(p)",
            "torch.load(p, weights_only=False)",
            "load_state_dict(p, use_ema=True)",
            "np.load(p, allow_pickle=True)",
            "__import__('os')",
        ]
    )
    assert [line for line, _ in code_from_data_calls(source)] == list(range(1, 16))
    safe = "\n".join(
        [
            "model.eval()",
            "yaml.load(f, Loader=SpecLoader)",
            "torch.load(p, weights_only=True)",
            "load_state_dict(p, use_ema=True, weights_only=True)",
            "np.load(p, mmap_mode='r')",
            "model.load_state_dict(state, strict=False)",
            "query(store, study, expr, columns)",
        ]
    )
    assert code_from_data_calls(safe) == []


def test_no_code_in_the_project_can_run_code_found_in_data():
    offences = []
    for package in ("trainers", "study", "analysis", "bench"):
        for name in sorted(os.listdir(os.path.join(REPO, package))):
            if name.endswith(".py"):
                path = os.path.join(REPO, package, name)
                offences += [(path, line, call) for line, call in code_from_data_calls(open(path).read())]
    assert not offences, offences


HUGE_VALUES = {"text": "x" * 20_000, "list": [[[[["deep", 1.5]] * 50] * 50]] + list(range(5_000))}
SPEC_FIELDS = [
    "name",
    "dataset",
    "models",
    "optimizers",
    "epochs",
    "samples",
    "sampler",
    "paired",
    "sampler_seed",
    "seeds",
    "space",
    "resources",
    "max_retries",
    "fuse",
    "recipe.batch_size",
    "recipe.device",
    "recipe.warmup_epochs",
    "recipe.init",
    "dataset.path",
    "dataset.image_size",
    "space.adamw.lr",
    "space.adamw",
]


@pytest.mark.parametrize("kind", ["text", pytest.param("list", marks=pytest.mark.slow)])  # the list kind: slow tier
@pytest.mark.parametrize("field", SPEC_FIELDS)
def test_a_huge_value_in_any_spec_field_is_shown_in_at_most_about_200_characters(tmp_path, field, kind):
    spec = small_spec(name="big", optimizers=["adamw"])
    *parents, last = field.split(".")
    holder = spec
    for parent in parents:
        holder = (
            holder.setdefault(parent, {})
            if isinstance(holder.get(parent), dict)
            else holder.__setitem__(parent, {"name": "digits"} if parent == "dataset" else {}) or holder[parent]
        )
    holder[last] = HUGE_VALUES[kind]
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(HpstudyError, match=r"^[^\n]*$") as raised:
        load_spec(str(path))
    assert len(str(raised.value)) < 700, str(raised.value)[:1000]  # what is allowed may list every model
