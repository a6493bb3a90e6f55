"""`hpstudy suggest`: the fixed lr/wd of a length or optimizer study, read from a stored lr/wd study.

The paper's length and optimizer studies train each model at one lr/wd found by its lr/wd study.
This makes that step a command instead of hand-copied numbers: for every (model, optimizer) of the
stored study it prints the spec lines (YAML, under `space:`) of a fixed point,

    lr = 10 ** p50(log10 lr),  wd = 10 ** p50(log10 wd)

of the study's good ranges (`hpstudy.analysis.stats.good_ranges`, pycls's `get_filters`: 2500 bootstrap
subsets of 25% of the trials, the best trial of each; p50 is the median of the winners' values).

Why the median winner, not the best trial or the centre of the range: the single best trial is one
draw (with seed noise, which of the good trials comes out best is partly luck); the geometric centre
of [p2.5, p97.5] follows the range's tails, which a few trials at the box's edge decide. The median
over bootstrap winners is where the best trial usually falls: a single lucky trial moves it little,
and it lies inside the good range by construction.
lr and wd are taken each at its own median; the comment line says whether their product lies in
the good range of lr·wd (the product the paper finds matters most).

Each (model, optimizer, epochs) cell is its own point, never pooled across training lengths: the good
lr of a 6-epoch and a 16-epoch schedule are different things. A study of one length (an lr/wd study
usually has one) prints one `space:` block; a study of several prints one block per length, as YAML
documents (`---`) headed by the length, and says so: paste the block of the length your spec trains.

A recipe field the study sampled (the spec record's `sampled`) that varies in a cell is fixed the same
way, beside lr and wd in the cell's box (a box fixes a recipe field with a single value): a log-uniform
one at 10 ** p50 of its log10, a uniform one at p50, an int one at p50 rounded, a choice at the value
the most bootstrap winners have (its share is in the comment line).

A spec expresses a fixed value as a single number (`lr: 1.2e-3`) and a per-model box under the
model's name (`space: {<model>: {<optimizer>: {lr, wd}}}`, study/spec.py, which looks up model, then
family, then the optimizer's box), and needs a top-level box per optimizer. So the lines give every
model its own fixed point, and the top-level boxes the values of the first model in catalogue order
(required by the spec, used by no model the lines name).

`good_ranges` lives in `analysis`, which `study` does not import (tests/contracts/test_architecture.py): the
command line passes it in (`ranges_fn`).
"""

from typing import Callable, Dict, List, Mapping, Optional, Sequence

import pandas as pd

from hpstudy.study.store.read import CLI, Fields, load_study
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.schema import FAILED
from hpstudy.trainers.zoo import list_models

RangesFn = Callable[..., pd.DataFrame]  # hpstudy.analysis.stats.good_ranges(frame, metric[, keys=]) -> table


def yaml_number(value: float) -> str:
    """3 significant digits, always read back by YAML as a float (1.0e-05, not the string 1e-05)."""
    text = f"{value:.3g}"
    return f"{value:.2e}" if "e" in text else text


def fixed_points(
    trials: pd.DataFrame,
    ranges_fn: RangesFn,
    metric: str,
    models: Optional[Sequence[str]] = None,
    optimizers: Optional[Sequence[str]] = None,
    sampled: Mapping[str, str] = {},
) -> List[Dict]:
    """Per (model, optimizer, epochs) cell of the trials (filtered to `models` / `optimizers`), never pooled
    across lengths: the suggested fixed lr and wd, and each recipe field of `sampled` (field -> distribution,
    columns of `trials`) that varies in the cell, and what they come from (n, left out, good ranges)."""
    for name, wanted, column in (("--model", models, "model"), ("--optimizer", optimizers, "optimizer")):
        missing = sorted(set(wanted or ()) - set(trials[column]))
        if missing:
            raise ConfigError(
                f"{name}: bad value {missing[0]!r}; allowed (in the study): {', '.join(sorted(set(trials[column])))}"
            )
    catalogue = list_models()
    out = []
    for (model, opt, epochs), cell in sorted(  # catalogue order, then models it does not list (timm:) by name
        trials.groupby(["model", "optimizer", "epochs"], observed=True),
        key=lambda kv: (catalogue.index(kv[0][0]) if kv[0][0] in catalogue else len(catalogue), kv[0]),
    ):
        if (models and model not in models) or (optimizers and opt not in optimizers):
            continue
        out.append(_point(cell, model, opt, int(epochs), ranges_fn, metric, sampled))
    if not out:
        raise ConfigError("--model/--optimizer: no (model, optimizer) of the study matches")
    return out


