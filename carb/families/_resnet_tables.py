"""The ResNet families' fixed tables, shared by their config (:mod:`.resnet`) and their
networks (:mod:`._resnet_nets`) without either importing the other."""

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
