"""carb.datasets.export: what `carb dataset export` does, callable from Python (SYNTHETIC backend)."""

from __future__ import annotations

import pandas as pd
import pytest

from carb.campaign.characterization import characterize, select_configs
from carb.datasets.export import export_store
from tests._helpers import SyntheticBackend


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "s.duckdb"
    characterize(
        select_configs(space="tiny", samples=3, seed=0), path, backend=SyntheticBackend(), rounds=1, sentinel=False
    )
    return path


def test_export_store_writes_one_row_per_config_with_the_features(store, tmp_path):
    done = export_store(store, tmp_path / "d.csv")
    back = pd.read_csv(tmp_path / "d.csv")
    assert len(back) == len(done.data) == 3 and "flops" in back.columns and done.bare_net_rows == 0
    assert "flops" not in export_store(store, tmp_path / "bare.parquet", features=False).data.columns


def test_export_store_refuses_an_unknown_type_and_nothing_to_export(store, tmp_path):
    with pytest.raises(ValueError, match=r"^out .*d\.xlsx: unknown output type"):
        export_store(store, tmp_path / "d.xlsx")
    with pytest.raises(ValueError, match="no measurements for platform elsewhere"):
        export_store(store, tmp_path / "d.csv", platform="elsewhere")
    assert not (tmp_path / "d.csv").exists()
