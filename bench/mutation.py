"""Mutation testing of the analysis library and of the training/study core with mutmut: one run
per module, in a scratch copy of the tree, against that module's fast tests (`-m "not slow"`);
prints one JSON object (score per module and per area, and every surviving mutant with its diff).

    bash bench/mutation.sh [--area analysis|core] [--modules analysis/edf.py ...] [--max-children 2]
                           [--sample N] [--keep --survivors-only | --survivors-of EARLIER.json]

After adding tests, `--keep --survivors-only` (same --sample) reruns, in the last run's scratch copies,
its undetected mutants and those that are new or changed (a module edited since: its sample shifts);
`--survivors-of EARLIER.json` does the same from an earlier run's printed JSON when
the copies are gone (the mutants it counted as detected stay detected; a survivor whose diff no longer
matches, because its module changed, stops the run).

A survivor listed in EQUIVALENT (matched on its function and its mutated lines, so a renumbering
does not unlist it) is an equivalent mutant: it changes no behaviour the code promises, and the
reason is stated there. The score counts killed and timed-out mutants among the others.

Run time on a shared 2-core machine (mutmut 3.8.1, two mutants at a time, about 7-14 s a mutant and
1-2 min per module to map tests to functions): `--area core --sample 16` (113 mutants) 17 min,
`--area analysis --sample 4` (396 mutants) 31 min, measured before inference.py joined the area and
stats.py lost its KS/AD functions (issue #25); a survivors-only rerun a few minutes per module.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
FAST = ["-m", "not slow"]
ANALYSIS_TESTS = [
    "tests/analysis/test_numbers.py",
    "tests/analysis/test_inference.py",
    "tests/parity/test_pycls.py",
    "tests/parity/test_known_answers.py",
]
TRAINER_TESTS = [
    "tests/contracts/test_trainer.py",
    "tests/trainers/test_trial.py",
    "tests/trainers/test_optim.py",
    "tests/trainers/test_gpu_paths.py",
    "tests/trainers/test_fused.py",
    "tests/trainers/test_checkpoint.py",
    "tests/parity/test_pycls.py",
    "tests/contracts/test_core.py",
]
STORE_TESTS = [
    "tests/study/test_store_atomicity.py",
    "tests/study/test_store.py",
    "tests/hostile/test_store.py",
    "tests/study/test_store_compaction.py",
    "tests/contracts/test_core.py",
    # the fast tests of report folders (the rest of the CLI tests only pass through the store)
    "tests/cli/test_commands.py::test_a_report_goes_into_the_store_and_replaces_the_earlier_one",
    "tests/analysis/test_report_folder.py",
]
# test_spec's bundled-config test expands the paper specs (12 s a run): it checks the YAML files, not sampling
SAMPLING_TESTS = [
    "tests/study/test_sampling.py",
    "tests/study/test_spec.py",
    "--deselect",
    "tests/study/test_spec.py::test_bundled_configs_are_valid",
]
PRESENTATION_TESTS = ["tests/analysis/test_figures.py", "tests/analysis/test_numbers.py"]
# module -> the fast test files run against its mutants (mutmut runs, per mutant, the ones that call it)
MODULES = {
    "analysis/metric.py": ANALYSIS_TESTS,
    "analysis/edf.py": ANALYSIS_TESTS,
    "analysis/stats.py": ANALYSIS_TESTS,
    "analysis/gaps.py": ANALYSIS_TESTS,
    "analysis/inference.py": ANALYSIS_TESTS,
    "trainers/loop.py": TRAINER_TESTS,
    "trainers/trial.py": TRAINER_TESTS,
    "trainers/optim.py": TRAINER_TESTS,
    "study/sampling.py": SAMPLING_TESTS,
    "study/store.py": STORE_TESTS,
    "study/store_read.py": STORE_TESTS,
    "study/store_compaction.py": STORE_TESTS,
    "study/store_spec_record.py": STORE_TESTS,
    "analysis/report.py": PRESENTATION_TESTS,
    "analysis/figures.py": PRESENTATION_TESTS,
}
# analysis = the numbers library; presentation (HTML report, figures: 1,865 mutants, mostly layout and
# wording) runs only when asked for (--area presentation) and has no target
AREAS = {
    "analysis": [
        "analysis/metric.py",
        "analysis/edf.py",
        "analysis/stats.py",
        "analysis/gaps.py",
        "analysis/inference.py",
    ],
    "core": [
        "trainers/loop.py",
        "trainers/trial.py",
        "trainers/optim.py",
        "study/sampling.py",
        "study/store.py",
        "study/store_read.py",
        "study/store_compaction.py",
        "study/store_spec_record.py",
    ],
    "presentation": ["analysis/report.py", "analysis/figures.py"],
}
DEFAULT_AREAS = ("analysis", "core")
TARGETS = {"analysis": 0.90, "core": 0.80, "presentation": None}
COPIED = ["analysis", "trainers", "study", "tests", "bench", "docs", "pyproject.toml", "README.md"]
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    37: "caught by type check",
    -11: "segfault",
    -9: "segfault",
    None: "not checked",
    "earlier": "detected earlier",
}
DETECTED = {"killed", "timeout", "segfault", "detected earlier"}

# (module, function, the mutated lines as they read after the mutation) -> why the mutant is equivalent:
# it changes nothing the code promises, for any input it can be given
_OBSERVED = (
    "pandas >= 3 groups with observed=True by default (on the pandas 2 floor, "
    "test_unused_categories_of_the_model_column_change_nothing catches it)"
)
_SORTED = "sort=True is pandas' default"
_FLOAT_METRIC = "the metric column is float64 (hpstudy.analysis.metric.usable builds it from a float array)"
_TRANSFORM = (
    "the grouping only feeds transforms, which write one value per existing row: a category "
    "without rows has no row to write to"
)
EQUIVALENT = {
    (
        "analysis/metric.py",
        "_any_finite",
        ("return column in frame and bool(np.isfinite(frame[column].astype(None).to_numpy()[rows]).any())",),
    ): "numpy reads dtype None as float64: the same cast",
    (
        "analysis/metric.py",
        "left_out_per",
        ('counts = rows.left_out.groupby(by, ).size().rename("_left_out").reset_index()',),
    ): _OBSERVED,
    (
        "analysis/edf.py",
        "dkw_epsilon",
        ("return np.sqrt(np.log(2.0 / alpha) / (2.0 * np.asarray(n, )))",),
    ): "2.0 * n is a float array whatever integer dtype n has",
    (
        "analysis/edf.py",
        "edf_at",
        ('return np.searchsorted(ordered, np.asarray(points, ), side="right") / len(ordered)',),
    ): "searchsorted compares numbers across dtypes: integer or float points land at the same positions",
    (
        "analysis/edf.py",
        "edf_table",
        ("data = data.sort_values(by + [ERR], )",),
    ): "pandas uses `kind` only when sorting on one column; here it sorts on the groups and the error",
    ("analysis/edf.py", "edf_table", ("grouped = data.groupby(by, sort=False, observed=False)",)): _TRANSFORM,
    (
        "analysis/edf.py",
        "weighted_edf_at",
        ("order = np.argsort(errors, kind=None)",),
    ): "tied errors sit together in any order, and the weight summed up to the last of them is the same",
    (
        "analysis/edf.py",
        "weighted_edf_at",
        ('order = np.argsort(errors, kind="STABLE")',),
    ): "numpy reads the sort kind without regard to case",
    (
        "analysis/stats.py",
        "_fanova",
        ('for lr, wd, value in kept[["lr", "wd", ERR]].itertuples(index=None):',),
    ): "index=None is falsy: no index either way",
    (
        "analysis/stats.py",
        "expected_best",
        ("ks = np.asarray(list(ks), )",),
    ): "ks are integers (Iterable[int]): asarray keeps them int",
    (
        "analysis/stats.py",
        "expected_best",
        ("i = np.arange(1, n + 1, dtype=None)",),
    ): "i is only divided, compared and passed to gammaln: int and float give the same numbers",
    (
        "analysis/stats.py",
        "good_ranges",
        ("draws = np.random.default_rng(seed).integers(n, size=(n_boot, size))",),
    ): "Generator.integers(n) draws from [0, n) as integers(0, n) does, the same numbers (pycls parity holds to 1e-12)",
    (
        "analysis/stats.py",
        "good_ranges",
        ('"log10_lr": np.log10(rows.kept["lr"].to_numpy(None)),',),
    ): "lr is float64 in the trial schema: to_numpy() keeps it",
    (
        "analysis/gaps.py",
        "_keys",
        ("return dict(zip(by, key if (isinstance(key, tuple)) or True else (key,)))",),
    ): "its callers group by a list, and pandas yields tuple keys for a list: the other branch never runs",
    (
        "analysis/gaps.py",
        "ema_gain",
        ("with_ema = frame.groupby(by, observed=False)[ema].transform(lambda s: s.notna().any()).astype(bool)",),
    ): _TRANSFORM,
    ("analysis/gaps.py", "ema_gain", ("kept.groupby(by, observed=True)",)): _SORTED,
    ("analysis/gaps.py", "length_gap", ("for key, group in rows.kept.groupby(by, sort=True, ):",)): _OBSERVED,
    ("analysis/gaps.py", "optimizer_gap", ("for key, group in rows.kept.groupby(by, observed=True):",)): _SORTED,
    (
        "analysis/gaps.py",
        "optimizer_gap",
        ('sgd = group.loc[group["optimizer"] == "sgd", ERR].to_numpy(None)',),
    ): _FLOAT_METRIC,
    (
        "analysis/gaps.py",
        "optimizer_gap",
        ('adamw = group.loc[group["optimizer"] == "adamw", ERR].to_numpy(None)',),
    ): _FLOAT_METRIC,
    ("analysis/gaps.py", "peak_table", ('for model, group in rows.kept.groupby("model", observed=True):',)): _SORTED,
    (
        "trainers/optim.py",
        "build_schedule",
        ("t_in_epochs=None,",),
    ): "t_in_epochs=None is falsy, as False: the schedule counts steps either way",
    (
        "trainers/optim.py",
        "build_schedule",
        ("t_initial=max(2, total_steps - warmup_steps),",),
    ): "the floor only differs when one cosine step is left, and a trial never steps past it: the cosine's "
    "first value (the peak) is all it uses",
}


def _function(name: str) -> str:
    """`hpstudy.analysis.edf.x_dkw_epsilon__mutmut_3` -> `dkw_epsilon`; methods as `Class.method`."""
    base = name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    return base[2:] if base.startswith("x_") else base.lstrip("xǁ").replace("ǁ", ".")


def _order(item):
    """Mutants by function, then by number."""
    base, _, number = item[0].rpartition("__mutmut_")
    return base, int(number)


def _changed_lines(diff: str) -> tuple:
    """The mutated lines of a mutmut diff, stripped: what the allow-list matches on."""
    return tuple(line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))


def _scratch(work: Path, module: str, keep: bool) -> Path:
    """A copy of the tree for one module's mutants (mutmut writes mutants/ there, never here)."""
    path = work / module.replace("/", "_").removesuffix(".py")
    if path.exists() and not keep:
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, path / name, ignore=ignore, dirs_exist_ok=True)
        elif source.exists():
            shutil.copy2(source, path / name)
    tests = [t for t in MODULES[module] if not t.endswith(".py") or (REPO / t).exists()]
    lines = [
        "[mutmut]",
        "source_paths =",
        "    analysis",
        "    trainers",
        "    study",
        f"only_mutate = {module}",
        "pytest_add_cli_args_test_selection =",
        *(f"    {arg}" for arg in tests + FAST),
        "pytest_add_cli_args =",
        "    -p",
        "    no:cacheprovider",
        "process_isolation = forkserver",
        "use_git_change_detection = false",
        "",
    ]
    (path / "setup.cfg").write_text("\n".join(lines))
    return path


