"""What a finding is: its test, the typed numbers its sentence quotes (one class per kind), and its
verdict before and after Holm's adjustment. Sentences are rendered from these (findings.text), tables
too (findings.tables): nothing here is words."""

from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from hpstudy.analysis.inference import Test

KINDS = ("scope", "edf_pair", "optimizer_gap", "optimizer_gap_pair", "length_gap", "length_gap_pair", "peak")
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


Detail = Union[GapDetail, DeltaDetail, ScopeDetail]
POSITIVE = {  # the verdict of a positive estimate, and of a negative one
    "optimizer_gap": ("adamw_better", "sgd_better"),
    "length_gap": ("shorter_worse", "shorter_better"),
    "optimizer_gap_pair": ("b_better", "a_better"),  # a's gap is larger: a less stable
    "length_gap_pair": ("b_better", "a_better"),  # a further from its long-schedule error
    "peak": ("b_better", "a_better"),  # a's error higher
}


@dataclass
class Finding:
    """One verdict: its test, the numbers its sentence quotes, and its place in the family."""

    kind: str
    models: Tuple[str, ...]  # catalogue order; a_better / b_better refer to it
    cell: Dict  # optimizer and/or epochs ({} = whole study)
    test: Optional[Test]  # None: the scope line
    n_left_out: Tuple[int, ...]
    detail: Detail
    p_holm: Optional[float] = None
    p_holm_mc: Optional[Tuple[float, float]] = None  # bounds on p_holm where some p of the family is Monte-Carlo
    family: int = 0  # tests in the Holm family
    studies: Tuple[str, ...] = ()  # a family over several studies: the studies of this finding's source
    retest: Optional[Callable[[Sequence[float]], Test]] = field(default=None, repr=False, compare=False)

    @property
    def statistic(self) -> float:
        """The test's estimate (for scope: the number of tests)."""
        return self.test.estimate if self.test else float(self.family)

    @property
    def p(self) -> Optional[float]:
        """The test's p, before Holm's adjustment."""
        return self.test.p if self.test else None

    @property
    def n(self) -> Tuple[int, ...]:
        """Counted trials per group behind the test."""
        if self.test:
            return self.test.n
        return (self.detail.n,) if isinstance(self.detail, ScopeDetail) else ()

    @property
    def verdict(self) -> str:
        """The verdict at alpha (one of VERDICTS)."""
        if self.test is None:
            return "info" if self.kind == "scope" else "inconclusive"
        if self.test.borderline:
            return "borderline"
        return self._direction() if self.test.significant else "inconclusive"

    @property
    def verdict_holm(self) -> str:
        """The verdict after Holm's adjustment over the report's family."""
        if self.test is None or self.p_holm is None:
            return self.verdict if self.test is None else "inconclusive"
        bounds = self.p_holm_mc
        if self.test.borderline or (bounds is not None and bounds[0] <= self.test.alpha < bounds[1]):
            return "borderline"
        decided = self.test.significant and self.p_holm <= self.test.alpha
        return self._direction() if decided else "inconclusive"

    def _direction(self) -> str:
        assert self.test is not None
        if self.kind == "edf_pair":
            return "a_better" if self.test.estimate > 0.5 else "b_better"
        positive, negative = POSITIVE[self.kind]
        return positive if self.test.estimate > 0 else negative

    @property
    def better(self) -> Optional[str]:
        """The model or optimizer the verdict favours."""
        favoured = {"a_better": self.models[0], "b_better": self.models[-1]}
        return favoured.get(self.verdict, {"adamw_better": "adamw", "sgd_better": "sgd"}.get(self.verdict))

    @property
    def sentence(self) -> str:
        """The finding in words, with its test, numbers and n (findings.text)."""
        from hpstudy.analysis.findings.text import sentence  # words live there; it reads this module

        return sentence(self)

    def as_dict(self) -> Dict:
        """Plain JSON: the fields, the test flattened, the detail by name, the rendered verdicts and sentence."""
        out = {k: v for k, v in asdict(self).items() if k not in ("test", "retest")}
        out.update(
            models=list(self.models),
            n=list(self.n),
            n_left_out=list(self.n_left_out),
            statistic=self.statistic,
            p=self.p,
            verdict=self.verdict,
            verdict_holm=self.verdict_holm,
            better=self.better,
            sentence=self.sentence,
            test=None
            if self.test is None
            else {**asdict(self.test), "decidable": self.test.decidable, "borderline": self.test.borderline},
        )
        return plain(out)


def plain(value):
    """numpy scalars to Python, NaN and inf to None, tuples to lists (JSON)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
