"""The dry run's memory plan (study/gpu_plan.py): which models fit the GPU, and the accum_steps that would."""

import dataclasses
import re

import pytest
import yaml

from hpstudy.study.gpu_plan import memory_plan
from hpstudy.study.sampling import first_trials
from hpstudy.study.spec import parse_spec, resolve_config
from hpstudy.trainers import zoo
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.memory import peak_memory_gb
from tests.helpers import small_spec

LARGEST = {"vit_p_18gf", "vit_c_18gf", "regnety_16gf"}  # the paper spec's models above 140 GB at batch 2048


def _verdicts(spec, gpu_memory_gb):
    """{model: what the plan says of it}: 'fits', or what to change."""
    lines = memory_plan(spec, first_trials(spec), gpu_memory_gb)[1:]
    return dict(re.fullmatch(r"\s+(\S+) .* GB\s+(.*)", line).groups() for line in lines)


def _proposed(verdict):
    """The accum_steps a verdict proposes (None: it proposes none)."""
    found = re.search(r"accum_steps: (\d+)", verdict)
    return int(found.group(1)) if found else None


def _small(gpu_share):
    """Two tiny models on digits (16 px, batch 64), one trial taking `gpu_share` of a GPU."""
    raw = small_spec(resources={"cpu": 1, "gpu": gpu_share})
    raw["recipe"] = {k: v for k, v in raw["recipe"].items() if k != "device"}
    return parse_spec(raw)


def test_a_model_fits_within_its_share_or_gets_the_fewest_micro_batches_that_fit():
    spec = _small(0.5)
    vit = TrialConfig.from_dict(first_trials(spec)[0].config)
    assert vit.model == "vit_c_tiny" and vit.accum_steps == 1
    one, two = (peak_memory_gb(dataclasses.replace(vit, accum_steps=s), 10) for s in (1, 2))
    budget = (one + two) / 2  # vit_c_tiny fits in two micro-batches, not in one
    verdicts = _verdicts(spec, 2 * budget)  # half of a GPU twice the budget
    assert verdicts["cnn_tiny"] == "fits" and _proposed(verdicts["vit_c_tiny"]) == 2
    assert _verdicts(_small(1), budget) == verdicts  # the budget is the trial's share of the GPU
    assert set(_verdicts(_small(1), one).values()) == {"fits"}


def test_a_model_that_fits_in_no_micro_batch_gets_advice():
    verdicts = _verdicts(_small(1), 1.0)  # below the 2 GB overhead: nothing fits
    assert all("grad_checkpointing" in v for v in verdicts.values()) and not any(map(_proposed, verdicts.values()))
    # cnn_tiny's BatchNorm cannot train on one image: its smallest micro-batch is 2 of its batch of 64
    assert verdicts["cnn_tiny"] == (
        "DOES NOT FIT: no micro-batch fits (not even the smallest the model can train on, "
        "2 images): set recipe.grad_checkpointing: true, or give trials a GPU (or GPU "
        "share) with more memory"
    )
    assert "(not even the smallest the model can train on, 1 image)" in verdicts["vit_c_tiny"]


def _paper(accum_steps):
    """The bundled paper spec with recipe.accum_steps replaced (its /data/imagenet need not exist here)."""
    with open(resolve_config("paper_lr_wd")) as f:
        raw = yaml.safe_load(f)
    raw["recipe"]["accum_steps"] = accum_steps
    return parse_spec(raw, check_paths=False)


@pytest.mark.slow
def test_the_paper_spec_fits_an_a100_with_its_accum_steps_and_an_h200_with_two():
    at_141 = _verdicts(_paper(1), 141)  # batch 2048 in one step on an H200
    assert {model for model, verdict in at_141.items() if verdict != "fits"} == LARGEST
    assert {_proposed(at_141[model]) for model in LARGEST} == {2}
    assert set(_verdicts(_paper(2), 141).values()) == {"fits"}  # the proposal fits
    spec = _paper(8)
    assert set(_verdicts(spec, 40).values()) == {"fits"}  # as bundled, on a 40 GB A100
    assert _verdicts(spec, None) == _verdicts(spec, 40)  # 40 GB is the default
    assert set(_verdicts(spec, 20).values()) != {"fits"}  # and the plan can say no


