"""The unimodal launch order and its exact programme, against brute force over every order."""

from __future__ import annotations

import itertools
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import schedopt.optimize.unimodal as unimodal_mod
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions
from schedopt.optimize.bounds import constant_bound
from schedopt.optimize.instance import build_instance
from schedopt.optimize.model import unimodal_order
from schedopt.optimize.unimodal import (
    pair_makespan,
    unhidden_share,
    unimodal_exact,
    unimodal_feasible,
)

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


@settings(max_examples=25, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True), with_update=st.booleans(),
       grid_rel=st.sampled_from([0.002, 0.02, 0.1]), slack=st.floats(0.0, 1.0))
def test_grid_phase_keeps_the_bound_and_the_optimum(trace: Trace, cluster: Cluster,
                                                    with_update: bool, grid_rel: float,
                                                    slack: float) -> None:
    """The grid phase (grid tests bisecting the bracket before the exact tests, coarse grids
    here so that it runs) stays sound: the bound never passes the optimum over every launch
    order, a plan is judged exactly, and without an update step or data path the programme
    still ends at the optimum from a loose upper end."""
    trace = trace.model_copy(update={"io_s": 0.0, "h2d_s": 0.0})
    if not with_update:
        trace = trace.model_copy(update={"update_s": 0.0})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    if inst.n > 6 or not inst.stages:
        return
    best = int(brute(inst)[0])
    res = unimodal_exact(inst, constant_bound(inst) - 1, best + int(slack * best),
                         grid_rel=grid_rel)
    assert res is not None
    assert max(res.bound, constant_bound(inst)) <= best
    if res.segs:
        assert inst.evaluate(res.segs).period >= best
    if res.exact:
        assert res.bound == best


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


def _pair_trace(update_s: float, sizes: list[list[int]], forward_s: float = 5e-4) -> Trace:
    """Layers of one small and one large tensor (a bias and a weight; ``sizes`` in float32
    elements)."""
    layers = [{"name": f"l{i}", "forward_s": forward_s, "backward_s": 2 * forward_s,
               "tensors": [{"name": f"l{i}.t{j}", "bytes": 4 * b, "dtype": "float32"}
                           for j, b in enumerate(ts)]}
              for i, ts in enumerate(sizes)]
    return Trace.model_validate({"name": "pairs", "batch_size": 8, "layers": layers,
                                 "update_s": update_s})


_PAIR_CLUSTER = Cluster.model_validate({
    "name": "c", "nodes": 2, "gpus_per_node": 1,
    "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 0.0},
    "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 0.0},
    "allreduce": {"alpha_s": 1e-3, "beta_s_per_byte": 1e-9}})


def _assert_bound_at_most_optimum(trace: Trace) -> None:
    """The programme's bound (per-layer, reordered, on ``_PAIR_CLUSTER``) never exceeds the
    optimum over every bucketing and launch order."""
    inst = build_instance(trace, _PAIR_CLUSTER,
                          SolveOptions(next_forward="per-layer", reorder=True))
    best, _ = brute(inst)
    res = unimodal_exact(inst, constant_bound(inst) - 1, int(best))
    assert res is not None
    assert max(res.bound, constant_bound(inst)) <= best