def _all_mutants(path: Path, module: str) -> list:
    """Every mutant mutmut makes of the module, by name, in order (generated here, nothing run)."""
    code = (
        "import json, sys; from pathlib import Path; "
        "from mutmut.mutation.file_mutation import mutate_file_contents; "
        "from mutmut.utils.format_utils import get_mutant_name; "
        "m = mutate_file_contents(sys.argv[1], Path(sys.argv[1]).read_text()); "
        "print(json.dumps([get_mutant_name(Path(sys.argv[1]), n) for n in m.mutant_names]))"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, module], cwd=path, capture_output=True, text=True, check=True
    ).stdout
    return sorted(json.loads(out.strip().splitlines()[-1]), key=lambda name: _order((name, None)))


def _diffs(path: Path, module: str, names: list) -> dict:
    """Each named mutant's diff against the original function (headers left out)."""
    # from the module as it is now (mutated here, not read from mutants/: there may be none yet)
    code = (
        "import json, sys; from pathlib import Path; from mutmut.mutation.diff_apply import get_diff_for_mutant; "
        "from mutmut.mutation.file_mutation import mutate_file_contents; "
        "m = mutate_file_contents(sys.argv[1], Path(sys.argv[1]).read_text()).code; "
        "print(json.dumps({n: get_diff_for_mutant(n, source=m, path=sys.argv[1]) "
        "for n in json.loads(sys.stdin.read())}))"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, module],
        cwd=path,
        input=json.dumps(names),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        name: "\n".join(line for line in diff.splitlines() if not line.startswith(("---", "+++")))
        for name, diff in json.loads(out.strip().splitlines()[-1]).items()
    }


