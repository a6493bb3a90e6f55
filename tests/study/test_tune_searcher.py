"""The Tune searcher (study/tune_searcher.py): a study's groups first..stop-1, each once, in order."""

from hpstudy.study.tune_searcher import GroupQueue


def test_the_queue_hands_out_its_groups_in_order_then_finishes():
    queue = GroupQueue(1000, 1003)
    assert [queue.suggest(f"t{i}") for i in range(5)] == [
        {"group": 1000},
        {"group": 1001},
        {"group": 1002},
        GroupQueue.FINISHED,
        GroupQueue.FINISHED,
    ]
