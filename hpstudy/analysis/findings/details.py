"""The typed numbers a finding's sentence quotes (one class per kind of detail), the kinds and verdicts of
findings, and where the Δ-EDF test's power approximation holds: data the finding (findings.model), its
words (findings.text) and its tables (findings.tables) share; nothing here is words."""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple, Union

KINDS = (
    "scope",
    "edf_pair",
    "optimizer_gap",
    "optimizer_gap_pair",
    "length_gap",
    "length_gap_pair",
    "peak",
    "aggregate",  # a family over several studies only: a pair of models across every cell holding both
)
CELL_KINDS = tuple(k for k in KINDS if k not in ("scope", "aggregate"))  # a study report's findings tables
VERDICTS = (
    "a_better",  # pairs: the first model (catalogue order) is better in the tested sense
    "b_better",
    "adamw_better",  # optimizer gap: SGD's error is higher
    "sgd_better",
    "shorter_worse",  # length gap: the shorter schedule's error is higher
    "shorter_better",
    "inconclusive",  # tested, not decided at alpha
    "borderline",  # a Monte-Carlo p whose verdict would depend on the seed, even after every draw allowed
    "info",  # the scope line
)

# The Δ-EDF test's power follows Noether's normal approximation from about this many trials per model; below,
# it is far lower (docs/calibration.md, 1,000 normal studies a cell: a 4x spread found 0.11 of the time at
# n = 8, 0.97 at 24; 2x: 0.01 and 0.42), so no detectable difference is stated and no plan asks for fewer
DELTA_APPROXIMATE_FROM = 24


@dataclass(frozen=True)
class Level:
    """One group (cell) as a sentence quotes it."""

    label: str  # "SGD", "ViT-C tiny", "ViT-P tiny 6 ep", ...
    n: int
    diverged: int
    best: float
    mean: float
    sd: float  # nan below 2 trials
    best_images: Optional[int]  # the best error as misclassified images, where the errors lie on a grid


@dataclass(frozen=True)
class GapDetail:
    """A difference (optimizer gap, length gap, peak) or a difference of two differences, per group."""

    quantity: str  # what the estimate is: "best SGD − best AdamW", "gap ViT-P − gap ViT-C (of means)", ...
    groups: Tuple[Level, ...]
    images: Optional[int]  # N where the errors are k of N validation images
    detectable: Optional[Tuple[float, float, float]]  # Welch: |difference| found at 80% power, and its range
    reference_epochs: Optional[int] = None  # length gaps: E_ref
    fallback: bool = False  # length gaps: the longest schedule diverged, E_ref is the best shorter one
    per_length: Tuple[Tuple[int, float], ...] = ()  # length gaps: (epochs, level - reference level) per length


@dataclass(frozen=True)
class DeltaDetail:
    """A Δ-EDF comparison: the nearer-probability (the test's estimate) and the numbers read with it."""

    groups: Tuple[Level, Level]
    images: Optional[int]  # N where the errors are k of N validation images
    d_a_above: float  # descriptive: sup (F_a - F_b) of the Δ-EDFs
    d_b_above: float
    mean_delta: Tuple[float, float]  # mean Δ of a and of b (points)
    area: float  # mean Δ of b - mean Δ of a (positive: a's trials nearer its best)
    area_ci: Tuple[float, float]  # bootstrap 95% interval of the area, references recomputed
    within: Tuple[float, float]  # share of a's and of b's trials within WITHIN points of their best
    detectable: Optional[float]  # the nearer-probability found at 80% power at these n (Noether); None below
    # DELTA_APPROXIMATE_FROM trials per model, where the approximation overstates the test's power
    trials_needed: Optional[int]  # per model, for the observed effect at 80% power; None if decided or no more


@dataclass(frozen=True)
class ScopeDetail:
    """The family: how many tests, by which rules, how many decided, and the trials behind them."""

    alpha: float
    rules: Dict[str, int]
    decided: int
    decided_holm: int
    borderline: int
    n: int
    metric: str
    n_failed: int
    n_diverged: int
    n_no_finite_error: int
    images: Optional[int]  # N of the grid the errors lie on (k of N images), where they do
    sources: Tuple[Tuple[str, ...], ...] = ()  # a family over several studies: its sources (findings_across)
    shared: int = 0  # rows held by more than one study of a source, counted once


@dataclass(frozen=True)
class AggregateCell:
    """One cell of an aggregate: its source's studies, the cell, and a's probability of improvement there."""

    studies: Tuple[str, ...]
    optimizer: str
    epochs: int
    n: Tuple[int, int]
    diverged: Tuple[int, int]
    p_a_better: float
    p_a_better_ci: Tuple[float, float]  # the cell's own bootstrap interval (effects.pair_effects; NaN below 8 a group)


@dataclass(frozen=True)
class AggregateDetail:
    """A pair of models across cells: the cells averaged over (findings.aggregate)."""

    cells: Tuple[AggregateCell, ...]
    images: Optional[int] = None  # the cells may lie on different grids: no image counts are quoted


Detail = Union[GapDetail, DeltaDetail, ScopeDetail, AggregateDetail]
