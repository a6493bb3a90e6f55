"""Fine-tuning from a local checkpoint (its sha256: hpstudy.trainers.init_file): loading it into a freshly built
model (the classifier re-initialised when the class count differs), and freezing leading parameter groups.

Nothing downloads: `init` names a local file, a torch state dict (.pt, .pth, .bin; read with
`weights_only=True`, so a pickle cannot run code) or a safetensors file, read by timm's
`load_state_dict` (which takes a checkpoint's EMA weights where it holds them and strips DDP prefixes).
"""

import sys
from functools import lru_cache
from typing import Any, Dict, List, Mapping

import torch
from timm.models import load_state_dict
from timm.models._manipulate import group_parameters
from timm.utils.model import freeze
from torch import nn

from hpstudy.trainers.errors import ConfigError, shown
from hpstudy.trainers.init_file import CHECKPOINT_KINDS

NAMED = 3  # mismatched keys named per kind in an error


def _classifier_keys(model: nn.Module) -> List[str]:
    """State-dict keys of the model's classifier (timm's `get_classifier`)."""
    # timm's method, typed Tensor | Module by torch's Module.__getattr__
    classifier = model.get_classifier()  # type: ignore[operator]
    prefix = next(name for name, module in model.named_modules() if module is classifier)
    return [f"{prefix}.{key}" for key in classifier.state_dict()]


def _named(keys: List[str]) -> str:
    """The first NAMED keys, comma-separated, and how many more."""
    more = f" (+{len(keys) - NAMED} more)" if len(keys) > NAMED else ""
    return ", ".join(keys[:NAMED]) + more


def load_checkpoint(model: nn.Module, path: str, model_name: str) -> bool:
    """Load the checkpoint at `path` into `model` (built and seeded for the trial; position tables of
    another image size are resized by timm). Its classifier is kept as built, i.e. re-initialised, when
    the checkpoint's class count differs or it has none; returns whether it was. ConfigError naming the
    first mismatched keys when the checkpoint does not fit."""
    state = _read_state(path)
    own = model.state_dict()
    state = _resized(model, state, own)
    head = _classifier_keys(model)
    reinit = any(key not in state or state[key].shape != own[key].shape for key in head)
    if reinit:
        state = {k: v for k, v in state.items() if k not in head}
    problems = _fit_problems(state, own, head)
    if problems:
        raise ConfigError(
            f"init: {shown(path)} does not fit model {model_name}: {'; '.join(problems)}; allowed: "
            f"a checkpoint of {model_name} (any class count)"
        )
    with torch.no_grad():
        model.load_state_dict(state, strict=False)
    return reinit


def _read_state(path: str) -> Dict[str, Any]:
    """The checkpoint's state dict (its EMA weights where it holds them); ConfigError unless all tensors."""
    try:
        state = load_state_dict(path, use_ema=True, weights_only=True)
    except Exception as exc:  # torch.load and safetensors raise many types for a file they cannot read
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"init: cannot read {shown(path)} ({reason}); allowed: {CHECKPOINT_KINDS}")
    loose = next((key for key, value in state.items() if not isinstance(value, torch.Tensor)), None)
    if loose is not None:
        raise ConfigError(
            f"init: {shown(path)} is not a state dict of tensors: its entry {shown(loose)} is "
            f"{type(state[loose]).__name__}; allowed: {CHECKPOINT_KINDS}, e.g. a model's "
            f"state_dict() saved with torch.save"
        )
    return state


def _resized(model: nn.Module, state: Dict[str, Any], own: Mapping[str, Any]) -> Dict[str, Any]:
    """The state with the entries the model's timm module filters (checkpoint_filter_fn) as it adapts them."""
    timm_filter = getattr(sys.modules[type(model).__module__], "checkpoint_filter_fn", None)
    if timm_filter is None:
        return state
    # timm's filter resizes position embeddings and tables to the model's image size
    return {**state, **timm_filter({k: v for k, v in state.items() if k in own}, model)}


def _fit_problems(state: Mapping[str, Any], own: Mapping[str, Any], head: List[str]) -> List[str]:
    """What keeps the state from loading into the model: missing, unexpected and mis-shaped keys, first few each."""
    missing = [k for k in own if k not in state and k not in head]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
        for k in state
        if k in own and state[k].shape != own[k].shape
    ]
    return [
        f"{what} {_named(keys)}"
        for what, keys in (("missing", missing), ("unexpected", unexpected), ("shape (checkpoint vs model)", shapes))
        if keys
    ]


def parameter_groups(model: nn.Module) -> Dict[int, List[str]]:
    """timm's coarse parameter groups in order: 0 the stem, then stages (blocks of a ViT), the head last."""
    # timm's method, typed Tensor | Module by torch's Module.__getattr__
    return group_parameters(model, model.group_matcher(coarse=True))  # type: ignore[operator]


@lru_cache(maxsize=None)
def count_parameter_groups(model_name: str) -> int:
    """How many coarse parameter groups a registered model has (built on the meta device)."""
    from hpstudy.trainers.models import build_model

    with torch.device("meta"):
        return len(parameter_groups(build_model(model_name, num_classes=10)))


def freeze_leading(model: nn.Module, groups: int) -> None:
    """Freeze the first `groups` coarse parameter groups: no gradients, and their BatchNorm layers keep
    the checkpoint's statistics (timm's `freeze` of the modules holding them)."""
    frozen = [name for group, names in parameter_groups(model).items() if group < groups for name in names]
    for name in frozen:  # also those held by the root module (a ViT's position embedding)
        model.get_parameter(name).requires_grad_(False)
    freeze(model, sorted({name.rpartition(".")[0] for name in frozen} - {""}))
