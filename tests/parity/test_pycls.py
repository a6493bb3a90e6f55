"""hpstudy's numbers against the paper's own code: pycls's sweep analysis
(facebookresearch/pycls, pycls/sweep/analysis.py and pycls/sweep/plotting.py).

pycls's formulas are written out again below, from its source and independently of hpstudy's
code, and run on the same fixed sweep: trials built by hpstudy's one row builder
(`hpstudy.trainers.loop.trial_row`) from per-epoch errors, with failed and diverged trials. Two conventions
are hpstudy's and are stated where they enter: a diverged trial counts at chance error (pycls has
no diverged jobs), and a job without EMA uses its raw best error (pycls's `error_tst`; every pycls
job has EMA). The bootstrap draws one (b, n_sample) array from `default_rng(seed)`, where pycls
calls `np.random.choice` b times: the same draws go to both sides.
"""

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.edf import edf_table
from hpstudy.analysis.gaps import ema_gain, peak_table
from hpstudy.analysis.stats import good_ranges
from hpstudy.trainers.config import TrialConfig
from tests.helpers import stored_row

SEED, B = 3, 2500


class _Trainer:
    """What `trial_row` reads of a trainer."""

    num_classes = 10

    def __init__(self, device):
        self.device = device


def _curve(rng, epochs):
    """A noisy decreasing test error per epoch (%)."""
    return 60 * np.exp(-np.arange(epochs) / 3) + rng.uniform(5, 20) + rng.normal(0, 1.5, epochs)


def _sweep_and_rows():
    """(pycls sweep records of the jobs that finished, hpstudy rows of every trial): per model 30
    trials, 3 failed and 2 diverged (27 count: int(0.25 * 27) = 6 where round() gives 7); EMA on
    for vit_c_tiny, off for cnn_tiny."""
    import torch

    from hpstudy.trainers.loop import chance_error, trial_row

    chance = chance_error(10)
    rng = np.random.default_rng(0)
    sweep, rows = [], []
    for model, ema_decay in (("vit_c_tiny", 0.99), ("cnn_tiny", None)):
        for i in range(30):
            lr, wd = 10 ** rng.uniform(-4, -2), 10 ** rng.uniform(-2, 0)
            key = f"{model}-{i}"
            if i < 3:
                rows.append(
                    stored_row(
                        study="parity",
                        trial_key=key,
                        model=model,
                        optimizer="adamw",
                        epochs=8,
                        lr=lr,
                        wd=wd,
                        seed=0,
                        status="failed",
                        error="worker died",
                    )
                )
                continue
            diverged = i < 5
            top1 = _curve(rng, 8 if not diverged else 2)
            ema = top1 - rng.uniform(0, 2, len(top1)) if ema_decay else None
            log = [
                {
                    "epoch": e + 1,
                    "train_loss": 1.0,
                    "train_top1_err": None,
                    "top1_err": float(top1[e]),
                    "top5_err": float(top1[e] / 3),
                    "ema_top1_err": None if ema is None else float(ema[e]),
                    "lr": lr,
                    "seconds": 1.0,
                }
                for e in range(len(top1))
            ]
            cfg = TrialConfig.from_dict(
                {
                    "model": model,
                    "optimizer": "adamw",
                    "epochs": 8,
                    "lr": lr,
                    "wd": wd,
                    "ema_decay": ema_decay,
                    "dataset": {"name": "digits", "image_size": 16},
                }
            )
            row = trial_row(cfg, log, diverged, _Trainer(torch.device("cpu")), wall_s=1.0)
            del row["epoch_log"]
            rows.append(stored_row(**row, study="parity", trial_key=key))
            # pycls logs the running minimum of each epoch's error; hpstudy's diverged trial is at chance
            test = [chance] if diverged else list(np.minimum.accumulate(top1))
            job = {
                "model": model,
                "cfg": {"OPTIM": {"BASE_LR": lr, "WEIGHT_DECAY": wd}},
                "test_epoch": {"min_top1_err": test},
            }
            if ema_decay:
                job["test_ema_epoch"] = {"min_top1_err": [chance] if diverged else list(np.minimum.accumulate(ema))}
            sweep.append(job)
    return sweep, pd.DataFrame(rows)


@pytest.fixture(scope="module")
def sweep_and_rows():
    return _sweep_and_rows()


# ---- pycls, written out again (pycls/sweep/analysis.py, pycls/sweep/plotting.py) ----


def pycls_error(job):
    """metrics_info["error"]: min of test_ema_epoch.min_top1_err (error_tst without EMA: hpstudy's)."""
    return min(job["test_ema_epoch" if "test_ema_epoch" in job else "test_epoch"]["min_top1_err"])


def pycls_vals(sweep, metric):
    """get_vals for lr, wd (log10 transforms) and aug.lr_wd = log10 lr + log10 wd."""
    if metric == "lr_wd":
        return [a + b for a, b in zip(pycls_vals(sweep, "lr"), pycls_vals(sweep, "wd"))]
    key = {"lr": "BASE_LR", "wd": "WEIGHT_DECAY"}[metric]
    return [np.log10(job["cfg"]["OPTIM"][key]) for job in sweep]


