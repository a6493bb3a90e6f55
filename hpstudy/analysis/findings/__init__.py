"""Findings: the report's verdicts, each one `Finding` holding its test (`inference.Test`) and the typed
numbers its sentence quotes.

`findings` computes them (findings.compute), `Finding.sentence` renders one in words (findings.text),
`claims_table` and `findings_table` tabulate them (findings.tables): a table, a sentence and report.json
come from the same object, so they cannot disagree. Where a test cannot decide, the sentence says
"inconclusive at this n" and what 80% power would need; where the design cannot reach alpha at all
(3 vs 3 without a distributional assumption), it says so; where a Monte-Carlo p cannot be settled, it
says "borderline" with its interval.
"""

from hpstudy.analysis.findings.compute import Seeds, findings, findings_across, image_grid, sources_of
from hpstudy.analysis.findings.details import (
    CELL_KINDS,
    KINDS,
    VERDICTS,
    AggregateCell,
    AggregateDetail,
    DeltaDetail,
    GapDetail,
    Level,
    ScopeDetail,
)
from hpstudy.analysis.findings.model import Finding
from hpstudy.analysis.findings.tables import (
    AGGREGATE_ROW,
    CLAIMS,
    aggregate_table,
    claim_number,
    claims_table,
    findings_table,
)
from hpstudy.analysis.findings.text import CALIBRATION_DOC, WITHIN, fmt_p, sig3

__all__ = [
    "AGGREGATE_ROW",
    "CALIBRATION_DOC",
    "CELL_KINDS",
    "CLAIMS",
    "KINDS",
    "VERDICTS",
    "WITHIN",
    "AggregateCell",
    "AggregateDetail",
    "DeltaDetail",
    "Finding",
    "GapDetail",
    "Level",
    "ScopeDetail",
    "Seeds",
    "aggregate_table",
    "claim_number",
    "claims_table",
    "findings",
    "findings_across",
    "findings_table",
    "fmt_p",
    "image_grid",
    "sig3",
    "sources_of",
]
