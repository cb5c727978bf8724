"""The NAS-Bench-201 family's fixed tables.

They are shared by its config and features (:mod:`.nb201`) and its networks (:mod:`._nb201_nets`) without either
importing the other.
"""

#: The 5 candidate operations of a cell edge, in NAS-Bench-201's order (index = code).
OPS: tuple[str, ...] = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
#: The codes of :data:`OPS`.
NONE, SKIP, CONV1, CONV3, POOL = range(5)
#: (target node, source node) of each of the 6 edges, in ``arch_str`` order.
EDGES: tuple[tuple[int, int], ...] = ((1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2))
#: Channels of the stem and of the three stages (C = 16). Units: channels.
STEM_CHANNELS = 16
STAGE_CHANNELS: tuple[int, ...] = (16, 32, 64)
#: Cells per stage (N = 5).
CELLS_PER_STAGE = 5