def _last_diffs(path: Path, module: str, names: list) -> dict:
    """Each named mutant's diff as the last run made it (from its mutants/ copy), None where it made
    none: a mutant whose diff is the same now is the same mutant, and its result stands."""
    code = (
        "import json, sys; from mutmut.mutation.diff_apply import get_diff_for_mutant\n"
        "def diff(n):\n"
        "    try:\n        return get_diff_for_mutant(n, path=sys.argv[1])\n"
        "    except Exception:\n        return None\n"
        "print(json.dumps({n: diff(n) for n in json.loads(sys.stdin.read())}))"
    )
    if not (path / "mutants" / module).exists():
        return dict.fromkeys(names)
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, module],
        cwd=path,
        input=json.dumps(names),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        name: None
        if diff is None
        else "\n".join(line for line in diff.splitlines() if not line.startswith(("---", "+++")))
        for name, diff in json.loads(out.strip().splitlines()[-1]).items()
    }


def _mutmut(path: Path, args, log, timeout=None) -> int:
    exe = shutil.which("mutmut", path=os.path.dirname(sys.executable)) or "mutmut"
    with open(log, "a") as out:
        return subprocess.run(
            [exe, *args],
            cwd=path,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_WAIT_POLICY="PASSIVE"),
        ).returncode


