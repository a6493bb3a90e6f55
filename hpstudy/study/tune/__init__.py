"""The study's hooks into Ray Tune: the searcher that hands out trial groups, the scheduler, the stopper
and the callback that stores finished trials (hpstudy.study.runner puts them together)."""
