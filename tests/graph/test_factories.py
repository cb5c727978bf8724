"""A forward that makes tensors of its own (a detection head's anchor grid, a projection vector) is
captured: its factories run on the meta device with everything else, whichever tracer reads it."""

from __future__ import annotations

import torch
from torch import nn

import carb
from carb import graph


class Grid(nn.Module):
    """An FCOS/YOLO-style head decoding boxes on a grid it builds in its forward (torch.fx traces it)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 2, 1)
        self.reg = nn.Conv2d(16, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.conv(x)
        h, w = f.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack([xs, ys], -1).float().view(1, h * w, 2)
        r = self.reg(f).flatten(2).transpose(1, 2)
        return torch.cat([(r[..., :2].sigmoid() * 2 + grid) * 8, torch.exp(r[..., 2:]) * 8], -1)


class Split(nn.Module):
    """A YOLOv8-style C2f block (a list of a split, extended: torch.fx cannot iterate it) and a DFL projection."""

    def __init__(self) -> None:
        super().__init__()
        self.cv1 = nn.Conv2d(3, 32, 1)
        self.m = nn.ModuleList(nn.Conv2d(16, 16, 3, padding=1) for _ in range(2))
        self.box = nn.Conv2d(64, 64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).split(16, 1))
        y.extend(m(y[-1]) for m in self.m)
        b = self.box(torch.cat(y, 1))
        n, _, h, w = b.shape
        dist = b.view(n, 4, 16, h * w).softmax(2)
        return (dist * torch.arange(16, dtype=torch.float32).view(1, 1, 16, 1)).sum(2)


def test_a_grid_made_in_the_forward_is_captured_by_torch_fx() -> None:
    t = graph.capture(Grid().eval(), (1, 3, 64, 64))
    assert t.meta["capture"] == "torch.fx"
    assert {"arange", "stack"} <= set(t.layers["kind"])
    assert t.layers.iloc[-1]["out_shape"] == (1, 32 * 32, 4)


def test_a_tensor_made_in_the_forward_is_captured_by_torch_export_too() -> None:
    t = graph.capture(Split().eval(), (1, 3, 32, 32))
    assert t.meta["capture"] == "torch.export"
    assert t.layers.iloc[-1]["out_shape"] == (1, 4, 32 * 32)
    p = carb.predict_module(Split().eval(), (1, 3, 32, 32))
    assert p.latency_ms > 0 and p.flops == t.flops
