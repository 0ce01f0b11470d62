"""Benchmark of the optimizer on instances with a host side (launch, hook and host times).

Usage::

    python benchmarks/bench_host_side.py                       # every instance, 20 s each
    python benchmarks/bench_host_side.py --only resnet50 --hosts 1.5
    python benchmarks/bench_host_side.py --per-layer --json out.json
    python benchmarks/bench_host_side.py --launch-us 20 200 1000     # dearer calls too
    python benchmarks/bench_host_side.py --big --only gpt2-1.5b      # a large model

Instances: shipped traces and clusters, whose host times (docs/model.md, "Host side") are set
to ``host`` times the device's, layer by layer and for the optimizer step (0.5: the host runs
ahead; 0.95: close behind the device; 1.05 and 1.5: host-bound), with 20 us per collective
call (``--launch-us``: others) and 15 us per gradient hook: ResNet-50 (V100, batch 64) on
``dgx1-v100``, GPT-2 124M (A100, bf16) on ``dgx-a100`` and BERT-base (A100, bf16) on 2 nodes
of ``dgx-a100-family``.
Wait-for-all in readiness order, or with ``--per-layer`` the per-layer next forward with
reordering; the baselines as hint, one worker, seed 0.

The optimizer searches the model without a host and judges its plans, and plans with fewer
calls, by the simulator; the bound is the larger of that model's, the host side's
(:mod:`schedopt.optimize.host_side`) and, in wait-for-all mode, the exact programme's with the
host side (:mod:`schedopt.optimize.host_dp`). The table prints, per instance, the plan, the best
baseline, the bound, the gap, the status, the wall time and the method of the bound. Run it
from another checkout (``PYTHONPATH=<checkout> python benchmarks/bench_host_side.py``) to
compare commits in one session.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve

#: (name, trace, cluster, nodes or None)
INSTANCES: tuple[tuple[str, str, str, int | None], ...] = (
    ("resnet50-v100/dgx1-v100", "resnet50-v100-b64", "dgx1-v100", None),
    ("gpt2-124m-a100/dgx-a100", "gpt2-124m-a100-bf16", "dgx-a100", None),
    ("bert-base-a100/dgx-a100-2n", "bert-base-a100-bf16", "dgx-a100-family", 2),
)

#: The large instance of ``--big``: GPT-2 1.5B (A100, bf16, 292 layers, 581 tensors).
BIG: tuple[str, str, str, int | None] = (
    "gpt2-1.5b-a100/dgx-a100-2n", "gpt2-1.5b-a100-bf16", "dgx-a100-family", 2)

#: Host times as multiples of the device's.
HOSTS: tuple[float, ...] = (0.5, 0.95, 1.05, 1.5)

LAUNCH_S = 2e-5
HOOK_S = 1.5e-5


def with_host(trace: Trace, cluster: Cluster, host: float, launch_s: float = LAUNCH_S,
              hook_s: float = HOOK_S) -> tuple[Trace, Cluster]:
    """``trace`` with host times ``host`` times its device times, ``cluster`` with
    ``launch_s`` per call and ``hook_s`` per hook."""
    doc = trace.model_dump(mode="json", exclude_none=True)
    for layer in doc["layers"]:
        layer["host_forward_s"] = host * layer["forward_s"]
        layer["host_backward_s"] = host * layer["backward_s"]
    doc["host_update_s"] = host * doc["update_s"]
    doc["name"] = f"{trace.name}-host{host:g}"
    return (Trace.model_validate(doc),
            Cluster.model_validate({**cluster.model_dump(), "launch_overhead_s": launch_s,
                                    "hook_overhead_s": hook_s}))


def run(name: str, trace_name: str, cluster_name: str, nodes: int | None, host: float,
        limit: float, per_layer: bool, launch_s: float = LAUNCH_S) -> dict[str, Any]:
    """Solve one instance (with the baselines); the row of the table."""
    base = load_cluster(cluster_name, nodes=nodes) if nodes else load_cluster(cluster_name)
    trace, cluster = with_host(load_trace(trace_name), base, host, launch_s)
    mode: dict[str, Any] = {"next_forward": "per-layer", "reorder": True} if per_layer else {}
    res = solve(trace, cluster, SolveOptions(time_limit_s=limit, workers=1, seed=0, **mode))
    best = min((b.iteration_time_s for b in res.baselines if b.expressible), default=None)
    row = {"instance": name, "host": host, "launch_us": round(launch_s * 1e6, 6),
           "plan_ms": res.iteration_time_s * 1e3, "buckets": len(res.plan.buckets),
           "baseline_ms": None if best is None else best * 1e3,
           "baseline": res.hint_policy, "bound_ms": res.bound_s * 1e3, "gap": res.gap,
           "status": str(res.status), "solve_s": res.solve_time_s,
           "method": str(res.method), "bound_method": str(res.bound_method)}
    print(f"# {name} host={host:g}: {row['plan_ms']:.3f} ms, bound {row['bound_ms']:.3f} ms, "
          f"gap {row['gap'] * 100:.3f}%, {row['solve_s']:.1f} s", file=sys.stderr, flush=True)
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    """The table (markdown)."""
    print("| instance | host | call (us) | plan (ms) | buckets | best baseline (ms) | bound (ms) "
          "| gap | status | time (s) | plan by | bound by |")
    print("|---" * 12 + "|")
    for r in rows:
        base = "-" if r["baseline_ms"] is None else f"{r['baseline_ms']:.3f} ({r['baseline']})"
        print(f"| {r['instance']} | {r['host']:g} | {r['launch_us']:g} | {r['plan_ms']:.3f} | "
              f"{r['buckets']} | {base} | {r['bound_ms']:.3f} | {r['gap'] * 100:.3f}% | "
              f"{r['status']} | {r['solve_s']:.1f} | {r['method']} | {r['bound_method']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="instances whose name contains this")
    ap.add_argument("--big", action="store_true",
                    help="also GPT-2 1.5B on 2 DGX A100 (292 layers, 581 tensors)")
    ap.add_argument("--hosts", type=float, nargs="+", default=list(HOSTS),
                    help="host times as multiples of the device's")
    ap.add_argument("--launch-us", type=float, nargs="+", default=[LAUNCH_S * 1e6],
                    help="host time of one collective call (us)")
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--per-layer", action="store_true",
                    help="per-layer next forward with reordering (default: wait-for-all)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    instances = (*INSTANCES, BIG) if args.big else INSTANCES
    cases = [(case, host, launch) for case in instances for launch in args.launch_us
             for host in args.hosts if not args.only or args.only in case[0]]
    rows = [run(*case, host, args.time_limit, args.per_layer, launch * 1e-6)
            for case, host, launch in cases]
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
