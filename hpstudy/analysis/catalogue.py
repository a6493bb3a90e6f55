"""The model catalogue as the analysis reads it: names, families, size classes and order, for the
catalogue's models and for any other name a table holds (a model the catalogue does not know is a
family of its own, without a size class, labelled by its name, and comes after the catalogue's)."""

from typing import Iterable, List, Optional

from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.zoo import ModelSpec, get_spec, list_models


def _spec(model: str) -> Optional[ModelSpec]:
    try:
        return get_spec(model)
    except ConfigError:
        return None


def known(model: str) -> bool:
    """Whether the catalogue lists `model` (a timm: model resolves, but is not listed: it has no style of its own)."""
    return model in list_models()


def model_label(model: str) -> str:
    """The name figures and sentences show: the catalogue's (ViT-C 1GF), else the table's name."""
    spec = _spec(model)
    return (spec.label or model) if spec else model


def model_family(model: str) -> str:
    """The catalogue family, or the model's own name for a model the catalogue does not know."""
    spec = _spec(model)
    return spec.family if spec else model


def model_size(model: str) -> str:
    """The catalogue size class, or "" for a model the catalogue does not know."""
    spec = _spec(model)
    return spec.size if spec else ""


def catalogue_order(models: Iterable[str]) -> List[str]:
    """The distinct `models` in catalogue order, the ones it does not know after them by name."""
    catalogue = {name: i for i, name in enumerate(list_models())}
    return sorted(set(models), key=lambda m: (catalogue.get(m, len(catalogue)), m))


def catalogue_state() -> List[List[str]]:
    """The catalogue as the analysis reads it, in plain values: [name, label, family, size class] per listed model,
    in order (a report's worker draws only where its own catalogue is the report's: a model registered at run
    time is not in a new process's)."""
    return [[name, model_label(name), model_family(name), model_size(name)] for name in list_models()]
