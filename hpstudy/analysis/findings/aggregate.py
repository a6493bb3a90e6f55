"""One finding per pair of models across the studies of a family declared over several: the probability that a
random trial of a has a lower error than a random trial of b of the same cell, averaged over every (source,
optimizer, epochs) cell that holds both (effects.mean_improvement), with its stratified bootstrap interval and a
test valid however the cells depend on each other (hpstudy.analysis.stratified). Cells are strata, never pooled:
each contributes its own probability, every cell weighing the same."""

from typing import TYPE_CHECKING, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from hpstudy.analysis.effects import group_label, mean_improvement_interval, pair_effects
from hpstudy.analysis.findings.details import AggregateCell, AggregateDetail
from hpstudy.analysis.findings.model import Finding
from hpstudy.analysis.stratified import mean_improvement_test

if TYPE_CHECKING:  # compute imports this module: the types only
    from hpstudy.analysis.findings.compute import Group, Seeds

Key = Tuple[str, str, int]  # (model, optimizer, epochs)
Held = Tuple[Tuple[str, ...], str, int, "Group", "Group"]  # (a source's studies, optimizer, epochs, a's, b's)
MIN_SOURCES = 2  # a pair held by one source only: that source's own cells and effect sizes say it


def _pairs(sources: Sequence[Tuple[Tuple[str, ...], Mapping[Key, "Group"]]], rank: Mapping[str, int]) -> Dict:
    """Every pair of models (a before b in `rank`) with the cells that hold both and say something (not every
    error of the cell equal, as where both models' trials all diverged): [Held]."""
    pairs: Dict[Tuple[str, str], List[Held]] = {}
    for studies, groups in sources:
        for (model_a, opt, epochs), ga in groups.items():
            for (model_b, opt_b, epochs_b), gb in groups.items():
                same_cell = (opt_b, epochs_b) == (opt, epochs)
                if same_cell and rank[model_a] < rank[model_b] and np.ptp(np.concatenate([ga.errors, gb.errors])) > 0:
                    pairs.setdefault((model_a, model_b), []).append((studies, opt, epochs, ga, gb))
    return pairs


def _labels(held: Held, a: str, b: str) -> Tuple[str, str]:
    """The bootstrap streams of a cell's two groups: the report's effect-size table's (effects.group_label)."""
    _, opt, epochs, _, _ = held
    return group_label({"model": a, "optimizer": opt, "epochs": epochs}), group_label(
        {"model": b, "optimizer": opt, "epochs": epochs}
    )


def _cell(held: Held, labels: Tuple[str, str], seed: int) -> AggregateCell:
    """One cell of an aggregate, with its own probability of improvement and interval (the report's effects')."""
    studies, opt, epochs, ga, gb = held
    effects = pair_effects(ga.errors, gb.errors, seed, labels)
    return AggregateCell(
        studies=studies,
        optimizer=str(opt),
        epochs=int(epochs),
        n=(len(ga.errors), len(gb.errors)),
        diverged=(ga.diverged, gb.diverged),
        p_a_better=effects["p_a_better"],
        p_a_better_ci=(effects["p_a_better_low"], effects["p_a_better_high"]),
    )


def aggregate_findings(
    sources: Sequence[Tuple[Tuple[str, ...], Mapping[Key, "Group"]]], order: Sequence[str], seeds: "Seeds"
) -> List[Finding]:
    """Per pair of models (catalogue `order`) held by cells of MIN_SOURCES sources or more (each source its
    studies and its (model, optimizer, epochs) groups): the aggregate finding over all those cells."""
    rank = {model: i for i, model in enumerate(order)}
    pairs = _pairs(sources, rank)
    out = []
    for a, b in sorted(pairs, key=lambda pair: (rank[pair[0]], rank[pair[1]])):
        held = sorted(pairs[(a, b)], key=lambda c: c[:3])
        if len({c[0] for c in held}) < MIN_SOURCES:
            continue
        cells = [(ga.errors, gb.errors) for *_, ga, gb in held]
        labels = [_labels(c, a, b) for c in held]
        ci = mean_improvement_interval(cells, labels, seeds.area)
        out.append(
            Finding(
                kind="aggregate",
                models=(a, b),
                cell={},
                test=mean_improvement_test(cells, ci),
                n_left_out=(sum(c[3].left_out for c in held), sum(c[4].left_out for c in held)),
                detail=AggregateDetail(cells=tuple(_cell(c, names, seeds.area) for c, names in zip(held, labels))),
            )
        )
    return out
