"""The ResNet families' fixed tables.

They are shared by their config (:mod:`.resnet`) and their networks (:mod:`._resnet_nets`) without either importing
the other.
"""

FAMILIES = ("cifar", "imagenet")
BLOCKS = ("basic", "bottleneck")
#: torchvision's layer table for the imagenet family: depth -> (block, blocks per stage).
IMAGENET_LAYERS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
DEFAULT_CLASSES = {"cifar": 10, "imagenet": 1000}


def channels(base: int, width: float) -> int:
    """Channels of a layer with ``base`` channels at width multiplier ``width``.

    Units: channels. ``max(1, round(base * width))`` with Python's round (half to even).
    """
    return max(1, round(base * width))
