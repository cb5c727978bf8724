"""The ResNets' work, counted per image operator by operator without building a module.

:func:`arch_features` walks one network's forward (cached per network);
:mod:`carb.families.resnet` turns its figures into the feature columns.
"""

from __future__ import annotations

from functools import lru_cache

from ._resnet_tables import IMAGENET_LAYERS, channels

__all__ = ["arch_features"]

# per-image, per-architecture quantities, in elements (or counts); see _Walk
_ARCH_FIELDS = (
    "flops",
    "params",
    "bn_channels",
    "n_bn",
    "activation",
    "peak_io",
    "live",
    "largest",
    "n_conv",
    "n_linear",
    "n_ops",
    "n_stages",
    "n_blocks",
    "n_projections",
    "min_channels",
    "max_channels",
    "final_channels",
    "stem_output_size",
    "final_feature_size",
    "flops_1x1",
)
# the _Walk fields that add up over blocks (the others are maxima or set once)
_ADDITIVE = (
    "flops",
    "params",
    "bn_channels",
    "n_bn",
    "activation",
    "n_conv",
    "n_linear",
    "n_ops",
    "n_blocks",
    "n_projections",
    "flops_1x1",
)


class _Walk:
    """Walks one network's forward for one image, accumulating counts in elements.

    ``held`` arguments are the activation elements that enclosing frames keep alive (other
    than the block's input); ``live_before`` ones, those alive when an operator starts.
    """

    def __init__(self) -> None:
        self.flops = self.params = self.bn_channels = self.n_bn = 0
        self.activation = self.peak_io = self.live = self.largest = 0
        self.n_conv = self.n_linear = self.n_ops = 0
        self.n_stages = self.n_blocks = self.n_projections = 0
        self.min_channels = 1 << 62
        self.max_channels = 0
        self.final_channels = self.stem_output_size = self.final_feature_size = 0
        self.flops_1x1 = 0

    def _out(self, elems: int, inp: int | None = None, live: int | None = None) -> None:
        """Book an operator's output of ``elems`` elements.

        For allocating ops only, ``inp`` is for the peak-io figure and ``live`` the live elements while it runs.
        """
        self.activation += elems
        self.n_ops += 1
        self.largest = max(self.largest, elems)
        if inp is not None:
            self.peak_io = max(self.peak_io, inp + elems)
        if live is not None:
            self.live = max(self.live, live)

    def conv(self, cin: int, cout: int, k: int, stride: int, h: int, live_before: int) -> tuple[int, int]:
        """A bias-free k x k convolution, padding k // 2; returns (output side, output elements).

        ``live_before``: live elements when it starts (its input included when counted).
        """
        ho = (h - 1) // stride + 1
        out = cout * ho * ho
        flops = 2 * cin * cout * k * k * ho * ho
        self.flops += flops
        if k == 1:
            self.flops_1x1 += flops
        self.params += cin * cout * k * k
        self.n_conv += 1
        self.min_channels = min(self.min_channels, cout)
        self.max_channels = max(self.max_channels, cout)
        self._out(out, inp=cin * h * h, live=live_before + out)
        return ho, out

    def bn(self, c: int, elems: int, live_before: int) -> int:
        self.params += 2 * c
        self.bn_channels += c
        self.n_bn += 1
        self._out(elems, inp=elems, live=live_before + elems)
        return elems

    def inplace(self, elems: int) -> None:  # ReLU or residual addition
        self._out(elems)

    def basic(self, cin: int, planes: int, stride: int, h: int, held: int) -> tuple[int, int, int]:
        """BasicBlock of carb.families.arch; returns (output channels, output side, output elements)."""
        x = cin * h * h
        ho, a = self.conv(cin, planes, 3, stride, h, held + x)
        self.bn(planes, a, held + x + a)
        self.inplace(a)  # relu
        _, a2 = self.conv(planes, planes, 3, 1, ho, held + x + a)
        self.bn(planes, a2, held + x + a2)  # conv1 output freed by out = conv2(out)
        out = self._shortcut(cin, planes, stride, h, held + x + a2, a2)
        self.inplace(a2)  # out += identity
        self.inplace(a2)  # relu
        self.n_blocks += 1
        return planes, ho, out

    def bottleneck(self, cin: int, planes: int, stride: int, h: int, held: int) -> tuple[int, int, int]:
        """Bottleneck of carb.families.arch (stride on the 3x3); returns (channels, side, elements)."""
        x = cin * h * h
        cout = 4 * planes
        _, p1 = self.conv(cin, planes, 1, 1, h, held + x)
        self.bn(planes, p1, held + x + p1)
        self.inplace(p1)
        ho, p2 = self.conv(planes, planes, 3, stride, h, held + x + p1)
        self.bn(planes, p2, held + x + p2)
        self.inplace(p2)
        _, o = self.conv(planes, cout, 1, 1, ho, held + x + p2)
        self.bn(cout, o, held + x + o)
        out = self._shortcut(cin, cout, stride, h, held + x + o, o)
        self.inplace(o)
        self.inplace(o)
        self.n_blocks += 1
        return cout, ho, out

    def _shortcut(self, cin: int, cout: int, stride: int, h: int, live: int, out: int) -> int:
        # identity, or 1x1 conv + BN on the block input while the branch's output is alive
        if stride == 1 and cin == cout:
            return out
        self.n_projections += 1
        _, d = self.conv(cin, cout, 1, stride, h, live)
        self.bn(cout, d, live + d)
        return out

    def stage(self, block: str, cin: int, planes: int, n: int, stride: int, h: int) -> tuple[int, int, int]:
        """``n`` blocks; the stage's input stays alive for the whole stage (held by the caller)."""
        step = self.basic if block == "basic" else self.bottleneck
        x0 = cin * h * h
        c, side, elems = step(cin, planes, stride, h, 0)
        if n > 1:
            # blocks 2..n are identical (same shapes, same stage input held): walk one and
            # add the others' sums; maxima (peaks, channels) do not change
            before = [getattr(self, f) for f in _ADDITIVE]
            c, side, elems = step(c, planes, 1, side, x0)
            for f, b in zip(_ADDITIVE, before):
                setattr(self, f, getattr(self, f) + (n - 2) * (getattr(self, f) - b))
        self.n_stages += 1
        return c, side, elems

    def head(self, c: int, h: int, classes: int) -> None:
        x = c * h * h
        self._out(c, inp=x, live=x + c)  # global average pooling
        self.flops += 2 * c * classes
        self.params += c * classes + classes
        self.n_linear += 1
        self._out(classes, inp=c, live=c + classes)  # linear (flatten is a view)
        self.final_channels = c
        self.final_feature_size = h


