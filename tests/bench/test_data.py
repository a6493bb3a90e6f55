"""bench/data.py: the input paths it measures."""

import pytest

from tests.helpers import image_folder


@pytest.mark.slow
def test_the_prepared_bench_measures_both_paths_with_and_without_auto_augment(tmp_path):
    import torch

    from bench.data import prepared_rates
    from hpstudy.trainers.prepared import prepare

    out = str(tmp_path / "prep")
    prepare(image_folder(tmp_path / "imgs", n=4), out, train_size=32, image_size=24, workers=1, progress=None)
    rates = prepared_rates(out, torch.device("cpu"), batch=4)
    names = {f"prepared_{mode}_{aa}_images_per_s" for mode in ("mapped", "resident") for aa in ("plain", "aa")}
    assert set(rates) == names and all(rate > 0 for rate in rates.values())
