"""A stage alone still waits for the stages before it and the start-up costs after it
(:func:`schedopt.optimize.bounds.stage_heads`): the one-stage relaxations with releases moved
later never cut off a plan.

Checked by brute force on the small instances of :mod:`.test_multistage_bounds_chain` (six
units of the pipelined hierarchical all-reduce and of dedicated servers): for every plan, every
bucketing in every launch order simulated by :func:`schedopt.simulate.simulator.simulate`, the
one-stage period of every moved relaxation under the same launch order stays at or below the
simulated period (both tick budgets in hand, as ``solve`` converts it); the readiness-order
programme, the DP bound over bucketings and the unimodal programme on each relaxation, and
:func:`.bounds.stage_bound`, stay below the brute-force optimum; and the move lifts some bounds.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from schedopt.optimize.bounds import (
    lower_bound,
    stage_bound,
    stage_groups,
    stage_heads,
    stage_relaxation,
)
from schedopt.optimize.dp import solve_fifo_per_layer
from schedopt.optimize.instance import TICK_BUDGET, build_instance
from schedopt.optimize.unimodal import unimodal_exact
from schedopt.simulate.simulator import simulate

from .test_multistage_bounds_chain import (
    LAYOUTS,
    MODES,
    SEEDS,
    TOL,
    every_plan,
    layout_cluster,
    options,
    random_trace,
)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_moved_relaxations_never_cut_off_a_plan(layout: str, mode: str, seed: int) -> None:
    """Every plan, simulated, against every moved relaxation's period of the same order; the
    bounds of every relaxation against the brute-force optimum."""
    trace, cluster, opts = random_trace(seed), layout_cluster(layout), options(mode)
    inst = build_instance(trace, cluster, opts, merge=False)
    groups = [g for g in stage_groups(inst) if isinstance(g, int)]
    ones = [stage_relaxation(trace, cluster, opts, inst, g, merge=False) for g in groups]
    assert all(one.n == inst.n for one in ones) and len(ones) == len(inst.stages) > 1
    knobs = {"next_forward": mode, "reorder": True, "partition_bytes": None}
    best_s, best_t = np.inf, np.iinfo(np.int64).max
    for segs in every_plan(inst.n, inst.segments_from_cuts):
        sim = simulate(trace, cluster, inst.to_plan(segs, knobs=knobs)).iteration_time_s
        best_s, best_t = min(best_s, sim), min(best_t, int(inst.evaluate(segs).period))
        for one in ones:
            slack = TICK_BUDGET * (one.lower_bound_s + inst.lower_bound_s)
            assert int(one.evaluate(segs).period) * one.tick <= sim * (1 + TOL) + slack
    for one in ones:
        slack = TICK_BUDGET * (one.lower_bound_s + inst.lower_bound_s)
        limit = best_s * (1 + TOL) + slack
        if mode == "per-layer":
            dp_val = int(solve_fifo_per_layer(one)[0])
            res = unimodal_exact(one, lower_bound(one, dp_val) - 1, dp_val)
            assert res is not None and res.bound * one.tick <= limit
        assert lower_bound(one, 1 << 40) * one.tick <= limit
    assert stage_bound(trace, cluster, opts, inst) <= best_t


def test_moving_lifts_the_relaxations() -> None:
    """Every moved release is at least the unmoved one less a tick, and the moved
    relaxations' bounds are never lower (and on some of these instances higher)."""
    lifted = 0
    for layout, seed in itertools.product(LAYOUTS, SEEDS):
        trace, cluster, opts = random_trace(seed), layout_cluster(layout), options("per-layer")
        inst = build_instance(trace, cluster, opts, merge=False)
        for g in range(len(inst.stages)):
            plain = build_instance(trace, cluster, opts, merge=False, stage=g)
            moved = stage_heads(plain, inst.stages, g)
            assert np.all(moved.r >= plain.r - 1) and np.all(np.diff(moved.r) >= 0)
            dp_p, dp_m = int(solve_fifo_per_layer(plain)[0]), int(solve_fifo_per_layer(moved)[0])
            b_p = unimodal_exact(plain, lower_bound(plain, dp_p) - 1, dp_p)
            b_m = unimodal_exact(moved, lower_bound(moved, dp_m) - 1, dp_m)
            assert b_p is not None and b_m is not None
            assert b_m.bound >= b_p.bound - 1
            lifted += b_m.bound > b_p.bound
    assert lifted >= 1


def test_nothing_to_move_on_one_stage() -> None:
    """One stage (or a PCIe link shared with the batch copy): the relaxation is the instance."""
    trace, cluster = random_trace(0), layout_cluster("pipelined")
    opts = options("per-layer")
    inst = build_instance(trace, cluster, opts, merge=False, stage=1)
    assert stage_heads(inst, inst.stages, 0) is inst