@lru_cache(maxsize=4096)
def arch_features(
    family: str, block: str, depth: int, width: float, early_downsample: bool, input_size: int, classes: int
) -> tuple[int, ...]:
    """Per-image figures of one network, in the order of ``_ARCH_FIELDS`` (elements, counts).

    Assumes a valid config (see :meth:`carb.families.space.Config.problem`).
    """
    w = _Walk()
    h = input_size
    if family == "cifar":
        per = 6 if block == "basic" else 9
        n = (depth - 2) // per
        c = channels(16, width)
        h, s = w.conv(3, c, 3, 2 if early_downsample else 1, h, 0)
        w.bn(c, s, s)
        w.inplace(s)
        plan = [(channels(16, width), n, 1), (channels(32, width), n, 2), (channels(64, width), n, 2)]
    else:
        block, counts = IMAGENET_LAYERS[depth]
        c = channels(64, width)
        h, s = w.conv(3, c, 7, 2, h, 0)
        w.bn(c, s, s)
        w.inplace(s)
        h = (h - 1) // 2 + 1  # max-pool 3x3/2, padding 1
        m = c * h * h
        w._out(m, inp=s, live=s + m)
        plan = [
            (channels(b, width), k, 1 if i == 0 else 2) for i, (b, k) in enumerate(zip((64, 128, 256, 512), counts))
        ]
    w.stem_output_size = h
    for planes, n, stride in plan:
        c, h, _ = w.stage(block, c, planes, n, stride, h)
    w.head(c, h, classes)
    return tuple(int(getattr(w, f)) for f in _ARCH_FIELDS)
