"""What a finding is: its test, the typed numbers its sentence quotes (findings.details), and its verdict
before and after Holm's adjustment; its sentence is rendered from these (findings.text), its tables too
(findings.tables)."""

from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from hpstudy.analysis.findings.details import Detail, ScopeDetail
from hpstudy.analysis.findings.text import sentence
from hpstudy.analysis.inference import Test

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
        if self.kind in ("edf_pair", "aggregate"):  # a probability: 1/2 is no difference
            return "a_better" if self.test.estimate > 0.5 else "b_better"
        positive, negative = POSITIVE[self.kind]
        return positive if self.test.estimate > 0 else negative

    @property
    def better(self) -> Optional[str]:
        """The model or optimizer the verdict favours."""
        if self.verdict in ("a_better", "b_better"):
            return self.models[0] if self.verdict == "a_better" else self.models[-1]
        return {"adamw_better": "adamw", "sgd_better": "sgd"}.get(self.verdict)

    @property
    def sentence(self) -> str:
        """The finding in words, with its test, numbers and n (findings.text)."""
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
