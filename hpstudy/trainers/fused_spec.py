"""What fused trials must share and which recipe options fusion supports (torch-free: the dry run's plan
reads it without importing the fused trainer, hpstudy.trainers.fused)."""

from typing import Sequence

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError, shown

PER_MEMBER = ("lr", "wd", "seed")
# recipe options fusion does not implement, with the values that mean "off"
UNSUPPORTED = {
    "mixup": (0,),
    "cutmix": (0,),
    "ema_decay": (None,),
    "grad_clip": (None,),
    "accum_steps": (1,),
    "grad_checkpointing": (False,),
    "init": (None,),
    "freeze": (0,),
    "channels_last": (None, False),
}
# why, for the options that are not merely unimplemented
WHY_UNSUPPORTED = {
    "channels_last": "vmap stacks the members' images and weights into tensors of one more "
    "dimension, which have no channels_last layout; null trains fused without it"
}


def check_fusable(cfgs: Sequence[TrialConfig]) -> None:
    """Members must share everything but lr, wd and seed, and use the options fusion supports."""
    first = cfgs[0].to_dict()
    for cfg in cfgs[1:]:
        diff = [k for k, v in cfg.to_dict().items() if k not in PER_MEMBER and v != first[k]]
        if diff:
            raise ConfigError(f"fused members differ in {diff}; only {PER_MEMBER} may differ")
    for name, off in UNSUPPORTED.items():
        if first[name] not in off:
            why = f" ({WHY_UNSUPPORTED[name]})" if name in WHY_UNSUPPORTED else ""
            raise ConfigError(f"{name}: {shown(first[name])} is not supported in fused training{why}; train alone")
