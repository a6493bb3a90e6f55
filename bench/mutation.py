"""Mutation testing of every module of hpstudy with mutmut: a seeded sample of mutants per package,
run in one scratch copy of the tree against the fast tier (`-m "not slow"`; mutmut runs, per mutant,
the tests that call the mutated function); prints one JSON object (score per package and module,
every surviving mutant with its diff) and exits 1 when a package misses its target.

    bash bench/mutation.sh [--package analysis|presentation|trainers|study|cli ...] [--seed 0]
                           [--per-package N] [--max-children 2] [--survivors-of EARLIER.json]

Packages: analysis (the numbers and the Findings' decisions), presentation (the report's and the
figures' numbers and labels; drawing code is left out, see LAYOUT), trainers, study and cli (the
command-line glue, sampled lighter). Every module of a package is in its pool: a new module joins
without an edit here. `--survivors-of EARLIER.json` reruns, with the same seed and sample sizes, only
the mutants that run left undetected and those whose diff changed since (a module edited since); the
rest keep their result.

A survivor listed in EQUIVALENT (matched on its function and its mutated lines, so a renumbering
does not unlist it) is an equivalent mutant: it changes no behaviour the code promises, and the
reason is stated there. The score counts killed and timed-out mutants among the others; a mutant
no fast test reaches ("no tests") counts as a survivor.

Run time on a 2-core machine (mutmut 3.8.1, two mutants at a time), seed 2: about 40 minutes to generate
the mutants, map the fast tier to functions and run it clean, then 5-15 s a mutant (the default sample,
PER_PACKAGE: about 20 minutes), then 2-4 minutes for each undetected mutant's package re-run.
docs/development.md has the measured runs.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
# the fast tier, less what checks the tree rather than code a mutant can change: test_spec's
# bundled-config test expands the paper specs (12 s a run) and checks the YAML files; the provenance
# test reads the checkout's git history, which the scratch copy has not; the import-root tests check
# where the installed package's files are (mutmut runs the tests on its mutants/ copy instead); the
# no-code-from-data test reads the source text, which under mutmut holds every mutant at once
TESTS = [
    "tests",
    "-m",
    "not slow",
    "-n",  # one process: mutmut maps and runs tests itself (pyproject.toml's addopts would start xdist workers)
    "0",  # also in pytest_add_cli_args below, since mutmut runs a mutant's tests without these selection args
    "-p",  # nor the seed-reach plugin (tests/seed_reach.py): its probes would run each mutant's seeded calls twice
    "no:tests.seed_reach",
    "--deselect",
    "tests/study/test_spec.py::test_bundled_configs_are_valid",
    "--deselect",
    "tests/contracts/test_install.py::test_a_copy_without_git_carries_the_recorded_code_version",
    "--deselect",
    "tests/contracts/test_import_root.py",
    "--deselect",
    "tests/hostile/test_files.py::test_no_code_in_the_project_can_run_code_found_in_data",
]
# each package's own tests: a mutant that survives the tests mutmut maps to its function runs again
# against these (the map misses a test that reaches the function through a shared fixture or cache)
PACKAGE_TESTS = {
    "analysis": ["tests/analysis", "tests/parity"],
    "presentation": ["tests/analysis"],
    "trainers": ["tests/trainers", "tests/contracts/test_trainer.py", "tests/contracts/test_core.py"],
    "study": ["tests/study", "tests/contracts/test_core.py"],
    "cli": ["tests/cli"],
}
FOLDERS = {
    "analysis": "analysis",
    "presentation": "analysis",
    "trainers": "trainers",
    "study": "study",
    "cli": "hpstudy",
}
PRESENTATION = ("analysis/report.py", "analysis/report_page.py", "analysis/captions.py", "analysis/figures.py")
TARGETS = {"analysis": 0.90, "presentation": 0.85, "trainers": 0.85, "study": 0.85, "cli": 0.85}
# mutants drawn per package by default: 245 in all (run time: the module docstring)
PER_PACKAGE = {"analysis": 60, "presentation": 40, "trainers": 60, "study": 50, "cli": 35}
# modules left out of the pool, and why
EXCLUDED = {
    "trainers/dataset.py": "a typing.Protocol (method stubs): mutmut's trampolines would add members to it, "
    "which its test reads, and its only mutants are the stubs' default values",
}
# functions whose mutants only move pixels or page layout (matplotlib drawing, CSS, the page's
# skeleton): the figure contract tests check their output's structure, not values a mutant changes
LAYOUT = {
    "analysis/figures.py": (
        "_grid",
        "integer_ticks",
        "fixed_ticks",
        "log_ticks",
        "_plain_ticks",
        "_legend",
        "_band",
        "*_figure",
    ),
    "analysis/report_page.py": ("inline_svg",),
}
COPIED = [
    "analysis",
    "trainers",
    "study",
    "hpstudy",
    "tests",
    "bench",
    "docs",
    "examples",
    "pyproject.toml",
    "README.md",
]
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
    "package": "killed by its package's tests",
    "earlier": "detected earlier",
}
DETECTED = {"killed", "timeout", "segfault", "detected earlier", "killed by its package's tests"}

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
    ("analysis/gaps.py", "peak_table", ('for model, group in rows.kept.groupby("model", sort=True, ):',)): _OBSERVED,
    (
        "analysis/inference.py",
        "_first",
        ("counts = np.cumsum(members[:, :head], axis=1, )",),
    ): "int64 counts instead of int32: the same counts (at most a row's length); int32 only halves the memory",
    (
        "analysis/inference.py",
        "raw_ps",
        ("span = 3 * float(max(np.abs(x).max(), np.abs(y).max())) + 1",),
    ): "any span above twice the largest |atom| keeps each study's atoms and queries apart: 3x as 2x; a tie "
    "x = -y stays a tie (offset + x either way)",
    (
        "analysis/stats.py",
        "_fanova",
        ("return dict(optuna.importance.get_param_importances(study, evaluator=evaluator, ))",),
    ): "normalize=True is Optuna's default for get_param_importances",
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
    (
        "analysis/metric.py",
        "_vanished",
        ("gone = left[~left.index.isin(rows.kept.groupby(by, ).size().index)]",),
    ): "pandas >= 3 groups with observed=True by default (on the pandas 2 floor, "
    "test_a_categorical_group_whose_trials_are_all_left_out_is_named catches it)",
    (
        "trainers/augment.py",
        "DeviceAutoAugment._pixel_map",
        ("inside = mapped[2] >= 0.5",),
    ): "the ones channel is sampled with nearest interpolation and filled by mask, never blended: it is exactly 0 or 1",
    (
        "trainers/data.py",
        "TensorEpochs.__iter__",
        ("shifts, mirrored = (t.to(device, ) if t is not None else None for t in (shifts, mirrored))",),
    ): "non_blocking decides only whether the host waits for the copy, not what is copied "
    "(these tensors are not pinned)",
    (
        "trainers/prepared.py",
        "PreparedVal.__iter__",
        ('yield self.data.gather(np.arange(start, min(start + b, n)), "VAL")',),
    ): 'gather reads the training arrays only for the split "train": "VAL" gathers the same validation images',
    (
        "study/sampling.py",
        "unit_points",
        ("return qmc.Sobol(d=2, seed=seed).random_base2(m)[:n]",),
    ): "scramble=True is scipy's default for qmc.Sobol (the same points)",
    (
        "study/trainable.py",
        "run_tune_trial",
        ('tune.report({"final": 2, "top1_err": min(r["top1_err"] for r in rows), "rows_json": json.dumps(rows)})',),
    ): 'nothing reads the "final" metric\'s value (the store writer reads rows_json and trial_error; '
    "Tune only sees that it is reported)",
    (
        "trainers/checkpoint.py",
        "_read_state",
        ("state = load_state_dict(path, weights_only=True)",),
    ): "use_ema=True is timm's default for load_state_dict (a training checkpoint's EMA weights are still the "
    "ones loaded: test_a_training_checkpoint_loads_its_ema_weights)",
    (
        "hpstudy/cli.py",
        "add_run_args",
        ("-default=None,",),
    ): "None is argparse's default for an option not given: --gpu-memory-gb is None either way",
    (
        "hpstudy/cli.py",
        "add_run_args",
        ('-dest="fresh",',),
    ): "--resume then writes an attribute nothing reads; fresh stays False unless --fresh is given, "
    "and the flags still exclude each other",
}


def _function(name: str) -> str:
    """`hpstudy.analysis.edf.x_dkw_epsilon__mutmut_3` -> `dkw_epsilon`; methods as `Class.method`."""
    base = name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    return base[2:] if base.startswith("x_") else base.lstrip("xǁ").replace("ǁ", ".")


def _order(name: str):
    """Mutants by module and function, then by number."""
    base, _, number = name.rpartition("__mutmut_")
    return base, int(number)


def _changed_lines(diff: str) -> tuple:
    """The mutated lines of a mutmut diff, stripped: what the allow-list matches on; a mutant that
    only deletes is matched on its deleted lines, marked `-`."""
    lines = diff.splitlines()
    added = tuple(line[1:].strip() for line in lines if line.startswith("+") and not line.startswith("+++"))
    return added or tuple(
        "-" + line[1:].strip() for line in lines if line.startswith("-") and not line.startswith("---")
    )


def _digest(diff: str) -> str:
    return hashlib.sha1(diff.encode()).hexdigest()[:12]


def _is_layout(module: str, name: str) -> bool:
    function = _function(name)
    return any(
        function == pattern or (pattern.startswith("*") and function.endswith(pattern[1:]))
        for pattern in LAYOUT.get(module, ())
    )


def modules_of(package: str) -> List[str]:
    """Every module of a package (its subpackages' too: study/store/, study/tune/, analysis/findings/) that
    mutmut can mutate, as a path from the repository root; the command line's are hpstudy/'s own files."""
    folder = REPO / FOLDERS[package]
    files = folder.glob("*.py") if package == "cli" else folder.rglob("*.py")
    paths = sorted(str(p.relative_to(REPO)) for p in files if p.name != "__init__.py")
    paths = [p for p in paths if p not in EXCLUDED]
    if package == "presentation":
        return [p for p in paths if p in PRESENTATION]
    return [p for p in paths if p not in PRESENTATION] if package == "analysis" else paths


def _installed(module: str) -> str:
    """`analysis/edf.py` -> `hpstudy/analysis/edf.py`: where the module sits in the installed package."""
    return module if module.startswith("hpstudy/") else f"hpstudy/{module}"


def _scratch(work: Path, modules: List[str]) -> Path:
    """A fresh copy of the tree for the mutants (mutmut writes mutants/ there, never here), links kept:
    the tests import hpstudy.analysis, and mutmut's mutants/ must come before the editable install on
    the import path under that name."""
    path = work / "tree"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    copied = sorted({line.split("/", 1)[0] for line in tracked.splitlines()})  # the tests read docs and configs too
    links = [name for name in copied if (REPO / name).is_symlink()]  # analysis/, study/, trainers/ -> hpstudy/
    for name in links:  # in mutants/ too, made before mutmut runs: its also_copy would copy the unmutated code
        for root in (path, path / "mutants"):
            root.mkdir(exist_ok=True)
            (root / name).symlink_to(os.readlink(REPO / name))
    for name in copied:
        source = REPO / name
        if name in links:
            continue
        if source.is_dir():
            shutil.copytree(source, path / name, ignore=ignore, symlinks=True)
        elif source.exists():
            shutil.copy2(source, path / name)
    (path / "setup.cfg").write_text(
        mutmut_config(modules, [n for n in copied if n not in {"hpstudy", "tests", *links}])
    )
    return path


def mutmut_config(modules: List[str], also_copy: List[str]) -> str:
    """The scratch tree's setup.cfg: what mutmut mutates, copies beside its mutants and runs pytest with."""
    lines = [
        "[mutmut]",
        "source_paths =",
        "    hpstudy",
        "only_mutate =",
        *(f"    {_installed(module)}" for module in modules),
        "also_copy =",
        *(f"    {name}" for name in also_copy),
        "pytest_add_cli_args_test_selection =",
        *(f"    {arg}" for arg in TESTS),
        "pytest_add_cli_args =",
        "    -n",
        "    0",
        "    -p",
        "    no:cacheprovider",
        "    -p",
        "    no:tests.seed_reach",
        "process_isolation = forkserver",
        "use_git_change_detection = false",
        "",
    ]
    return "\n".join(lines)


def _mutants(path: Path, modules: List[str]) -> Dict[str, Dict[str, str]]:
    """module -> {each mutant mutmut makes of it: its diff against the original function}, generated
    here, nothing run; the functions are cut from the mutated text by the line spans mutmut records
    (mutmut's get_diff_for_mutant parses the whole mutated module again for each mutant)."""
    code = (
        "import json, sys; from difflib import unified_diff; from pathlib import Path\n"
        "from mutmut.mutation.file_mutation import mutate_file_contents\n"
        "from mutmut.utils.format_utils import get_mutant_name\n"
        "def diffs(module):\n"
        "    m = mutate_file_contents(module, Path(module).read_text()); lines = m.code.split('\\n')\n"
        "    def text(key, name):\n"
        "        span = m.line_span_by_function_name[key]\n"
        "        return '\\n'.join(lines[span.start - 1 : span.end]).strip().replace(key, name).split('\\n')\n"
        "    def diff(key):\n"
        "        base = key.rsplit('__mutmut_', 1)[0]\n"
        "        name = base.rsplit('\u01c1', 1)[1] if '\u01c1' in base else base[2:]\n"
        "        lines = unified_diff(text(base + '__mutmut_orig', name), text(key, name), lineterm='', n=2)\n"
        "        return '\\n'.join(list(lines)[2:])\n"
        "    return {get_mutant_name(Path(module), key): diff(key) for key in m.mutant_names}\n"
        "print(json.dumps({module: diffs(module) for module in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, *map(_installed, modules)],
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = json.loads(out.strip().splitlines()[-1])
    return {module: found[_installed(module)] for module in modules}


def sample(package: str, names: List[str], size: int, seed: int) -> List[str]:
    """`size` mutants of a package drawn without replacement; the same seed and pool draw the same ones."""
    pool = sorted(names, key=_order)
    return sorted(random.Random(f"{seed}:{package}").sample(pool, min(size, len(pool))), key=_order)


def _mutmut(path: Path, names: List[str], max_children: int, timeout: Optional[float]) -> int:
    exe = shutil.which("mutmut", path=os.path.dirname(sys.executable)) or "mutmut"
    with open(path / "mutmut.log", "a") as out:
        return subprocess.run(
            [exe, "run", "--max-children", str(max_children), *names],
            cwd=path,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_WAIT_POLICY="PASSIVE"),
        ).returncode


def _package_kills(path: Path, package: str, name: str, timeout: float = 600) -> bool:
    """Whether the mutant fails its package's fast tests, run whole with the mutant switched on."""
    tests = [t for t in PACKAGE_TESTS[package] if (path / "mutants" / t).exists()]
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *tests, *TESTS[1:], "-x", "-q", "-p", "no:cacheprovider"],
            cwd=path / "mutants",
            capture_output=True,
            timeout=timeout,
            env=dict(os.environ, MUTANT_UNDER_TEST=name, PYTHONDONTWRITEBYTECODE="1"),
        )
    except subprocess.TimeoutExpired:
        return True  # as mutmut counts a mutant that hangs its tests
    return run.returncode == 1  # 1: a test failed; 5 (none collected) or an error is no kill


