"""The command line answers at once (issue 24): `--help` and `--version` of every command load no torch,
timm, torchvision, Ray, pandas or pyarrow; every help ends with an example of the command."""

import json
import shlex
import subprocess
import sys

import pytest

from hpstudy import __version__
from hpstudy.cli import hpstudy_main, parser, run_edf_main
from hpstudy.study.store.layout import write_trial
from tests.helpers import stored_row

HEAVY = ("torch", "timm", "torchvision", "ray", "pandas", "pyarrow", "numpy", "scipy", "matplotlib")
SCIPY_STATS = "scipy.stats"  # 1.5 s of imports: only for Sobol points, the findings and figures
SUBCOMMANDS = ["run", "status", "report", "query", "compact", "prepare", "suggest"]


def loaded_after(code: str) -> list:
    """The heavy packages a fresh interpreter has loaded after running `code` (and scipy.stats if it was)."""
    probe = (
        f"import json, sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\n"
        f"found = {{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r} | {{{SCIPY_STATS!r}}} & set(sys.modules)\n"
        "print(json.dumps(sorted(found)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["--version"], *[[name, "--help"] for name in SUBCOMMANDS]])
def test_help_and_version_load_nothing_heavy(argv):
    assert loaded_after(f"from hpstudy.cli import hpstudy_main; hpstudy_main({argv!r})") == []


def test_run_edf_help_loads_nothing_heavy():
    assert loaded_after("from hpstudy.cli import run_edf_main; run_edf_main(['--help'])") == []


@pytest.mark.parametrize("argv", [["status"], ["query", "lr > 0"], ["compact"]])
def test_store_commands_load_no_torch_timm_matplotlib_or_scipy_stats(argv, tmp_path):
    # the commands that only read or rewrite the store answer without the trainers' or figures' imports
    store = tmp_path / "store"
    write_trial(str(store), "s", stored_row(trial_key="k"))
    argv = [*argv, "--store", str(store), "--study", "s"]
    loaded = loaded_after(f"from hpstudy.cli import hpstudy_main; assert hpstudy_main({argv!r}) == 0")
    assert not {"torch", "timm", "torchvision", "matplotlib", SCIPY_STATS} & set(loaded), loaded


def test_version_names_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        hpstudy_main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"hpstudy {__version__}\n"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_command_help_ends_with_an_example_of_that_command(name, capsys):
    with pytest.raises(SystemExit):
        hpstudy_main([name, "--help"])
    lines = capsys.readouterr().out.rstrip().splitlines()
    assert lines[-2] == "example:" and lines[-1].startswith(f"  hpstudy {name} ")
    assert parser().parse_args(shlex.split(lines[-1])[1:]).command == name  # the example parses


def test_run_edf_help_ends_with_an_example(capsys):
    with pytest.raises(SystemExit):
        run_edf_main(["--help"])
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("  python study/run_edf.py --config")
