"""Benchmark of the optimizer on multi-stage collectives with several tensors per layer.

Usage::

    python benchmarks/bench_multistage.py                  # every layout, seeds 0 and 1
    python benchmarks/bench_multistage.py --only pipelined --seeds 0 1 2
    python benchmarks/bench_multistage.py --work-limit 20 --json out.json
    python benchmarks/bench_multistage.py --brute-force --only pipelined --seeds 0 1 2 3 4 5
    python benchmarks/bench_multistage.py --eval-rate --seeds 0 1   # an evaluation's cost

Instances (generated, :func:`random_trace`): 60 layers, each with 2 or 3 gradient tensors
(a weight of 0.05-16 MB, log-uniform, and one or two small tensors of 1-64 KB, as biases and
norms), forward times of 0.1-3 ms (log-uniform), the backward twice the forward, the compute
scaled so that it equals the bandwidth time of every gradient on the busiest resource
(``ratio``, 1 by default: the communication-bound regime), and an update step of 5% of the
compute. Layouts (every multi-stage collective, per-layer next-forward with reordering, no
baselines, one worker, seed 0, 60 s):

* ``pipelined``: the pipelined hierarchical all-reduce of 4 DGX A100 (8 GPUs on NVSwitch,
  InfiniBand HDR): reduce-scatter and all-gather on the intra-node link, the all-reduce on
  the network, both about equally loaded;
* ``ps-dedicated``: 8 single-GPU 10GbE nodes with 2 dedicated servers (push and pull on
  different links: a two-machine flow shop);
* ``ps-local-reduce``: 4 nodes of 4 K80 on 10GbE with 4 dedicated servers after a local reduce
  (push and pull share the PCIe link: one task per bucket);
* ``ps-colocated``: the same cluster with colocated servers (push and pull share the NIC).

The table prints the plan, the bound, the gap, the status, the time, the deterministic work
and the methods that found the plan and proved the bound.

``--brute-force`` asks which side of a gap is loose: on four-layer analogues (two tensors per
layer, eight units: more plans than :func:`.flowshop.enumerate_plans` takes inside ``solve``,
which then runs its other methods) the optimum over every bucketing and launch order, and how
far ``solve``'s plan lies above it and its bound below it. ``--eval-rate`` times the
annealing's evaluations (the exact period of a plan with a random move, from plans of 4 to
``n`` buckets) and fits the cost per evaluation and per bucket and stage, the figures its
deterministic charge (``solver.ANNEAL_EVAL_S``, ``solver.ANNEAL_BUCKET_STAGE_S``) is set
from.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from schedopt.files import load_cluster
from schedopt.model.cluster import Cluster, PSConfig
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve, solver
from schedopt.optimize.anneal import _move as anneal_move
from schedopt.optimize.flowshop import enumerate_plans
from schedopt.optimize.instance import build_instance

PER_LAYER_REORDER: dict[str, Any] = {"next_forward": "per-layer", "reorder": True}

LAYOUTS = ("pipelined", "ps-dedicated", "ps-local-reduce", "ps-colocated")


def layout_cluster(layout: str) -> Cluster:
    """The cluster of one multi-stage layout (module docstring)."""
    if layout == "pipelined":
        base = load_cluster("dgx-a100-family", nodes=4)
        return base.model_copy(update={"collective": "hierarchical",
                                       "pipelined_hierarchical": True,
                                       "name": "dgx-a100-4n-pipelined"})
    if layout == "ps-dedicated":
        flat = load_cluster("10gbe-k80-family", nodes=8)
        return flat.model_copy(update={"collective": "ps", "allreduce": None,
                                       "ps": PSConfig(servers=2, colocated=False),
                                       "name": "10gbe-8n-ps2-dedicated"})
    ps = load_cluster("k80-4x4-10gbe-ps")
    if layout == "ps-local-reduce":
        return ps.model_copy(update={"ps": PSConfig(servers=4, colocated=False),
                                     "name": "k80-4x4-10gbe-ps-dedicated"})
    assert layout == "ps-colocated", layout
    return ps


def random_trace(seed: int, tensors: int, cluster: Cluster, layers: int = 60,
                 ratio: float = 1.0) -> Trace:
    """A random trace of ``layers`` layers with ``tensors`` (2 or 3) gradient tensors each
    (module docstring), its compute scaled to ``ratio`` times the bandwidth time of every
    gradient on ``cluster``'s busiest resource."""
    rng = np.random.default_rng([seed, tensors, layers])
    docs = []
    for i in range(layers):
        weight = 4 * int(np.exp(rng.uniform(np.log(12_500), np.log(4_000_000))))
        small = [4 * int(rng.integers(256, 16_384)) for _ in range(tensors - 1)]
        fwd = float(np.exp(rng.uniform(np.log(1e-4), np.log(3e-3))))
        docs.append({"name": f"l{i}", "forward_s": fwd, "backward_s": 2 * fwd,
                     "tensors": [{"name": f"l{i}.weight", "bytes": weight}]
                     + [{"name": f"l{i}.t{j}", "bytes": b} for j, b in enumerate(small)]})
    trace = Trace.model_validate({"name": f"rand{layers}-s{seed}-t{tensors}", "batch_size": 32,
                                  "layers": docs})
    load: dict[str, float] = {}
    for st in cluster.comm_stages():
        for res in st.resources:
            load[res] = load.get(res, 0.0) + st.beta_s_per_byte
    comm = max(load.values()) * trace.total_bytes
    scale = ratio * comm / trace.compute_s
    out = trace.scaled(compute=scale)
    return Trace.model_validate({**out.model_dump(), "update_s": 0.05 * out.compute_s})


