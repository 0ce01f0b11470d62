"""Benchmark of the optimizer: exact DP and CP-SAT on the instances of docs/formulation.md.

Usage::

    python benchmarks/bench_optimize.py            # the whole matrix (about 10 minutes)
    python benchmarks/bench_optimize.py --quick    # ResNet-50 only (about 2 minutes)
    python benchmarks/bench_optimize.py --multi-stage   # several stages only (about 4 minutes)
    python benchmarks/bench_optimize.py --multi-stage --only gpt2   # rows whose name has gpt2
    python benchmarks/bench_optimize.py --json out.json

Instances (all shipped):

* ResNet-50 (``resnet50-v100-b64``, 161 tensors) on the 8-worker 10GbE fit of Shi et al.
  (``10gbe-k80-family`` at 8 nodes: alpha = 5.23e-4 s, beta = 8.57e-10 s/B), forward time scaled
  to 15, 25, 30, 35 and 45 ms (backward = 2 x forward, as in the trace);
* GPT-2 1.5B (``gpt2-1.5b-v100-fp16``, 580 tensors) on ``dgx1-v100-4n-ib-edr``, compute scaled to
  0.5, 1 and 2 times the bandwidth time of all gradients;
* ``synthetic-5000`` (5,000 tensors) on the 10GbE fit;
* several communication stages (:func:`multi_stage_cases`, per-layer + reorder, 60 s): the
  pipelined hierarchical all-reduce of ``dgx-a100-family`` at 4 and 16 nodes with
  ``resnet50-a100-b256`` and ``gpt2-1.5b-a100-bf16``; ``resnet50-v100-b64`` through parameter
  servers on ``k80-4x4-10gbe-ps`` (colocated, and dedicated) and on 8 single-GPU 10GbE nodes
  with 2 dedicated servers; and, as an ablation, the dedicated servers without the step of a
  link shared with the batch copy (``without shared-link``).

Options per instance (the first three families): the default class (wait-for-all, readiness
order, no partitioning) and ``--next-forward per-layer --reorder``. Limits: 10 s for ResNet-50,
60 s for the others (one worker, seed 0). The table prints the best baseline, the optimum found,
the bound, the gap, the time, the method that found the plan and the one that proved the
bound; ``solve_s`` includes simulating the 11 baselines,
``opt_s`` is the optimizer alone (same solve without baselines), reported for the rows of the
exact programmes (``dp``, ``unimodal``); ``work (s)`` is the solve's deterministic work
(``SolveResult.work_s``), the figure that does not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster, PSConfig
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve

DEFAULT = {"next_forward": "wait-for-all"}
PER_LAYER_REORDER = {"next_forward": "per-layer", "reorder": True}


@dataclass
class Case:
    """One benchmark row: an instance and the options to solve it with."""

    name: str
    trace: Trace
    cluster: Cluster
    options: dict[str, Any]
    time_limit_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        opts = self.options
        if opts.get("next_forward", "wait-for-all") == "wait-for-all":
            return "default"
        out = "per-layer"
        if opts.get("reorder"):
            out += "+reorder"
        if opts.get("partition_bytes"):
            out += f"+partition {opts['partition_bytes']}"
        if self.extra.get("without"):
            out += f" without {self.extra['without']}"
        return out


def resnet50_cases(limit: float = 10.0) -> list[Case]:
    """ResNet-50 on 8 x 10GbE at five forward times."""
    base = load_trace("resnet50-v100-b64")
    cluster = load_cluster("10gbe-k80-family", nodes=8)
    out = []
    for fwd_ms in (15, 25, 30, 35, 45):
        trace = base.scaled(compute=fwd_ms * 1e-3 / float(base.forward.sum()),
                            name=f"resnet50-f{fwd_ms}ms")
        for opts in (DEFAULT, PER_LAYER_REORDER):
            out.append(Case(trace.name, trace, cluster, opts, limit))
    return out


def gpt2_cases(limit: float = 60.0) -> list[Case]:
    """GPT-2 1.5B on 4 DGX-1 over EDR InfiniBand at three compute/communication ratios."""
    base = load_trace("gpt2-1.5b-v100-fp16")
    cluster = load_cluster("dgx1-v100-4n-ib-edr")
    _, beta = cluster.alpha_beta()
    comm = beta * base.total_bytes
    out = []
    for ratio in (0.5, 1.0, 2.0):
        trace = base.scaled(compute=ratio * comm / base.compute_s, name=f"gpt2-1.5b-r{ratio:g}")
        for opts in (DEFAULT, PER_LAYER_REORDER):
            out.append(Case(trace.name, trace, cluster, opts, limit))
    return out


def synthetic_cases(limit: float = 60.0) -> list[Case]:
    """5,000 tensors on 8 x 10GbE."""
    trace = load_trace("synthetic-5000")
    cluster = load_cluster("10gbe-k80-family", nodes=8)
    return [Case(trace.name, trace, cluster, opts, limit) for opts in (DEFAULT,
                                                                       PER_LAYER_REORDER)]


def multi_stage_cases(limit: float = 60.0) -> list[Case]:
    """Several communication stages, per-layer + reorder: the pipelined hierarchical all-reduce
    of ``dgx-a100-family`` at 4 and 16 nodes (ResNet-50 and GPT-2 1.5B, A100 traces), and
    ResNet-50 through parameter servers on ``k80-4x4-10gbe-ps`` (colocated; dedicated, where a
    local reduce makes push and pull share the intra link) and on 8 single-GPU 10GbE nodes with
    dedicated servers (push and pull on different links: a two-machine flow shop); the last
    row, the dedicated servers again without the shared link's step (ablation)."""
    out = []
    family = load_cluster("dgx-a100-family", nodes=4)
    for name in ("resnet50-a100-b256", "gpt2-1.5b-a100-bf16"):
        trace = load_trace(name)
        for nodes in (4, 16):
            cluster = family.with_size(nodes=nodes).model_copy(update={
                "collective": "hierarchical", "pipelined_hierarchical": True,
                "name": f"dgx-a100-{nodes}n-pipelined"})
            out.append(Case(f"{name} {cluster.name}", trace, cluster, PER_LAYER_REORDER, limit))
    resnet = load_trace("resnet50-v100-b64")
    ps = load_cluster("k80-4x4-10gbe-ps")
    ded = ps.model_copy(update={"ps": PSConfig(servers=4, colocated=False),
                                "name": "k80-4x4-10gbe-ps-dedicated"})
    flat = load_cluster("10gbe-k80-family", nodes=8)
    flat = flat.model_copy(update={"collective": "ps", "allreduce": None,
                                   "ps": PSConfig(servers=2, colocated=False),
                                   "name": "10gbe-8n-ps2-dedicated"})
    for cluster in (ps, ded, flat):
        out.append(Case(f"resnet50-v100-b64 {cluster.name}", resnet, cluster, PER_LAYER_REORDER,
                        limit))
    # ablation: the dedicated servers without the shared link's step (its bound and plans)
    out.append(Case(f"resnet50-v100-b64 {ded.name}", resnet, ded, PER_LAYER_REORDER, limit,
                    extra={"without": "shared-link"}))
    return out


