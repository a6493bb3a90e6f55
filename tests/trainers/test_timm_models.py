"""Any model of timm's registry in a study (`timm:<name>`): spec entries with and without family and size,
names and sizes refused before a trial runs, trial keys that name the timm name and version, counted FLOPs
and parameters, a real trial each, and a study on a real local Ray whose workers resolve the names afresh."""

import dataclasses
import json
import subprocess
import sys

import pytest

from hpstudy.cli import run_edf_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import SpecError, check_models, parse_spec
from hpstudy.study.store.read import load_trials
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.flops import model_profile
from hpstudy.trainers.zoo import display_name, get_spec, list_models
from tests.helpers import REPO, small_spec, write_spec

CNN, VIT = "timm:resnet10t", "timm:deit_tiny_patch16_224"  # a CNN takes any size; the ViT is built for one
# timm's own smallest CNN and ViT (0.4M and 0.3M parameters) for the tests that train: seconds, not a minute
TINY_CNN, TINY_VIT = "timm:test_resnet", "timm:test_vit"
SIZE = {CNN: 8, VIT: 16, TINY_CNN: 8, TINY_VIT: 16}  # small images each can take (the ViTs' patch is 16 px)
BASE = dict(optimizer="adamw", epochs=1, lr=1e-3, wd=0.01, batch_size=128, device="cpu")


def digits(size: int) -> dict:
    return {"name": "digits", "image_size": size}


def config(model: str, **changes) -> TrialConfig:
    return TrialConfig.from_dict(dict(BASE, model=model, dataset=digits(SIZE.get(model, 16)), **changes))


def test_a_spec_takes_timm_models_by_name_or_with_a_family_and_size_class():
    spec = parse_spec(small_spec(models=["vit_c_tiny", CNN, {"name": VIT, "family": "vit_p", "size": "tiny"}]))
    assert spec.models == ("vit_c_tiny", CNN, VIT)
    assert spec.model_specs["vit_c_tiny"] == get_spec("vit_c_tiny")
    cnn, vit = spec.model_specs[CNN], spec.model_specs[VIT]
    assert (cnn.family, cnn.size, cnn.kwargs) == (CNN, "", {"timm_name": "resnet10t"})  # a family of its own
    assert (vit.family, vit.size, vit.kwargs) == ("vit_p", "tiny", {"timm_name": "deit_tiny_patch16_224"})
    assert CNN not in list_models() and display_name(CNN) == CNN


@pytest.mark.parametrize(
    "models,message",
    [
        (["vit_x"], "models: bad value 'vit_x'; allowed: vit_p_1gf, "),
        (["vit_x"], ", or timm:<a name in timm.list_models()>"),
        (["timm:"], "models[0]: bad value 'timm:'; allowed: timm:<a name in timm.list_models()>"),
        ([CNN, "timm:a b"], "models[1]: bad value 'timm:a b'; allowed: timm:<"),
        ([{"name": CNN, "family": "a b"}], "models[0].family: bad value 'a b'; allowed: one of vit_p, vit_c, cnn"),
        ([{"name": CNN, "size": "huge"}], "models[0].size: bad value 'huge'; allowed: one of tiny, 1gf"),
        (
            [{"name": "vit_c_tiny", "family": "cnn"}],
            "models[0].family: bad value 'cnn' for vit_c_tiny; allowed: 'vit_c'",
        ),
        ([{"name": "cnn_tiny", "size": "4gf"}], "models[0].size: bad value '4gf' for cnn_tiny; allowed: 'tiny'"),
        ([{"family": "cnn"}], "models[0]: bad value {'family': 'cnn'}; allowed: a mapping with the key name"),
        (
            [{"name": CNN, "colour": "red"}],
            f"models[0]: bad value {{'colour': 'red', 'name': '{CNN}'}}; allowed: a mapping with the key name",
        ),
        ([{"name": 5}], "models[0].name: bad value 5; allowed: a string"),
        (
            [CNN, {"name": CNN, "family": "cnn"}],
            f"models: bad value ['{CNN}', {{'family': 'cnn', 'name': '{CNN}'}}]; allowed: a list without repeats",
        ),
        ([CNN, CNN], "allowed: a list without repeats"),
    ],
)
def test_a_bad_models_entry_is_refused_naming_it(models, message):
    with pytest.raises(SpecError) as raised:
        parse_spec(small_spec(models=models))
    assert message in str(raised.value)