def run(layout: str, seed: int, tensors: int, limit: float, work_limit: float | None,
        ratio: float = 1.0) -> dict[str, Any]:
    """Solve one instance (no baselines); the row of the table."""
    cluster = layout_cluster(layout)
    trace = random_trace(seed, tensors, cluster, ratio=ratio)
    opts = SolveOptions(time_limit_s=limit, workers=1, seed=0, work_limit_s=work_limit,
                        baselines=False, **PER_LAYER_REORDER)
    res = solve(trace, cluster, opts)
    return {"instance": trace.name, "layout": layout, "tensors": trace.num_tensors,
            "ratio": ratio, "optimum_ms": res.iteration_time_s * 1e3, "bound_ms": res.bound_s * 1e3,
            "gap": res.gap, "status": str(res.status), "solve_s": res.solve_time_s,
            "work_s": res.work_s, "method": str(res.method),
            "bound_method": str(res.bound_method)}


def brute_force_row(layout: str, seed: int, limit: float, work_limit: float | None
                    ) -> dict[str, Any]:
    """One four-layer analogue (module docstring): the optimum by enumeration and ``solve``'s
    plan and bound against it."""
    cluster = layout_cluster(layout)
    trace = random_trace(seed, 2, cluster, layers=4)
    opts = SolveOptions(time_limit_s=limit, workers=1, seed=0, work_limit_s=work_limit,
                        baselines=False, **PER_LAYER_REORDER)
    inst = build_instance(trace, cluster, opts, merge=False)
    best = enumerate_plans(inst, True)[0] * inst.tick
    res = solve(trace, cluster, opts)
    return {"layout": layout, "instance": trace.name, "units": inst.n, "optimum_ms": best * 1e3,
            "plan_ms": res.iteration_time_s * 1e3, "bound_ms": res.bound_s * 1e3,
            "plan_above": res.iteration_time_s / best - 1, "bound_below": 1 - res.bound_s / best,
            "status": str(res.status), "bound_method": str(res.bound_method)}


def eval_rate_row(layout: str, seed: int, tensors: int, evals: int = 3_000) -> dict[str, Any]:
    """The cost of annealing evaluations (a random move of a plan, and the exact multi-stage
    period of the result): ``evals`` of them from each of the plans of 4, n/8, n/4, n/2 and n
    equal buckets (none accepted, so every plan evaluated has about as many buckets as its
    start), the time fitted as ``evals * base + buckets * stages * per_bucket_stage``
    (``buckets``: those of every plan evaluated), and the largest ratio of a plan size's time to
    its charge (:data:`.solver.ANNEAL_EVAL_S`, :data:`.solver.ANNEAL_BUCKET_STAGE_S`)."""
    cluster = layout_cluster(layout)
    trace = random_trace(seed, tensors, cluster)
    opts = SolveOptions(workers=1, seed=0, baselines=False, **PER_LAYER_REORDER)
    inst = build_instance(trace, cluster, opts, merge=False)
    n, n_s = inst.n, len(inst.stages)
    rng = random.Random(seed)
    runs = []
    for m in (4, n // 8, n // 4, n // 2, n):
        cut = np.linspace(0, n, m + 1).astype(int)
        segs = [(int(cut[k]), int(cut[k + 1]) - 1) for k in range(m)][::-1]
        done = buckets = 0
        t0 = time.perf_counter()
        while done < evals:
            cand = anneal_move(segs, rng)
            if cand is not None:
                inst.evaluate(cand)
                done, buckets = done + 1, buckets + len(cand)
        runs.append((done, buckets * n_s, time.perf_counter() - t0))
    a = np.array([[e, b] for e, b, _ in runs], float)
    t = np.array([s for _, _, s in runs])
    base, per = np.linalg.lstsq(a, t, rcond=None)[0]
    charge = a @ np.array([solver.ANNEAL_EVAL_S, solver.ANNEAL_BUCKET_STAGE_S])
    return {"layout": layout, "instance": trace.name, "units": n, "stages": n_s,
            "evals": sum(e for e, _, _ in runs), "base_us": base * 1e6,
            "bucket_stage_us": per * 1e6, "worst_ratio": float(np.max(t / charge))}


def _ms(key: str, digits: int = 3) -> Callable[[dict[str, Any]], str]:
    """A cell of milliseconds."""
    return lambda r: f"{r[key]:.{digits}f}"


def _pct(key: str) -> Callable[[dict[str, Any]], str]:
    """A cell of a fraction, in percent."""
    return lambda r: f"{r[key] * 100:.3f}%"


def _text(key: str) -> Callable[[dict[str, Any]], str]:
    """A cell of the value as it is."""
    return lambda r: str(r[key])


#: The columns of the main table and of ``--brute-force``: header and cell of a row.
COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("layout", _text("layout")), ("instance", _text("instance")), ("tensors", _text("tensors")),
    ("ratio", lambda r: f"{r['ratio']:g}"), ("plan (ms)", _ms("optimum_ms")),
    ("bound (ms)", _ms("bound_ms")), ("gap", _pct("gap")), ("status", _text("status")),
    ("time (s)", lambda r: f"{r['solve_s']:.1f}"), ("work (s)", lambda r: f"{r['work_s']:.1f}"),
    ("plan by", _text("method")), ("bound by", _text("bound_method"))]
