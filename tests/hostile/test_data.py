"""Issue #23 (data side): trial keys that name what was trained, CIFAR batches that cannot run code,
recipe values that cannot train as stored, init checkpoints that are not a state dict of tensors."""

import codecs
import os
import pickle
import subprocess

import numpy as np
import pytest

from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.errors import ConfigError, DataError
from tests.helpers import small_spec

BASE = dict(model="cnn_tiny", optimizer="adamw", epochs=3, lr=1e-3, wd=0.05)
TRAIN = ["--model", "cnn_tiny", "--optimizer", "adamw", "--epochs", "1", "--lr", "1e-3", "--wd", "0", "--device", "cpu"]
# Keys computed before DataSpec had `digest`: a field left at its default must not change any of them.
PINNED_KEYS = [
    (BASE, "34957f4602f5a1b9a648"),
    (
        dict(
            BASE,
            dataset={"name": "synthetic", "image_size": 16, "num_classes": 4, "n_train": 64, "n_val": 32, "seed": 3},
        ),
        "24b5826dc582994718b5",
    ),
    (dict(BASE, optimizer="sgd", dataset={"name": "cifar10", "path": "/data/cifar10"}, seed=7), "e06d331c9023f5958e3c"),
    (
        dict(BASE, dataset={"name": "imagefolder", "path": "/data/imagenet", "image_size": 64}, num_workers=2),
        "dfacd46dbb66ac8681d0",
    ),
    (dict(BASE, dataset={"name": "prepared", "path": "/local/imagenet-256", "image_size": 64}), "47d8b5505749c2b8348f"),
    (
        dict(
            BASE,
            model="vit_c_tiny",
            epochs=10,
            batch_size=64,
            reference_batch_size=256,
            warmup_epochs=2.5,
            min_lr_ratio=0.01,
            label_smoothing=0.1,
            mixup=0.8,
            cutmix=1.0,
            ema_decay=0.999,
            grad_clip=1.0,
            accum_steps=2,
            init="/ckpt/vit.pt",
            init_sha256="a" * 64,
            freeze=1,
        ),
        "08e7b0642f894997b690",
    ),
]


@pytest.mark.parametrize("config,key", PINNED_KEYS, ids=[k for _, k in PINNED_KEYS])
def test_trial_keys_of_existing_configs_do_not_change(config, key):
    assert TrialConfig.from_dict(config).key == key


def _cifar10(folder, dump, protocol=2, n=8):
    """A cifar-10-batches-py folder as the real one is laid out: per batch a pickled dict of a uint8
    (n, 3072) array and a list of labels; `dump(batch, file)` writes data_batch_1."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batches[name] = {
            b"batch_label": name.encode(),
            b"labels": rng.integers(0, 10, n).tolist(),
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"filenames": [f"{name}_{i}.png".encode() for i in range(n)],
        }
        with open(folder / name, "wb") as f:
            (dump if name == "data_batch_1" else lambda b, f: pickle.dump(b, f, protocol=protocol))(batches[name], f)
    return batches


def _numpy1_spelling(batch, f):
    """Protocol 2 as numpy 1 writes it (numpy.core.multiarray, where numpy 2 writes numpy._core)."""
    f.write(pickle.dumps(batch, protocol=2).replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n"))


@pytest.mark.parametrize("protocol,dump", [(2, None), (2, _numpy1_spelling), (pickle.HIGHEST_PROTOCOL, None)])
def test_real_cifar_batches_load_with_identical_arrays(tmp_path, protocol, dump):
    from hpstudy.trainers.data import load_data

    dump = dump or (lambda b, f: pickle.dump(b, f, protocol=protocol))
    batches = _cifar10(tmp_path / "cifar-10-batches-py", dump, protocol)
    data = load_data(DataSpec("cifar10", path=str(tmp_path)))
    train = [batches[f"data_batch_{i}"] for i in range(1, 6)]
    assert np.array_equal(data.train_x.numpy().reshape(-1, 3072), np.concatenate([b[b"data"] for b in train]))
    assert data.train_y.tolist() == sum((b[b"labels"] for b in train), [])
    assert np.array_equal(data.val_x.numpy().reshape(-1, 3072), batches["test_batch"][b"data"])


class Gadget:
    """Pickles as a call of `call(*args)`: what a crafted batch runs when it is unpickled."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


GADGETS = {
    "os.system": lambda marker: Gadget(os.system, f"touch {marker}"),
    "builtins.eval": lambda marker: Gadget(eval, f"open({str(marker)!r}, 'w')"),
    "builtins.exec": lambda marker: Gadget(exec, f"open({str(marker)!r}, 'w')"),
    "subprocess.call": lambda marker: Gadget(subprocess.call, ["touch", str(marker)]),
    "builtins.open": lambda marker: Gadget(open, str(marker), "w"),
    "numpy.save": lambda marker: Gadget(np.save, str(marker), np.zeros(1)),
    "_codecs.encode(rot13)": lambda marker: Gadget(codecs.encode, "text", "rot13"),
}


