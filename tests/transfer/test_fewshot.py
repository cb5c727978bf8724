"""carb.transfer's few-shot models on SYNTHETIC data (unit tests of the maps; HELP's measured
data is in tests/datasets/test_help_fbnet.py and tests/studies/)."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from carb.transfer import FewShotModel, SourceModels


def test_fewshot_recovers_a_synthetic_additive_target():
    """Synthetic data (unit test only): a target that is 2 x source a + 0.5 x a cost
    feature + 3 ms is recovered exactly by the NNLS map from 12 measurements."""
    rng = np.random.default_rng(1)
    X = pd.DataFrame(rng.uniform(1, 5, size=(300, 4)), columns=["f0", "f1", "f2", "macs"])
    ya, yb = X[["f0", "f1"]].sum(axis=1).to_numpy(), (3 * X["f2"]).to_numpy()
    sources = SourceModels().fit(X[["f0", "f1", "f2"]].assign(macs=0.0), {"a": ya, "b": yb})
    target = 2 * ya + 0.5 * X["macs"].to_numpy() + 3
    k = np.arange(12)
    model = FewShotModel(sources, passthrough=["macs"], method="nnls").fit(X.iloc[k], target[k])
    assert np.allclose(model.predict(X), target, rtol=1e-3)
    w = model.weights()
    assert w["a"] == pytest.approx(2, rel=1e-3) and w["macs"] == pytest.approx(0.5, rel=1e-3)
    assert w.get("b", 0.0) < 1e-4 and all(v >= 0 for v in w.values())
    small = FewShotModel(sources, passthrough=["macs"]).fit(X.iloc[:5], target[:5])
    assert small.method_ == "single" and spearmanr(small.predict(X), target)[0] > 0.8
    with pytest.raises(ValueError, match="at least 2"):
        FewShotModel(sources).fit(X.iloc[:1], target[:1])


def test_source_rows_restrict_each_model():
    rng = np.random.default_rng(1)
    X = rng.random((60, 3))  # SYNTHETIC
    y = X @ [1.0, 2.0, 3.0] + rng.normal(0, 0.01, 60)
    y_nan = y.copy()
    y_nan[40:] = np.nan  # outside the rows: never read
    a = SourceModels().fit(X, {"d": y_nan}, rows={"d": np.arange(40)})
    b = SourceModels().fit(X[:40], {"d": y[:40]})
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    with pytest.raises(ValueError):
        SourceModels().fit(X, {"d": y_nan})
