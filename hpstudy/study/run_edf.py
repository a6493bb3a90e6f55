"""Run an hpstudy study on Ray Tune.

    python study/run_edf.py [--config demo_digits] [--store ./results]
    python -m hpstudy.study.run_edf ...
    ray submit cluster.yaml study/run_edf.py -- --config paper_lr_wd --store s3://bucket/hpstudy --address auto

Ray's `submit` copies this file alone to the head node, so it imports the installed `hpstudy.study`
package and nothing relative to itself.
"""

from hpstudy.cli import run_edf_main
from hpstudy.trainers.errors import exit_with

if __name__ == "__main__":
    exit_with(run_edf_main)
