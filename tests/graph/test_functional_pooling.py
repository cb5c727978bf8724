"""Functional pooling and activations capture as their module forms do: ``F.max_pool2d(x, 3, 2, 1)``
is a 3x3 pooling of stride 2 (Inception's pools are functional), ``F.relu(x, True)`` is in place."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from carb import graph


class Modules(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.avgpool = nn.AvgPool2d(kernel_size=3, stride=1, padding=1)
        self.pool5 = nn.MaxPool2d(5)

    def forward(self, x):
        x = self.relu(self.conv(x))
        return self.pool5(self.avgpool(self.maxpool(x)))


class Functional(Modules):
    def forward(self, x):
        x = F.relu(self.conv(x), True)
        x = F.max_pool2d(x, 3, 2, 1)
        x = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)
        return F.max_pool2d(x, 5)  # no stride: the kernel's


COLUMNS = ["op", "out_shape", "kernel", "kernel_w", "stride", "padding", "flops", "inplace"]


@pytest.mark.parametrize("via", ["fx", "export"])
def test_functional_pooling_reads_kernel_stride_and_padding(via: str) -> None:
    x = torch.randn(1, 3, 40, 40)
    want = graph.capture(Modules(), x, via=via).layers[COLUMNS].reset_index(drop=True)
    got = graph.capture(Functional(), x, via=via).layers[COLUMNS].reset_index(drop=True)
    assert got.to_dict("records") == want.to_dict("records")
    pools = got[got.op.isin(["maxpool", "avgpool"])]
    assert pools[["kernel", "stride", "padding"]].values.tolist() == [[3, 2, 1], [3, 1, 1], [5, 5, 0]]