def _results(path: Path, module: str) -> dict:
    meta = path / "mutants" / f"{_installed(module)}.meta"
    return json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}


def _score(entries: List[dict]) -> dict:
    """Counts and score over modules' results: detected / (all - equivalent - skipped)."""
    count = lambda status: sum(e["counts"].get(status, 0) for e in entries)
    total = sum(e["mutants"] for e in entries)
    scored = total - count("equivalent") - count("skipped")
    detected = sum(count(s) for s in DETECTED)
    return {
        "mutants": total,
        "detected": detected,
        "equivalent": count("equivalent"),
        "survived": scored - detected,
        "score": round(detected / scored, 4) if scored else None,
    }


def _module_result(module: str, chosen: List[str], codes: dict, diffs: Dict[str, str]) -> dict:
    counts, survivors, equivalent = {}, [], []
    for name in chosen:
        status = STATUS.get(codes.get(name), "suspicious")
        if status not in DETECTED:
            why = EQUIVALENT.get((module, _function(name), _changed_lines(diffs[name])))
            if why:
                status = "equivalent"
                equivalent.append({"mutant": name, "why": why})
            else:
                survivors.append({"mutant": name, "status": status, "diff": diffs[name]})
        counts[status] = counts.get(status, 0) + 1
    entry = {"module": module, "counts": counts, "survivors": survivors, "equivalents": equivalent}
    entry.update(_score([{"mutants": len(chosen), "counts": counts}]))
    entry["digests"] = {name: _digest(diffs[name]) for name in chosen}
    return entry


