"""The report's figures as a registry: one entry per kind of figure, which says from the study's rows
where it applies (which cells), its table, its drawing, its section of the page and the metadata saved
beside it. hpstudy.analysis.report draws every entry's figures in registration order; adding a figure
is its table and figure functions (hpstudy.analysis.figures) and one `@register_figure` entry here."""

import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import pandas as pd

from hpstudy.analysis.edf import EDF_CONVENTION
from hpstudy.analysis.effects import COMPARED
from hpstudy.analysis.figures import (
    BEST_CURVES,
    HOURS_BUDGET,
    Plot,
    best_curves_figure,
    best_curves_table,
    best_of_k_figure,
    best_of_k_table,
    cell_name,
    delta_edf_figure,
    delta_edf_table,
    delta_error_vs_epochs_figure,
    delta_error_vs_epochs_table,
    delta_scale,
    error_vs_epochs_figure,
    error_vs_epochs_table,
    expected_best_figure,
    expected_best_table,
    generalization_figure,
    generalization_table,
    hp_scatter_figure,
    hp_scatter_table,
)
from hpstudy.analysis.inference import design_of
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, Rows, usable
from hpstudy.analysis.stats import Keys, hp_kinds
from hpstudy.trainers.schema import OK

CELL = ["model", "optimizer", "epochs"]
RANGES_BEYOND_LOG = " (linear values of a uniform or int one; per value of a choice, the share of the best trials)"


@dataclass(frozen=True)
class Study:
    """What every figure entry reads: the study's rows, the counted ones, the good ranges per cell,
    the metric, the sampled hyperparameters, the models' size classes and the study's epoch rows, if
    given (the sampled cells found once, for every entry)."""

    trials: pd.DataFrame
    rows: Rows
    ranges: Mapping[Tuple[str, str, Any], Any]
    metric: str
    keys: Keys
    sizes: Optional[Mapping[str, str]]
    epochs: Optional[pd.DataFrame] = None

    @functools.cached_property
    def sampled(self) -> pd.DataFrame:
        """The trials of the cells that sampled lr/wd (seed-only cells are not lr/wd studies)."""
        return sampled_cells(self.trials)

    @functools.cached_property
    def sampled_rows(self) -> pd.DataFrame:
        """The counted trials of the cells that sampled lr/wd."""
        return sampled_cells(self.rows.kept)

    def cells(self) -> Iterator[Tuple[str, int, pd.DataFrame, pd.DataFrame]]:
        """Per sampled (optimizer, epochs) cell, never pooled across lengths: (optimizer, epochs, its
        counted rows, all its trials)."""
        sampled = self.sampled
        for (opt, epochs), counted in self.sampled_rows.groupby(["optimizer", "epochs"], sort=True, observed=True):
            whole = sampled[(sampled["optimizer"] == opt) & (sampled["epochs"] == epochs)]
            yield opt, int(epochs), counted, whole


@dataclass(frozen=True)
class Planned:
    """One figure to draw: its file name, page section, table, drawing function, saved metadata, and the
    (optimizer, epochs) cell it shows, if one."""

    name: str
    section: str
    table: pd.DataFrame
    figure: Callable[[pd.DataFrame], Plot]
    meta: Dict[str, Any]
    cell: Optional[Tuple[str, int]] = None


FigureEntry = Callable[[Study], Iterable[Planned]]
FIGURES: Dict[str, FigureEntry] = {}


def register_figure(kind: str) -> Callable[[FigureEntry], FigureEntry]:
    """Add a figure entry (a function from the Study to the figures it applies to) under `kind`."""

    def add(entry: FigureEntry) -> FigureEntry:
        if kind in FIGURES:
            raise ValueError(f"figure kind {kind!r} is registered already")
        FIGURES[kind] = entry
        return entry

    return add


def planned_figures(study: Study) -> List[Planned]:
    """Every figure the study's rows support: a cell's figures together, cell by cell, then the figures
    of no one cell, each group in registration order."""
    planned = [planned for entry in FIGURES.values() for planned in entry(study)]
    return sorted(planned, key=lambda p: (p.cell is None, p.cell or ()))


