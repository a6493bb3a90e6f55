"""The Tune searcher (study/tune/searcher.py): a study's groups first..stop-1, each once, in order."""


def test_the_queue_hands_out_its_groups_in_order_then_finishes():
    from hpstudy.study.tune.searcher import GroupQueue

    queue = GroupQueue(1000, 1003)
    assert [queue.suggest(f"t{i}") for i in range(5)] == [
        {"group": 1000},
        {"group": 1001},
        {"group": 1002},
        GroupQueue.FINISHED,
        GroupQueue.FINISHED,
    ]


def test_saving_writes_nothing_and_is_not_refused(tmp_path):
    from hpstudy.study.tune.searcher import GroupQueue

    # Tune saves its searcher with its experiment state; Searcher.save raises NotImplementedError,
    # which Tune reports as a warning on every run
    queue = GroupQueue(0, 2)
    queue.save(str(tmp_path / "searcher.pkl"))
    assert not list(tmp_path.iterdir())