BRUTE_FORCE_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("layout", _text("layout")), ("instance", _text("instance")), ("units", _text("units")),
    ("optimum (ms)", _ms("optimum_ms", 4)), ("plan (ms)", _ms("plan_ms", 4)),
    ("plan above", _pct("plan_above")), ("bound (ms)", _ms("bound_ms", 4)),
    ("bound below", _pct("bound_below")), ("status", _text("status")),
    ("bound by", _text("bound_method"))]
EVAL_RATE_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("layout", _text("layout")), ("instance", _text("instance")), ("units", _text("units")),
    ("stages", _text("stages")), ("evaluations", _text("evals")),
    ("us per evaluation", _ms("base_us", 1)), ("us per bucket and stage", _ms("bucket_stage_us")),
    ("time / charge, largest", lambda r: f"{r['worst_ratio']:.2f}")]


def print_table(rows: list[dict[str, Any]],
                columns: list[tuple[str, Callable[[dict[str, Any]], str]]] = COLUMNS) -> None:
    """The table (markdown) of ``rows`` in ``columns``."""
    print("| " + " | ".join(head for head, _ in columns) + " |")
    print("|---" * len(columns) + "|")
    for r in rows:
        print("| " + " | ".join(cell(r) for _, cell in columns) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="layouts whose name contains this")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--tensors", type=int, nargs="+", default=[2, 3],
                    help="tensors per layer (2 or 3)")
    ap.add_argument("--ratio", type=float, nargs="+", default=[1.0],
                    help="compute over the busiest resource's bandwidth time")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--work-limit", type=float, default=None,
                    help="deterministic work limit (s); the time limit is then a safety stop")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--brute-force", action="store_true",
                    help="four-layer analogues against the optimum by enumeration")
    ap.add_argument("--eval-rate", action="store_true",
                    help="the cost of one annealing evaluation, per layout")
    args = ap.parse_args(argv)
    rows = []
    if args.eval_rate:
        rows = [eval_rate_row(layout, seed, tensors) for layout in LAYOUTS
                if not (args.only and args.only not in layout)
                for tensors in args.tensors for seed in args.seeds]
        print_table(rows, EVAL_RATE_COLUMNS)
        return 0
    if args.brute_force:
        for layout in LAYOUTS:
            if args.only and args.only not in layout:
                continue
            rows += [brute_force_row(layout, seed, args.time_limit, args.work_limit)
                     for seed in args.seeds]
        print_table(rows, BRUTE_FORCE_COLUMNS)
        return 0
    for layout in LAYOUTS:
        if args.only and args.only not in layout:
            continue
        for tensors in args.tensors:
            for seed, ratio in itertools.product(args.seeds, args.ratio):
                row = run(layout, seed, tensors, args.time_limit, args.work_limit, ratio)
                rows.append(row)
                print(f"# {layout} {row['instance']}: {row['optimum_ms']:.3f} ms, gap "
                      f"{row['gap'] * 100:.3f}%, {row['solve_s']:.1f} s", file=sys.stderr)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