def sampled_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the (model, optimizer, epochs) cells that sampled lr/wd (not one lr/wd over seeds)."""
    if frame.empty:
        return frame
    designs = {
        key: design_of(cell["lr"], cell["wd"], cell.get("config_json"))
        for key, cell in frame.groupby(CELL, observed=True)
    }
    return frame[[designs[key] == "samples" for key in frame[CELL].itertuples(index=False, name=None)]]


def equalize_counts(frame: pd.DataFrame, by: List[str], metric: str = DEFAULT_METRIC, seed: int = 0) -> pd.DataFrame:
    """Subsample every group's counted trials to the smallest group's count (models compared at
    equal n); the rows that do not count are kept, for the next function to leave out and count."""
    rows = usable(frame, metric)
    n_min = rows.kept.groupby(by, observed=True).size().min()
    shuffled = rows.kept.sample(frac=1.0, random_state=seed)
    kept = shuffled[shuffled.groupby(by, observed=True).cumcount() < n_min].drop(columns=ERR)
    return pd.concat([kept, rows.left_out]).sort_values(by, kind="stable")


def main_cell(cells: List[Tuple[str, int, int]]) -> Optional[Tuple[str, int]]:
    """The (optimizer, epochs) of the main Δ-EDF among (optimizer, epochs, n per model): the most trials,
    then the longest schedule, then AdamW."""
    if not cells:
        return None
    opt, epochs, _ = max(cells, key=lambda c: (c[2], c[1], c[0] == "adamw"))
    return opt, epochs


def _n_per_model(table: pd.DataFrame) -> int:
    return int(table.groupby("model")["n"].first().min())


@register_figure("delta_edf")
def _delta_edfs(study: Study) -> Iterator[Planned]:
    """Per sampled cell with two or more trials per model, the Δ-EDFs at equal n; the main cell opens the
    page, the others go to the models' section (or the sampled one, for one model)."""
    edfs = [
        (opt, epochs, delta_edf_table(equalize_counts(whole, ["model"], study.metric), study.metric))
        for opt, epochs, counted, whole in study.cells()
        if counted.groupby("model").size().min() >= 2
    ]
    main = main_cell([(opt, epochs, _n_per_model(table)) for opt, epochs, table in edfs])
    several = study.rows.kept["model"].nunique() > 1
    for opt, epochs, table in edfs:
        xscale = delta_scale(table)
        yield Planned(
            cell_name("delta_edf", opt, epochs),
            "main" if (opt, epochs) == main else "models" if several else "sampled",
            table,
            functools.partial(delta_edf_figure, sizes=study.sizes, xscale=xscale),
            dict(
                n_per_model=_n_per_model(table),
                reference="each model's best trial",
                edf_convention=EDF_CONVENTION,
                band="DKW 95% simultaneous",
                optimizer=opt,
                epochs=epochs,
                xscale=xscale,
            ),
            cell=(opt, epochs),
        )


@register_figure("hp_scatter")
def _hp_scatters(study: Study) -> Iterator[Planned]:
    """Per sampled cell, the error against each sampled hyperparameter, with each model's good range."""
    for opt, epochs, _, whole in study.cells():
        by_model = {m: r for (m, o, e), r in study.ranges.items() if (o, e) == (opt, epochs)}
        table = hp_scatter_table(whole, study.metric, study.keys)
        yield Planned(
            cell_name("hp_scatter", opt, epochs),
            "sampled",
            table,
            functools.partial(hp_scatter_figure, ranges=by_model, keys=study.keys),
            dict(
                good_ranges="bootstrap (2500 x max(1, int(25% n))) of the best trial's log10 values, 2.5-97.5%"
                + ("" if set(hp_kinds(study.keys).values()) == {"log_uniform"} else RANGES_BEYOND_LOG),
                ranges={m: r.to_dict() for m, r in by_model.items()},
                n_per_model=table.groupby("model").size().to_dict(),
                optimizer=opt,
                epochs=epochs,
            ),
            cell=(opt, epochs),
        )


def _sampled_cell(kind: str, opt: str, epochs: int, table: pd.DataFrame, figure, **meta) -> Planned:
    """The figure `kind` of one sampled (optimizer, epochs) cell, in the sampled section; its metadata names the
    cell and each model's counted trials (the table's `n`)."""
    n_per_model = table.groupby("model")["n"].first().to_dict()
    return Planned(
        cell_name(kind, opt, epochs),
        "sampled",
        table,
        figure,
        dict(meta, n_per_model=n_per_model, optimizer=opt, epochs=epochs),
        cell=(opt, epochs),
    )


@register_figure("expected_best")
def _expected_bests(study: Study) -> Iterator[Planned]:
    """Per sampled cell where a model has two or more trials, the expected best of k trials."""
    for opt, epochs, counted, whole in study.cells():
        if counted.groupby("model").size().max() >= 2:
            table = expected_best_table(whole, study.metric)
            yield _sampled_cell(
                "expected_best",
                opt,
                epochs,
                table,
                expected_best_figure,
                estimator="unbiased, Tang et al. 2020",
                band="bootstrap 95% pointwise",
            )