def pycls_edf(sweep):
    """plot_edf: errs = sorted(errors), edf = cumsum(ones(k) / k)."""
    k = len(sweep)
    return sorted(pycls_error(job) for job in sweep), np.cumsum(np.ones(k) / k)


def pycls_get_filters(sweep, metrics, alpha=5, sample=0.25, b=B, seed=SEED):
    """get_filters, with the b samples drawn as one array (the only change; see the module doc)."""
    errs = np.array([pycls_error(job) for job in sweep])
    n, b, filters = len(errs), int(b), {}
    percentiles = [alpha / 2, 50, 100 - alpha / 2]
    n_sample = int(sample) if sample > 1 else max(1, int(n * sample))
    draws = np.random.default_rng(seed).integers(0, n, size=(b, n_sample))
    samples = [s[np.argmin(errs[s])] for s in draws]
    for metric in metrics:
        vals = np.array(pycls_vals(sweep, metric))
        vals = [vals[s] for s in samples]
        filters[metric] = list(np.percentile(vals, percentiles))
    return filters, n_sample


def pycls_ema_gain(sweep):
    """augment_sweep: ema_gain = max(0, min(error) - min(error_ema)) per job."""
    return [
        max(0, min(job["test_epoch"]["min_top1_err"]) - min(job["test_ema_epoch"]["min_top1_err"])) for job in sweep
    ]


# ---- the comparisons ----


def _jobs(sweep, model):
    return [job for job in sweep if job["model"] == model]


@pytest.mark.parametrize("model", ["vit_c_tiny", "cnn_tiny"])
def test_edf_and_best_match_pycls(sweep_and_rows, model):
    sweep, rows = sweep_and_rows
    with pytest.warns(UserWarning, match="3 failed"):
        table = edf_table(rows[rows["model"] == model])
    errs, edf = pycls_edf(_jobs(sweep, model))
    np.testing.assert_allclose(table["error"], errs, rtol=0, atol=1e-12)
    # pycls draws ties (the diverged trials at chance) as a vertical run; the step EDF takes its top
    top_of_ties = edf[np.searchsorted(errs, errs, side="right") - 1]
    np.testing.assert_allclose(table["F"], top_of_ties, rtol=0, atol=1e-12)
    assert len(errs) == 27 and (table["n"] == 27).all() and (table["n_left_out"] == 3).all()
    with pytest.warns(UserWarning):
        assert peak_table(rows[rows["model"] == model])["best_err"].iloc[0] == pytest.approx(min(errs), abs=1e-12)


@pytest.mark.parametrize("model", ["vit_c_tiny", "cnn_tiny"])
def test_good_ranges_match_pycls_get_filters(sweep_and_rows, model):
    sweep, rows = sweep_and_rows
    with pytest.warns(UserWarning, match="3 failed"):
        ranges = good_ranges(rows[rows["model"] == model], n_boot=B, seed=SEED)
    filters, n_sample = pycls_get_filters(_jobs(sweep, model), ["lr", "wd", "lr_wd"])
    assert ranges["sample_size"].iloc[0] == n_sample == 6
    for ours, theirs in (("log10_lr", "lr"), ("log10_wd", "wd"), ("log10_lr_wd", "lr_wd")):
        np.testing.assert_allclose(ranges[ours].to_numpy(), filters[theirs], rtol=0, atol=1e-12)


def test_ema_gain_matches_pycls(sweep_and_rows):
    sweep, rows = sweep_and_rows
    with pytest.warns(UserWarning):
        gain = ema_gain(rows).set_index("model")
    assert list(gain.index) == ["vit_c_tiny"]  # EMA was off for the CNN
    gains = pycls_ema_gain(_jobs(sweep, "vit_c_tiny"))
    assert gain.loc["vit_c_tiny", "n"] == len(gains) == 27
    assert gain.loc["vit_c_tiny", "gain_mean"] == pytest.approx(np.mean(gains), abs=1e-12)
    assert gain.loc["vit_c_tiny", "gain_median"] == pytest.approx(np.median(gains), abs=1e-12)


def test_the_row_stores_the_best_ema_error(sweep_and_rows):
    from hpstudy.trainers.loop import chance_error

    _, rows = sweep_and_rows
    vit, cnn = rows[rows["model"] == "vit_c_tiny"], rows[rows["model"] == "cnn_tiny"]
    ok = vit[vit["status"] == "ok"]
    assert (ok["best_ema_top1_err"] <= ok["ema_top1_err"]).all() and ok["best_ema_top1_err"].notna().all()
    assert (vit.loc[vit["status"] == "diverged", "best_ema_top1_err"] == chance_error(10)).all()
    assert cnn["best_ema_top1_err"].isna().all()  # null without EMA, diverged or not
    assert vit.loc[vit["status"] == "failed", "best_ema_top1_err"].isna().all()