@pytest.mark.parametrize("where", ["batch", "labels"])
@pytest.mark.parametrize("gadget", GADGETS)
def test_a_crafted_cifar_batch_is_refused_without_running(tmp_path, gadget, where):
    from hpstudy.trainers.data import load_data

    marker = tmp_path / "ran"
    evil = GADGETS[gadget](marker)
    dump = (
        (lambda b, f: pickle.dump(evil, f, protocol=2))
        if where == "batch"
        else (lambda b, f: pickle.dump({**b, b"labels": [evil]}, f, protocol=2))
    )
    _cifar10(tmp_path / "cifar-10-batches-py", dump)
    with pytest.raises(DataError, match=r"data_batch_1: not a CIFAR pickle batch .*refused "):
        load_data(DataSpec("cifar10", path=str(tmp_path)))
    assert not marker.exists()


def test_a_warmup_as_long_as_the_training_is_refused():
    for warmup in (2, 5, 2.0):
        with pytest.raises(ConfigError, match=rf"^warmup_epochs: bad value {warmup}; allowed: >= 0 and < epochs \(2\)"):
            TrialConfig.from_dict(dict(BASE, epochs=2, warmup_epochs=warmup))
    assert TrialConfig.from_dict(dict(BASE, epochs=2, warmup_epochs=1.5)).warmup_epochs == 1.5
    for epochs in ([2], [10, 2]):  # checked against the shortest training of the study
        with pytest.raises(SpecError, match=r"^recipe.warmup_epochs: bad value 5; allowed: >= 0 and < epochs \(2\)"):
            parse_spec(small_spec(epochs=epochs, recipe=dict(small_spec()["recipe"], warmup_epochs=5)))


def test_a_warmup_as_long_as_the_training_is_one_line_from_the_trial_cli(capsys):
    from hpstudy.trainers.train import main as train_main

    assert (
        train_main(
            [
                "--model",
                "cnn_tiny",
                "--optimizer",
                "adamw",
                "--epochs",
                "2",
                "--lr",
                "1e-3",
                "--wd",
                "0",
                "--warmup-epochs",
                "3",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err == "error: warmup_epochs: bad value 3.0; allowed: >= 0 and < epochs (2): a warmup as long as the "
        "training never reaches its peak lr\n"
    )


@pytest.mark.parametrize(
    "name,layout", [("cifar10", "cifar-10-batches-py"), ("imagefolder", "train"), ("prepared", None)]
)
def test_a_relative_dataset_path_is_refused_when_a_study_is_planned(tmp_path, monkeypatch, name, layout):
    """Ray runs trials in other working directories: a relative path that exists here names nothing there."""
    (tmp_path / "data" / (layout or "")).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    spec = small_spec(dataset={"name": name, "path": "data", "image_size": 32})
    with pytest.raises(
        SpecError,
        match=r"^dataset\.path: bad value 'data' \(a relative path: trials run in other "
        r"working directories\); allowed: an absolute path every worker can read$",
    ):
        parse_spec(spec)
    assert parse_spec(spec, check_paths=False).dataset.path == "data"  # read without running (status, dry run)


def _state(tmp_path, kind):
    import torch

    path = tmp_path / f"{kind}.pt"
    value = {
        "non-tensor": {"w": 3},
        "nested": {"a": {"b": torch.zeros(2)}},
        "text": {"w": "weights"},
        "list": [torch.zeros(2)],
        "tensor": torch.zeros(2),
    }[kind]
    torch.save(value, path)
    return path


@pytest.mark.parametrize(
    "kind,problem",
    [
        ("non-tensor", "its entry 'w' is int"),
        ("nested", "its entry 'a' is dict"),
        ("text", "its entry 'w' is str"),
        ("list", "cannot read"),
        ("tensor", "cannot read"),
    ],
)
def test_an_init_that_is_not_a_state_dict_of_tensors_is_one_line(tmp_path, capsys, kind, problem):
    from hpstudy.trainers.train import main as train_main

    path = _state(tmp_path, kind)
    assert train_main(TRAIN + ["--init", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: init: ") and str(path) in err and problem in err and err.count("\n") == 1, err


def test_an_init_pickle_that_runs_code_is_still_refused(tmp_path, capsys):
    import torch

    from hpstudy.trainers.train import main as train_main

    marker, path = tmp_path / "ran", tmp_path / "evil.pt"
    torch.save({"w": Gadget(os.system, f"touch {marker}")}, path)
    assert train_main(TRAIN + ["--init", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: init: cannot read {str(path)!r}") and not marker.exists()
