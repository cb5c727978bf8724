"""Pluggable network families (carb.families): a family defined in this file alone goes
through config tables, the builder, the features, a real CPU measurement and the store;
FBNet does the same as a built-in; stores of schema version 1 still open."""

import hashlib
import json
import re
from dataclasses import asdict, dataclass

import duckdb
import pandas as pd
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from carb import families
from carb.campaign.runner import run_campaign
from carb.campaign.store import MEASUREMENT_COLUMNS, Store
from carb.families import arch, features, space
from carb.families.fbnet import FBNetConfig
from carb.families.space import SpaceError
from carb.measure import get_backend
from carb.measure.base import Measurement, Protocol

FAST = Protocol(min_repeats=3, max_repeats=10, max_time_s=0.1, warmup=1, warmup_s=0.0, timeout_s=120.0)


# -- a whole family in a few lines: plain stacks of 3x3 convolutions ------------------------


@dataclass(frozen=True)
class PlainConfig:
    """A toy family for the tests: ``layers`` 3x3 convolutions of ``channels`` channels."""

    layers: int = 2
    channels: int = 8
    input_size: int = 16
    batch: int = 1
    precision: str = "fp32"

    def to_dict(self):
        return {"family": "plain", **asdict(self)}

    @property
    def config_id(self):
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def label(self):
        return f"plain-l{self.layers}-c{self.channels}-i{self.input_size}-b{self.batch}-{self.precision}"


def _plain_build(cfg):
    convs = [
        torch.nn.Conv2d(3 if i == 0 else cfg.channels, cfg.channels, 3, padding=1, bias=False)
        for i in range(cfg.layers)
    ]
    return torch.nn.Sequential(*convs).eval()


def _plain_features(df):
    c, n, s, b = (df[k].astype("int64") for k in ("channels", "layers", "input_size", "batch"))
    params = 9 * c * (3 + (n - 1) * c)
    return df.assign(params=params, flops=2 * params * s * s * b, flops_per_image=2 * params * s * s)


PLAIN = families.Family(
    name="plain",
    config_type=PlainConfig,
    from_row=lambda r: PlainConfig(**{k: r[k] for k in ("layers", "channels", "input_size", "batch", "precision")}),
    to_row=lambda c: c.to_dict(),
    build=_plain_build,
    features=_plain_features,
    description="test-only",
)


@pytest.fixture
def plain():
    families.register(PLAIN)
    yield PLAIN
    families._REGISTRY.pop("plain", None)


def test_registry_and_errors(plain):
    assert {"cifar", "imagenet", "fbnet", "plain"} <= set(families.names())
    with pytest.raises(ValueError, match="already registered"):
        families.register(PLAIN)
    known = ", ".join(families.names())  # every registered family, named in the error
    assert "plain" in known and "cifar" in known
    with pytest.raises(SpaceError, match=re.escape(f"family: unknown value 'nope' (known: {known})")):
        families.get("nope")
    with pytest.raises(SpaceError, match="not a config of a registered family"):
        families.of(object())


def test_a_family_goes_through_tables_builder_and_features(plain):
    cfgs = [PlainConfig(), PlainConfig(layers=3, batch=4)]
    mixed = [*list(space.load("tiny"))[:2], *cfgs, FBNetConfig(("k3_e3",) * 22)]
    df = features.compute(mixed)
    assert list(df.family) == ["cifar", "cifar", "plain", "plain", "fbnet"]
    assert space.configs_from_frame(df) == mixed  # round trip through a table
    # the family's features keep the contracts: FLOPs as FlopCounterMode counts, exact params
    for cfg, row in zip(cfgs, df.iloc[2:4].itertuples()):
        model = arch.build(cfg)
        assert sum(p.numel() for p in model.parameters()) == row.params
        with FlopCounterMode(display=False) as fc:
            model(torch.zeros(cfg.batch, 3, cfg.input_size, cfg.input_size))
        assert fc.get_total_flops() == row.flops
    # ResNet rows are computed as in a ResNet-only table, whatever else is in the table
    pd.testing.assert_frame_equal(
        df.iloc[:2].reset_index(drop=True)[features.FEATURE_COLUMNS],
        features.compute(mixed[:2])[features.FEATURE_COLUMNS],
        check_dtype=False,
    )


@pytest.mark.slow
@pytest.mark.shares_cpu  # statuses and the stored configs: no timing is checked
def test_families_are_measured_and_stored(plain, tmp_path):
    cfgs = [PlainConfig(channels=4), FBNetConfig(("skip",) * 22, input_size=16), *list(space.load("tiny"))[:1]]
    with get_backend("cpu", threads=1, protocol=FAST) as b, Store(tmp_path / "s.duckdb") as store:
        r = run_campaign(cfgs, b, store)
        assert r.by_status == {"ok": 3}
        rows = store.measurements()
    assert set(rows.family) == {"plain", "fbnet", "cifar"} and (rows.latency_ms > 0).all()
    assert rows.arch.isna().tolist() == [c.__class__.__name__ == "Config" for c in cfgs]
    assert space.configs_from_frame(rows) == cfgs  # the store gives the configs back
    assert rows.loc[rows.family == "fbnet", "layer_00"].tolist() == ["skip"]


def test_stores_of_schema_version_1_open_and_migrate(plain, tmp_path):
    path = tmp_path / "v1.duckdb"
    cols = ", ".join(f"{c} {t}" for c, t in MEASUREMENT_COLUMNS if c != "arch")  # as carb 0.1 wrote them
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, started_at TIMESTAMPTZ, platform VARCHAR, "
        "device VARCHAR, command VARCHAR, carb_version VARCHAR, provenance JSON, protocol JSON)"
    )
    con.execute(f"CREATE TABLE measurements ({cols}, PRIMARY KEY (config_id, platform))")
    con.execute(f"CREATE TABLE remeasurements ({cols})")
    con.execute(f"CREATE TABLE rounds ({cols}, round INTEGER, PRIMARY KEY (config_id, platform, round))")
    con.close()
    with Store(path, read_only=True) as s:
        assert "arch" not in s.measurements().columns
    cfg = PlainConfig()
    with Store(path) as s:  # opening for writing migrates
        assert s.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "2"
        s.add(cfg, "p", Measurement(status="error", message="synthetic"), "r1")
        assert s.measurements().arch.notna().all()
