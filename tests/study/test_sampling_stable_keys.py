"""Trial keys that do not move (issue 23): sampled lr/wd rounded to 6 significant digits before they are
keyed, so the last bit of exp/log (numpy 1.x vs 2.x, one platform or another) cannot change a key; and a
store written by the sampler before the rounding resumes to nothing."""

import hashlib
import math

import numpy as np
import pytest

import hpstudy.study.sampling
from hpstudy.cli import hpstudy_main, run_edf_main
from hpstudy.study.sampling import expand, expand_for_store, unit_points
from hpstudy.study.spec import Box, SpecError, load_spec, parse_spec, resolve_config
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_trials
from hpstudy.study.store.spec_record import write_spec_record
from hpstudy.trainers.config import TrialConfig
from tests.helpers import small_spec, stored_row, write_spec

# sha256 (first 16 hex digits) of the sorted trial keys of bundled specs: a change here re-keys every
# stored study of that spec (say so in the changelog, and keep the old keys resumable as below)
PINNED = {
    "demo_digits": "9bc4190a17c3f852",  # #39: ViT-P vs ViT-C, AdamW, 16 samples; the old 16 ViT AdamW keys kept
    "repro_digits_lr_wd": "66ab061a9e9be308",  # epochs [6, 16] (#25): the 144 6-epoch keys are unchanged
    "repro_digits_length": "410c75833facbc5c",
    "repro_digits_optimizer": "0ab3ee3e789326a5",
    "cifar10_lr_wd": "b1e85f937cae2c12",
}