@contextlib.contextmanager
def ablated(without: str | None) -> Iterator[None]:
    """Solve without one ingredient: ``"shared-link"``, the step of a link shared with the
    batch copy (:mod:`schedopt.optimize.shared_link`)."""
    if without is None:
        yield
        return
    assert without == "shared-link", without
    solve_mod = importlib.import_module("schedopt.optimize.solver")
    steps = solve_mod.SEARCH
    solve_mod.SEARCH = tuple(s for s in steps if s.method != "shared-link")
    try:
        yield
    finally:
        solve_mod.SEARCH = steps


def matrix(quick: bool = False, multi_stage: bool = False) -> list[Case]:
    """The benchmark matrix (``quick``: ResNet-50 only; ``multi_stage``: the several-stage
    collectives only)."""
    if multi_stage:
        return multi_stage_cases()
    if quick:
        return resnet50_cases(10.0)
    return resnet50_cases() + gpt2_cases() + synthetic_cases() + multi_stage_cases()


def run_case(case: Case, workers: int = 1, seed: int = 0,
             work_limit_s: float | None = None) -> dict[str, Any]:
    """Solve one case (``work_limit_s``: a deterministic work limit, the time limit then only
    a safety stop); return the row of the table."""
    opts = SolveOptions(time_limit_s=case.time_limit_s, workers=workers, seed=seed,
                        work_limit_s=work_limit_s, **case.options)
    with ablated(case.extra.get("without")):
        res = solve(case.trace, case.cluster, opts)
    opt_s = None
    if res.method in ("dp", "unimodal"):  # the exact programmes
        t0 = time.perf_counter()
        solve(case.trace, case.cluster, opts.model_copy(update={"baselines": False}))
        opt_s = time.perf_counter() - t0
    best = min(res.baselines, key=lambda b: b.iteration_time_s)
    best_expr = min((b for b in res.baselines if b.expressible),
                    key=lambda b: b.iteration_time_s, default=None)
    return {
        "instance": case.name,
        "tensors": case.trace.num_tensors,
        "options": case.label,
        "best_baseline": best.policy,
        "best_baseline_ms": best.iteration_time_s * 1e3,
        "best_expressible": best_expr.policy if best_expr else None,
        "best_expressible_ms": best_expr.iteration_time_s * 1e3 if best_expr else None,
        "optimum_ms": res.iteration_time_s * 1e3,
        "objective_ms": res.objective_s * 1e3,
        "bound_ms": res.bound_s * 1e3,
        "gap": res.gap,
        "status": str(res.status),
        "solve_s": res.solve_time_s,
        "opt_s": opt_s,
        "method": str(res.method),
        "bound_method": str(res.bound_method),
        "work_s": res.work_s,
        "buckets": res.plan.num_buckets,
        "result": res,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    """The benchmark table (markdown)."""
    head = ("| instance | tensors | options | best baseline (ms) | optimum (ms) | bound (ms) | "
            "gap | status | time (s) | work (s) | method | bound by |")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for r in rows:
        base = f"{r['best_baseline']} {r['best_baseline_ms']:.3f}"
        if r["best_expressible"] and r["best_expressible"] != r["best_baseline"]:
            base += f" ({r['best_expressible']} {r['best_expressible_ms']:.3f} expressible)"
        t = f"{r['solve_s']:.2f}" + (f" ({r['opt_s']:.3f})" if r["opt_s"] is not None else "")
        print(f"| {r['instance']} | {r['tensors']} | {r['options']} | {base} | "
              f"{r['optimum_ms']:.3f} | {r['bound_ms']:.3f} | {r['gap'] * 100:.3f}% | "
              f"{r['status']} | {t} | {r['work_s']:.2f} | {r['method']} | {r['bound_method']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="ResNet-50 only")
    ap.add_argument("--multi-stage", action="store_true",
                    help="the several-stage collectives only")
    ap.add_argument("--only", help="rows whose instance name contains this")
    ap.add_argument("--workers", type=int, default=1, help="CP-SAT workers (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--work-limit", type=float, default=None,
                    help="deterministic work limit (s) of every row; the time limits are then "
                         "safety stops (default: 70%% of each row's time limit)")
    args = ap.parse_args(argv)
    rows = []
    for case in matrix(args.quick, args.multi_stage):
        if args.only and args.only not in case.name:
            continue
        row = run_case(case, args.workers, args.seed, args.work_limit)
        rows.append(row)
        print(f"# {row['instance']} {row['options']}: {row['optimum_ms']:.3f} ms, "
              f"gap {row['gap'] * 100:.3f}%, {row['solve_s']:.1f} s", file=sys.stderr)
        # the default class is exact: it must be proven optimal
        if row["options"] == "default":
            assert row["status"] == "OPTIMAL", row
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([{k: v for k, v in r.items() if k != "result"} for r in rows], fh,
                      indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
