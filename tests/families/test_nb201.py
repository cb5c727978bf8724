"""carb.families.nb201: the NAS-Bench-201 family's networks, configs and closed-form features.

The features must equal what torch counts on the built modules, exactly: FLOPs
(FlopCounterMode on the meta device), parameters and state bytes, module counts, and the
activation figures of a tracker of the tensors an eager forward allocates.

The network follows NAS-Bench-201's inference model (D-X-Y/AutoDL-Projects
``cell_operations.py`` / ``TinyNetwork`` / ``InferCell``, read as reference): stem 3x3 conv
+ BN; 3 x 5 cells at 16/32/64 channels; ``ResNetBasicblock`` reductions (ReLUConvBN x 2,
shortcut AvgPool2d(2) + 1x1 conv); ``lastact`` BN + ReLU, global pooling, linear.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from carb import families
from carb.families import nb201
from carb.families.arch import dtype_of
from carb.families.nb201 import OPS, NB201Config
from carb.families.space import SpaceError
from tests._helpers import assert_activation_figures, assert_flops_equal_torch, assert_module_figures, meta_input

torch.set_num_threads(1)


def _sample() -> list[NB201Config]:
    """Seeded random cells, hand-made extremes (all none, all skip, all conv, a dead node),
    the three input variants, other batches and precisions."""
    rng = np.random.default_rng(0)
    out = [NB201Config(tuple(OPS[i] for i in rng.integers(0, 5, 6))) for _ in range(16)]
    out += [
        NB201Config(("none",) * 6),
        NB201Config(("skip_connect",) * 6, classes=100),
        NB201Config(("nor_conv_3x3",) * 6, precision="fp16", batch=2),
        NB201Config(("avg_pool_3x3",) * 6, input_size=16, classes=120),
        NB201Config(("none", "none", "nor_conv_1x1", "skip_connect", "none", "avg_pool_3x3")),  # node 1 zero
        NB201Config(("nor_conv_1x1", "none", "none", "none", "none", "nor_conv_3x3"), precision="bf16"),
        NB201Config(("skip_connect", "none", "skip_connect", "none", "none", "skip_connect"), batch=3),
        NB201Config(tuple(OPS[i] for i in (4, 3, 2, 1, 0, 3)), input_size=20, classes=7, batch=2),
    ]
    return out


SAMPLE = _sample()


def _module(cfg: NB201Config) -> nn.Module:
    with torch.device("meta"):
        return nb201.build(cfg).to(dtype_of(cfg.precision))


FEATURES = nb201.features  # the ``table`` fixture (tests/conftest.py): FEATURES(SAMPLE)


def test_flops_and_output_shape_equal_torch(table: pd.DataFrame) -> None:
    assert_flops_equal_torch(SAMPLE, table, _module)


def test_params_and_module_counts_equal_the_module(table: pd.DataFrame) -> None:
    for cfg, row in zip(SAMPLE, table.itertuples()):
        model = _module(cfg)
        mods = assert_module_figures(row, model, cfg.label())
        assert row.n_blocks == sum(isinstance(m, (nb201.Cell, nb201.ReductionBlock)) for m in mods) == 17
        assert row.final_channels == model.classifier.in_features == 64
        assert [getattr(row, f"n_{op}") for op in OPS] == [cfg.edges.count(op) for op in OPS]
        # every BN is affine and tracks running statistics, as NAS-Bench-201's inference model
        assert all(m.affine and m.track_running_stats for m in mods if isinstance(m, nn.BatchNorm2d))


def _hand_params(edges: tuple[str, ...], classes: int) -> int:
    """Parameters of NAS-Bench-201's inference network, by hand from cell_operations.py:
    stem conv + BN; per cell edge ReLUConvBN = conv + affine BN (none, skip, pool: 0);
    ResNetBasicblock = two 3x3 ReLUConvBN + a 1x1 shortcut conv; lastact BN; linear."""
    total = 3 * 16 * 9 + 2 * 16
    for c in (16, 32, 64):
        k = {"nor_conv_1x1": 1, "nor_conv_3x3": 9}
        total += 5 * sum(k[op] * c * c + 2 * c for op in edges if op in k)
    for cin, cout in ((16, 32), (32, 64)):
        total += 9 * cin * cout + 2 * cout + 9 * cout * cout + 2 * cout + cin * cout
    return total + 2 * 64 + 64 * classes + classes


def test_param_counts_follow_the_reference_by_hand() -> None:
    cfgs = SAMPLE + [
        NB201Config(
            nb201.parse_arch_str(
                "|avg_pool_3x3~0|+|nor_conv_1x1~0|skip_connect~1|+|nor_conv_1x1~0|skip_connect~1|skip_connect~2|"
            )
        )
    ]
    got = nb201.features(cfgs)
    assert got["params"].tolist() == [_hand_params(c.edges, c.classes) for c in cfgs]
    # NAS-Bench-201 architecture 0 on CIFAR-10, pinned (the hand count above gives the same)
    assert got["params"].iloc[-1] == 129306
    # none and skip edges count nothing at all: no FLOPs, parameters, operators or tensors
    two = nb201.features([NB201Config(("none",) * 6), NB201Config(("skip_connect",) * 6)])
    for c in ("params", "flops", "n_conv", "n_bn"):
        assert two[c].iloc[0] == two[c].iloc[1], c
    assert (two["n_conv"].iloc[0], two["n_bn"].iloc[0]) == (1 + 2 * 3, 1 + 2 * 2 + 1)


@pytest.mark.parametrize("cfg", SAMPLE[::2] + SAMPLE[-8:], ids=lambda c: c.label())
def test_activation_figures_equal_a_tensor_tracker(cfg: NB201Config) -> None:
    row = nb201.features(cfg).iloc[0]
    assert_activation_figures(row, _module(cfg), meta_input(cfg))


def test_every_cell_of_the_space_counts_like_the_module() -> None:
    # all 15,625 cells at once (vectorized), spot-checked against modules for 40 of them
    cells = list(itertools.product(OPS, repeat=6))
    frame = pd.DataFrame(cells, columns=list(nb201.EDGE_COLUMNS))
    got = nb201.features(frame)
    assert len(got) == 15625 and got["flops"].min() > 0
    for i in np.random.default_rng(1).choice(len(cells), 40, replace=False):
        cfg = NB201Config(cells[i])
        module = _module(cfg)  # built once: a forward leaves its parameters as they are
        with FlopCounterMode(display=False) as counter, torch.inference_mode():
            module(meta_input(cfg))
        assert got["flops"].iloc[i] == counter.get_total_flops()
        assert got["params"].iloc[i] == sum(p.numel() for p in module.parameters())


def test_none_edges_contribute_nothing_and_dead_nodes_are_zero() -> None:
    torch.manual_seed(0)
    full = NB201Config(("nor_conv_3x3", "skip_connect", "nor_conv_1x1", "avg_pool_3x3", "none", "nor_conv_3x3"))
    model = nb201.build(full)
    cell = model.cells[0]
    assert cell.inputs == (((0, 0),), ((1, 0), (2, 1)), ((3, 0), (5, 2)))
    x = torch.randn(1, 16, 8, 8)
    with torch.inference_mode():
        n1 = cell.ops[0](x)
        n2 = x + cell.ops[2](n1)
        want = cell.ops[3](x) + cell.ops[5](n2)
        assert torch.allclose(cell(x), want)
    dead = nb201.build(NB201Config(("none",) * 6)).cells[0]
    with torch.inference_mode():
        assert dead(x).abs().sum() == 0 and dead(x).shape == x.shape


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_real_forward(precision: str) -> None:
    cfg = NB201Config(
        ("nor_conv_3x3", "avg_pool_3x3", "skip_connect", "nor_conv_1x1", "none", "nor_conv_3x3"),
        input_size=16,
        batch=2,
        precision=precision,
        classes=120,
    )
    torch.manual_seed(0)
    model = nb201.build(cfg).to(dtype_of(precision))
    with torch.inference_mode():
        y = model(torch.randn(2, 3, 16, 16).to(dtype_of(precision)))
    assert y.shape == (2, 120) and y.dtype == dtype_of(precision)
    assert torch.isfinite(y.float()).all() and y.float().abs().sum() > 0
    assert not model.training


def test_config_id_is_stable_and_round_trips() -> None:
    cfg = NB201Config(("avg_pool_3x3", "nor_conv_1x1", "skip_connect", "nor_conv_1x1", "skip_connect", "skip_connect"))
    assert cfg.config_id == "b1ad9ab54df945a2"  # pinned: ids are keys in stores and datasets
    assert cfg.canonical().startswith('{"batch":1,"classes":10,"edges":["avg_pool_3x3"')
    assert '"family":"nb201"' in cfg.canonical()
    assert NB201Config.from_dict(cfg.to_dict()) == cfg
    same = NB201Config(list(np.array(cfg.edges)), input_size=np.int64(32), batch=1.0)
    assert same == cfg and same.config_id == cfg.config_id and hash(same) == hash(cfg)
    assert NB201Config(cfg.arch_str) == cfg
    assert NB201Config(cfg.edges, classes=100).config_id != cfg.config_id
    assert cfg.label() == "nb201-421211-i32-c10-b1-fp32"
    # the family record: rows in and out, registry dispatch, features through carb.families.features
    row = families.to_row(cfg)
    assert row["family"] == "nb201" and row["edge_0"] == "avg_pool_3x3"
    assert families.config_from_row(row) == cfg
    assert families.config_from_row({"family": "nb201", "arch_str": cfg.arch_str}) == cfg
    assert families.of(cfg).name == "nb201"
    from carb.families.arch import build
    from carb.families.features import compute

    assert isinstance(build(cfg), nb201.NB201Net)
    assert compute([cfg])["flops"].iloc[0] == nb201.features(cfg)["flops"].iloc[0]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"edges": ("none",) * 5}, "edges: expected 6 operations"),
        ({"edges": ("none",) * 5 + ("max_pool_3x3",)}, r"edges\[5\]: unknown operation 'max_pool_3x3'"),
        ({"edges": "|none~0|+|none~0|"}, "arch_str: .* is not a NAS-Bench-201 cell"),
        ({"edges": ("none",) * 6, "precision": "int8"}, "precision: unknown value 'int8'"),
        ({"edges": ("none",) * 6, "input_size": 30}, "input_size: 30 must be a positive multiple of 4"),
        ({"edges": ("none",) * 6, "batch": 0}, "batch: 0 must be >= 1"),
        ({"edges": ("none",) * 6, "classes": 0}, "classes: 0 must be >= 1"),
        # the limits every family shares (carb.families._base.run_limits_problem), as the ResNets refuse them
        ({"edges": ("none",) * 6, "input_size": 8196}, "input_size: 8196 is above the limit 8,192"),
        ({"edges": ("none",) * 6, "batch": 2**50 + 1}, "batch: 1125899906842625 is above the limit"),
        ({"edges": ("none",) * 6, "classes": 10**6 + 1}, "classes: 1000001 is above the limit 1,000,000"),
    ],
)
def test_validation_errors_are_one_line(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        NB201Config(**kwargs)
    assert "\n" not in str(info.value) and isinstance(info.value, SpaceError)


def test_features_errors_are_one_line_and_frames_agree(table: pd.DataFrame) -> None:
    frame = nb201.to_frame(SAMPLE)
    pd.testing.assert_frame_equal(nb201.features(frame), table)
    for bad, match in [
        (frame.drop(columns="edge_3"), "missing column edge_3"),
        (frame.assign(edge_1=["conv"] + list(frame.edge_1[1:])), "edge_1: unknown operation 'conv'"),
        (frame.assign(batch=[1, 0] + [1] * (len(frame) - 2)), "row 1: batch: 0 must be >= 1"),
        (frame.assign(input_size=[32, 32, 18] + [32] * (len(frame) - 3)), "row 2: input_size: 18"),
    ]:
        with pytest.raises(ValueError, match=match) as info:
            nb201.features(bad)
        assert "\n" not in str(info.value)
    for col, value in (("batch", 2**50 + 1), ("input_size", 8196), ("classes", 10**6 + 1)):
        with pytest.raises(ValueError, match=f"row 0: {col}: {value} must be .* <= ") as info:
            nb201.features(frame.head(1).assign(**{col: value}))
        assert "\n" not in str(info.value)


def test_features_at_the_batch_limit_do_not_overflow() -> None:
    # int64 would wrap silently at batch 2^50: the integer columns turn float64, values exact
    # to 16 significant digits, and each is the batch-1 figure times the batch
    cfg = NB201Config(("nor_conv_3x3",) * 6)
    one = nb201.features(cfg)
    big = nb201.features(NB201Config(cfg.edges, batch=2**50))
    assert big["flops"].dtype == np.float64
    for c in ("flops", "activation_bytes", "input_bytes", "live_activation_bytes"):
        assert big[c].iloc[0] > 0
        assert big[c].iloc[0] == pytest.approx(float(one[c].iloc[0]) * 2**50, rel=1e-12)
    assert big["params"].iloc[0] == one["params"].iloc[0]


# --- measured on this CPU through a campaign, like every family --------------------------


@pytest.mark.slow
@pytest.mark.shares_cpu  # statuses and the stored configs: no timing is checked
def test_nb201_is_measured_and_stored(tmp_path) -> None:
    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.families import space
    from carb.measure import get_backend
    from carb.measure.base import Protocol

    fast = Protocol(min_repeats=3, max_repeats=10, max_time_s=0.1, warmup=1, warmup_s=0.0, timeout_s=120.0)
    cfgs = [
        NB201Config(
            ("nor_conv_3x3", "skip_connect", "none", "avg_pool_3x3", "nor_conv_1x1", "none"), input_size=16, classes=120
        ),
        NB201Config(("none",) * 6, batch=2),
    ]
    with get_backend("cpu", threads=1, protocol=fast) as b, Store(tmp_path / "s.duckdb") as store:
        r = run_campaign(cfgs, b, store)
        assert r.by_status == {"ok": 2}
        rows = store.measurements()
    assert set(rows.family) == {"nb201"} and (rows.latency_ms > 0).all() and (rows.memory_mb > 0).all()
    assert space.configs_from_frame(rows) == cfgs  # the store gives the configs back
    assert rows["edge_0"].tolist() == ["nor_conv_3x3", "none"]


# --- the nb201 dataset ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def edgegpu() -> pd.DataFrame:
    from carb import datasets

    return datasets.load("nb201", device="edgegpu")


def test_dataset_rows_units_and_ids(edgegpu: pd.DataFrame) -> None:
    from carb import datasets
    from carb.datasets import nb201 as d

    assert len(edgegpu) == 3 * 15625 and set(edgegpu.dataset) == {"cifar10", "cifar100", "ImageNet16-120"}
    assert (edgegpu.platform == edgegpu.device).all() and (edgegpu.platform == "edgegpu").all()
    # energy is J per forward: HW-NAS-Bench's README, arch 0 on cifar10: 24.226614330768584 mJ, 5.807... ms
    a0 = edgegpu[(edgegpu.arch_idx == 0) & (edgegpu.dataset == "cifar10")].iloc[0]
    assert a0.energy_j == pytest.approx(24.226614330768584e-3, rel=1e-12)
    assert a0.latency_ms == pytest.approx(5.807418537139893, rel=1e-12)
    assert a0.measured and a0.source == "HW-NAS-Bench" and a0.status == "ok"
    # config ids are those of the family's configs; the space nb201 names the CIFAR-10 rows
    cfg = NB201Config(a0.arch_str, input_size=32, classes=10)
    assert a0.config_id == cfg.config_id and a0.flops == nb201.features(cfg)["flops"].iloc[0]
    assert (edgegpu.energy_j > 0).all() and edgegpu.memory_mb.isna().all()
    assert len(d.platforms()) == 29 and "titan_rtx_b256" in d.platforms()
    assert d.help_device("titan_rtx_b256") == "titan_rtx_256" and d.platform_of("1080ti_32") == "1080ti_b32"
    names = {i.name: i for i in datasets.list()}
    assert names["nb201"].rows == 640_625
    assert datasets.check(edgegpu).empty  # memory is missing for a stated reason, not a problem


def test_dataset_other_platforms_and_bad_names() -> None:
    from carb import datasets

    gpu = datasets.load("nb201", device="titan_rtx_b256", features=False)
    assert len(gpu) == 15625 and (gpu.batch == 256).all() and gpu.energy_j.isna().all()
    assert gpu.energy_missing_reason.notna().all()
    tpu = datasets.load("nb201", device="edgetpu", features=False)
    assert (tpu.status == "unsupported").sum() == 3 * 4699 and tpu.loc[tpu.status != "ok", "latency_ms"].isna().all()
    est = datasets.load("nb201", device="eyeriss", features=False)
    assert not est.measured.any() and est.energy_j.notna().all()
    with pytest.raises(datasets.DatasetError, match=r"unknown platform 'jetson' \(platforms: 1080ti_b1, ") as info:
        datasets.load("nb201", device="jetson")
    assert "\n" not in str(info.value)


def test_help_protocol_trims_like_helps_loader() -> None:
    from carb.datasets import nb201 as d
    from carb.studies.nb201 import fewshot_help_nb201

    r = fewshot_help_nb201("raspi4", seed=0)
    # HELP's loader: 1,000 test archs -> sorted positions [100, 900); 10 reference + 10 drawn
    assert r["test_archs"] == 800 and r["k"] == 20 and r["device"] == "raspi4"
    assert set(d.reference_arch_ids()) <= set(r["measured_ids"])
    drawn = set(r["measured_ids"]) - set(d.reference_arch_ids())
    assert len(drawn) == 10 and all(i < 900 for i in drawn)
    assert 0.8 < r["spearman"] <= 1.0
    with pytest.raises(ValueError, match="device 'jetson' not in nb201"):
        fewshot_help_nb201("jetson")


def test_evaluate_energy_with_the_power_latency_baseline(edgegpu: pd.DataFrame) -> None:
    from carb.model.evaluation import evaluate, split

    # grouped split: every input variant of a cell on one side
    sides = split(edgegpu, "grouped", 0)
    tr, te = set(edgegpu.arch_idx.iloc[sides["train"]]), set(edgegpu.arch_idx.iloc[sides["test"]])
    assert not tr & te and 0.15 < len(te) / 15625 < 0.25
    small = edgegpu[edgegpu.arch_idx < 1500]
    res = evaluate(small, "grouped", ["flops-linear", "power-latency"], seed=0)
    assert set(res["results"]) == {"flops-linear", "power-latency"}
    assert res["power_latency"]["base"] == "flops-linear" and 4.0 < res["power_latency"]["power_w"] < 5.0
    for m in res["results"].values():
        assert {"energy_j", "latency_ms"} <= set(m) and 0 < m["energy_j"]["mape"] < 1
    # the baseline's latency is its base model's, unchanged; its energy differs from the base's
    assert res["results"]["power-latency"]["latency_ms"] == res["results"]["flops-linear"]["latency_ms"]
    assert res["results"]["power-latency"]["energy_j"] != res["results"]["flops-linear"]["energy_j"]


@pytest.mark.parametrize(
    "args, match",
    [
        (
            ["evaluate", "--data", "nb201", "--platform", "jetson"],
            "error: nb201: unknown platform 'jetson' (platforms: 1080ti_b1,",
        ),
        (
            ["evaluate", "--data", "nb201", "--platform", "raspi4", "--budget", "energy_j=0.01"],
            "error: --budget energy_j: nb201 on raspi4 has no energy_j (targets there: latency_ms)",
        ),
        (
            ["fewshot", "--space", "nb201", "--platform", "jetson"],
            "error: device 'jetson' not in nb201 (devices: 1080ti_1,",
        ),
        # the energy baseline asked for by name where there is no energy (it left an empty table)
        (
            ["evaluate", "--data", "nb201", "--platform", "raspi4", "--preset", "power-latency"],
            "error: --preset power-latency: nb201 on raspi4 has no energy_j (targets there: latency_ms); the baseline",
        ),
        (
            ["evaluate", "--data", "cpu-1t", "--preset", "fast", "--preset", "power-latency"],
            "error: --preset power-latency: cpu-1t has no energy_j (targets there: latency_ms, memory_mb)",
        ),
    ],
)
def test_cli_bad_input_is_one_line(args: list[str], match: str, cli) -> None:
    code, _, err = cli(*args)
    assert code == 2 and err.startswith(match) and err.count("\n") == 1, err[-500:]


def test_cli_validate_with_a_dataset_of_several_platforms_needs_one(tmp_path, cli) -> None:
    out = tmp_path / "s"
    (out).mkdir()
    # the smallest screening output validate reads: summary, shortlist and feasible sets
    pd.DataFrame({"config_id": []}).to_parquet(out / "shortlist.parquet")
    pd.DataFrame({"config_id": []}).to_parquet(out / "feasible.parquet")
    (out / "summary.json").write_text(
        '{"budgets": {"energy_j": 0.02}, "objectives": ["min:energy_j"], "space": "nb201"}'
    )
    code, _, err = cli("validate", "--screen", out, "--data", "nb201")
    assert code == 2 and err.startswith("error: --data nb201 holds 29 platforms (1080ti_b1,")
    assert err.rstrip().endswith("choose one with --platform") and err.count("\n") == 1


def _cell_reference(ops: tuple[int, ...]) -> list[float]:
    """cell_features of one cell by a plain graph walk (path enumeration), written apart from
    the vectorized version."""
    edges = [(src, dst, op) for (dst, src), op in zip(nb201.EDGES, ops) if op != 0]

    def paths(node: int) -> list[list[tuple[int, int, int]]]:  # input -> node, as edge lists
        if node == 0:
            return [[]]
        return [p + [e] for e in edges if e[1] == node for p in paths(e[0])]

    full = paths(3)
    eff = {e for p in full for e in p}
    conv = lambda e: e[2] in (2, 3)  # noqa: E731
    return [float(sum(e[2] == op for e in eff)) for op in (1, 2, 3, 4)] + [
        float(len(eff)),
        float(max((len(p) for p in full), default=0)),
        float(max((sum(map(conv, p)) for p in full), default=0)),
        float(sum(conv(e) for e in edges if e not in eff)),
        float(len(edges) - len(eff)),
    ]


def test_cell_features_of_every_cell_equal_a_graph_walk() -> None:
    codes = np.array(list(itertools.product(range(5), repeat=6)))
    got = nb201.cell_features(codes)
    assert got.shape == (15625, len(nb201.CELL_FEATURE_COLUMNS))
    want = np.array([_cell_reference(tuple(c)) for c in codes.tolist()])
    np.testing.assert_array_equal(got, want)
    # a row of another family (negative codes) is -1 throughout; a bad shape is one line
    assert (nb201.cell_features(np.full((1, 6), -1)) == -1).all()
    with pytest.raises(ValueError, match=r"codes of shape \(n, 6\) expected"):
        nb201.cell_features(np.zeros((2, 5)))


def test_nb201_preset_derives_cell_inputs_and_round_trips(edgegpu: pd.DataFrame, tmp_path) -> None:
    from carb.model import CARB, load, save
    from carb.model.learners import fit_learner

    small = edgegpu[edgegpu.arch_idx < 600]
    model = CARB(preset="nb201", random_state=0, learner_params={"lgbm": {"n_estimators": 40}}).fit(small)
    lgbm = model.models_["energy_j"].learners["lgbm"]
    assert lgbm.name == "nb201-cell" and lgbm.kind == "lightgbm"
    # the derived columns are read: the trees split on them
    used = set(lgbm.inner.booster.trees_to_dataframe()["split_feature"].dropna())
    n_in = len(model.input_columns_)  # energy reads no upstream target: derived columns come next
    assert any(int(f.split("_")[1]) >= n_in for f in used if f.startswith("Column_"))
    test = edgegpu[(edgegpu.arch_idx >= 600) & (edgegpu.arch_idx < 700)]
    pred = model.predict(test)
    save(model, tmp_path / "m")
    back = load(tmp_path / "m").predict(test)
    pd.testing.assert_frame_equal(pred, back)
    assert 0 < np.mean(np.abs(pred.energy_j / test.energy_j - 1)) < 0.2
    X, y = np.zeros((4, 3)), np.zeros(4)
    with pytest.raises(ValueError, match="derive='nb201-cell': the inputs lack column edge_0"):
        fit_learner("lightgbm", {"derive": "nb201-cell"}, X, y, ["a", "b", "c"])
    with pytest.raises(ValueError, match="derive: unknown value 'x'"):
        fit_learner("lightgbm", {"derive": "x"}, X, y, ["a", "b", "c"])
    with pytest.raises(ValueError, match="only tree learners derive inputs, not 'linear'"):
        fit_learner("linear", {"derive": "nb201-cell"}, X, y, ["a", "b", "c"])
    from carb.model.learners import load_learner

    for name, index in (("nope", [0] * 6), ("nb201-cell", [0] * 5), ("nb201-cell", [0, 1, 2, 3, 4, -5])):
        with pytest.raises(ValueError, match="malformed derive"):
            load_learner(tmp_path, {"kind": "lightgbm", "file": "x.txt", "derive": name, "derive_index": index})


def test_catboost_learner_reads_edges_as_categories_and_round_trips(
    edgegpu: pd.DataFrame, tmp_path, monkeypatch
) -> None:
    pytest.importorskip("catboost")
    from carb.model import CARB, BundleError, load, save
    from carb.model import learners as L

    monkeypatch.chdir(tmp_path)  # CatBoost must not leave a catboost_info/ folder behind
    small = edgegpu[edgegpu.arch_idx < 600]
    model = CARB(preset="nb201-cb", random_state=0, learner_params={"cb": {"iterations": 60}}).fit(small)
    cb = model.models_["energy_j"].learners["cb"]
    assert cb.name == "nb201-cell" and cb.kind == "catboost"
    # the six edge columns are CatBoost's categories (not numbers), at their input positions
    assert [model.input_columns_[i] for i in cb.inner.categorical] == list(nb201.EDGE_COLUMNS)
    assert cb.inner.model.get_cat_feature_indices() == cb.inner.categorical
    assert not (tmp_path / "catboost_info").exists()
    test = edgegpu[(edgegpu.arch_idx >= 600) & (edgegpu.arch_idx < 700)]
    pred = model.predict(test)
    save(model, tmp_path / "m")
    assert (tmp_path / "m" / "energy_j.cb.cbm").is_file()
    back = load(tmp_path / "m").predict(test)
    pd.testing.assert_frame_equal(pred, back)
    assert 0 < np.mean(np.abs(pred.energy_j / test.energy_j - 1)) < 0.2
    # a missing categorical input, a malformed manifest entry: one line each
    X, y = np.zeros((4, 3)), np.zeros(4)
    with pytest.raises(ValueError, match="categorical: the inputs lack column edge_0"):
        L.fit_learner("catboost", {"categorical": ["edge_0"]}, X, y, ["a", "b", "c"])
    with pytest.raises(ValueError, match="malformed categorical_index"):
        L.load_learner(tmp_path, {"kind": "catboost", "file": "x.cbm", "categorical_index": [-1]})

    # without the package (import fails): fitting says what to install; a saved bundle is
    # refused in one line
    monkeypatch.setitem(sys.modules, "catboost", None)
    with pytest.raises(ValueError, match=r"pip install 'carb\[catboost\]'"):
        L.fit_learner("catboost", {}, X, y, ["a", "b", "c"])
    with pytest.raises(BundleError, match=r"m: learner kind 'catboost' needs the catboost package"):
        load(tmp_path / "m")


def test_evaluate_says_when_the_energy_baseline_did_not_run() -> None:
    """In the CLI's default list on rows without energy (our CPUs), power-latency is not
    run; the table says so instead of leaving it out unsaid."""
    from rich.console import Console

    from carb import datasets
    from carb.cli.evaluate import print_results
    from carb.model.evaluation import evaluate

    res = evaluate(datasets.load("cpu-1t").head(600), "grouped", ["flops-linear", "power-latency"], seed=0)
    assert set(res["results"]) == {"flops-linear"} and "power-latency" in res["skipped"]
    console = Console(record=True, width=150)
    print_results(res, console)
    assert "power-latency: not run (needs energy_j and latency_ms in the data)" in console.export_text()
