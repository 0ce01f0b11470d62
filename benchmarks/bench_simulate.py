"""Simulation speed: evaluation of a plan and the whole `simulate` command.

Run: ``python benchmarks/bench_simulate.py [--contention]``. Prints a table (instance, method,
figure) and exits non-zero when a target is missed: evaluation of a 10,000-tensor plan under 0.2 s,
the whole ``schedopt simulate`` command under 1 s. ``--contention`` adds the event-driven
evaluation of the slowdowns (docs/model.md, "Overlap slowdown") on the 10,000-layer instance,
``s = 1.2`` with ``s_c = 1`` and ``s_c = 2``, with its ratio to the vectorised one (no target).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

CLUSTER = Cluster.model_validate({
    "name": "10gbe-8", "nodes": 8, "gpus_per_node": 1,
    "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1.1e9},
    "allreduce": {"alpha_s": 5.23e-4, "beta_s_per_byte": 8.57e-10},
})


def synthetic(n: int, seed: int = 0) -> Trace:
    """``n`` layers with one tensor each; sizes log-uniform 4 KB..16 MB; 100 ms of compute."""
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.5, 1.5, n)
    f *= 0.1 / 3 / f.sum()
    sizes = np.exp(rng.uniform(np.log(4e3), np.log(16e6), n)).astype(int) * 4
    layers = [{"name": f"l{i}", "forward_s": float(f[i]), "backward_s": float(2 * f[i]),
               "tensors": [{"name": f"l{i}.w", "bytes": int(sizes[i])}]} for i in range(n)]
    return Trace.model_validate({"name": f"synthetic-{n}", "batch_size": 32, "io_s": 0.01,
                                 "h2d_s": 0.002, "update_s": 0.005, "layers": layers})


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def contention_rows() -> list[tuple[str, str, str]]:
    """The contention evaluation against the vectorised one, in one run."""
    tr, rows = synthetic(10_000), []
    for spec in ("caffe-mpi", "ddp", "mxnet"):
        plain = make_plan(tr, CLUSTER, spec)
        base = best_of(lambda plain=plain: simulate(tr, CLUSTER, plain), repeat=3)
        for s_c in (1.0, 2.0):
            cl = Cluster.model_validate({**CLUSTER.model_dump(), "overlap_slowdown": 1.2,
                                         "comm_slowdown": s_c})
            plan = make_plan(tr, cl, spec)
            secs = best_of(lambda cl=cl, plan=plan: simulate(tr, cl, plan), repeat=3)
            rows.append((tr.name, f"simulate {spec}, s = 1.2, s_c = {s_c:g}",
                         f"{secs * 1e3:.1f} ms ({secs / base:.1f}x the vectorised "
                         f"{base * 1e3:.1f} ms)"))
    return rows


def main() -> int:
    rows = []
    failed = False
    for n in (100, 1_000, 10_000):
        tr = synthetic(n)
        for spec in ("caffe-mpi", "mxnet"):
            plan = make_plan(tr, CLUSTER, spec)
            secs = best_of(lambda tr=tr, plan=plan: simulate(tr, CLUSTER, plan))
            rows.append((tr.name, f"simulate {spec}", f"{secs * 1e3:.1f} ms"))
            if n == 10_000 and secs > 0.2:
                failed = True
    tr = synthetic(10_000)
    with tempfile.TemporaryDirectory() as tmp:
        tp, cp = Path(tmp) / "t.json", Path(tmp) / "c.json"
        tp.write_text(json.dumps(tr.model_dump(mode="json")))
        cp.write_text(json.dumps(CLUSTER.model_dump(mode="json")))
        cmd = [sys.executable, "-m", "schedopt", "simulate", str(tp), str(cp), "-p", "caffe-mpi",
               "--json"]
        secs = best_of(lambda: subprocess.run(cmd, check=True, capture_output=True), repeat=3)
    rows.append((tr.name, "schedopt simulate (whole command)", f"{secs:.2f} s"))
    failed |= secs > 1.0
    if "--contention" in sys.argv[1:]:
        rows += contention_rows()
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"{'instance':<{width[0]}}  {'method':<{width[1]}}  figure")
    for r in rows:
        print(f"{r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}")
    print("targets: 10,000-tensor evaluation < 0.2 s; whole command < 1 s:",
          "MISSED" if failed else "met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
