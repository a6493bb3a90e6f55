"""Generated trial tables (the store's row schema) for the analysis tests."""

import numpy as np
import pandas as pd


def make_trials(models=("vit_p_tiny", "vit_c_tiny", "cnn_tiny"), optimizers=("adamw", "sgd"),
                epochs=(10,), n=24, seed=0, diverge_share=0.1, fail_share=0.0) -> pd.DataFrame:
    """Trials whose error is a bowl in log lr / log wd, plus noise; some diverged at chance (90%)."""
    rng = np.random.default_rng(seed)
    rows = []
    for m_index, model in enumerate(models):
        for opt in optimizers:
            for e in epochs:
                log_lr = rng.uniform(-4, -2, n)
                log_wd = rng.uniform(-2, 0, n)
                err = (10 + 3 * m_index + 8 * (log_lr + 3) ** 2 + 2 * (log_wd + 1) ** 2
                       + 20 / e + rng.normal(0, 0.5, n))
                status = np.where(rng.random(n) < diverge_share, "diverged", "ok").astype(object)
                err = np.where(status == "diverged", 90.0, err)
                failed = rng.random(n) < fail_share
                status[failed] = "failed"
                err = np.where(failed, np.nan, err)
                for i in range(n):
                    rows.append({"study": "gen", "trial_key": f"{model}-{opt}-{e}-{i}", "model": model,
                                 "optimizer": opt, "epochs": e, "lr": 10 ** log_lr[i], "wd": 10 ** log_wd[i],
                                 "seed": 0, "status": status[i], "top1_err": err[i], "wall_s": 30.0})
    return pd.DataFrame(rows)
