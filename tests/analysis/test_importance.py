"""fANOVA importance with its run-to-run variation (stats.importance_interval, figures.importance_table,
`hpstudy importance`): the point value, the bootstrap refits and the seed range against optuna's evaluator
called directly on the same rows; one table row per cell and hyperparameter, never pooled; bad counts exit 2."""

import json

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.stats import IMPORTANCE_DEPTH, StatsError, importance_interval
from hpstudy.cli import hpstudy_main
from tests.helpers import make_trials


def _optuna_importance(rows: pd.DataFrame, seed: int) -> dict:
    """optuna's fANOVA on the rows as a finished study (lr and wd log-uniform), as a user would call it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {k: optuna.distributions.FloatDistribution(rows[k].min(), rows[k].max(), log=True) for k in ("lr", "wd")}
    study = optuna.create_study(direction="minimize")
    for lr, wd, err in zip(rows["lr"], rows["wd"], rows["best_top1_err"]):
        study.add_trial(
            optuna.trial.create_trial(params={"lr": float(lr), "wd": float(wd)}, distributions=dists, value=float(err))
        )
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed, max_depth=IMPORTANCE_DEPTH)
    return optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True)


@pytest.mark.parametrize("seed", [0, 7])
def test_the_interval_is_optunas_fanova_over_resampled_rows_and_seeds(seed):
    """The point value is optuna's at `seed` on all rows; the interval the 2.5-97.5% of refits on rows drawn by
    default_rng([seed, r]) with evaluator seed seed + r; the seed range the min-max over seeds seed.. ."""
    cell = make_trials(models=("vit_c_tiny",), optimizers=("adamw",), n=12, diverge_share=0.0, seed=seed)
    found = importance_interval(cell, resamples=3, seeds=2, seed=seed).set_index("param")
    n = len(cell)
    refits = [
        _optuna_importance(cell.iloc[np.random.default_rng([seed, r]).integers(0, n, n)], seed + r) for r in range(3)
    ]
    by_seed = [_optuna_importance(cell, seed + s) for s in range(2)]
    for param in ("lr", "wd"):
        row = found.loc[param]
        assert row["importance"] == pytest.approx(by_seed[0][param])
        values = [refit[param] for refit in refits]
        assert (row["low"], row["high"]) == pytest.approx(tuple(np.quantile(values, [0.025, 0.975])))
        seeds = [s[param] for s in by_seed]
        assert (row["seed_low"], row["seed_high"]) == pytest.approx((min(seeds), max(seeds)))
        assert row["seed_low"] <= row["importance"] <= row["seed_high"]
    assert found["importance"].sum() == pytest.approx(1.0) and (found["n"] == n).all()


@pytest.mark.parametrize("resamples, seeds, n", [(0, 2, 8), (2, 0, 8), (2, 2, 1)])
def test_bad_counts_or_too_few_trials_are_one_stats_error(resamples, seeds, n):
    cell = make_trials(models=("vit_c_tiny",), optimizers=("adamw",), n=n, diverge_share=0.0)
    with pytest.raises(StatsError, match="^importance_interval: bad value"):
        importance_interval(cell, resamples=resamples, seeds=seeds)


def test_the_table_has_a_row_per_cell_and_hyperparameter_never_pooled():
    from hpstudy.analysis.figures import importance_table

    trials = make_trials(models=("vit_p_tiny", "vit_c_tiny"), optimizers=("adamw", "sgd"), n=8, diverge_share=0.0)
    calls = []
    table = importance_table(trials, resamples=2, seeds=1, progress=lambda done, cells: calls.append((done, cells)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert len(table) == 8 and set(table["param"]) == {"lr", "wd"} and (table["n"] == 8).all()
    for (model, opt, _), rows in table.groupby(["model", "optimizer", "epochs"]):
        cell = trials[(trials["model"] == model) & (trials["optimizer"] == opt)]
        alone = importance_interval(cell, resamples=2, seeds=1)
        assert list(rows["importance"]) == pytest.approx(list(alone["importance"]))


def test_hpstudy_importance_prints_json_and_draws_the_figure(tmp_path, capsys):
    """The lr/wd study's cells each get their rows (JSON alone on stdout); the optimizer study's cells repeat one
    (lr, wd) over seeds: nothing to attribute, no rows; bad counts exit 2 before any fit."""
    from tests.helpers import REPO

    store = f"{REPO}/docs/reproduction/store"
    argv = ["importance", "--store", store, "--resamples", "2", "--seeds", "1", "--json"]
    assert hpstudy_main([*argv, "--study", "repro_digits_lr_wd", "--out", str(tmp_path / "fig")]) == 0
    rows = pd.DataFrame(json.loads(capsys.readouterr().out))
    assert len(rows) == 12 * 2 and {"importance", "low", "high", "seed_low", "seed_high"} <= set(rows)
    drawn = pd.read_csv(tmp_path / "fig" / "importance.csv")
    assert list(drawn["importance"]) == pytest.approx(list(rows["importance"]), abs=1e-6)  # the CSV: 6 digits
    assert hpstudy_main([*argv, "--study", "repro_digits_optimizer"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert hpstudy_main(["importance", "--store", store, "--study", "repro_digits_lr_wd", "--seeds", "-1"]) == 2
    assert "--seeds: bad value -1; allowed: a whole number >= 1" in capsys.readouterr().err


def test_resamples_without_variance_are_left_out_and_a_cell_without_any_is_refused():
    """Two of three trials diverged at one error: some resamples hold only those (no variance to attribute,
    optuna's forest refuses them) and are left out of the interval, counted in `refits`; a cell whose trials all
    diverged has nothing to attribute and is one StatsError, and importance_table leaves it out."""
    from hpstudy.analysis.figures import importance_table

    cell = make_trials(models=("vit_c_tiny",), optimizers=("adamw",), n=3, diverge_share=0.0)
    cell.loc[cell.index[1:], ["status", "top1_err", "best_top1_err"]] = ["diverged", 90.0, 90.0]
    found = importance_interval(cell, resamples=8, seeds=1)
    n = 3
    usable = sum(
        np.ptp(cell["best_top1_err"].to_numpy()[np.random.default_rng([0, r]).integers(0, n, n)]) > 0 for r in range(8)
    )
    assert 0 < usable < 8 and set(found["refits"]) == {usable}
    flat = cell.assign(status="diverged", top1_err=90.0, best_top1_err=90.0)
    with pytest.raises(StatsError, match=r"\(1 distinct errors\)"):
        importance_interval(flat, resamples=2, seeds=1)
    both = pd.concat([flat, make_trials(models=("cnn_tiny",), optimizers=("adamw",), n=6, diverge_share=0.0)])
    assert set(importance_table(both, resamples=2, seeds=1)["model"]) == {"cnn_tiny"}
