"""hpstudy from Python, cell by cell (docs/python-api.md): run a tiny study on scikit-learn's digits into a
temporary store, read its trials, write its report, suggest a fixed lr/wd per model and hand the trials
to Optuna. Each `# %%` is a notebook cell (Jupyter, VS Code); `python examples/python_api.py` runs them
all, on a local Ray (about a minute on 2 CPU cores)."""

# %%
import tempfile

import hpstudy

SPEC = {  # what a YAML spec holds (docs/studies.md); a path or a bundled name works too
    "name": "api_demo",
    "dataset": {"name": "digits", "image_size": 16},
    "recipe": {"batch_size": 64, "warmup_epochs": 0.5, "device": "cpu"},
    "models": ["vit_c_tiny", "cnn_tiny"],
    "optimizers": ["adamw"],
    "epochs": [1],
    "samples": 3,
    "sampler": "sobol",
    "space": {
        "adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]},
        "cnn": {"adamw": {"lr": [2e-3, 4e-2], "wd": [0.01, 0.1]}},
    },
    "resources": {"cpu": 1},
    "fuse": "off",
}
store = tempfile.mkdtemp(prefix="hpstudy-api-")

# %% Run it: a progress bar in a notebook, a status line every 10 s in a terminal (the lines hpstudy run
# prints; show_output(True) shows them, the API is silent without it). A rerun trains only what is not
# stored yet. Returns every stored row of the study, every column.
hpstudy.show_output(True)
trials = hpstudy.run(SPEC, store, num_cpus=2, report=False)
trials[["model", "lr", "wd", "status", "top1_err"]]

# %% The same table, read back from the store at any later time
trials = hpstudy.load(store, "api_demo")
trials.groupby("model")["top1_err"].describe()

# %% The report: index.html, the figures and their numbers (hpstudy.run writes it too, unless report=False)
folder = hpstudy.report(store, "api_demo")

# %% A fixed lr and wd per model, for a length or optimizer study: the points, and the YAML to paste
suggestion = hpstudy.suggest(store, "api_demo")
print(suggestion["space"])

# %% Into Optuna (optuna-dashboard, Optuna's plots): one (model, optimizer, epochs) cell as an Optuna study
try:
    to_optuna = hpstudy.to_optuna
except ImportError:  # this version of hpstudy has no Optuna export
    optuna_study = None
else:
    optuna_study = to_optuna(trials, cell=("cnn_tiny", "adamw", 1))
