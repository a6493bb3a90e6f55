"""`python -m hpstudy.analysis.report_worker FOLDER`: the worker a large report starts beside itself
(hpstudy.analysis.report_jobs): plans the report's jobs from the inputs in FOLDER and runs, in order, those of
the report's plan the report's process has not taken, where its model catalogue is the report's, until the
report's process is gone."""

import logging
import os
import sys
import warnings
from typing import List, Optional

import pandas as pd

from hpstudy.analysis.catalogue import catalogue_state
from hpstudy.analysis.metric import LeftOutWarning
from hpstudy.analysis.report import plan_jobs
from hpstudy.analysis.report_jobs import JobFolder, read_inputs

log = logging.getLogger("hpstudy.analysis.report_worker")  # not __name__: "__main__" when run


def main(argv: Optional[List[str]] = None) -> int:
    """Run the report's untaken jobs of the folder named by the one argument; exit status 0 when done."""
    (folder,) = sys.argv[1:] if argv is None else argv
    frames, params = read_inputs(folder)
    if params["catalogue"] != catalogue_state():  # the report's process registered a model: it draws every figure
        log.info("report worker: the report's model catalogue is not this process's; no job taken")
        return 0
    with warnings.catch_warnings():  # as the report's process: it counts what it leaves out in its tables
        warnings.simplefilter("ignore", LeftOutWarning)
        trials, epochs = frames["trials"], frames.get("epochs", pd.DataFrame())
        _, _, jobs = plan_jobs(trials, epochs, params["metric"], params["keys"], params["sizes"], params["out"])
        wanted = set(params["jobs"])  # the report's plan: a figure it does not draw is not drawn here either
        parent = os.getppid()
        orphaned = lambda: os.getppid() != parent  # the report's process died: its folder is no one's
        JobFolder(folder).run({name: job for name, job in jobs.items() if name in wanted}, stop=orphaned)
    return 0


if __name__ == "__main__":
    sys.exit(main())