def _results(path: Path, module: str):
    meta = path / "mutants" / f"{module}.meta"
    return json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}


def run_module(
    module: str,
    work: Path,
    max_children: int,
    keep: bool,
    survivors_only: bool,
    sample: int,
    timeout: float,
    earlier: Optional[dict] = None,
) -> dict:
    """Run mutmut over one module (every `sample`-th mutant); returns its counts and survivors.

    `earlier`: this module's entry of an earlier run's JSON; only its undetected mutants run again."""
    start = time.time()
    path = _scratch(work, module, keep)
    log = path / "mutmut.log"
    print(f"mutation: {module} (log: {log})", file=sys.stderr, flush=True)
    chosen = _all_mutants(path, module)[::sample]
    previous = _results(path, module) if keep else {}
    before = {}
    if earlier is not None:  # an earlier run's survivors and equivalents run again, the rest stays detected
        if earlier["sample"] != sample or earlier["mutants"] != len(chosen):
            raise SystemExit(
                f"{module}: the earlier run had {earlier['mutants']} mutants at --sample "
                f"{earlier['sample']}, this one {len(chosen)} at --sample {sample}"
            )
        undetected = {s["mutant"]: s["diff"] for s in earlier["survivors"]}
        undetected.update({e["mutant"]: None for e in earlier["equivalent"]})
        again = [k for k in chosen if k in undetected]
        now = _diffs(path, module, again)
        moved = [k for k in again if undetected[k] is not None and now[k] != undetected[k]]
        if moved:
            raise SystemExit(f"{module} changed since the earlier run: {', '.join(moved)} are other mutations now")
        before = {k: "earlier" for k in chosen if k not in undetected}
        # an allow-listed equivalent survives again by definition: not run, listed below as equivalent
        before.update({k: 0 for k in again if (module, _function(k), _changed_lines(now[k])) in EQUIVALENT})
        names = [k for k in again if k not in before]
    elif survivors_only:  # the chosen mutants not detected last time, or new, or changed, but allow-listed ones
        now = _diffs(path, module, chosen)
        last = _last_diffs(path, module, [k for k in chosen if STATUS.get(previous.get(k)) in DETECTED])
        # mutmut forgets the results of a module that changed: a detected mutant whose diff is the
        # same as last time keeps its result; a new or changed one runs
        before = {k: previous[k] for k, diff in last.items() if diff is not None and diff == now[k]}
        names = [
            k
            for k in chosen
            if k not in before
            and (previous.get(k) is None or (module, _function(k), _changed_lines(now[k])) not in EQUIVALENT)
        ]
    else:
        names = chosen if sample > 1 else []  # none named: mutmut runs them all
    code = (
        _mutmut(path, ["run", "--max-children", str(max_children), *names], log, timeout)
        if names or not (survivors_only or earlier is not None)
        else 0
    )
    results = _results(path, module)
    exit_codes = {k: before.get(k, results.get(k)) for k in chosen}
    counts, survivors, equivalent = {}, [], []
    diffs = _diffs(path, module, [k for k, v in exit_codes.items() if STATUS.get(v, "suspicious") not in DETECTED])
    for name, exit_code in sorted(exit_codes.items(), key=_order):
        status = STATUS.get(exit_code, "suspicious")
        if status not in DETECTED:
            diff = diffs[name]
            why = EQUIVALENT.get((module, _function(name), _changed_lines(diff)))
            if why:
                status = "equivalent"
                equivalent.append({"mutant": name, "why": why})
            else:
                survivors.append({"mutant": name, "status": status, "diff": diff})
        counts[status] = counts.get(status, 0) + 1
    detected = sum(counts.get(s, 0) for s in DETECTED)
    scored = len(exit_codes) - counts.get("equivalent", 0) - counts.get("skipped", 0)
    return {
        "module": module,
        "tests": MODULES[module],
        "mutants": len(exit_codes),
        "sample": sample,
        "counts": counts,
        "score": round(detected / scored, 4) if scored else None,
        "mutmut_exit": code,
        "seconds": round(time.time() - start, 1),
        "survivors": survivors,
        "equivalent": equivalent,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--area",
        choices=sorted(AREAS),
        action="append",
        help="analysis, core or presentation (default: analysis and core)",
    )
    parser.add_argument("--modules", nargs="+", choices=sorted(MODULES), help="these modules only")
    parser.add_argument("--max-children", type=int, default=2, help="mutants run in parallel (default 2)")
    parser.add_argument(
        "--work",
        default=os.environ.get("MUTATION_WORK", "/tmp/hpstudy-mutation"),
        help="scratch folder for the copies of the tree (default /tmp/hpstudy-mutation)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="reuse the last run's copies: only mutants of changed functions run again"
    )
    parser.add_argument(
        "--survivors-only",
        action="store_true",
        help="with --keep: rerun the last run's survivors (e.g. after adding tests)",
    )
    parser.add_argument(
        "--survivors-of",
        metavar="EARLIER.json",
        help="rerun only the mutants an earlier run (its printed JSON) left undetected",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=1,
        help="run every N-th mutant of each module only (default 1: all); the same N picks the same mutants",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds per module (default: none)")
    args = parser.parse_args(argv)
    modules = args.modules or [m for area in (args.area or DEFAULT_AREAS) for m in AREAS[area]]
    earlier = None
    if args.survivors_of:
        earlier = {m["module"]: m for m in json.loads(Path(args.survivors_of).read_text())["modules"]}
        missing = [m for m in modules if m not in earlier]
        if missing:
            parser.error(f"--survivors-of: {args.survivors_of} has no run of {', '.join(missing)}")
    start = time.time()
    results = [
        run_module(
            m,
            Path(args.work),
            args.max_children,
            args.keep,
            args.survivors_only,
            args.sample,
            args.timeout,
            None if earlier is None else earlier[m],
        )
        for m in modules
    ]
    areas = {}
    for area, members in AREAS.items():
        mine = [r for r in results if r["module"] in members]
        if not mine:
            continue
        total = sum(r["mutants"] for r in mine)
        count = lambda status: sum(r["counts"].get(status, 0) for r in mine)
        scored = total - count("equivalent") - count("skipped")
        detected = sum(count(s) for s in DETECTED)
        score = detected / scored if scored else None
        areas[area] = {
            "modules": [r["module"] for r in mine],
            "mutants": total,
            "detected": detected,
            "equivalent": count("equivalent"),
            "survived": scored - detected,
            "score": None if score is None else round(score, 4),
            "target": TARGETS[area],
            "met": None if TARGETS[area] is None else score is not None and score >= TARGETS[area],
        }
    print(
        json.dumps(
            {
                "bench": "mutation",
                "tool": "mutmut",
                "seconds": round(time.time() - start, 1),
                "areas": areas,
                "modules": results,
            },
            indent=1,
        )
    )
    return 0 if all(a["met"] is not False for a in areas.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
