"""bench/best_of_k.py: the best-of-k curve's spread when two cells do not differ, and its move when one is better."""

import json

import numpy as np

from bench.best_of_k import budgets, main


def test_the_bench_prints_each_distributions_curve_under_the_null_and_a_shift(capsys):
    assert main(["--studies", "40", "--ns", "8,12"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bench"] == "best_of_k" and {c["distribution"] for c in report["cells"]} >= {"normal", "grid360"}
    for cell in report["cells"]:
        assert cell["k"] == budgets(cell["n"]) and cell["k"][0] == 1 and cell["k"][-1] == cell["n"]
        sd = np.array(cell["null_sd"])
        # under the null the spread grows with k: at k = n a comparison of two bests, about a coin flip
        assert (np.diff(sd) > 0).all() and sd[-1] > 0.4 and sd[0] < 0.25
        assert abs(cell["null_mean"][0] - 0.5) < 0.1 and cell["shifted_mean"][0] > cell["null_mean"][0]
