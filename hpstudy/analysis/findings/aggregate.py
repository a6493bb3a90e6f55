"""One finding per pair of models across the cells of a family declared over several studies: the probability
that a random trial of a has a lower error than a random trial of b of the same cell, averaged over every
(source, optimizer, epochs) cell that holds both (effects.mean_improvement), with its stratified bootstrap
interval and its permutation test within cells (hpstudy.analysis.stratified). Cells are strata, never pooled:
each contributes its own probability, every cell weighing the same."""

import functools
from typing import TYPE_CHECKING, Dict, List, Mapping, Sequence, Tuple

from hpstudy.analysis.effects import mean_improvement_interval, pair_effects
from hpstudy.analysis.findings.details import AggregateCell, AggregateDetail
from hpstudy.analysis.findings.model import Finding
from hpstudy.analysis.stratified import mean_improvement_test

if TYPE_CHECKING:  # compute imports this module: the types only
    from hpstudy.analysis.findings.compute import Group, Seeds

Key = Tuple[str, str, int]  # (model, optimizer, epochs)
MIN_CELLS = 2  # an aggregate over one cell is that cell's own comparison (the report's effect sizes)


def _pairs(sources: Sequence[Tuple[Tuple[str, ...], Mapping[Key, "Group"]]], rank: Mapping[str, int]) -> Dict:
    """Every pair of models (a before b in `rank`) with the cells that hold both: [(studies, optimizer, epochs,
    a's group, b's group)]."""
    pairs: Dict[Tuple[str, str], List] = {}
    for studies, groups in sources:
        for (model_a, opt, epochs), ga in groups.items():
            for (model_b, opt_b, epochs_b), gb in groups.items():
                if (opt_b, epochs_b) == (opt, epochs) and rank[model_a] < rank[model_b]:
                    pairs.setdefault((model_a, model_b), []).append((studies, opt, epochs, ga, gb))
    return pairs


def _cell(held: Tuple, labels: Tuple[str, str], seed: int) -> AggregateCell:
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
    """Per pair of models (catalogue `order`) held by MIN_CELLS cells or more over the sources (each its
    studies and its (model, optimizer, epochs) groups): the aggregate finding, its test retested at Holm's
    thresholds as the family asks."""
    rank = {model: i for i, model in enumerate(order)}
    pairs = _pairs(sources, rank)
    out = []
    for a, b in sorted(pairs, key=lambda pair: (rank[pair[0]], rank[pair[1]])):
        held = sorted(pairs[(a, b)], key=lambda c: c[:3])
        if len(held) < MIN_CELLS:
            continue
        cells = [(ga.errors, gb.errors) for *_, ga, gb in held]
        labels = [(f"{'+'.join(s)}/{a}/{o}/{e}", f"{'+'.join(s)}/{b}/{o}/{e}") for s, o, e, *_ in held]
        ci = mean_improvement_interval(cells, labels, seeds.area)
        retest = functools.partial(mean_improvement_test, cells, ci, seed=seeds.permutation)
        out.append(
            Finding(
                kind="aggregate",
                models=(a, b),
                cell={},
                test=retest(),
                n_left_out=(sum(c[3].left_out for c in held), sum(c[4].left_out for c in held)),
                detail=AggregateDetail(cells=tuple(_cell(c, names, seeds.area) for c, names in zip(held, labels))),
                retest=retest,
            )
        )
    return out
