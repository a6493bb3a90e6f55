"""The Tune searcher of a study: hands out the indices of its trial groups in order."""

from ray.tune.search import Searcher


class GroupQueue(Searcher):
    """Hands out trial groups first..stop-1 in order, one index per Tune trial.

    Tune's grid_search deep-copies the whole value list for every variant, which is quadratic in
    the number of trials (5,000 trials never started); this is linear.
    """

    def __init__(self, first: int, stop: int):
        super().__init__()
        self.next_group, self.stop = first, stop

    def suggest(self, trial_id: str):
        """The next group's index, or FINISHED."""
        if self.next_group >= self.stop:
            return Searcher.FINISHED
        self.next_group += 1
        return {"group": self.next_group - 1}

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        """Nothing to learn: the queue is fixed."""

    def save(self, checkpoint_path: str) -> None:
        """Write nothing: a rerun resumes from the store, never from Tune's experiment state (without
        this, Tune warns at every run that the searcher cannot save)."""
