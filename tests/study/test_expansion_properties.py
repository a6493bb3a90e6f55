"""Properties of spec -> expansion -> trial keys (hpstudy.study.sampling.expand), over generated specs
(Hypothesis): every trial has its own key; a trial's key and config do not move when the spec's lists
(models, optimizers, epochs, seeds) are listed in another order, when the spec is expanded again (in this
process or a fresh one with another hash seed), or when the spec around the trial changes (its name, the
other models, optimizers, schedules and seeds); and a key is the hash of its trial's config: equal configs,
equal keys; different configs, different keys."""

import copy
import json
import os
import subprocess
import sys
from typing import Dict, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.study.sampling import _planned, cells, expand, expand_cell, sampled_values
from hpstudy.study.spec import parse_spec
from hpstudy.trainers.config import TrialConfig
from tests.helpers import REPO, small_spec

MODELS = ("vit_p_tiny", "vit_c_tiny", "cnn_tiny", "vit_p_1gf", "regnety_1gf")
OPTIMIZERS = ("adamw", "sgd")
LISTS = ("models", "optimizers", "epochs", "seeds")
# a sampled recipe field of a box: (field, distribution), none of them in small_spec's recipe
RECIPE_FIELDS = (
    ("label_smoothing", {"uniform": [0.0, 0.2]}),
    ("min_lr_ratio", {"log_uniform": [0.001, 0.1]}),
    ("grad_clip", {"choice": [0.5, 1.0, 2.0]}),
)


def _box(draw, recipe: dict, fixed_wd: bool) -> dict:
    """An lr and wd box a decade or more wide (or, with `fixed_wd`, maybe a fixed wd: a grid of a fixed
    coordinate repeats its points, which the spec refuses), and the sampled recipe field of `recipe`."""
    lr_low = 10 ** draw(st.floats(-5, -1.5))
    wd_low = 10 ** draw(st.floats(-6, -1.5))
    box = {"lr": [lr_low, lr_low * 10 ** draw(st.floats(1, 2))]}
    box["wd"] = wd_low if fixed_wd and draw(st.booleans()) else [wd_low, wd_low * 10 ** draw(st.floats(1, 2))]
    return dict(box, **recipe)


@st.composite
def raw_specs(draw) -> dict:
    """A valid spec (as a dict, before parse_spec): 1-3 models, 1-2 optimizers, 1-3 schedules and seeds,
    any sampler, paired or not, with or without a family's own box and a sampled recipe field."""
    optimizers = draw(st.lists(st.sampled_from(OPTIMIZERS), min_size=1, max_size=2, unique=True))
    recipe = dict([draw(st.sampled_from(RECIPE_FIELDS))]) if draw(st.booleans()) else {}  # one field, every box
    sampler = draw(st.sampled_from(("random", "sobol", "grid")))
    dims = 2 + len(recipe)
    samples = draw(st.sampled_from([1, 2**dims]) if sampler == "grid" else st.integers(1, 5))
    space = {opt: _box(draw, recipe, sampler != "grid") for opt in optimizers}
    if draw(st.booleans()):  # the cnn family's own box for one optimizer
        space["cnn"] = {optimizers[0]: _box(draw, recipe, sampler != "grid")}
    return small_spec(
        name=draw(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)),
        models=draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True)),
        optimizers=optimizers,
        epochs=draw(st.lists(st.integers(1, 60), min_size=1, max_size=3, unique=True)),
        seeds=draw(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=3, unique=True)),
        samples=samples,
        sampler=sampler,
        paired=draw(st.booleans()),
        sampler_seed=draw(st.integers(0, 2**40)),
        space=space,
    )


Cell = Tuple[str, str, int, int, int]  # model, optimizer, epochs, sample, seed


def planned(raw: dict) -> Dict[Cell, Tuple[str, str]]:
    """Each trial of the spec by where it lies in the design: (key, its config as canonical JSON)."""
    out = {}
    for t in expand(parse_spec(copy.deepcopy(raw))):
        out[(t.model, t.optimizer, t.epochs, t.sample, t.seed)] = (t.key, json.dumps(t.config, sort_keys=True))
    return out


@settings(max_examples=30)
@given(raw_specs())
def test_every_trial_of_a_spec_has_its_own_key_and_a_key_is_the_hash_of_its_config(raw):
    trials = expand(parse_spec(raw))
    spec = parse_spec(raw)
    assert len(trials) == len(spec.models) * len(spec.optimizers) * len(spec.epochs) * spec.samples * len(spec.seeds)
    assert len({t.key for t in trials}) == len(trials)
    configs = {json.dumps(t.config, sort_keys=True) for t in trials}
    assert len(configs) == len(trials)  # one key per config: different configs, different keys
    for t in trials:
        config = TrialConfig.from_dict(t.config, check_model=False)
        assert config.key == t.key  # the key is recomputed from the config alone
        assert config.to_dict() == t.config  # as validated whole, in a cell whose trials vary only lr, wd, seed too
        design = dict(model=t.model, optimizer=t.optimizer, epochs=t.epochs, seed=t.seed)
        assert {name: t.config[name] for name in design} == design


