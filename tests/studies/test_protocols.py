"""The evaluation protocols stay deterministic: HELP's plain baseline and its score, and the
grouped folds that hold out whole architectures."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from carb.datasets import help_fbnet as hf
from carb.model.evaluation import arch_folds
from carb.studies import help_fbnet as bhf


def test_help_baseline_and_score_reproduce():
    wide = hf.load(wide=True)
    devices = ["pixel3", "raspi4"]
    y = {d: wide[f"latency_ms_{d}"].to_numpy() for d in devices}
    onehot = hf.layer_onehot(wide)
    prot = bhf.protocol(y, devices, trimmed=True)
    ref = np.array(hf.reference_arch_ids())
    runs = []
    for jobs in (1, 2):  # LightGBM deterministic: the thread count changes nothing
        base = bhf.Baseline(onehot, y, ["pixel3"], jobs, pools=prot["pool"])
        runs.append((base.logpred, bhf.score(base.predict, "raspi4", y, 10, True, range(2), ref, prot)))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]


def test_device_model_folds_group_whole_architectures():
    # SYNTHETIC frame: 12 architectures, each at two input sizes, two class counts, two batches
    rows = [
        dict(family="resnet", block="basic", depth=d, width=w, early_downsample=False, input_size=s, classes=c, batch=b)
        for d, w in itertools.product((8, 14, 20), (0.5, 1.0, 1.5, 2.0))
        for s, c, b in itertools.product((32, 64), (10, 100), (1, 8))
    ]
    df = pd.DataFrame(rows)
    folds = arch_folds(df, folds=5, seed=0)
    per_arch = pd.Series(folds).groupby([df.depth, df.width]).nunique()
    assert (per_arch == 1).all()  # every input size and class count of an architecture: one fold
    assert len(set(folds)) == 5
    np.testing.assert_array_equal(folds, arch_folds(df, folds=5, seed=0))