def keys_digest(trials) -> str:
    return hashlib.sha256("\n".join(sorted(t.key for t in trials)).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_bundled_specs_trial_keys_are_pinned(name):
    assert keys_digest(expand(load_spec(resolve_config(name), check_paths=False))) == PINNED[name]


def spec_with(sampler: str, samples: int = 9, lr=(1e-4, 3e-2), wd=(1.234567891e-3, 0.5)):
    return parse_spec(
        {
            "name": "k",
            "models": ["cnn_tiny"],
            "optimizers": ["adamw"],
            "epochs": [1],
            "samples": samples,
            "sampler": sampler,
            "space": {"adamw": {"lr": list(lr), "wd": list(wd)}},
        }
    )


@pytest.mark.parametrize("sampler", ["random", "sobol", "grid"])
@pytest.mark.parametrize("ulps", [-2, -1, 1, 2])
def test_a_last_bit_of_exp_or_log_elsewhere_changes_no_key(monkeypatch, sampler, ulps):
    spec = spec_with(sampler)
    before = [t.key for t in expand(spec)]

    def off(fn):
        def shifted(x):
            y = fn(x)
            for _ in range(abs(ulps)):
                y = math.nextafter(y, math.copysign(math.inf, ulps))
            return y

        return shifted

    monkeypatch.setattr(hpstudy.study.sampling.math, "exp", off(math.exp))
    monkeypatch.setattr(hpstudy.study.sampling.math, "log", off(math.log))
    assert [t.key for t in expand(spec)] == before


@pytest.mark.parametrize("sampler", ["random", "sobol", "grid"])
def test_sampled_values_have_six_significant_digits_and_stay_in_the_closed_box(sampler):
    spec = spec_with(sampler, samples=16)
    for t in expand(spec):
        for value, (lo, hi) in ((t.config["lr"], spec.space["adamw"].lr), (t.config["wd"], spec.space["adamw"].wd)):
            assert lo <= value <= hi
            assert value in (lo, hi) or float(f"{value:.5e}") == value  # 6 significant digits
    if sampler == "grid":  # the grid spans the box: its ends are the box's ends, rounded inward
        wds = [t.config["wd"] for t in expand(spec)]
        assert (min(wds), max(wds)) == (0.00123457, 0.5)


def test_a_fixed_value_is_exactly_the_value_written():
    spec = spec_with("random", samples=1, lr=(0.0012345678912, 0.0012345678912), wd=(0.1, 0.1))
    assert [(t.config["lr"], t.config["wd"]) for t in expand(spec)] == [(0.0012345678912, 0.1)]


def old_sampler_key(spec, trial) -> tuple:
    """The (lr, wd) and key the sampler of hpstudy 0.1 gave `trial`: np.exp of the log-box, unrounded."""
    box: Box = spec.box(trial.model, trial.optimizer)
    seed = hpstudy.study.sampling._stream_seed(spec.sampler_seed, trial.optimizer, {"lr": box.lr, "wd": box.wd}) % 2**32
    u = unit_points(spec.sampler, spec.samples, seed)[trial.sample]
    lr, wd = (float(np.exp(np.log(lo) + x * (np.log(hi) - np.log(lo)))) for x, (lo, hi) in zip(u, (box.lr, box.wd)))
    return lr, wd, TrialConfig.from_dict(dict(trial.config, lr=lr, wd=wd)).key


def store_as_old_sampler(root: str, study: str, spec, trial) -> str:
    """Store `trial` as an ok row of `study` under the (lr, wd) and key hpstudy 0.1's sampler gave it;
    returns that key."""
    lr, wd, key = old_sampler_key(spec, trial)
    write_trial(
        root,
        study,
        stored_row(
            trial_key=key,
            model=trial.model,
            optimizer=trial.optimizer,
            epochs=trial.epochs,
            lr=lr,
            wd=wd,
            seed=trial.seed,
            status="ok",
            top1_err=10.0,
            config_json=TrialConfig.from_dict(dict(trial.config, lr=lr, wd=wd)).to_json(),
        ),
    )
    return key


def test_a_store_of_the_unrounded_sampler_resumes_to_nothing(tmp_path, capsys):
    raw = small_spec(
        name="old", samples=4, optimizers=["adamw"], space={"adamw": {"lr": [1e-4, 1e-2], "wd": [1e-3, 0.5]}}
    )
    config = write_spec(tmp_path, raw)
    spec = load_spec(config)
    root = str(tmp_path / "store")
    planned = expand(spec)
    old = {}
    for trial in planned:
        lr, _, key = old_sampler_key(spec, trial)
        assert key != trial.key and abs(lr / trial.config["lr"] - 1) < 5e-6
        old[trial.key] = store_as_old_sampler(root, "old", spec, trial)
    write_spec_record(root, "old", raw, len(planned), trial_keys=list(old.values()))
    assert [t.key for t in expand_for_store(spec, root)] == [old[t.key] for t in planned]
    assert run_edf_main(["--config", config, "--store", root, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"study old: {len(planned)} trials, 0 to run ({len(planned)} already stored)" in out
    assert "different spec" not in out
    assert hpstudy_main(["status", "--store", root, "--config", config]) == 0
    assert f"{len(planned)}/{len(planned)} trials of the spec stored as ok/diverged" in capsys.readouterr().out


def test_a_stored_row_of_another_trial_or_without_a_readable_config_is_not_adopted(tmp_path):
    spec = load_spec(write_spec(tmp_path, small_spec(name="other", samples=2)))
    root = str(tmp_path / "store")
    trial = expand(spec)[0]
    shifted = dict(trial.config, lr=trial.config["lr"] * 1.001)  # another lr: another trial
    write_trial(
        root,
        "other",
        stored_row(
            trial_key="x" * 20,
            model=trial.model,
            optimizer="adamw",
            epochs=1,
            lr=shifted["lr"],
            wd=trial.config["wd"],
            status="ok",
            top1_err=1.0,
            config_json=TrialConfig.from_dict(shifted).to_json(),
        ),
    )
    write_trial(
        root,
        "other",
        stored_row(
            trial_key="y" * 20,
            model=trial.model,
            optimizer="adamw",
            epochs=1,
            lr=1e-3,
            wd=0.1,
            status="ok",
            top1_err=1.0,
            config_json="{not json",
        ),
    )
    assert [t.key for t in expand_for_store(spec, root)] == [t.key for t in expand(spec)]
    assert len(load_trials(root, "other")) == 2


def test_a_box_narrower_than_six_significant_digits_is_refused_before_it_repeats_trials(tmp_path, capsys):
    raw = small_spec(
        name="narrow",
        samples=16,
        optimizers=["adamw"],
        space={"adamw": {"lr": [1.0e-3, 1.000002e-3], "wd": [0.05, 0.0500002]}},
    )
    config = write_spec(tmp_path, raw)
    args = ["--config", config, "--store", str(tmp_path / "s")]
    for command in (lambda: run_edf_main([*args, "--dry-run"]), lambda: hpstudy_main(["status", *args])):
        assert command() == 2
        err = capsys.readouterr().err
        assert (
            err.startswith(
                "error: samples: bad value 16 for the box lr [0.001, 0.001000002], wd [0.05, "
                "0.0500002] of vit_c_tiny (adamw): it gives "
            )
            and err.count("\n") == 1
        )
        assert "allowed: samples <= " in err
    fixed = small_spec(name="fixed", samples=2, optimizers=["adamw"], space={"adamw": {"lr": 1e-3, "wd": 0.05}})
    with pytest.raises(SpecError, match=r"^samples: bad value 2 .* gives 1 distinct \(lr, wd\) points"):
        expand(parse_spec(fixed))


def _old_row(root, trial, key, lr, status, when):
    config_json = TrialConfig.from_dict(dict(trial.config, lr=lr)).to_json()
    write_trial(
        root,
        "dup",
        stored_row(
            trial_key=key,
            model=trial.model,
            optimizer=trial.optimizer,
            epochs=1,
            lr=lr,
            wd=trial.config["wd"],
            seed=0,
            status=status,
            top1_err=10.0,
            config_json=config_json,
            finished_at=when,
        ),
    )


def test_only_a_finished_older_row_is_adopted_and_the_newest_of_them(tmp_path):
    spec = load_spec(write_spec(tmp_path, small_spec(name="dup", samples=2, optimizers=["adamw"])))
    root = str(tmp_path / "store")
    first, second = expand(spec)[:2]
    lr = first.config["lr"]
    _old_row(root, first, "a" * 20, lr * (1 + 1e-15), "ok", "2026-11-01T00:00:00+00:00")
    _old_row(root, first, "b" * 20, lr * (1 - 1e-15), "failed", "2026-11-02T00:00:00+00:00")  # newer, failed
    _old_row(root, second, "c" * 20, second.config["lr"] * (1 + 1e-15), "failed", "2026-11-01T00:00:00+00:00")
    _old_row(root, second, "d" * 20, second.config["lr"] * (1 + 2e-15), "ok", "2026-11-01T00:00:00+00:00")
    _old_row(root, second, "e" * 20, second.config["lr"] * (1 - 2e-15), "diverged", "2026-11-03T00:00:00+00:00")
    keys = [t.key for t in expand_for_store(spec, root)]
    assert keys[:2] == ["a" * 20, "e" * 20]


@pytest.mark.parametrize(
    "config_json",
    [
        '{"lr": 1' + "0" * 400 + ', "wd": 1}',
        "[" * 50_000 + "]" * 50_000,
        '{"lr": "x", "wd": 1}',
        "[1, 2]",
        '"text"',
        '{"lr": NaN, "wd": 1}',
    ],
)
def test_a_stored_row_with_a_hostile_config_is_left_under_its_own_key(tmp_path, config_json, capsys):
    config = write_spec(tmp_path, small_spec(name="hostile", samples=2, optimizers=["adamw"]))
    root = str(tmp_path / "store")
    write_trial(
        root,
        "hostile",
        stored_row(
            trial_key="z" * 20,
            model="cnn_tiny",
            optimizer="adamw",
            epochs=1,
            lr=1e-3,
            wd=0.1,
            status="ok",
            top1_err=1.0,
            config_json=config_json,
        ),
    )
    spec = load_spec(config)
    assert [t.key for t in expand_for_store(spec, root)] == [t.key for t in expand(spec)]
    assert hpstudy_main(["status", "--store", root, "--config", config]) == 0
    assert "0/4 trials of the spec stored as ok/diverged" in capsys.readouterr().out


def test_a_row_of_the_same_trial_in_another_study_is_not_adopted(tmp_path):
    """Keys are adopted from the study's own rows only, never from another study's row of the same trial."""
    spec = load_spec(write_spec(tmp_path, small_spec(name="mine", samples=2)))
    root = str(tmp_path / "store")
    store_as_old_sampler(root, "theirs", spec, expand(spec)[0])
    assert [t.key for t in expand_for_store(spec, root)] == [t.key for t in expand(spec)]