@register_figure("best_curves")
def _best_curves(study: Study) -> Iterator[Planned]:
    """Per sampled cell whose trials have stored epochs, the best trials' validation error over the epochs."""
    if study.epochs is None or study.epochs.empty:
        return
    for opt, epochs, _, whole in study.cells():
        table = best_curves_table(whole, study.metric, epochs=study.epochs)
        if not table.empty:
            yield _sampled_cell(
                "best_curves",
                opt,
                epochs,
                table,
                best_curves_figure,
                best=BEST_CURVES,
                selection="the trials with the lowest error under the metric, ties by trial key",
            )


@register_figure("best_of_k")
def _best_of_ks(study: Study) -> Iterator[Planned]:
    """Per comparison the design holds (models, optimizers, lengths) with two or more trials in some pair, the
    probability that the first's best of k beats the second's, in that comparison's section."""
    for compared in COMPARED:
        table = best_of_k_table(study.sampled, study.metric, compared)
        if len(table) and table["k"].max() >= 2:
            yield Planned(
                f"best_of_k_{compared}",
                compared,
                table,
                best_of_k_figure,
                dict(
                    estimator="closed form, k of the n trials without replacement (as the expected best's unbiased)",
                    ties="counted half",
                    reference="none: a probability",
                    n_per_group=sorted({int(n) for n in pd.concat([table["n_a"], table["n_b"]])}),
                ),
            )


@register_figure("expected_best_hours")
def _expected_best_hours(study: Study) -> Iterator[Planned]:
    """Where the sampled cells compare two or more models and every counted trial has a wall time, the expected
    best against what k trials take in hours, a panel per cell: models whose trials cost differently compared
    at equal compute (with one model it would only rescale the expected best's axis)."""
    counted = study.sampled_rows
    if counted["model"].nunique() < 2 or counted.groupby(CELL, observed=True).size().max() < 2:
        return
    # one table over every sampled cell, not the cells' own: the metric is resolved once for all its panels
    table = expected_best_table(study.sampled, study.metric)
    if np.isfinite(table["hours"].astype(float)).all():
        yield Planned(
            "expected_best_hours",
            "sampled",
            table,
            functools.partial(expected_best_figure, budget="hours"),
            dict(
                estimator="unbiased, Tang et al. 2020",
                band="bootstrap 95% pointwise",
                budget=HOURS_BUDGET,
                hours_per_trial={"/".join(map(str, cell)): round(float(h), 6) for cell, h in _first_k(table).items()},
            ),
        )


def _first_k(table: pd.DataFrame) -> pd.Series:
    """An expected-best table's hours of one trial per (model, optimizer, epochs) cell."""
    return table[table["k"] == 1].set_index(CELL)["hours"]


def _several_lengths(study: Study) -> bool:
    return study.rows.kept["epochs"].nunique() > 1


@register_figure("error_vs_epochs")
def _error_vs_epochs(study: Study) -> Iterator[Planned]:
    """With two or more training lengths, the best error against the length."""
    if _several_lengths(study):
        yield Planned(
            "error_vs_epochs",
            "lengths",
            error_vs_epochs_table(study.trials, study.metric),
            lambda table: error_vs_epochs_figure(table, sizes=study.sizes),
            dict(aggregate="best trial per (model, optimizer, epochs)"),
        )


@register_figure("delta_error_vs_epochs")
def _delta_error_vs_epochs(study: Study) -> Iterator[Planned]:
    """With two or more training lengths, each shorter schedule's gap to the longest."""
    if _several_lengths(study):
        yield Planned(
            "delta_error_vs_epochs",
            "lengths",
            delta_error_vs_epochs_table(study.trials, study.metric),
            delta_error_vs_epochs_figure,
            dict(rule="E_max all diverged -> best shorter schedule, flagged"),
        )


@register_figure("generalization")
def _generalization(study: Study) -> Iterator[Planned]:
    """With two or more model families and a finite train loss, the train loss against the error."""
    kept = study.rows.kept
    losses = kept.get("train_loss")  # a table without train losses has no such figure
    trained = losses is not None and ((kept["status"] == OK) & np.isfinite(losses.astype(float))).any()
    if kept["family"].nunique() > 1 and trained:
        yield Planned(
            "generalization",
            "models",
            generalization_table(study.trials, study.metric),
            generalization_figure,
            dict(aggregate="median per model", left_out="failed, no finite error, diverged"),
        )
