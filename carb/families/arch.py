"""The PyTorch network of a config of any family.

:func:`build` dispatches to the config's family (:mod:`carb.families`). The ResNet networks themselves live in
:mod:`carb.families._resnet_nets` and are re-exported here.

The ResNet families' networks (``cifar``: He et al. 2016; ``imagenet``: torchvision's
ResNet-18..152, same parameter counts) are described in :mod:`carb.families._resnet_nets`;
:mod:`carb.families.features` computes their FLOPs, parameters and activations in closed form.
"""

from __future__ import annotations

from typing import Any, Mapping

from carb import families
from carb.families._resnet_nets import (
    BasicBlock,
    Bottleneck,
    CifarResNet,
    ImageNetResNet,
    channels,
    dtype_of,
)
from carb.families.resnet import FAMILIES, Config

__all__ = ["build", "dtype_of", "channels", "BasicBlock", "Bottleneck", "CifarResNet", "ImageNetResNet"]


def build(config: Any | Mapping[str, Any]) -> Any:
    """The network of a config (a ``torch.nn.Module``), in eval mode, with fp32 weights.

    Batch and precision do not change the module; cast it yourself, e.g.
    ``build(cfg).to(dtype_of(cfg.precision))``, and feed inputs of shape
    ``(batch, 3, input_size, input_size)``. The module is created on torch's current
    default device, so ``with torch.device("meta"): build(cfg)`` allocates nothing.

    Args:
        config: a config of any registered family (:mod:`carb.families`), or a plain dict /
            table row of its parameters (``family`` missing means ``cifar``).

    Raises:
        carb.families.space.SpaceError: (a ``ValueError``) the config is invalid.
    """
    if isinstance(config, Mapping):
        # a ResNet dict is read strictly (an unknown key is an error, not an ignored column)
        config = (
            Config.from_dict(config) if config.get("family", "cifar") in FAMILIES else families.config_from_row(config)
        )
    return families.of(config).build(config)