@settings(max_examples=30)
@given(raw_specs())
def test_a_cells_trials_are_those_that_validating_each_trial_whole_gives(raw):
    """expand_cell's fast path (a cell varying lr, wd and seed alone: the first trial validated whole, the rest
    filled in) and its general one give each trial's key, config and place as _planned, which validates it."""
    spec = parse_spec(raw)
    for cell in cells(spec):
        samples = sampled_values(spec, *cell)
        whole = [_planned(spec, *cell, i, values, seed) for i, values in enumerate(samples) for seed in spec.seeds]
        assert expand_cell(spec, *cell) == whole


@settings(max_examples=60)
@given(
    st.lists(
        st.sampled_from(["\x00lr\x00", "\x00wd\x00", "\x00seed\x00", '"', "%", "%s", "\\", "/x", "é"]),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["path", "init"]),
)
def test_free_text_in_a_config_moves_no_key_of_a_cell_that_varies_lr_wd_and_seed(pieces, where):
    """A dataset path or init file (unchecked, as `hpstudy status --config` reads a spec) holding the text the
    fast path marks its fields with, quotes, % or backslashes: each trial as validating it whole gives."""
    text = "".join(pieces)
    recipe = dict(small_spec()["recipe"], **({"init": "/" + text} if where == "init" else {}))
    dataset = {"name": "cifar10", "path": text} if where == "path" else small_spec()["dataset"]
    spec = parse_spec(small_spec(recipe=recipe, dataset=dataset, seeds=[0, 7]), check_paths=False)
    for cell in cells(spec):
        samples = sampled_values(spec, *cell)
        whole = [_planned(spec, *cell, i, values, seed) for i, values in enumerate(samples) for seed in spec.seeds]
        assert expand_cell(spec, *cell) == whole


@settings(max_examples=30)
@given(raw_specs(), st.randoms(use_true_random=False))
def test_listing_the_specs_lists_in_another_order_moves_no_key(raw, rng):
    """The same design listed in another order: each trial keeps its key and config, and the expansion
    follows the new order (models x optimizers x epochs x samples x seeds)."""
    shuffled = copy.deepcopy(raw)
    for name in LISTS:
        rng.shuffle(shuffled[name])
    assert planned(shuffled) == planned(raw)
    order = [(t.model, t.optimizer, t.epochs, t.sample, t.seed) for t in expand(parse_spec(shuffled))]
    position = {name: {v: i for i, v in enumerate(shuffled[name])} for name in LISTS}
    assert order == sorted(
        order,
        key=lambda c: (
            (position["models"][c[0]], position["optimizers"][c[1]], position["epochs"][c[2]], c[3])
            + (position["seeds"][c[4]],)
        ),
    )


@settings(max_examples=30)
@given(raw_specs(), st.data())
def test_a_trials_key_does_not_depend_on_the_rest_of_the_spec(raw, data):
    """A spec of part of the design (some models, optimizers, schedules and seeds; another name) plans its
    trials under the keys, and at the configs, the whole spec gives them."""
    part = copy.deepcopy(raw)
    for name in LISTS:
        part[name] = data.draw(st.lists(st.sampled_from(raw[name]), min_size=1, unique=True), label=name)
    part["name"] = raw["name"] + "_part"
    whole = planned(raw)
    mine = planned(part)
    assert mine and all(whole[cell] == value for cell, value in mine.items())


SCRIPT = """
import json, sys
from hpstudy.study.sampling import _planned, cells, expand, expand_cell, sampled_values
from hpstudy.study.spec import parse_spec
print(json.dumps([[t.key for t in expand(parse_spec(raw))] for raw in json.load(sys.stdin)]))
"""


@settings(max_examples=1)
@given(st.lists(raw_specs(), min_size=6, max_size=6))
def test_a_fresh_process_with_another_hash_seed_expands_to_the_same_keys(raws):
    """Python salts hash() per process: keys and sampled points must not depend on it."""
    here = [[t.key for t in expand(parse_spec(copy.deepcopy(raw)))] for raw in raws]
    for hash_seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            input=json.dumps(raws),
            capture_output=True,
            text=True,
            cwd=REPO,
            env=dict(os.environ, PYTHONHASHSEED=hash_seed),
            timeout=120,
            check=True,
        )
        assert json.loads(done.stdout) == here
