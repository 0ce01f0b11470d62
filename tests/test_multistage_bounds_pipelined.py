"""The stage views of the flow-shop bounds (:mod:`schedopt.optimize.pipeline`: one stage as a
non-preemptive machine over bucketings, the first bucket of a suffix in launch order paying
its earlier stages and the last its later stages) never cut off a plan.

Checked by brute force on small random instances of the pipelined hierarchical all-reduce
(reduce-scatter and all-gather on the intra-node link, the all-reduce on the network): those of
:mod:`.test_multistage_bounds_chain` and three-layer analogues of
``benchmarks/bench_multistage.py``'s ``pipelined`` instances (4 DGX A100), in both
next-forward modes. For every plan, every bucketing in every launch order, simulated: every
stage view accepts the plan's own period (per-layer) or the end of its communication
(wait-for-all), and an independent sum of the view's terms over the plan's own buckets stays
below it; the flow-shop bound stays below the best plan; the views lift the bound on these
instances; and ``solve`` on a four-layer analogue (eight units, past the enumeration) reports
a bound below the brute-force optimum and claims OPTIMAL only at it.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, flowshop
from schedopt.optimize.bounds import lower_tails, no_tails
from schedopt.optimize.flowshop import enumerate_plans, resource_bound, resource_views
from schedopt.optimize.instance import TICK_BUDGET, Instance, build_instance
from schedopt.optimize.pipeline import StageView

from .test_multistage_bounds_chain import (
    MODES,
    SEEDS,
    TOL,
    PlanCheck,
    check_plans,
    layout_cluster,
    options,
    random_trace,
    solve_past_the_enumeration,
)
from .test_multistage_bounds_chain import bench_instance as chain_bench_instance

BENCH_SEEDS = range(4)  # three-layer analogues of the benchmark's instances


def bench_instance(seed: int, mode: str = "per-layer", layers: int = 3
                   ) -> tuple[Trace, Cluster, SolveOptions]:
    """A ``pipelined`` instance of the benchmark's generator (two units per layer)."""
    return chain_bench_instance("pipelined", seed, mode, layers)


def stage_terms(inst: Instance, segs: list[tuple[int, int]], s: int) -> int:
    """The largest term of stage ``s``'s view on the plan's own buckets (ticks): for every
    suffix of buckets in readiness order, the least head plus tail over two different buckets
    and the suffix's work on ``s``, and every bucket's chain."""
    tails = inst.terms.bucket_tails or no_tails(inst.n)
    rows = []
    for lo, hi in sorted(segs):
        d = [int(inst.stage_a[t] + inst.stage_p[t, lo:hi + 1].sum())
             for t in range(len(inst.stages))]
        q = int(lower_tails(tails, lo, np.array([hi]))[0])
        rows.append((int(inst.r[hi]) + sum(d[:s]), sum(d[s + 1:]) + q, d[s], sum(d) - d[s]))
    out = max(h + w + g for h, g, w, _ in rows)  # every bucket's chain
    for k in range(len(rows) - 1):
        suffix = rows[k:]
        pairs = min(hx + gy for x, (hx, _, _, _) in enumerate(suffix)
                    for y, (_, gy, _, _) in enumerate(suffix) if x != y)
        out = max(out, pairs + sum(w for _, _, w, _ in suffix))
    return out


def check_every_plan(trace: Trace, cluster: Cluster, opts: SolveOptions) -> int:
    """Every plan, simulated, against every stage view; the best period (ticks)."""

    def make_check(inst: Instance) -> PlanCheck:
        assert len(inst.stages) == 3
        machines = resource_views(inst)
        views = [StageView(inst, s, flowshop.ResourceView(inst, (s,)), machines)
                 for s in range(3)]

        def check(segs: list[tuple[int, int]], lam: int, *_: object) -> None:
            for view in views:
                assert stage_terms(inst, segs, view.s) <= lam, (segs, view.s)
                assert view.fits(inst, lam), (segs, view.s)

        return check

    return check_plans(trace, cluster, opts, make_check)[1]


@pytest.mark.parametrize(("seed", "mode"), [(seed, MODES[seed % len(MODES)]) for seed in SEEDS])
def test_stage_views_never_cut_off_a_plan(seed: int, mode: str) -> None:
    """The chain harness's pipelined instances (six units): every plan against every view."""
    check_every_plan(random_trace(seed), layout_cluster("pipelined"), options(mode))


@pytest.mark.parametrize(("seed", "mode"), [(seed, MODES[seed % len(MODES)])
                                             for seed in BENCH_SEEDS])
def test_stage_views_on_benchmark_analogues(seed: int, mode: str) -> None:
    """Three-layer analogues of the benchmark's pipelined all-reduce: every plan against
    every view, and the best plan is the enumeration's optimum."""
    trace, cluster, opts = bench_instance(seed, mode)
    best = check_every_plan(trace, cluster, opts)
    inst = build_instance(trace, cluster, opts, merge=False)
    assert enumerate_plans(inst, True)[0] == best


def test_stage_views_lift_the_bound() -> None:
    """Without the stage views the bound is never higher, and on some of the analogues
    lower; on one it reaches the brute-force optimum."""
    lifted = reached = 0
    for seed in BENCH_SEEDS:
        inst = build_instance(*bench_instance(seed), merge=False)
        with_views = resource_bound(inst, 1 << 40)
        with mock.patch.object(flowshop, "stage_views", return_value=[]):
            without = resource_bound(inst, 1 << 40)
        assert with_views >= without
        lifted += with_views > without
        reached += with_views == enumerate_plans(inst, True)[0]
    assert lifted >= 2 and reached >= 1


@pytest.mark.parametrize("seed", [0])
def test_solve_on_benchmark_analogues_past_the_enumeration(seed: int) -> None:
    """Four layers (eight units: more plans than the enumeration takes): ``solve``'s bound
    stays below the brute-force optimum, and OPTIMAL only at it."""
    trace, cluster, _ = bench_instance(seed, layers=4)
    res, inst, best = solve_past_the_enumeration(trace, cluster)
    if str(res.status) == "OPTIMAL":
        assert res.iteration_time_s <= best * inst.tick * (1 + TOL) + TICK_BUDGET * (
            inst.lower_bound_s)
