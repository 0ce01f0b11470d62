"""Robust plans against the nominal optimum and the baselines (the figures of docs/robust.md).

Usage::

    python benchmarks/bench_robust.py            # about 2 minutes, one worker, seed 0
    python benchmarks/bench_robust.py --limit 5  # shorter searches

For each instance (trace, cluster, plan class, scenarios) the robust search runs once; every
row is one candidate judged on every scenario by the simulator: its worst and its nominal
iteration time. ``nominal optimum`` is the optimum of the nominal instance, ``robust`` the
plan of ``optimize --robust``; the ablation rows (``robust: ...``) are the best worst case
among the candidates of the ingredients named (so ``+ scenario optima`` is the search without
its local search). ``loss`` is how much slower the row's worst case is than the robust plan's.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import AllReduceFit, Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions
from schedopt.optimize.robust import RobustResult, robust_solve
from schedopt.simulate.scenarios import Scenario, cluster_scenarios, corner_scenarios

PER_LAYER = {"next_forward": "per-layer", "reorder": True}


def calibrations(trace: Trace, base: Cluster) -> list[Scenario]:
    """Two fitted all-reduce costs of one machine that disagree: start-up heavy (x100 the
    link model's alpha, x0.5 its beta; the nominal one) and bandwidth heavy (x0.05 alpha,
    x0.75 beta)."""
    a, b = base.alpha_beta()
    fits = [("startup-fit", a * 100, b * 0.5), ("bandwidth-fit", a * 0.05, b * 0.75)]
    return cluster_scenarios(trace, [
        base.model_copy(update={"name": n, "allreduce": AllReduceFit(alpha_s=fa,
                                                                     beta_s_per_byte=fb)})
        for n, fa, fb in fits])


def cases() -> list[tuple[str, list[Scenario], dict[str, Any]]]:
    """(label, scenarios, solve options) of every instance."""
    out = []
    for t, c, nodes, cls, vary, pct in [
        ("resnet50-v100-b64", "k80-4x4-10gbe", None, PER_LAYER, ["beta"], 20),
        ("resnet50-a100-b256", "10gbe-k80-family", 8, PER_LAYER, ["beta"], 20),
        ("resnet50-a100-b256", "dgx-a100-family", 16, PER_LAYER, ["beta"], 20),
        ("bert-large-a100-bf16", "10gbe-k80-family", 8, PER_LAYER, ["beta"], 20),
        ("bert-large-a100-bf16", "dgx-a100-family", 16, PER_LAYER, ["beta"], 20),
        ("gpt2-124m-a100-bf16", "10gbe-k80-family", 8, PER_LAYER, ["beta"], 20),
        ("bert-base-v100-fp16", "10gbe-k80-family", 8, {}, ["beta"], 20),
        ("bert-base-v100-fp16", "10gbe-k80-family", 8, {}, ["alpha", "beta"], 50),
    ]:
        tr, cl = load_trace(t), load_cluster(c, nodes)
        mode = "per-layer+reorder" if cls else "wait-for-all"
        out.append((f"{t} {cl.name} {mode} {','.join(vary)}+-{pct}%",
                    corner_scenarios(tr, cl, pct, vary=vary), cls))
    tr, cl = load_trace("bert-base-v100-fp16"), load_cluster("k80-4x4-10gbe")
    out.append((f"bert-base-v100-fp16 {cl.name} wait-for-all 2 fits",
                calibrations(tr, cl), {}))
    return out


def rows(res: RobustResult) -> list[tuple[str, float, float]]:
    """(method, worst, nominal) rows: baselines, nominal optimum, ablation, robust."""
    out: list[tuple[str, float, float]] = []
    by = {c.source: c for c in res.candidates}
    for name in ("mgwfbp", "ddp", "horovod", "bytescheduler"):
        c = by.get(f"baseline {name}")
        if c is not None:
            out.append((name + ("" if c.expressible else " (outside the class)"),
                        c.worst_s, c.nominal_s))
    nom = by["nominal optimum"]
    out.append(("nominal optimum", nom.worst_s, nom.nominal_s))
    steps = [("robust: + baselines", ("nominal optimum", "baseline ")),
             ("robust: + scenario optima", ("nominal optimum", "baseline ", "optimum of "))]
    for label, prefixes in steps:
        cands = [c for c in res.candidates if c.expressible and c.source.startswith(prefixes)]
        best = min(cands, key=lambda c: c.worst_s)
        out.append((label, best.worst_s, best.nominal_s))
    out.append(("robust (+ local search)", res.worst_s, res.nominal_s))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=float, default=20.0, help="time limit per instance (s)")
    args = parser.parse_args(argv)
    print(f"{'instance':<62} {'method':<32} {'worst ms':>10} {'nominal ms':>11} {'loss':>8}")
    for label, scenarios, cls in cases():
        res = robust_solve(scenarios, SolveOptions(time_limit_s=args.limit, workers=1, seed=0,
                                                   **cls))
        for method, worst, nominal in rows(res):
            loss = 100 * (worst / res.worst_s - 1)
            print(f"{label:<62} {method:<32} {worst * 1e3:>10.3f} {nominal * 1e3:>11.3f} "
                  f"{loss:>7.2f}%")
        print(f"{label:<62} {'robust status':<32} {res.status} gap {100 * res.gap:.3f}% "
              f"bound {res.bound_s * 1e3:.3f} ms, {res.solve_time_s:.1f} s, "
              f"{len(scenarios)} scenarios, worst {res.worst_scenario}"
              f"{', wall stop' if res.wall_stop else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
