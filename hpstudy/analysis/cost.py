"""What a trial cost in compute: its worker's wall time, in hours, for budgets in hours rather than trials
(Dodge et al. 2019 plot expected validation performance against compute)."""

import numpy as np
import pandas as pd

SECONDS_PER_HOUR = 3600.0
# a fused group's rows: one cell's trials trained together on one node, each storing the group's wall time (the
# same float: one time.time() difference written to every member), which no two separate trials share
GROUP = ["node", "model", "optimizer", "epochs"]


def trial_hours(trials: pd.DataFrame) -> pd.Series:
    """Each row's hours of its worker's wall time (`wall_s` / 3600); the rows of a fused group, which store the
    group's wall time (the same `wall_s` in one cell on one `node`), share it evenly, so pass all of a study's
    rows (a subset holding some of a group's rows would share among fewer). A table without `node` (not a
    store's) has no groups; NaN without a finite wall_s."""
    if "wall_s" not in trials:
        return pd.Series(np.nan, index=trials.index, name="hours")
    wall = trials["wall_s"].astype(float)
    members = pd.Series(1.0, index=trials.index)
    if "node" in trials:
        keys = [trials[c].astype(str) for c in GROUP if c in trials]
        members = wall.groupby([*keys, wall], dropna=False).transform("size").astype(float)
    return (wall.where(np.isfinite(wall)) / members / SECONDS_PER_HOUR).rename("hours")