@pytest.mark.parametrize(
    "gpu_share,gpu_memory_gb,header",
    [
        (0.25, 10.0, "memory per trial (estimate; budget 2.5 GB = 10 GB GPU x 0.25 share):"),
        (1, 10.0, "memory per trial (estimate; budget 10.0 GB = 10 GB GPU x 1 share):"),
        (2, 10.0, "memory per trial (estimate; budget 10.0 GB = 10 GB GPU x 1 share):"),  # per GPU, not x 2
        (4, None, "memory per trial (estimate; budget 40.0 GB = 40 GB GPU x 1 share):"),  # an A100 by default
    ],
)
def test_the_budget_is_one_gpus_memory_times_the_share_capped_at_one_gpu(gpu_share, gpu_memory_gb, header):
    assert memory_plan(_small(gpu_share), first_trials(_small(gpu_share)), gpu_memory_gb)[0] == header


def test_a_trial_on_two_gpus_fits_only_what_one_gpu_holds():
    """Every trial needs more than the 2 GB of CUDA overhead alone: 1.5 GB GPUs hold none of them,
    whether a trial has half of one or two of them; 1000 GB ones hold both tiny models."""
    for share in (0.5, 2):
        assert not any(v == "fits" for v in _verdicts(_small(share), 1.5).values())
        assert set(_verdicts(_small(share), 1000).values()) == {"fits"}


def test_a_study_that_samples_the_batch_is_planned_at_each_model_s_largest_setting():
    from hpstudy.study.gpu_plan import memory_trials

    raw = small_spec(resources={"cpu": 1, "gpu": 1}, optimizers=["sgd", "adamw"])
    raw["recipe"] = {k: v for k, v in raw["recipe"].items() if k not in ("device", "batch_size")}
    raw["space"]["adamw"] = dict(raw["space"]["adamw"], batch_size={"choice": [32, 256]})
    spec = parse_spec(raw)
    trials = memory_trials(spec)
    lines = memory_plan(spec, trials, 80)[1:]
    for model, line in zip(spec.models, lines):
        needs = {
            (t.config["optimizer"], t.config["batch_size"]): peak_memory_gb(TrialConfig.from_dict(t.config), 10)
            for t in trials
            if t.model == model
        }
        (opt, batch), need = max(needs.items(), key=lambda kv: kv[1])
        assert (opt, batch) == ("adamw", 256) and len(needs) == 3  # sgd at the recipe's batch, adamw at 32 and 256
        assert line.startswith(f"  {model:<14} batch 256 / accum_steps 1: {need:6.1f} GB")
        assert line.endswith("(the largest of 3 sampled settings)")
    # nothing sampled that sets memory: one trial per model and optimizer, and the worse optimizer is planned
    plain = _small(1.0)
    assert [(t.model, t.optimizer) for t in memory_trials(plain)] == [
        (m, o) for m in plain.models for o in plain.optimizers
    ]


def _peak(checkpointing: bool):
    """The bundled peak-performance spec, its 36 GF ViTs with or without gradient checkpointing."""
    with open(resolve_config("paper_peak")) as f:
        raw = yaml.safe_load(f)
    for model in ("vit_p_36gf", "vit_c_36gf"):
        raw["space"][model]["adamw"]["grad_checkpointing"] = checkpointing
    return parse_spec(raw, check_paths=False)


@pytest.mark.slow
def test_the_peak_spec_holds_every_paper_model_and_fits_an_a100_by_checkpointing_the_36_gf_vits():
    spec = _peak(True)
    paper = {m for m in zoo.list_models() if m.startswith(("vit_p_", "vit_c_", "regnety_")) and "tiny" not in m}
    assert set(spec.models) == paper  # every size, 1 to 36 GF
    assert set(_verdicts(spec, 40).values()) == {"fits"}
    without = _verdicts(_peak(False), 40)
    assert {model for model, verdict in without.items() if verdict != "fits"} == {"vit_p_36gf", "vit_c_36gf"}