def _point(
    cell: pd.DataFrame, model: str, opt: str, epochs: int, ranges_fn: RangesFn, metric: str, sampled: Mapping[str, str]
) -> Dict:
    """The fixed point of one (model, optimizer, epochs) cell (see fixed_points)."""
    if not (cell["status"] != FAILED).any():
        return {"model": model, "optimizer": opt, "epochs": epochs, "lr": None, "wd": None, "why": "every trial failed"}
    recipe = {
        name: kind
        for name, kind in sampled.items()
        if name not in ("lr", "wd") and name in cell and cell[name].nunique(dropna=False) > 1
    }
    with_recipe = {"keys": {"lr": "log_uniform", "wd": "log_uniform", **recipe}} if recipe else {}
    ranges = ranges_fn(cell, metric, **with_recipe)
    # plain floats (a notebook shows np.float64(0.00195...) for numpy's): the points are the API's data
    log_lr, log_wd = float(ranges.loc["p50", "log10_lr"]), float(ranges.loc["p50", "log10_wd"])
    lo_prod, hi_prod = float(ranges.loc["p2.5", "log10_lr_wd"]), float(ranges.loc["p97.5", "log10_lr_wd"])
    return {
        "model": model,
        "family": str(cell["family"].iloc[0]),  # as stored: a timm: model's as its spec gave it
        "optimizer": opt,
        "epochs": epochs,
        "lr": 10**log_lr,
        "wd": 10**log_wd,
        "n": int(ranges["n"].iloc[0]),
        "n_left_out": int(ranges["n_left_out"].iloc[0]),
        "metric": str(ranges["metric"].iloc[0]),
        "lr_range": (_power10(ranges, "p2.5", "log10_lr"), _power10(ranges, "p97.5", "log10_lr")),
        "wd_range": (_power10(ranges, "p2.5", "log10_wd"), _power10(ranges, "p97.5", "log10_wd")),
        "product_in_range": bool(lo_prod - 1e-9 <= log_lr + log_wd <= hi_prod + 1e-9),
        "recipe": {name: _fixed_field(ranges, name, kind) for name, kind in recipe.items()},
    }


def _power10(ranges: pd.DataFrame, quantile: str, column: str) -> float:
    """10 ** a good-range quantile of a log10 column, as a plain float."""
    return float(10 ** ranges.loc[quantile, column])


def _fixed_field(ranges: pd.DataFrame, name: str, kind: str) -> Dict[str, str]:
    """A sampled recipe field's suggested value (YAML) and where it comes from, from its good ranges."""
    if kind == "choice":
        shares = {column.split("=", 1)[1]: ranges[column].iloc[0] for column in ranges if column.startswith(f"{name}=")}
        best = max(shares, key=shares.__getitem__)  # the first of equal shares
        return {"value": best, "source": f"{name} {best} in {shares[best]:.0%} of the best"}
    column = f"log10_{name}" if kind == "log_uniform" else name
    low, p50, high = (ranges.loc[q, column] for q in ("p2.5", "p50", "p97.5"))
    if kind == "log_uniform":
        low, p50, high = 10**low, 10**p50, 10**high
    value = str(round(p50)) if kind == "int" else yaml_number(p50)
    return {"value": value, "source": f"good {name} [{yaml_number(low)}, {yaml_number(high)}]"}


def _box(point: Dict) -> str:
    recipe = "".join(f", {name}: {field['value']}" for name, field in point["recipe"].items())
    return f"{{lr: {yaml_number(point['lr'])}, wd: {yaml_number(point['wd'])}{recipe}}}"


