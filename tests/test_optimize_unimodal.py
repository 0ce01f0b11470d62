"""The unimodal launch order and its exact programme, against brute force over every order."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import schedopt.optimize.unimodal as unimodal_mod
from schedopt.cluster import Cluster
from schedopt.optimize import SolveOptions
from schedopt.optimize.bounds import constant_bound
from schedopt.optimize.instance import build_instance
from schedopt.optimize.model import unimodal_order
from schedopt.optimize.unimodal import unimodal_exact, unimodal_feasible
from schedopt.trace import Trace

from .strategies import clusters, traces


def brute(inst):
    """Best period over every bucketing in every launch order, and over unimodal orders."""
    best = best_uni = None
    for bits in itertools.product([False, True], repeat=inst.n - 1):
        segs = inst.segments_from_cuts(np.array(bits, dtype=bool))
        for perm in itertools.permutations(range(len(segs))):
            order = [segs[k] for k in perm]
            val = inst.evaluate(order).period
            uni = inst.evaluate(unimodal_order(inst, order)).period
            best = val if best is None else min(best, val)
            best_uni = uni if best_uni is None else min(best_uni, uni)
    return best, best_uni


@settings(max_examples=40, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True), with_update=st.booleans(),
       with_data=st.booleans(), piece=st.one_of(st.none(), st.integers(2_000_000, 6_000_000)))
def test_unimodal_programme_is_exact_or_a_bound(trace: Trace, cluster: Cluster,
                                                with_update: bool, with_data: bool,
                                                piece: int | None) -> None:
    """Without an update step or data path the programme's optimum is the optimum over every
    launch order (and the unimodal order loses nothing); otherwise it is a lower bound."""
    if not with_update:
        trace = trace.model_copy(update={"update_s": 0.0})
    if not with_data:
        trace = trace.model_copy(update={"io_s": 0.0, "h2d_s": 0.0})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True,
                                                       partition_bytes=piece))
    if inst.n > 6 or not inst.stages:
        return
    best, best_uni = brute(inst)
    res = unimodal_exact(inst, constant_bound(inst) - 1, int(best))
    assert res is not None
    bound = max(res.bound, constant_bound(inst))
    assert bound <= best
    if res.exact:
        assert best_uni == best
        assert bound == best
        if res.segs:
            assert inst.evaluate(res.segs).period == best


@settings(max_examples=30, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True),
       grid=st.sampled_from([1, 7, 1000, 100_000]), levels=st.sampled_from([0, 1, 3]),
       max_states=st.sampled_from([2, 5, 10**9]))
def test_relaxations_stay_bounds(trace: Trace, cluster: Cluster, grid: int, levels: int,
                                 max_states: int) -> None:
    """The coarser relaxations (update levels, state grid) never declare infeasible a period
    that some plan meets, and with tiny fronts (every test overflowing into them) the search
    still returns a bound."""
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    if inst.n > 6 or not inst.stages:
        return
    best, _ = brute(inst)
    ok, segs = unimodal_feasible(inst, int(best), want_plan=True, grid=grid, levels=levels)
    assert ok and segs
    assert sorted(segs) == inst.segments_from_cuts(
        np.array([any(hi == k for _, hi in segs) for k in range(inst.n - 1)], dtype=bool))
    saved = unimodal_mod.MAX_STATES
    unimodal_mod.MAX_STATES = max_states
    try:
        res = unimodal_exact(inst, constant_bound(inst) - 1, int(best), grid_rel=0.01)
    finally:
        unimodal_mod.MAX_STATES = saved
    assert res is not None
    assert res.bound <= best
    if res.segs:  # a plan: its segments tile the units
        assert sum(hi - lo + 1 for lo, hi in res.segs) == inst.n
        assert sorted(res.segs) == inst.segments_from_cuts(
            np.array([any(hi == k for _, hi in res.segs) for k in range(inst.n - 1)]))
