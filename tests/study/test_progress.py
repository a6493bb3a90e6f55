"""Tune pickles hpstudy's stopper and callbacks at every experiment-state save: they must not carry the study."""

from ray import cloudpickle

from hpstudy.study.progress import ProgressPrinter
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.tune_stopper import RunStopper
from hpstudy.study.tune_store_writer import StoreWriter
from tests.helpers import small_spec


def test_tune_hooks_pickle_without_the_studys_plan(tmp_path):
    trials = expand(parse_spec(small_spec(samples=50)))
    groups = [{"keys": [t.key], "configs": [t.config]} for t in trials]
    writer = StoreWriter(str(tmp_path), "s", trials, groups)
    assert len(cloudpickle.dumps(writer.__dict__)) > 10_000  # the plan it holds is large
    for hook in (writer, RunStopper(writer), ProgressPrinter(writer, len(trials))):
        assert len(cloudpickle.dumps(hook)) < 200
