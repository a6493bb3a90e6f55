"""The Python API, for notebooks and scripts: what `hpstudy run` (and its `--dry-run` plan), `report` and
`suggest` do, returning
data instead of printing it (docs/python-api.md). `import hpstudy` exposes these lazily.

Each function calls what the command calls (hpstudy.commands, hpstudy.study), so a bad argument
raises the same error (an HpstudyError: SpecError, StoreError, MetricError, ...) with the same
one-line message the command line prints before exiting with code 2.
"""

import numbers
import os
from typing import Dict, List, Optional, Sequence, Type, Union, cast

import numpy as np
import pandas as pd

from hpstudy.analysis.metric_names import DEFAULT_METRIC
from hpstudy.analysis.stats import good_ranges
from hpstudy.study.spec import SpecError, StudySpec, load_spec, parse_spec, resolve_config
from hpstudy.study.store.layout import StoreError
from hpstudy.study.store.read import API, load_study
from hpstudy.study.suggest import suggestion
from hpstudy.study.trackers import trackers_of
from hpstudy.trainers.errors import ConfigError, HpstudyError, shown

PathLike = Union[str, os.PathLike]


def _spec(spec: Union[PathLike, Dict]) -> StudySpec:
    """A spec given as a path, a bundled spec's name or a dict, read and validated as `--config` is."""
    if isinstance(spec, dict):
        return parse_spec(spec)
    if isinstance(spec, (str, os.PathLike)):
        return load_spec(resolve_config(os.fspath(spec)))
    raise SpecError(f"spec: bad value {shown(spec)}; allowed: a YAML path, a bundled spec's name or a dict")


def _path(name: str, value, error: Type[HpstudyError] = StoreError) -> str:
    """A path argument as text, or `error` naming it: a str or os.PathLike of one, non-empty, without NUL,
    UTF-8 (Arrow's filesystems, which read and write stores and reports, take no other; the checks a
    filesystem would fail late, with another error)."""
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if isinstance(path, str) and path and "\x00" not in path:
        try:
            path.encode("utf-8")
            return path
        except UnicodeEncodeError:  # a lone surrogate: a byte of a file name that was not UTF-8
            pass
    raise error(f"{name}: bad value {shown(value)}; allowed: a folder path or URI as UTF-8 text (a str or os.PathLike)")


def _count(name: str, value) -> Optional[int]:
    """None or a whole number (an int or a numpy integer, not a bool) as an int, its range checked as the
    command line's (check_run_args); SpecError naming it otherwise."""
    if value is None or (isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))):
        return None if value is None else int(value)
    raise SpecError(f"{name}: bad value {shown(value)}; allowed: None or an integer >= 1")


def _flag(name: str, value) -> None:
    """SpecError unless `value` is True or False."""
    if not isinstance(value, bool):
        raise SpecError(f"{name}: bad value {shown(value)}; allowed: True or False")


def run(
    spec: Union[PathLike, Dict],
    store: PathLike = "results",
    *,
    address: Optional[str] = None,
    max_concurrent: Optional[int] = None,
    num_cpus: Optional[int] = None,
    resume: bool = True,
    report: bool = True,
    trackers: Sequence = (),
    progress: Union[str, bool] = "auto",
    wait: bool = False,
) -> pd.DataFrame:
    """Run a study as `hpstudy run` does; returns its stored trial table (every column, one row per trial).
    While another driver writes the study, StudyBusy names it; with `wait`, it runs once that one ends."""
    max_concurrent, num_cpus = _count("max_concurrent", max_concurrent), _count("num_cpus", num_cpus)
    _flag("resume", resume)
    _flag("report", report)
    _flag("wait", wait)
    trackers = trackers_of(_trackers(trackers))  # a bad KIND:DIR fails now, naming `trackers`
    if not address:
        # A local Ray binds to loopback only (read when ray is first imported: below, or by the user before).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    # the service and the runner load torch and Ray: imported only when a study runs (load stays light)
    from hpstudy.service import NO_REPORT, RunSettings, check_run, check_settings
    from hpstudy.service import run as run_under_lease
    from hpstudy.study.progress import progress_display

    settings = RunSettings(
        store=_path("store", store),
        address=address,
        fresh=not resume,
        max_concurrent=max_concurrent,
        num_cpus=num_cpus,
        trackers=trackers,
        report=None if report else NO_REPORT,
    )
    with progress_display(progress):
        check_settings(settings)
        study = _spec(spec)
        check_run(study, settings)
        run_under_lease(study, settings, "hpstudy.run", wait, "wait=True", fields=API)
    return load(settings.store, study.name)


def plan(
    spec: Union[PathLike, Dict], store: PathLike = "results", assume_tflops: Optional[float] = None
) -> pd.DataFrame:
    """The plan `hpstudy run --dry-run` prints, one row per (model, optimizer, epochs) cell: its trials, those
    not yet stored in `store`, its lr and wd boxes, the model's forward GMACs per image and the estimated
    trial-hours (at `assume_tflops` effective TFLOP/s per trial; default 100 on a GPU, 0.02 on a CPU)."""
    from hpstudy import service  # counts a model not counted before (torch): only when a plan is asked for

    return service.plan(_spec(spec), _path("store", store), assume_tflops).cells


def load(store: PathLike, study: str) -> pd.DataFrame:
    """The study's stored trials (rows of the spec it last ran with, every column), as `hpstudy report` reads them."""
    return load_study(_path("store", store), study, API)[0]


def report(
    store: PathLike, study: Union[str, Sequence[str]], out: Optional[PathLike] = None, metric: str = DEFAULT_METRIC
) -> str:
    """Write the study's report as `hpstudy report` does (into the store, or `out`); returns its folder. A list
    of studies: one report over them, as `hpstudy report --study A --study B`."""
    from hpstudy.analysis.report_folder import ReportError
    from hpstudy.service import write_report  # the report loads the analysis' figures (matplotlib)

    folder = None if out is None else _path("out", out, ReportError)
    listed = _names("study", study) if isinstance(study, (list, tuple)) else None  # a name: checked in write_report
    studies = cast(Union[str, List[str]], study if listed is None else listed)
    page = write_report(_path("store", store), studies, folder, metric, API)
    return page.rsplit("/", 1)[0]


def suggest(
    store: PathLike,
    study: str,
    metric: str = DEFAULT_METRIC,
    models: Optional[Sequence[str]] = None,
    optimizers: Optional[Sequence[str]] = None,
) -> Dict:
    """What `hpstudy suggest` computes, as data: {"points": one dict per (model, optimizer, epochs), "space": YAML}."""
    models, optimizers = _names("models", models), _names("optimizers", optimizers)
    return suggestion(_path("store", store), study, good_ranges, metric, models, optimizers, API)


def _trackers(values) -> Sequence:
    """`trackers` as a list: a KIND:DIR text, a tracker object or a list/tuple of them; ConfigError otherwise."""
    listed = [values] if isinstance(values, str) else values
    if not isinstance(listed, (list, tuple)):
        raise ConfigError(f"trackers: bad value {shown(values)}; allowed: a KIND:DIR text, a tracker or a list of them")
    return listed


def _names(name: str, values: Optional[Union[str, Sequence[str]]]) -> Optional[List[str]]:
    """None, or a name or a list/tuple of names as a list (a string is not a list of its letters); ConfigError
    naming the argument otherwise."""
    if values is None:
        return None
    listed = [values] if isinstance(values, str) else values
    if not isinstance(listed, (list, tuple)) or not all(isinstance(value, str) for value in listed):
        raise ConfigError(f"{name}: bad value {shown(values)}; allowed: a name or a list of names")
    return list(listed)