def test_pair_makespan_is_the_better_of_both_orders() -> None:
    """Two jobs (communication ``d``, then update ``s``) on a two-machine flow shop."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        d_a, s_a, d_b, s_b = (int(x) for x in rng.integers(0, 100, size=4))

        def flow(first: tuple[int, int], second: tuple[int, int]) -> int:
            return max(first[0] + first[1], first[0] + second[0]) + second[1]

        want = min(flow((d_a, s_a), (d_b, s_b)), flow((d_b, s_b), (d_a, s_a)))
        got = pair_makespan(np.array([d_a]), np.array([s_a]), np.int64(d_b), np.int64(s_b))
        assert int(got[0]) == want


def _flow_shop(jobs: list[tuple[int, int]]) -> int:
    """Best makespan of ``(communication, update)`` jobs on a two-machine flow shop, over every
    order (brute force)."""
    best = None
    for perm in itertools.permutations(jobs):
        link = upd = 0
        for d, s in perm:
            link += d
            upd = max(upd, link) + s
        best = upd if best is None else min(best, upd)
    assert best is not None
    return best


def test_unhidden_share_bounds_every_flow_shop() -> None:
    """The term a late bucket gets when later late buckets of its layer follow (one or more,
    at most ``work_after`` of communication, each update at least ``least_update``) never
    exceeds the best flow-shop makespan beyond all their communication; with a single later
    bucket the pair makespan is that makespan exactly."""
    rng = np.random.default_rng(1)
    for _ in range(400):
        jobs = [(int(d), int(s)) for d, s in rng.integers(1, 60, size=(int(rng.integers(2, 5)), 2))]
        (d_a, s_a), after = jobs[0], jobs[1:]
        work = sum(d for d, _ in after)
        least = min(s for _, s in after)
        best = _flow_shop(jobs)
        got = int(unhidden_share(np.array([s_a]), work + int(rng.integers(0, 5)),
                                 max(0, least - int(rng.integers(0, 5))))[0])
        assert d_a + work + got <= best
        if len(after) == 1:
            (d_b, s_b), = after
            pair = pair_makespan(np.array([d_a]), np.array([s_a]), np.int64(d_b), np.int64(s_b))
            assert int(pair[0]) == best


def test_late_pair_of_one_layer_waits_for_both_updates() -> None:
    """A layer split into a large bucket and its last unit, both launched after the peak: the
    forward waits for both updates whatever their order. With updates comparable to the
    communication, counting that flow shop makes the programme's bound the optimum over every
    bucketing and launch order (without it the bound is 20,170 ticks, 10% below)."""
    inst = build_instance(_pair_trace(0.02, [[2_000_000, 100]] * 3), _PAIR_CLUSTER,
                          SolveOptions(next_forward="per-layer", reorder=True))
    assert inst.n == 6
    best, _ = brute(inst)
    res = unimodal_exact(inst, constant_bound(inst) - 1, int(best))
    assert res is not None
    assert max(res.bound, constant_bound(inst)) == best


@settings(max_examples=15, deadline=None)
@given(update_s=st.floats(0.0, 0.04), forward_s=st.floats(0.0, 0.004),
       sizes=st.lists(st.tuples(st.integers(1, 5_000), st.integers(500_000, 2_000_000)),
                      min_size=2, max_size=3),
       swap=st.booleans())
def test_pair_term_stays_a_bound(update_s: float, forward_s: float,
                                 sizes: list[tuple[int, int]], swap: bool) -> None:
    """Layers of a bias and a weight with updates as long as their communication (where the
    flow-shop term of a late pair binds): the programme's bound never exceeds the optimum over
    every bucketing and launch order."""
    _assert_bound_at_most_optimum(
        _pair_trace(update_s, [list(ts[::-1]) if swap else list(ts) for ts in sizes], forward_s))


def test_a_timeout_returns_only_what_was_proven() -> None:
    """Stopped by its deadline before any test ends, the search proves nothing: its bound is
    the ``lo`` it was given plus one, never the plan value ``hi`` it was to improve on."""
    inst = build_instance(_pair_trace(0.02, [[2_000_000, 100]] * 3), _PAIR_CLUSTER,
                          SolveOptions(next_forward="per-layer", reorder=True))
    best, _ = brute(inst)
    lo = constant_bound(inst) - 1
    res = unimodal_exact(inst, lo, int(best) + 5_000, deadline=time.perf_counter() - 1.0)
    assert res is not None
    assert res.bound == lo + 1 <= best
    assert not res.exact and res.segs == []


@settings(max_examples=12, deadline=None)
@given(update_s=st.floats(0.0, 0.04), forward_s=st.floats(0.0, 0.004),
       layers=st.lists(st.lists(st.integers(1, 2_000_000), min_size=3, max_size=3),
                       min_size=2, max_size=2))
def test_flow_shop_term_stays_a_bound_with_more_units_left(update_s: float, forward_s: float,
                                                           layers: list[list[int]]) -> None:
    """Layers of three tensors: a late bucket with two units of its layer after it is followed
    by late buckets that hide at most their work behind its update; the bound stays below the
    optimum over every bucketing and launch order."""
    _assert_bound_at_most_optimum(_pair_trace(update_s, layers, forward_s))


@settings(max_examples=30, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True),
       grid_rel=st.sampled_from([0.002, 0.02, 0.1]), slack=st.integers(1, 50))
def test_fine_grid_phase_proves_only_what_holds(trace: Trace, cluster: Cluster, grid_rel: float,
                                                slack: int) -> None:
    """The fine grid test just below a plan's period: when it reports the bracket closed, no
    plan beats that period; a plan it finds is judged exactly and is never below the
    optimum over every launch order."""
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    if inst.n > 6 or not inst.stages:
        return
    best = int(brute(inst)[0])
    lo = constant_bound(inst) - 1
    tests = unimodal_mod._Tests(inst, deadline=None, levels=512, grid_rel=grid_rel,
                                pairs=True)
    new_lo, new_top = unimodal_mod._fine_grid_phase(tests, lo, best + slack, 1)
    assert new_lo < best <= new_top
    if tests.found is not None and tests.segs:
        assert int(inst.evaluate(tests.segs).period) >= best
