"""A prepared folder held on the training device (PreparedData.to and hold): the same batches as the memory-mapped
path, bit for bit, gathered where the arrays are held with nothing read back on the host."""

import pytest

from tests.helpers import image_folder


@pytest.fixture(scope="module")
def cpu():
    """torch's CPU device."""
    import torch

    return torch.device("cpu")


@pytest.fixture(scope="module")
def prepared_folder(tmp_path_factory):
    """A preparation (train squares 32 px, validation 24 px) of 12 training and 12 validation images."""
    from hpstudy.trainers.prepared import prepare

    root = tmp_path_factory.mktemp("resident")
    out = str(root / "prep")
    prepare(image_folder(root / "imgs", n=6), out, train_size=32, image_size=24, workers=1, progress=None)
    return out


def _epochs(data, epochs=2, batch=4, seed=0):
    """`epochs` passes of training batches (AutoAugmented) and the generator's state after them."""
    import torch

    g = torch.Generator().manual_seed(seed)
    loader = data.train_loader(batch, g)
    return [batch for _ in range(epochs) for batch in loader], g.get_state()


def test_a_resident_epoch_and_validation_pass_equal_the_memory_mapped_ones_bit_for_bit(prepared_folder, cpu):
    import torch

    from hpstudy.trainers.prepared import PreparedData

    mapped = PreparedData(prepared_folder, 24, "original")
    assert mapped.to(cpu) is mapped  # on a CPU the memory map is kept by default
    assert mapped.hold(cpu, mapped.nbytes - 1) is mapped  # too big for the budget
    resident = mapped.hold(cpu, mapped.nbytes)
    assert resident.resident is not None and mapped.resident is None
    assert resident.to(cpu) is resident
    (ours, our_state), (theirs, their_state) = _epochs(resident), _epochs(mapped)
    assert len(ours) == 6 and torch.equal(our_state, their_state)  # the same draws, consumed alike
    for (x, y), (ex, ey) in zip(ours, theirs):
        assert torch.equal(x, ex) and torch.equal(y, ey) and x.stride() == ex.stride()
    assert not torch.equal(ours[0][0], ours[3][0])  # the second epoch is another order and other draws
    ours, theirs = list(resident.val_loader(5)), list(mapped.val_loader(5))
    assert [len(y) for _, y in ours] == [5, 5, 2]
    assert all(torch.equal(a, b) for (x, y), (ex, ey) in zip(ours, theirs) for a, b in ((x, ex), (y, ey)))


def test_a_resident_epoch_gathers_on_its_device_and_reads_nothing_back(prepared_folder):
    """Held on the meta device, which stands in for a GPU: any read of a value there raises or is a
    copy to the host (counted); the memory-mapped path turns its order into numpy (counted)."""
    import torch

    from bench.op_count import OpCounter
    from hpstudy.trainers.prepared import PreparedData

    mapped = PreparedData(prepared_folder, 24, "original")
    meta = torch.device("meta")
    resident = mapped.hold(meta, mapped.nbytes)
    _epochs(resident, epochs=1)  # the first batch of a size builds AutoAugment's tables
    with OpCounter() as ops:
        batches, _ = _epochs(resident, epochs=1)
        val = list(resident.val_loader(5))
    assert ops.host_reads == 0
    assert ops.counts["aten.index_select"] == 2 * (len(batches) + len(val))  # images and labels
    assert {t.device.type for batch in batches + val for t in batch} == {"meta"}
    with OpCounter() as ops:
        _epochs(mapped, epochs=1)
    assert ops.host_reads > 0 and ops.counts["aten.index_select"] == 0


def test_the_resident_budget_is_half_what_the_process_may_still_take_on_its_share_of_the_gpu(monkeypatch, cpu):
    import torch

    from hpstudy.trainers import prepared

    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (100 * gib, 140 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 5 * gib)
    cuda = torch.device("cuda", 0)
    for share, budget in ((1.0, 50 * gib), (0.25, 15 * gib)):  # 0.25: a quarter of 140, less the 5 held
        monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device, s=share: s, raising=False)
        assert prepared.resident_budget(cuda) == budget
    monkeypatch.delattr(torch.cuda, "get_per_process_memory_fraction")  # as torch 2.5: the whole card
    assert prepared.resident_budget(cuda) == 50 * gib
    assert prepared.resident_budget(cpu) == 0


@pytest.mark.slow
def test_a_trial_on_resident_data_has_the_rows_of_one_on_the_memory_map(prepared_folder, monkeypatch, cpu):
    """Through the trainer (data_for -> PreparedData.to), the budget forced open on the CPU."""
    from hpstudy.trainers import prepared
    from hpstudy.trainers.config import TrialConfig
    from hpstudy.trainers.loop import data_for, data_on_device
    from hpstudy.trainers.trial import train_trial

    cfg = dict(
        model="cnn_tiny",
        optimizer="adamw",
        epochs=2,
        lr=3e-3,
        wd=0.0,
        batch_size=4,
        auto_augment="original",
        dataset={"name": "prepared", "path": prepared_folder, "image_size": 24},
        device="cpu",
    )
    logs, held = [], []
    for budget in (0, 1 << 30):
        data_on_device.cache_clear()
        monkeypatch.setattr(prepared, "resident_budget", lambda device, b=budget: b)
        logs.append([{k: v for k, v in e.items() if k != "seconds"} for e in train_trial(cfg)["epoch_log"]])
        held.append(data_for(TrialConfig.from_dict(cfg), cpu).resident is not None)  # the trial's, cached
    data_on_device.cache_clear()
    assert held == [False, True]
    assert len(logs[0]) == 2 and logs[0] == logs[1]