def run(
    packages: List[str],
    work: Path,
    seed: int,
    sizes: Dict[str, int],
    max_children: int,
    timeout: Optional[float],
    earlier: Optional[dict] = None,
) -> dict:
    """Draw each package's sample, run mutmut once over all of it, score it per module and package."""
    start = time.time()
    modules = {package: modules_of(package) for package in packages}
    every = [m for package in packages for m in modules[package]]
    path = _scratch(work, every)
    print(f"mutation: {len(every)} modules (log: {path / 'mutmut.log'})", file=sys.stderr, flush=True)
    diffs = _mutants(path, every)
    chosen, pools = {}, {}
    for package in packages:
        pool = [n for m in modules[package] for n in diffs[m] if not _is_layout(m, n)]
        pools[package] = len(pool)
        chosen[package] = sample(package, pool, sizes[package], seed)
    module_of = {name: m for m in every for name in diffs[m]}
    drawn = [n for package in packages for n in chosen[package]]
    before = {}
    if earlier is not None:  # what the earlier run detected, with the same diff, stays detected
        for entry in earlier["modules"]:
            undetected = {s["mutant"] for s in entry["survivors"]} | {e["mutant"] for e in entry["equivalents"]}
            for name, digest in entry["digests"].items():
                m = module_of.get(name)
                if m is not None and name not in undetected and _digest(diffs[m][name]) == digest:
                    before[name] = "earlier"
    names = [n for n in drawn if n not in before]
    code = _mutmut(path, names, max_children, timeout) if names else 0
    results = {m: _results(path, m) for m in every}
    package_of = {n: package for package in packages for n in chosen[package]}
    again = [n for n in names if STATUS.get(results[module_of[n]].get(n)) in {"survived", "no tests"}]
    with ThreadPoolExecutor(max_children) as pool:
        for name, killed in zip(again, pool.map(lambda n: _package_kills(path, package_of[n], n), again)):
            if killed:
                results[module_of[name]][name] = "package"
    report = {"bench": "mutation", "tool": "mutmut", "seed": seed, "mutmut_exit": code, "packages": {}, "modules": []}
    for package in packages:
        entries = []
        for m in modules[package]:
            mine = [n for n in chosen[package] if module_of[n] == m]
            if mine:
                codes = {n: before.get(n, results[m].get(n)) for n in mine}
                entries.append(_module_result(m, mine, codes, diffs[m]))
        summary = _score(entries)
        target = TARGETS[package]
        summary.update(
            pool=pools[package], target=target, met=summary["score"] is not None and summary["score"] >= target
        )
        report["packages"][package] = summary
        report["modules"] += entries
    report["seconds"] = round(time.time() - start, 1)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", choices=sorted(FOLDERS), action="append", help="default: every package")
    parser.add_argument("--seed", type=int, default=0, help="draws the sample (default 0)")
    parser.add_argument(
        "--per-package", type=int, metavar="N", help=f"mutants drawn per package (default {PER_PACKAGE})"
    )
    parser.add_argument("--max-children", type=int, default=2, help="mutants run in parallel (default 2)")
    parser.add_argument(
        "--work",
        default=os.environ.get("MUTATION_WORK", "/tmp/hpstudy-mutation"),
        help="scratch folder for the copy of the tree (default /tmp/hpstudy-mutation)",
    )
    parser.add_argument(
        "--survivors-of",
        metavar="EARLIER.json",
        help="rerun only the mutants an earlier run (its printed JSON, same seed) left undetected or that changed",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds in all (default: none)")
    args = parser.parse_args(argv)
    if args.per_package is not None and args.per_package < 1:
        parser.error(f"--per-package: {args.per_package} is not a positive count")
    packages = args.package or list(FOLDERS)
    sizes = {p: args.per_package or PER_PACKAGE[p] for p in packages}
    earlier = None
    if args.survivors_of:
        earlier = json.loads(Path(args.survivors_of).read_text())
        if earlier.get("seed") != args.seed:
            parser.error(f"--survivors-of: {args.survivors_of} drew with seed {earlier.get('seed')}, not {args.seed}")
    report = run(packages, Path(args.work), args.seed, sizes, args.max_children, args.timeout, earlier)
    print(json.dumps(report, indent=1))
    return 0 if all(p["met"] for p in report["packages"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
