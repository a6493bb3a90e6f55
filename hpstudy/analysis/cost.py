"""What a trial cost in compute: its worker's wall time, in hours, for budgets in hours rather than trials
(Dodge et al. 2019 plot expected validation performance against compute)."""

import numpy as np
import pandas as pd

SECONDS_PER_HOUR = 3600.0


def trial_hours(trials: pd.DataFrame) -> pd.Series:
    """Each row's hours of its worker's wall time (`wall_s` / 3600); the rows of a fused group, which store the
    group's wall time (the same `wall_s` on one `node`), share it evenly; NaN without a finite wall_s."""
    if "wall_s" not in trials:
        return pd.Series(np.nan, index=trials.index, name="hours")
    wall = trials["wall_s"].astype(float)
    node = trials["node"].astype(str) if "node" in trials else pd.Series("", index=trials.index)
    members = wall.groupby([node, wall], dropna=False).transform("size").astype(float)
    hours = wall.where(np.isfinite(wall)) / members / SECONDS_PER_HOUR
    return hours.rename("hours")
