"""Benchmark of the optimizer on clusters with contention between compute and communication.

Usage::

    python benchmarks/bench_contention.py                      # every instance and slowdown, 60 s
    python benchmarks/bench_contention.py --only resnet50 --time-limit 20
    python benchmarks/bench_contention.py --slowdowns 2,2 1,2 --json out.json
    python benchmarks/bench_contention.py --per-layer --only googlenet --time-limit 20

Instances (shipped traces and clusters, wait-for-all, readiness order, the baselines as hint,
one worker, seed 0), from 2 to 16 GPUs, communication from 1% to 52% of the compute:
GoogLeNet (K80) on ``bcaffe-osu-2n`` (2 GPUs, 64 layers), GPT-2 124M (A100, bf16) on
``dgx-a100`` (8 GPUs, 76 layers), ResNet-50 (K80, batch 32) on ``k80-4x4-10gbe`` (16 GPUs,
107 layers), VGG-16 (K80, batch 32) on ``k80-4x4-10gbe`` (16 layers) and BERT-base (A100,
bf16) on ``dgx-a100-family`` with 2 nodes (16 GPUs), each with the overlap
slowdown ``s`` and the communication slowdown ``s_c`` (docs/model.md, "Overlap slowdown") in
(1.2, 1), (1.5, 1.5), (2, 2) and (1, 2).

On such a cluster the optimizer searches its full-speed model and judges plans by the simulator
(docs/formulation.md, "Clusters beyond the model"). The table prints, per instance, the method
that found the plan, the simulated iteration time of the plan and of the best baseline, the
bound, the gap, the status, the wall time to the final result and the deterministic work. The
target is a gap within 2% in 60 s; the rows above it are marked. ``--per-layer``
solves the per-layer next forward with reordering instead. The bound is the larger of the
full-speed model's and the contention bound (``schedopt.optimize.relax.contention_bound``,
per-layer with the sides of whole tensors, ``per_layer_overlap``); the plan the best of the
model's, the baselines' and plans with fewer calls judged by the simulator (per-layer, also
plans that launch calls after the lowest layer's, ``split_candidates``). Each mode's 20 rows
take seconds (2026-12-06, 2-core machine): every row ends long before its time limit.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.optimize import SolveOptions, solve

#: (name, trace, cluster, nodes or None)
INSTANCES: tuple[tuple[str, str, str, int | None], ...] = (
    ("googlenet-k80/bcaffe-osu-2n", "googlenet-k80-10gbe-2n", "bcaffe-osu-2n", None),
    ("gpt2-124m-a100/dgx-a100", "gpt2-124m-a100-bf16", "dgx-a100", None),
    ("resnet50-k80/k80-4x4-10gbe", "resnet50-k80-b32", "k80-4x4-10gbe", None),
    ("vgg16-k80/k80-4x4-10gbe", "vgg16-k80-b32", "k80-4x4-10gbe", None),
    ("bert-base-a100/dgx-a100-2n", "bert-base-a100-bf16", "dgx-a100-family", 2),
)

SLOWDOWNS: tuple[tuple[float, float], ...] = ((1.2, 1.0), (1.5, 1.5), (2.0, 2.0), (1.0, 2.0))

TARGET_GAP = 0.02


def contended(cluster: Cluster, s: float, s_c: float) -> Cluster:
    """``cluster`` with the overlap slowdown ``s`` and the communication slowdown ``s_c``."""
    return Cluster.model_validate({**cluster.model_dump(), "overlap_slowdown": s,
                                   "comm_slowdown": s_c,
                                   "name": f"{cluster.name}-s{s:g}-sc{s_c:g}"})


def run(name: str, trace_name: str, cluster_name: str, nodes: int | None, s: float, s_c: float,
        limit: float, work_limit: float | None, per_layer: bool = False) -> dict[str, Any]:
    """Solve one instance (with the baselines); the row of the table."""
    trace = load_trace(trace_name)
    base = load_cluster(cluster_name, nodes=nodes) if nodes else load_cluster(cluster_name)
    cluster = contended(base, s, s_c)
    mode: dict[str, Any] = {"next_forward": "per-layer", "reorder": True} if per_layer else {}
    opts = SolveOptions(time_limit_s=limit, workers=1, seed=0, work_limit_s=work_limit, **mode)
    res = solve(trace, cluster, opts)
    best = min((b.iteration_time_s for b in res.baselines if b.expressible), default=None)
    return {"instance": name, "s": s, "s_c": s_c, "plan_ms": res.iteration_time_s * 1e3,
            "baseline_ms": None if best is None else best * 1e3,
            "baseline": res.hint_policy, "bound_ms": res.bound_s * 1e3, "gap": res.gap,
            "status": str(res.status), "solve_s": res.solve_time_s, "work_s": res.work_s,
            "method": str(res.method), "bound_method": str(res.bound_method)}


def print_table(rows: list[dict[str, Any]]) -> None:
    """The table (markdown)."""
    print("| instance | method | s | s_c | plan (ms) | best baseline (ms) | bound (ms) | gap "
          "| status | time (s) | work (s) | bound by | <= 2% |")
    print("|---" * 13 + "|")
    for r in rows:
        base = "-" if r["baseline_ms"] is None else f"{r['baseline_ms']:.3f} ({r['baseline']})"
        ok = "yes" if r["gap"] <= TARGET_GAP else "**no**"
        print(f"| {r['instance']} | {r['method']} | {r['s']:g} | {r['s_c']:g} | "
              f"{r['plan_ms']:.3f} | {base} | {r['bound_ms']:.3f} | {r['gap'] * 100:.2f}% | "
              f"{r['status']} | {r['solve_s']:.1f} | {r['work_s']:.1f} | {r['bound_method']} "
              f"| {ok} |")


def _pair(text: str) -> tuple[float, float]:
    s, s_c = text.split(",")
    return float(s), float(s_c)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="instances whose name contains this")
    ap.add_argument("--slowdowns", type=_pair, nargs="+", default=list(SLOWDOWNS),
                    metavar="S,S_C", help="pairs of overlap and communication slowdowns")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--work-limit", type=float, default=None,
                    help="deterministic work limit (s); the time limit is then a safety stop")
    ap.add_argument("--per-layer", action="store_true",
                    help="per-layer next forward with reordering (default: wait-for-all)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for name, trace_name, cluster_name, nodes in INSTANCES:
        if args.only and args.only not in name:
            continue
        for s, s_c in args.slowdowns:
            row = run(name, trace_name, cluster_name, nodes, s, s_c, args.time_limit,
                      args.work_limit, args.per_layer)
            rows.append(row)
            print(f"# {name} s={s:g} s_c={s_c:g}: {row['plan_ms']:.3f} ms, bound "
                  f"{row['bound_ms']:.3f} ms, gap {row['gap'] * 100:.2f}%, "
                  f"{row['solve_s']:.1f} s", file=sys.stderr, flush=True)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