def _source(point: Dict) -> str:
    if point["lr"] is None:
        return f"# {point['model']}, {point['optimizer']}, {point['epochs']} epochs: no suggestion ({point['why']})"
    lr, wd = point["lr_range"], point["wd_range"]
    note = "" if point["product_in_range"] else "; lr·wd lies OUTSIDE the good lr·wd range: check the scatter figure"
    recipe = "".join(f", {field['source']}" for field in point["recipe"].values())
    return (
        f"# {point['model']}, {point['optimizer']}, {point['epochs']} epochs: n = {point['n']} counted "
        f"({point['n_left_out']} left out); good lr [{yaml_number(lr[0])}, {yaml_number(lr[1])}], "
        f"wd [{yaml_number(wd[0])}, {yaml_number(wd[1])}]{recipe}{note}"
    )


def space_lines(points: List[Dict], study: str, store: str) -> List[str]:
    """The `space:` block (YAML with comments) of the fixed points; one block (a YAML document) per
    training length where the points span several, never pooled."""
    usable_points = [p for p in points if p["lr"] is not None]
    metric = usable_points[0]["metric"] if usable_points else "?"
    lengths = sorted({p["epochs"] for p in points})
    lines = [
        f"# hpstudy suggest --store {store} --study {study}   (metric: {metric})",
        "# lr, wd = 10^p50 of the good ranges (hpstudy.analysis.stats.good_ranges): the median best trial over",
        "# 2500 bootstrap subsets of 25% of the trials (study/suggest.py says why). A single number fixes",
        "# the value. Paste under a length or optimizer spec's `space:` (replacing its boxes).",
    ]
    if len(lengths) > 1:
        lines += [
            f"# The study ran {len(lengths)} lengths ({', '.join(map(str, lengths))} epochs): each length is its own",
            "# point, never pooled; one block (YAML document) per length below: paste the one your spec trains.",
        ]
    for epochs in lengths:
        if len(lengths) > 1:
            lines += ["---", f"# from the {epochs}-epoch trials"]
        lines += _space_block([p for p in points if p["epochs"] == epochs])
    return lines


def _space_block(points: List[Dict]) -> List[str]:
    """One `space:` block of the fixed points of one training length."""
    lines = ["space:"]
    first: Dict[str, Dict] = {}  # optimizer -> its first point with a box
    for p in points:
        if p["lr"] is not None:
            first.setdefault(p["optimizer"], p)
    for opt, p in first.items():
        lines.append(f"  {opt}: {_box(p)}   # = {p['model']}'s; required per optimizer, used by no model below")
    by_model: Dict[str, List[Dict]] = {}
    for p in points:
        by_model.setdefault(p["model"], []).append(p)
    for model, group in by_model.items():
        lines.append(f"  {model}:")
        for p in group:
            lines.append(f"    {_source(p)}")
            if p["lr"] is not None:
                lines.append(f"    {p['optimizer']}: {_box(p)}")
    return lines


def suggest(
    store: str,
    study: str,
    ranges_fn: RangesFn,
    metric: str = "paper",
    models: Optional[Sequence[str]] = None,
    optimizers: Optional[Sequence[str]] = None,
) -> str:
    """The spec lines for a stored lr/wd study (see the module docstring)."""
    return suggestion(store, study, ranges_fn, metric, models, optimizers)["space"]


def suggestion(
    store: str,
    study: str,
    ranges_fn: RangesFn,
    metric: str = "paper",
    models: Optional[Sequence[str]] = None,
    optimizers: Optional[Sequence[str]] = None,
    fields: Fields = CLI,
) -> Dict:
    """A stored study's fixed points as data: {"points": one dict per (model, optimizer, epochs), "space": the
    spec lines `suggest` prints}; the recipe fields the spec record says it sampled are fixed too."""
    trials, _, record = load_study(store, study, fields)
    sampled = (record or {}).get("sampled", {})
    points = fixed_points(trials, ranges_fn, metric, models, optimizers, sampled)
    return {"points": points, "space": "\n".join(space_lines(points, study, store))}
