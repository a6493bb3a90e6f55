"""hpstudy: hyperparameter-robustness studies of image classifiers on Ray.

One import root over three layers: `hpstudy.trainers` (one trial), `hpstudy.analysis` (DataFrames in,
tables and figures out) and `hpstudy.study` (specs, Ray Tune, the Parquet store); `hpstudy.cli` is the
command line above them (docs/architecture.md). The Python API, `hpstudy.plan`, `run`, `load`, `report`,
`suggest` (hpstudy.api), `to_optuna` (hpstudy.analysis.optuna_export) and `show_output`
(hpstudy.trainers.console: the API prints nothing unless it is on), is imported on first use, so
`import hpstudy` and `hpstudy --help` load nothing heavy (docs/python-api.md).
"""

import importlib

__version__ = "0.2.0"
__all__ = ["plan", "run", "load", "report", "suggest", "to_optuna", "show_output"]


_HOMES = {
    **dict.fromkeys(("plan", "run", "load", "report", "suggest"), "hpstudy.api"),
    "to_optuna": "hpstudy.analysis.optuna_export",
    "show_output": "hpstudy.trainers.console",
}


def __getattr__(name: str):
    """The Python API's functions, imported when first asked for (PEP 562)."""
    if name not in _HOMES:
        raise AttributeError(f"module 'hpstudy' has no attribute {name!r}")
    # by name: the type check of one layer (.ci/typecheck) does not follow the whole API from here
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__():
    """The module's names and the API's, which `__getattr__` imports on first use."""
    return sorted([*globals(), *__all__])
