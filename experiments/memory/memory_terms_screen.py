"""Would another memory term reach the deployed networks? Candidate terms screened on the zoo first.

The network model's memory is a linear fit (:func:`carb.netmodel.network._mem_design`: model
bytes, input bytes, the captured peak of live outputs, the largest layer's weights, a constant) on
the 100 carb.zoo networks a model was fitted on. Each candidate is judged as a model would be:
the zoo's leave-one-family-out error (the terms refitted without the family) and, the zoo's fit
applied, the 25 deployed networks' error against their stored fresh-process truth
(``benchmarks/results/deployed_epyc512_native.json``). A candidate that worsens the zoo is not one.

Candidates (MB = 1e6 B):

* ``largest_output``, ``sum_outputs``: the largest output and the sum of all outputs of a forward;
* ``graph_heap``: in place of the peak of live outputs, the heap's growth when the captured graph's
  outputs are allocated and freed over three forwards through glibc (``posix_memalign(64)``,
  allocator ``retain``, a fresh process each: :func:`heap_replay.graph_sequence`, :func:`heap_replay.replay`);
* ``op_code``: a fixed term, the sum over the network's op classes of what each adds to a process
  that ran a classifier's ops (``results/op_code_memory.json``, :mod:`op_code_memory`);
* ``oracle_torch_peak_mb``, ``oracle_heap_mb``: not terms a model can read, bounds: in place of the peak of
  live outputs, torch's own allocation peak or the heap's growth, measured per network
  (``results/heap_replay.json``, ``results/heap_zoo.json``: :mod:`heap_replay`);
* ``deployed_in_sample``: not a model, a bound: the five terms fitted on the zoo and the deployed
  networks together, judged on the same deployed networks.

    python experiments/memory/memory_terms_screen.py --json experiments/memory/results/memory_terms_screen.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "nets"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
from heap_replay import graph_events  # noqa: E402


def _replay(seq: list, d: str) -> float:
    path = Path(d) / "seq.json"
    path.write_text(json.dumps(seq))
    p = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parent / "heap_replay.py"),
            "--child",
            "replay",
            str(path),
            "memalign",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(p.stdout.strip().splitlines()[-1])["replay_mb"])


def main(argv: list[str] | None = None) -> int:
    import deployed_nets
    import numpy as np
    from ship import _store_rows

    from carb import families, netmodel
    from carb.families import zoo
    from carb.graph import build_meta, capture
    from carb.netmodel.layers import op_class
    from carb.netmodel.network import _mem_design, _mem_shift, _network_rows, _nnls_rel

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="layers-cpu-epyc512-1t")
    ap.add_argument(
        "--zoo",
        default=str(ROOT / "experiments/memory/results/zoo_networks.json"),
        help="the zoo networks the model was fitted on: a campaign store (its rows are also written beside "
        "--json as zoo_networks.json) or such a JSON",
    )
    ap.add_argument("--deployed", default=str(ROOT / "benchmarks/results/deployed_epyc512_native.json"))
    ap.add_argument("--op-code", default=str(ROOT / "experiments/memory/results/op_code_memory.json"))
    ap.add_argument("--heap", default=str(ROOT / "experiments/memory/results/heap_replay.json"))
    ap.add_argument("--heap-zoo", default=str(ROOT / "experiments/memory/results/heap_zoo.json"))
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    t0 = time.time()
    if "zoo" not in families.names():
        families.register(zoo.ZOO)
    nm = netmodel.load(a.model)
    if a.zoo.endswith(".json"):
        zoo_doc = json.loads(Path(a.zoo).read_text())
    else:
        zdf, _ = _store_rows(a.zoo, "zoo")
        zoo_doc = {
            "what": "the carb.zoo networks of a campaign store: each config and its measured memory_mb (MB = 1e6 B)",
            "store": Path(a.zoo).name,
            "measured_utc": [str(zdf["measured_at"].min()), str(zdf["measured_at"].max())],
            "networks": [
                {"config": zoo._from_row(r).to_dict(), "memory_mb": float(r["memory_mb"])}
                for r in zdf.to_dict("records")
            ],
        }
        if a.json:
            _common.write_json(Path(a.json).with_name("zoo_networks.json"), zoo_doc)
    configs = [zoo.ZooConfig.from_dict(n["config"]) for n in zoo_doc["networks"]]
    ztabs = [zoo.capture(c) for c in configs]
    zrows = _network_rows(ztabs, nm.layer)[0]
    zy = np.array([n["memory_mb"] for n in zoo_doc["networks"]])
    groups = np.array([c.arch for c in configs])
    dep = json.loads(Path(a.deployed).read_text())["per_network"]
    names = [r["network"] for r in dep]
    specs = [deployed_nets.NETWORKS[n] for n in names]
    dtabs = [capture(build_meta(s.build), tuple(s.input)) for s in specs]
    drows = _network_rows(dtabs, nm.layer)[0]
    dy = np.array([r["memory_mb"] for r in dep])
    print(f"{len(ztabs)} zoo and {len(dtabs)} deployed networks captured in {time.time() - t0:.0f} s", flush=True)

    with tempfile.TemporaryDirectory() as d:
        zev = [graph_events(zoo._meta_build(c), (c.batch, 3, c.input_size, c.input_size), c.precision) for c in configs]
        dev = [graph_events(build_meta(s.build), tuple(s.input)) for s in specs]
        z_heap = np.array([_replay(s, d) for s, _ in zev])
        d_heap = np.array([_replay(s, d) for s, _ in dev])
    print(f"graph sequences replayed in {time.time() - t0:.0f} s", flush=True)
    inc = {c: v["increment_mb"] for c, v in json.loads(Path(a.op_code).read_text())["classes"].items()}
    z_code = np.array([sum(inc.get(c, 0.0) for c in set(op_class(t.layers))) for t in ztabs])
    d_code = np.array([sum(inc.get(c, 0.0) for c in set(op_class(t.layers))) for t in dtabs])

    def judge(name: str, extra=None, replace=None, fixed=None) -> dict:
        Mz, Md = _mem_design(zrows), _mem_design(drows)
        if replace is not None:
            Mz[:, 2], Md[:, 2] = replace
        if extra is not None:
            Mz, Md = np.column_stack([Mz, extra[0]]), np.column_stack([Md, extra[1]])
        sz, sd = _mem_shift(zrows, nm.layer), _mem_shift(drows, nm.layer)
        if fixed is not None:
            sz, sd = sz - fixed[0], sd - fixed[1]
        coef = np.asarray(_nnls_rel(Mz, zy + sz))
        lofo = []
        for k in np.unique(groups):
            tr, te = groups != k, groups == k
            cm = np.asarray(_nnls_rel(Mz[tr], zy[tr] + sz[tr]))
            lofo += list((Mz[te] @ cm - sz[te]) / zy[te] - 1)
        lofo = np.abs(np.array(lofo))
        dep_err = (Md @ coef - sd) / dy - 1
        out = {
            "zoo_lofo_mape_pct": float(100 * lofo.mean()),
            "zoo_lofo_within10_pct": float(100 * (lofo <= 0.1).mean()),
            "deployed_mape_pct": float(100 * np.abs(dep_err).mean()),
            "deployed_within10_pct": float(100 * (np.abs(dep_err) <= 0.1).mean()),
            "coef": [float(c) for c in coef],
        }
        print(
            f"{name:22s} zoo LOFO {out['zoo_lofo_mape_pct']:5.2f}% ({out['zoo_lofo_within10_pct']:3.0f}% within 10) | "
            f"deployed {out['deployed_mape_pct']:5.2f}% ({out['deployed_within10_pct']:3.0f}% within 10)",
            flush=True,
        )
        return out

    largest = (np.array([max(al) for _, al in zev]) / 1e6, np.array([max(al) for _, al in dev]) / 1e6)
    total = (np.array([sum(al) for _, al in zev]) / 1e6, np.array([sum(al) for _, al in dev]) / 1e6)
    res = {
        "shipped terms": judge("shipped terms"),
        "largest_output": judge("+ largest output", extra=largest),
        "sum_outputs": judge("+ sum of outputs", extra=total),
        "graph_heap": judge("graph heap for live", replace=(z_heap, d_heap)),
        "op_code": judge("+ op classes' code", fixed=(z_code, d_code)),
    }
    if Path(a.heap).exists() and Path(a.heap_zoo).exists():  # measured, not read from the graph: oracles
        hz = {r["index"]: r for r in json.loads(Path(a.heap_zoo).read_text())["networks"]}
        hd = {r["network"]: r for r in json.loads(Path(a.heap).read_text())["networks"]}
        for key, label in (("torch_peak_mb", "oracle: torch's peak"), ("heap_mb", "oracle: measured heap")):
            z = np.array([hz[i][key] for i in range(len(configs))])
            res[f"oracle_{key}"] = judge(label, replace=(z, np.array([hd[n][key] for n in names])))
    Mz, Md = _mem_design(zrows), _mem_design(drows)
    sz, sd = _mem_shift(zrows, nm.layer), _mem_shift(drows, nm.layer)
    coef = np.asarray(_nnls_rel(np.vstack([Mz, Md]), np.concatenate([zy + sz, dy + sd])))
    e = (Md @ coef - sd) / dy - 1
    res["deployed_in_sample"] = {
        "deployed_mape_pct": float(100 * np.abs(e).mean()),
        "deployed_within10_pct": float(100 * (np.abs(e) <= 0.1).mean()),
        "coef": [float(c) for c in coef],
    }
    print(
        f"{'in sample (a bound)':22s} deployed {res['deployed_in_sample']['deployed_mape_pct']:5.2f}% "
        f"({res['deployed_in_sample']['deployed_within10_pct']:3.0f}% within 10)"
    )
    if a.json:
        doc = {
            "what": "memory terms screened: the zoo's leave-one-family-out error and the deployed networks' error "
            "(%, |predicted / measured - 1|) of the network model's memory fit with each candidate",
            "model": a.model,
            "zoo": Path(a.zoo).name,
            "deployed": str(Path(a.deployed).relative_to(ROOT)),
            "op_code": str(Path(a.op_code).relative_to(ROOT)),
            "candidates": res,
            "networks": {"zoo": len(ztabs), "deployed": len(dtabs)},
            "seconds": time.time() - t0,
        }
        _common.write_json(a.json, doc)
        print(f"written {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
