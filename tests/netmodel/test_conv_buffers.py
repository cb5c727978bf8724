"""Which kernels PyTorch runs convolutions of every rank through, and the working buffer of its own
ones: checked against the installed torch (its profiler, a fresh process's peak memory)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from carb import graph, netmodel

_NATIVE = {"aten::_slow_conv2d_forward", "aten::slow_conv3d_forward", "aten::slow_conv_transpose2d"}
_ONEDNN = "aten::mkldnn_convolution"


def _convs() -> list[tuple[nn.Module, tuple[int, ...]]]:
    """1-D, 3-D and transposed convolutions on both sides of ATen's rule (batch, kernel, stride, size)."""
    out: list[tuple[nn.Module, tuple[int, ...]]] = []
    for b, k, s, c in itertools.product([1, 2], [1, 3, 5], [1, 2], [4, 32]):
        out.append((nn.Conv1d(c, 8, k, s, k // 2), (b, c, 700)))
        out.append((nn.Conv3d(c, 8, k, s, k // 2), (b, c, 4, 12, 12)))
        out.append((nn.ConvTranspose2d(c, 8, k, s, k // 2), (b, c, 24, 24)))
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_the_rule_of_every_rank_matches_the_installed_torch(threads) -> None:
    """Each convolution is run once under the profiler; the kernel it ran is the one the rule names."""
    from torch.profiler import ProfilerActivity, profile

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ran, said = [], []
        for m, shape in _convs():
            m.eval()
            with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
                m(torch.randn(shape))
            names = {e.key for e in prof.key_averages()}
            if isinstance(m, nn.ConvTranspose2d):  # oneDNN's transposed path runs inside aten::_convolution
                assert "aten::_convolution" in names, names
                ran.append(not names & _NATIVE)
            else:
                assert names & (_NATIVE | {_ONEDNN}), names
                ran.append(_ONEDNN in names)
            said.append(bool(netmodel.onednn_conv(graph.capture(m, shape).layers, threads, all_ranks=True)[0]))
    finally:
        torch.set_num_threads(before)
    assert 0 < sum(ran) < len(ran)  # both paths occur in the grid
    assert said == ran
    # the 2-D rule alone (the layer models' latency feature) leaves these ranks out
    m, shape = _convs()[0]
    assert not netmodel.onednn_conv(graph.capture(m, shape).layers, 1)[0]


_PEAK = r"""
import json, sys
import torch
from torch import nn
torch.set_num_threads(1)

def status(key):
    return int(open("/proc/self/status").read().split(key + ":")[1].split()[0]) * 1024

out = []
for kind, c, o, shape in json.loads(sys.argv[1]):
    m = (nn.Conv3d(c, o, 3, 1, 1, bias=False) if kind == "3d" else nn.ConvTranspose2d(c, o, 3, 2, 1, bias=False)).eval()
    x = torch.randn(shape)
    with torch.inference_mode():
        m(x)  # first call: the kernel's own one-off allocations
        open("/proc/self/clear_refs", "w").write("5")  # the peak from here on
        before = status("VmRSS")
        y = m(x)
    out.append([status("VmHWM") - before, y.numel() * 4])
print(json.dumps(out))
"""


def test_a_native_convolution_adds_its_column_buffer_to_the_peak() -> None:
    """In a fresh process (glibc's default allocator maps and unmaps blocks this large), one call of a
    3-D or a transposed convolution that PyTorch runs itself raises the peak by its output and the
    buffer :func:`carb.netmodel.native_conv_columns` gives (tens of MB), within 10%."""
    cases = [["3d", 16, 8, [1, 16, 16, 56, 56]], ["transposed", 4, 256, [1, 4, 64, 64]]]
    rows = pd.concat(
        [
            graph.capture(
                nn.Conv3d(c, o, 3, 1, 1) if k == "3d" else nn.ConvTranspose2d(c, o, 3, 2, 1), tuple(shape)
            ).layers
            for k, c, o, shape in cases
        ],
        ignore_index=True,
    )
    columns = netmodel.native_conv_columns(rows)
    assert (columns > 20e6).all(), columns  # both run natively and unfold tens of MB
    try:
        open("/proc/self/clear_refs").close()
    except OSError:
        pytest.skip("no /proc/self/clear_refs: the peak cannot be reset here")
    p = subprocess.run([sys.executable, "-c", _PEAK, json.dumps(cases)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for (peak, out_bytes), buffer in zip(json.loads(p.stdout), columns):
        assert peak == pytest.approx(out_bytes + buffer, rel=0.1)


def test_the_network_model_adds_the_buffer_where_it_raises_the_peak() -> None:
    """A 3-D stem PyTorch runs natively: its buffer over the live activations is added to the memory
    answer once (MB), on top of the same terms a network without it gets."""

    class Clip(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.head = nn.Conv3d(3, 8, 3, 1, 1), nn.Conv3d(8, 8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.stem(x))

    table = graph.capture(Clip(), (1, 3, 8, 64, 64))
    sample = netmodel.load(netmodel.resolve("layers-cpu-avx2-1t")).layer
    row, _ = netmodel.network_row(table, sample)
    columns = netmodel.native_conv_columns(table.layers)
    assert columns[0] == 3 * 27 * 8 * 64 * 64 * 4 and columns[1] == 0  # the 1x1x1 one unfolds nothing
    live = table.layers["live_bytes"].to_numpy(float)
    assert row["work_buffer_bytes"] == pytest.approx(max(live[0] + columns[0] - table.peak_live_bytes, 0.0))
    assert row["work_buffer_bytes"] > 0
    rows = pd.DataFrame([row])
    nm = netmodel.NetModel(sample, [1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 30.0], {})
    without = rows.assign(work_buffer_bytes=0.0)
    added = nm.predict_rows(rows)["memory_mb"].iloc[0] - nm.predict_rows(without)["memory_mb"].iloc[0]
    assert added == pytest.approx(row["work_buffer_bytes"] / 1e6)


def test_the_latency_feature_reads_every_rank_from_version_4() -> None:
    """A 3-D convolution on few frames runs natively, on many through oneDNN: the ``onednn`` feature of
    version 4 says which, version 3's (2-D convolutions alone) leaves both at 0."""
    from carb.netmodel.layers import _FEATURES_BY_VERSION, _x

    few, many = (graph.capture(nn.Conv3d(8, 8, 3, 1, 1), (1, 8, d, 28, 28)).layers for d in (4, 128))
    rows = pd.concat([few, many], ignore_index=True)
    col = {v: _FEATURES_BY_VERSION[v].index("onednn") for v in (3, 4)}
    assert list(_x(rows, ["conv3d"], version=4)[:, col[4]]) == [0.0, 1.0]
    assert list(_x(rows, ["conv3d"], version=3)[:, col[3]]) == [0.0, 0.0]
    assert netmodel.FEATURES_VERSION >= 4


def test_version_5_reads_depth_kernel_depth_and_output_channels_per_group() -> None:
    """Version 5 tells apart two 3-D convolutions of equal height and width (one deeper, with a shallower
    kernel) by depth and kernel depth, and two grouped convolutions by their output channels per group."""
    from carb.netmodel.layers import _FEATURES_BY_VERSION, _x

    rows = pd.concat(
        [
            graph.capture(nn.Conv3d(8, 8, (3, 3, 3), 1, 1), (1, 8, 4, 14, 14)).layers,
            graph.capture(nn.Conv3d(8, 8, (1, 3, 3), 1, (0, 1, 1)), (1, 8, 16, 14, 14)).layers,
            graph.capture(nn.Conv2d(64, 64, 3, 1, 1, groups=8), (1, 64, 14, 14)).layers,
            graph.capture(nn.Conv2d(64, 128, 3, 1, 1, groups=8), (1, 64, 14, 14)).layers,
        ],
        ignore_index=True,
    )
    names = _FEATURES_BY_VERSION[5]
    x = _x(rows, [], version=5)
    d, kd, cout_g = (x[:, names.index(n)] for n in ("l_d", "l_kd", "l_cout_g"))
    assert d[0] < d[1] and kd[0] > kd[1]
    assert cout_g[2] == np.log2(9) and cout_g[3] == np.log2(17)
    assert _x(rows, [], version=4).shape[1] == len(_FEATURES_BY_VERSION[4]) == len(names) - 3
