"""The PyTorch network of a config of any family: :func:`build` dispatches to the config's
family (:mod:`carb.families`). The ResNet networks themselves live in
:mod:`carb.families._resnet_nets` and are re-exported here.

Two families, both plain ``nn.Module`` trees with no data-dependent Python control flow
(so they trace, script, export and run on the ``meta`` device):

``cifar``
    The 3-stage ResNet of He et al. (2016), section 4.2: a 3x3 convolution stem
    (stride 2 when ``early_downsample``, else 1) with BN and ReLU; three stages of ``n``
    blocks with base channels 16/32/64 times ``width``; stride 2 in the first block of
    stages 2 and 3; global average pooling and a linear classifier. ``depth = 6n + 2``
    for basic blocks and ``9n + 2`` for bottleneck blocks (expansion 4: the stage's
    channels are the bottleneck's inner width, its output is 4x). Shortcuts are
    identities, except where the shape changes: there a 1x1 convolution + BN projects
    (option B of the paper).

``imagenet``
    torchvision's ``ResNet`` (``resnet18`` ... ``resnet152``), rebuilt here: 7x7/2 stem,
    BN, ReLU, 3x3/2 max-pool, 4 stages of 64/128/256/512 times ``width`` channels with the
    block counts of :data:`carb.space.IMAGENET_LAYERS`, v1.5 bottlenecks (stride on the
    3x3 convolution), 1x1 conv + BN downsample shortcuts, adaptive average pooling and a
    linear classifier. At ``width = 1`` and 1000 classes the parameter counts equal
    torchvision's (ResNet-18: 11,689,512; ResNet-50: 25,557,032).

Channel counts under a width multiplier are :func:`channels` of the base count
(``max(1, round(base * width))``, Python's round-half-to-even); the stem of the imagenet
family is scaled the same way. Convolutions have no bias (each is followed by BN), ReLU
and the residual addition are in place, and the forwards are written one statement per
layer, as in torchvision, so that eager PyTorch holds the same tensors alive (the
``live_activation_bytes`` model of :mod:`carb.features` relies on this).

:mod:`carb.features` computes the same networks' FLOPs, parameters and activation sizes in
closed form without building them; the tests check that both agree exactly.
"""

from __future__ import annotations

from typing import Any, Mapping

from carb import families
from carb.families._base import init_weights as _init
from carb.families.resnet import FAMILIES, Config
from carb.families._resnet_nets import (
    BasicBlock,
    Bottleneck,
    CifarResNet,
    ImageNetResNet,
    channels,
    dtype_of,
)

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
        carb.space.SpaceError: (a ``ValueError``) the config is invalid.
    """
    if isinstance(config, Mapping):
        # a ResNet dict is read strictly (an unknown key is an error, not an ignored column)
        config = Config.from_dict(config) if config.get("family", "cifar") in FAMILIES \
            else families.config_from_row(config)
    return families.of(config).build(config)


_COMPAT = (_init,)  # carb.arch._init: the shared initialisation, for older callers
