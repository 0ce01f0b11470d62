"""The path view of the flow-shop bounds (:mod:`schedopt.optimize.twomachine`: the first and the
last stage as a two-machine flow shop over bucketings, a pivot released before the suffix paid
twice) never cuts off a plan.

Checked by brute force on small random instances: those of
:mod:`.test_multistage_bounds_chain` (six units, dedicated parameter servers and the pipelined
hierarchical all-reduce) and three-layer analogues of ``benchmarks/bench_multistage.py``'s
``ps-dedicated`` instances (8 single-GPU 10GbE nodes, 2 dedicated servers). For every plan,
every bucketing in every launch order, the programme accepts the plan's own period (per-layer)
or the end of its communication (wait-for-all), the simulated period is at least every path
term of the plan's own buckets, and the flow-shop bound stays below the best plan; the view
lifts the bound on some instances; and ``solve`` past the enumeration reports a bound below
the brute-force optimum and claims OPTIMAL only at it.
"""

from __future__ import annotations

import numpy as np
import pytest

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions
from schedopt.optimize.bounds import lower_tails, no_tails
from schedopt.optimize.flowshop import enumerate_plans, pair_bound, resource_bound
from schedopt.optimize.instance import TICK_BUDGET, Instance, build_instance
from schedopt.optimize.twomachine import PathView, path_fits

from .test_multistage_bounds_chain import (
    LAYOUTS,
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
    """A ``ps-dedicated`` instance of the benchmark's generator (two units per layer)."""
    return chain_bench_instance("ps-dedicated", seed, mode, layers)


def path_terms(inst: Instance, segs: list[tuple[int, int]]) -> int:
    """The largest term of the path view on the plan's own buckets (ticks): for every
    bucket ``[i..j]`` the suffix of buckets from it on (in readiness order), with a pivot
    among them and with every earlier unit as the pivot, and every bucket's chain."""
    view = PathView(inst)
    tails = inst.terms.bucket_tails or no_tails(inst.n)
    by_ready = sorted(segs)
    units = np.arange(inst.n)
    out = 0
    for k, (i, j) in enumerate(by_ready):
        suffix = by_ready[k:]
        base = sum(view.a + int(view.p[lo:hi + 1].sum()) for lo, hi in suffix)
        tail = int(lower_tails(tails, i, np.array([j]))[0])
        extra = max(int(view.extra(lo, hi)) for lo, hi in suffix)
        out = max(out, int(inst.r[j]) + base + extra + tail,
                  int(inst.r[j] + view.chain(i, j) + tail))
        for v in units[:i]:
            before = min(int(inst.r[v]) + tail, int(inst.r[j] + tails.fwd[v]))
            out = max(out, base + int(view.chain(v, v)) + before)
    return out


def check_every_plan(trace: Trace, cluster: Cluster, opts: SolveOptions) -> tuple[int, float]:
    """Every plan against the view; the best period over every plan (ticks, seconds)."""

    def make_check(inst: Instance) -> PlanCheck:
        assert len(inst.stages) > 1
        view = PathView(inst)

        def check(segs: list[tuple[int, int]], lam: int, *_: object) -> None:
            assert path_terms(inst, segs) <= lam, segs
            assert path_fits(inst, view, lam), segs

        return check

    _, best_t, best_s = check_plans(trace, cluster, opts, make_check)
    return best_t, best_s


@pytest.mark.parametrize(("layout", "mode", "seed"),
                         [(layout, mode, (k + j) % len(SEEDS)) for k, layout in enumerate(LAYOUTS)
                          for j, mode in enumerate(MODES)])
def test_path_view_never_cuts_off_a_plan(layout: str, mode: str, seed: int) -> None:
    """The chain harness's instances: every plan, simulated, against the path view."""
    check_every_plan(random_trace(seed), layout_cluster(layout), options(mode))


@pytest.mark.parametrize(("seed", "mode"), [(seed, MODES[seed % len(MODES)])
                                             for seed in BENCH_SEEDS])
def test_path_view_on_benchmark_analogues(seed: int, mode: str) -> None:
    """Three-layer analogues of the benchmark's dedicated servers: every plan against the
    path view, and the bound against the enumeration's optimum."""
    trace, cluster, opts = bench_instance(seed, mode)
    best_t, _ = check_every_plan(trace, cluster, opts)
    inst = build_instance(trace, cluster, opts, merge=False)
    assert enumerate_plans(inst, True)[0] == best_t


def test_path_view_lifts_the_bound() -> None:
    """Without the path view (``paths=False`` leaves the resource views alone) the bound is
    never higher, and on some of these instances lower; on some it is higher than the
    unit-level path bound too."""
    lifted = 0
    for seed in BENCH_SEEDS:
        trace, cluster, opts = bench_instance(seed)
        inst = build_instance(trace, cluster, opts, merge=False)
        with_view = resource_bound(inst, 1 << 40)
        without = resource_bound(inst, 1 << 40, paths=False)
        assert with_view >= without
        lifted += with_view > max(without, pair_bound(inst))
    assert lifted >= 1


@pytest.mark.parametrize("seed", [0])
def test_solve_on_benchmark_analogues_past_the_enumeration(seed: int) -> None:
    """Four layers (eight units: more plans than the enumeration takes): ``solve``'s bound
    stays below the brute-force optimum, and OPTIMAL only at it."""
    trace, cluster, _ = bench_instance(seed, layers=4)
    res, inst, best = solve_past_the_enumeration(trace, cluster)
    if str(res.status) == "OPTIMAL":
        assert res.iteration_time_s <= best * inst.tick * (1 + TOL) + TICK_BUDGET * (
            inst.lower_bound_s)