def test_a_name_timm_does_not_know_fails_before_any_trial_naming_its_entry_and_close_names(tmp_path, capsys):
    spec = parse_spec(small_spec(models=["cnn_tiny", "timm:resnet10x"]))  # reading the spec does not import timm
    with pytest.raises(SpecError, match=r"^models\[1\]: unknown timm model 'timm:resnet10x'; allowed: ") as raised:
        check_models(spec)
    assert "timm:<a name in timm.list_models()>" in str(raised.value)
    assert "timm:resnet10t" in str(raised.value).split("close: ")[1]
    store = tmp_path / "store"
    path = write_spec(tmp_path, small_spec(models=["cnn_tiny", "timm:resnet10x"]))
    assert run_edf_main(["--config", path, "--store", str(store), "--report", "none"]) == 2
    assert "error: models[1]: unknown timm model 'timm:resnet10x'" in capsys.readouterr().err
    assert not store.exists()


def test_a_timm_model_that_cannot_take_the_image_size_fails_as_a_registered_one_does():
    with pytest.raises(SpecError, match=rf"^dataset.image_size: bad value 8 for model {VIT}; allowed: a size the"):
        check_models(parse_spec(small_spec(models=[CNN, VIT], dataset=digits(8))))
    check_models(parse_spec(small_spec(models=[CNN, VIT], dataset=digits(16))))


def test_a_trial_key_names_the_timm_name_and_the_installed_timm_version():
    import timm

    cfg = config(CNN)
    canonical = json.loads(cfg.to_json())
    assert canonical["model"] == CNN and canonical["timm_version"] == timm.__version__ == cfg.timm_version
    assert cfg.key == config(CNN).key  # a pure function of the config
    other_version = dataclasses.replace(cfg, timm_version="0.0.1")
    assert other_version.key != cfg.key and config("timm:resnet14t").key != cfg.key
    with pytest.raises(ConfigError, match=rf"^timm_version: bad value '0.0.1' for model {CNN}; allowed: '"):
        other_version.validate(check_model=False)  # a worker with another timm refuses the trial


def test_a_registered_models_config_names_no_family_or_timm_version_so_its_key_stays():
    cfg = TrialConfig.from_dict(dict(BASE, model="cnn_tiny"))
    assert {"family", "timm_version"}.isdisjoint(json.loads(cfg.to_json()))
    assert TrialConfig.from_dict(dict(BASE, model="cnn_tiny", family="cnn")).key == cfg.key
    with pytest.raises(ConfigError, match=r"^timm_version: bad value '1.0' for model cnn_tiny; allowed: null"):
        TrialConfig.from_dict(dict(BASE, model="cnn_tiny", timm_version="1.0"), check_model=False)


def test_a_given_family_is_the_rows_and_keys_the_trial_its_own_family_does_not():
    own, given = config(CNN), config(CNN, family="cnn")
    assert own.row_fields()["family"] == CNN and given.row_fields()["family"] == "cnn"
    assert given.key != own.key and config(CNN, family=CNN).key == own.key


def test_adding_a_timm_model_to_a_spec_moves_no_other_key():
    plain = {t.key for t in expand(parse_spec(small_spec()))}
    with_timm = expand(parse_spec(small_spec(models=small_spec()["models"] + [CNN])))
    assert {t.key for t in with_timm if t.model != CNN} == plain
    assert len({t.key for t in with_timm if t.model == CNN}) == 6  # 2 optimizers x 3 samples


@pytest.mark.parametrize("model", [CNN, VIT])
def test_a_timm_model_is_timms_own_architecture_built_for_the_data(model):
    import timm
    import torch

    from hpstudy.trainers.models import build_model

    name, size = model.removeprefix("timm:"), SIZE[model]
    fixed = {"img_size": size} if model == VIT else {}  # a ViT's position embedding is made for its size
    with torch.device("meta"):
        built, reference = build_model(model, 10, size), timm.create_model(name, num_classes=10, **fixed)
    assert type(built) is type(reference)
    assert {k: v.shape for k, v in built.state_dict().items()} == {
        k: v.shape for k, v in reference.state_dict().items()
    }


