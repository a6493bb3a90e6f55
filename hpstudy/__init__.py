"""hpstudy: hyperparameter-robustness studies of image classifiers on Ray.

One import root over three layers: `hpstudy.trainers` (one trial), `hpstudy.analysis` (DataFrames in,
tables and figures out) and `hpstudy.study` (specs, Ray Tune, the Parquet store); `hpstudy.cli` is the
command line above them (docs/architecture.md).
"""

__version__ = "0.2.0"
