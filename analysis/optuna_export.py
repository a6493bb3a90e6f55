"""Stored trials into Optuna: one (model, optimizer, epochs) cell as an `optuna.Study` of finished
trials, for Optuna's plots and importances and, saved to a storage, optuna-dashboard
(docs/analysis.md#into-optuna).

Each row becomes one trial: its value the `metric` error (minimized), its params the sampled values
with their distributions, its user attributes model, optimizer, epochs, seed, trial_key and status.
Diverged rows are COMPLETE at their stored chance error, as the EDFs, good ranges and importances of
the report count them (a diverged setting is a bad setting, not a missing one); failed rows, and rows
without a finite error under the metric, are FAIL (no value), as the report leaves them out."""

from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, usable
from hpstudy.trainers.errors import HpstudyError, shown

if TYPE_CHECKING:
    import optuna

CELL = ("model", "optimizer", "epochs")
LOG_SCALED = ("lr", "wd")  # sampled log-uniformly (hpstudy.study.sampling): log-uniform distributions
USER_ATTRS = ("model", "optimizer", "epochs", "seed", "trial_key", "status")
EXPORTED = "hpstudy_cell"  # the study attribute that marks a study written here (which a new export may replace)


class ExportError(HpstudyError, ValueError):
    """Trials that do not make one Optuna study: no rows, several studies or cells without `cell`, an
    unknown cell or param, a storage's study of the same name that hpstudy did not write."""


def to_optuna(
    trials: pd.DataFrame,
    storage: Optional[Any] = None,
    study_name: Optional[str] = None,
    params: Union[Sequence[str], Mapping[str, Any]] = ("lr", "wd"),
    cell: Optional[Tuple[str, str, int]] = None,
    metric: str = DEFAULT_METRIC,
    epochs: Optional[pd.DataFrame] = None,
) -> "optuna.Study":
    """The trials of one (model, optimizer, epochs) `cell` (needed when `trials` hold several) as a
    minimizing Optuna study of finished trials, saved to `storage` (an Optuna storage or URL such as
    sqlite:///study.db) when given; `epochs` (the study's epoch records) adds each trial's per-epoch
    top-1 error as its intermediate values."""
    import optuna

    rows, cell = _one_cell(trials, cell)
    distributions = _distributions(rows, params)
    scored = usable(rows, metric)
    values = scored.kept[ERR]
    curves = _curves(epochs, rows["trial_key"]) if epochs is not None else {}
    made = []
    for index, row in rows.iterrows():
        given = {name: d for name, d in distributions.items() if pd.notna(row[name])}
        made.append(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.COMPLETE if index in values.index else optuna.trial.TrialState.FAIL,
                value=float(values[index]) if index in values.index else None,
                params={name: _plain(row[name]) for name in given},
                distributions=given,
                user_attrs={name: _plain(row[name]) for name in USER_ATTRS if name in row},
                intermediate_values=curves.get(row.get("trial_key"), {}),
            )
        )
    name = study_name or "/".join(str(part) for part in ((*_studies(rows)[:1], *cell)))
    if storage is not None:
        _replace_export(optuna, storage, name)
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize")
    study.set_user_attr(EXPORTED, list(cell))
    study.set_user_attr("metric", scored.metric)
    study.add_trials(made)
    return study


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value Optuna's storages take."""
    return value.item() if isinstance(value, np.generic) else value


def _studies(rows: pd.DataFrame) -> list:
    """The study names of the rows (none when the table has no study column)."""
    return sorted(set(rows["study"])) if "study" in rows else []


def _one_cell(trials: pd.DataFrame, cell: Optional[Tuple[str, str, int]]) -> Tuple[pd.DataFrame, Tuple]:
    """The rows of `cell`, or of the one cell the trials hold; ExportError otherwise."""
    if trials.empty:
        raise ExportError("trials: no rows; allowed: a study's trial table (hpstudy.load, load_trials)")
    if len(_studies(trials)) > 1:
        raise ExportError(f"trials: rows of several studies {shown(_studies(trials))}; allowed: one study's rows")
    cells = sorted(trials.groupby(list(CELL)).groups)
    if cell is None and len(cells) == 1:
        cell = cells[0]
    if cell is None or tuple(cell) not in cells:
        raise ExportError(
            f"cell: bad value {shown(cell)}; allowed: one of the trials' (model, optimizer, epochs) cells "
            f"{shown([tuple(_plain(v) for v in c) for c in cells])}"
        )
    chosen = (trials[list(CELL)] == pd.Series(dict(zip(CELL, cell)))).all(axis=1)
    return trials[chosen], tuple(_plain(v) for v in cell)


def _distributions(rows: pd.DataFrame, params: Union[Sequence[str], Mapping[str, Any]]) -> Dict[str, Any]:
    """Each param's Optuna distribution: given in a mapping, else from the rows' values (lr and wd
    log-uniform, other numbers uniform, anything else categorical) over their observed range."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    unknown = [name for name in params if name not in rows]
    if unknown:
        raise ExportError(f"params: unknown column {shown(unknown[0])}; columns: {', '.join(map(str, rows.columns))}")
    if isinstance(params, Mapping):
        return dict(params)
    made: Dict[str, Any] = {}
    for name in params:
        values = rows[name].dropna()
        if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
            made[name] = CategoricalDistribution(sorted({_plain(v) for v in values}, key=str))
        elif pd.api.types.is_integer_dtype(values):
            made[name] = IntDistribution(int(values.min()), int(values.max()))
        else:
            made[name] = FloatDistribution(float(values.min()), float(values.max()), log=name in LOG_SCALED)
    return made


def _curves(epochs: pd.DataFrame, keys: pd.Series) -> Dict[str, Dict[int, float]]:
    """{trial_key: {epoch: top-1 error}} of the finite epoch errors of `keys`."""
    mine = epochs[epochs["trial_key"].isin(set(keys)) & np.isfinite(epochs["top1_err"].astype(float))]
    return {
        key: {int(e): float(err) for e, err in zip(group["epoch"], group["top1_err"])}
        for key, group in mine.groupby("trial_key")
    }


def _replace_export(optuna: Any, storage: Any, name: str) -> None:
    """Delete the storage's study `name` if an earlier export wrote it; ExportError if someone else did."""
    if name not in optuna.study.get_all_study_names(storage):
        return
    if EXPORTED not in optuna.load_study(study_name=name, storage=storage).user_attrs:
        raise ExportError(
            f"study_name: {shown(name)} is already in the storage and was not written by hpstudy; "
            f"allowed: a new name, or one an earlier export wrote (replaced)"
        )
    optuna.delete_study(study_name=name, storage=storage)