@pytest.mark.parametrize("model", [CNN, VIT])
def test_flops_and_params_are_counted_on_the_built_model(model):
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from hpstudy.trainers.models import build_model

    size = SIZE[model]
    with torch.device("meta"):  # shapes only: no memory, no weights to draw
        net = build_model(model, 10, size).eval()
    for module in net.modules():  # explicit attention: the counter sees QK^T and AV as matmuls
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        net(torch.zeros(1, 3, size, size, device="meta"))
    assert model_profile(model, 10, size) == (counter.get_total_flops() // 2, sum(p.numel() for p in net.parameters()))


@pytest.mark.slow
def test_reading_a_spec_with_timm_models_imports_no_torch_or_timm():
    probe = (
        "import sys\nfrom hpstudy.study.spec import parse_spec\nfrom tests.helpers import small_spec\n"
        f"parse_spec(small_spec(models=[{CNN!r}, {{'name': {VIT!r}, 'family': 'vit_p'}}]))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'timm', 'ray'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("model", [TINY_CNN, TINY_VIT])
def test_one_real_trial_trains_a_timm_model_on_digits(model):
    import timm

    from hpstudy.trainers.trial import train_trial

    row = train_trial(dict(BASE, model=model, dataset=digits(SIZE[model])))
    assert (row["status"], row["model"], row["family"], row["epochs_done"]) == ("ok", model, model, 1)
    assert (row["flops"], row["params"]) == model_profile(model, 10, SIZE[model])
    assert json.loads(row["config_json"])["timm_version"] == json.loads(row["versions"])["timm"] == timm.__version__
    assert 0 <= row["top1_err"] <= 100 and row["train_loss"] > 0


@pytest.fixture
def local_ray():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.mark.slow
def test_a_study_of_timm_models_runs_on_ray_workers_that_resolve_the_names_afresh(local_ray, tmp_path):
    import timm

    from hpstudy.study.runner import run_study

    recipe = {"batch_size": BASE["batch_size"], "device": "cpu"}
    models = [TINY_CNN, TINY_VIT]
    spec = parse_spec(small_spec(models=models, optimizers=["adamw"], samples=1, dataset=digits(16), recipe=recipe))
    store = str(tmp_path / "store")
    run_study(spec, store)
    rows = load_trials(store, "e2e")
    assert set(rows["trial_key"]) == {t.key for t in expand(spec)} and len(rows) == 2
    assert sorted(rows["model"]) == sorted(rows["family"]) == sorted(models)
    assert set(rows["status"]) == {"ok"}
    for model, flops, params, config_json in zip(rows["model"], rows["flops"], rows["params"], rows["config_json"]):
        assert (flops, params) == model_profile(model, 10, 16)
        assert json.loads(config_json)["timm_version"] == timm.__version__


def test_one_trial_alone_takes_a_timm_model_and_refuses_an_unknown_one_naming_it():
    from hpstudy.trainers.train import build_parser, config_from_args

    def config(model):
        argv = ["--model", model, "--optimizer", "sgd", "--epochs", "1", "--lr", "0.1", "--wd", "0"]
        return TrialConfig.from_dict(config_from_args(build_parser().parse_args(argv)), check_model=False)

    assert config("timm:test_resnet").model == "timm:test_resnet"
    with pytest.raises(ConfigError, match="^model: unknown timm model 'timm:no_such_net'"):
        config("timm:no_such_net").validate()
    with pytest.raises(ConfigError, match="^model: unknown timm model 'timm:resnet10x'") as near:
        config("timm:resnet10x").validate()
    assert "timm:resnet10t" in str(near.value).split("close: ")[1].split(", ")  # the names timm holds, close


def test_a_timm_model_and_the_family_the_spec_gives_it_key_their_own_boxes_in_space():
    from hpstudy.study.spec import sampled_fields

    raw = small_spec(name="t", models=["cnn_tiny", "timm:test_resnet", {"name": "timm:test_vit", "family": "mine"}])
    raw["space"]["timm:test_resnet"] = {"adamw": {"lr": [0.003, 0.03], "wd": [0.01, 0.1]}}
    raw["space"]["mine"] = {"adamw": {"lr": [2e-4, 4e-4], "wd": [0.2, 0.4], "label_smoothing": {"uniform": [0, 0.1]}}}
    trials = [t for t in expand(parse_spec(raw)) if t.optimizer == "adamw"]
    resnet, vit = ([t.config for t in trials if t.model == m] for m in ("timm:test_resnet", "timm:test_vit"))
    assert all(0.003 <= c["lr"] <= 0.03 and 0.01 <= c["wd"] <= 0.1 for c in resnet)
    assert all(2e-4 <= c["lr"] <= 4e-4 and 0 <= c["label_smoothing"] <= 0.1 for c in vit)
    assert len({c["label_smoothing"] for c in vit}) == len(vit) > 1
    assert sampled_fields(raw["space"], raw["models"])["label_smoothing"] == "uniform"  # the spec record's
    raw["space"]["timm:not_in_the_spec"] = raw["space"]["timm:test_resnet"]
    with pytest.raises(SpecError, match=r"^space: bad value 'timm:not_in_the_spec'; allowed: .*family names \(.*mine"):
        parse_spec(raw)
