"""The flow-shop view of several communication stages: per-resource bounds that never exceed
the brute-force optimum over every bucketing and launch order, and that count every stage."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve, solver
from schedopt.optimize.flowshop import enumerate_plans, plan_count, resource_bound, resource_views
from schedopt.optimize.instance import build_instance

from .strategies import clusters, comparable_layers, traces


def several_stages(cluster: Cluster, layout: str) -> Cluster:
    """``cluster`` with a multi-stage collective: the pipelined hierarchical all-reduce
    (several GPUs per node) or dedicated servers without a local reduce (one GPU per node)."""
    data = cluster.model_dump()
    return Cluster.model_validate({
        **data, "collective": layout, "allreduce": None, "shared_pcie": False,
        "pipelined_hierarchical": True, "ps": {"servers": 2, "colocated": False},
        "nodes": max(2, data["nodes"]),
        "gpus_per_node": max(2, data["gpus_per_node"]) if layout == "hierarchical" else 1})


def brute_force(inst, reorder: bool) -> int:
    """The best period over every bucketing and (with ``reorder``) every launch order."""
    best = np.iinfo(np.int64).max
    for bits in itertools.product([False, True], repeat=inst.n - 1):
        segs = inst.segments_from_cuts(np.array(bits, dtype=bool))
        for perm in itertools.permutations(range(len(segs))) if reorder else [range(len(segs))]:
            best = min(best, int(inst.evaluate([segs[k] for k in perm]).period))
    return int(best)


@settings(max_examples=40, deadline=None)
@given(trace=traces(max_layers=3), cluster=clusters(fitted=False),
       layout=st.sampled_from(["hierarchical", "ps"]), per_layer=st.booleans())
def test_resource_bound_is_valid(trace: Trace, cluster: Cluster, layout: str,
                                 per_layer: bool) -> None:
    """The best resource view never exceeds the brute-force optimum over every bucketing and
    launch order."""
    cluster = several_stages(cluster, layout)
    opts = SolveOptions(next_forward="per-layer" if per_layer else "wait-for-all",
                        reorder=True, merge_layers=False)
    inst = build_instance(trace, cluster, opts)
    if len(inst.stages) < 2 or inst.n > 5:
        return
    best = brute_force(inst, reorder=True)
    assert resource_bound(inst, best) <= best


@st.composite
def pipelines(draw: st.DrawFn) -> tuple[Trace, Cluster]:
    """A trace of at most 5 tensors whose communication is comparable with its compute (the
    heads and tails of the stages matter), on a pipelined hierarchical all-reduce or on
    dedicated servers without a local reduce."""
    layers = draw(comparable_layers(4_000_000))
    trace = Trace.model_validate({"name": "p", "batch_size": 1, "layers": layers,
                                  "update_s": draw(st.sampled_from([0.0, 1e-3]))})
    layout = draw(st.sampled_from(["hierarchical", "ps"]))
    cluster = Cluster.model_validate({
        "name": "p", "nodes": draw(st.integers(2, 4)),
        "gpus_per_node": 8 if layout == "hierarchical" else 1, "collective": layout,
        "pipelined_hierarchical": True, "ps": {"servers": 2, "colocated": False},
        "intra_link": {"bandwidth_Bps": draw(st.floats(2e9, 2e10)),
                       "latency_s": draw(st.sampled_from([0.0, 1e-5, 3e-4]))},
        "inter_link": {"bandwidth_Bps": draw(st.floats(2e9, 2e10)),
                       "latency_s": draw(st.sampled_from([0.0, 1e-5, 3e-4]))}})
    return trace, cluster


@settings(max_examples=60, deadline=None)
@given(case=pipelines(), per_layer=st.booleans())
def test_resource_bound_is_valid_on_pipelines(case: tuple[Trace, Cluster],
                                              per_layer: bool) -> None:
    """Stages of comparable cost (the heads, the tails and the bucket counts all matter): the
    bound never exceeds the brute-force optimum over every bucketing and launch order."""
    trace, cluster = case
    opts = SolveOptions(next_forward="per-layer" if per_layer else "wait-for-all",
                        reorder=True, merge_layers=False)
    inst = build_instance(trace, cluster, opts)
    if inst.n > 5:
        return
    best = brute_force(inst, reorder=True)
    assert resource_bound(inst, best) <= best


def test_views_count_every_stage() -> None:
    """Pipelined hierarchical: the intra link holds reduce-scatter and all-gather (no head, no
    tail), the network the all-reduce with both intra stages as head and tail."""
    trace = Trace.model_validate({"name": "t", "batch_size": 1, "layers": [
        {"name": "l0", "forward_s": 1e-3, "backward_s": 2e-3,
         "tensors": [{"name": "w", "bytes": 4_000_000}]}]})
    cluster = Cluster.model_validate({
        "name": "c", "nodes": 4, "gpus_per_node": 8, "collective": "hierarchical",
        "pipelined_hierarchical": True,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 1e-6},
        "inter_link": {"bandwidth_Bps": 1e10, "latency_s": 1e-5}})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer"))
    views = {v.on: v for v in resource_views(inst)}
    assert set(views) == {(0, 2), (1,)}
    net = views[(1,)]
    assert net.a_before == inst.stage_a[0] and net.a_after == inst.stage_a[2]
    assert np.array_equal(net.p_before, inst.stage_p[0])
    # one bucket, one unit: the bound is the whole chain of three stages plus the tail
    segs = [(0, 0)]
    period = int(inst.evaluate(segs).period)
    chain = int(inst.stage_a.sum() + inst.stage_p.sum())
    assert resource_bound(inst, period) >= inst.r[0] + chain + inst.fwd_from[0]
    assert resource_bound(inst, period) <= period


@settings(max_examples=12, deadline=None)
@given(case=pipelines(), per_layer=st.booleans(), reorder=st.booleans())
def test_solve_on_several_stages_is_sound(case: tuple[Trace, Cluster], per_layer: bool,
                                          reorder: bool) -> None:
    """``solve`` on several stages: the objective is the simulated period, the bound never
    exceeds the brute-force optimum, and OPTIMAL is claimed only at that optimum."""
    trace, cluster = case
    opts = SolveOptions(next_forward="per-layer" if per_layer else "wait-for-all",
                        reorder=reorder, merge_layers=False, time_limit_s=5.0,
                        cp_sat={"max_deterministic_time": 1.0})
    inst = build_instance(trace, cluster, opts)
    if inst.n > 5:
        return
    best = brute_force(inst, reorder=reorder)
    res = solve(trace, cluster, opts)
    assert res.tick_s == inst.tick
    assert res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-3)
    assert round(res.bound_s / res.tick_s) <= best
    if res.status == "OPTIMAL":
        assert round(res.objective_s / res.tick_s) == best


def test_several_stages_are_deterministic() -> None:
    """One worker and a seed: the same plan and bound twice (dedicated servers, reordering)."""
    layers = [{"name": f"l{i}", "forward_s": 1e-3 * (1 + i % 3), "backward_s": 2e-3,
               "tensors": [{"name": f"l{i}.w", "bytes": 400_000 * (1 + (7 * i) % 5)},
                           {"name": f"l{i}.b", "bytes": 4_000}]} for i in range(12)]
    trace = Trace.model_validate({"name": "d", "batch_size": 1, "layers": layers})
    cluster = Cluster.model_validate({
        "name": "d", "nodes": 4, "gpus_per_node": 1, "collective": "ps",
        "ps": {"servers": 2, "colocated": False},
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 1e-6},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 3e-5}})
    opts = SolveOptions(next_forward="per-layer", reorder=True, time_limit_s=20.0, seed=3)
    one, two = solve(trace, cluster, opts), solve(trace, cluster, opts)
    assert one.plan.buckets == two.plan.buckets
    assert one.bound_s == two.bound_s
    assert not one.wall_stop


@settings(max_examples=15, deadline=None)
@given(case=pipelines(), reorder=st.booleans())
def test_enumeration_is_the_brute_force_optimum(case: tuple[Trace, Cluster],
                                                reorder: bool) -> None:
    """Every bucketing and launch order, counted as :func:`plan_count` says: the optimum of
    the class."""
    trace, cluster = case
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer",
                                                       reorder=reorder, merge_layers=False))
    if inst.n > 5:
        return
    val, segs = enumerate_plans(inst, reorder)
    assert val == brute_force(inst, reorder=reorder)
    assert int(inst.evaluate(segs).period) == val
    bucketings = sum(1 for _ in itertools.product([0, 1], repeat=inst.n - 1))
    assert plan_count(inst.n, reorder) >= bucketings
    assert plan_count(5, True) == 1 + 4 * 2 + 6 * 6 + 4 * 24 + 120
    assert plan_count(5, False) == 16
    assert plan_count(5_000, True, limit=20_000) > 20_000  # stops early: no huge sum


@settings(max_examples=15, deadline=None)
@given(case=pipelines(), piece=st.sampled_from([1_000_000, 2_000_000, 4_000_000]),
       per_layer=st.booleans())
def test_partitioning_is_never_worse_than_the_unpartitioned_class(
        case: tuple[Trace, Cluster], piece: int, per_layer: bool) -> None:
    """With ``partition_bytes`` the plan is never slower than the best plan of the
    unpartitioned class (brute force over every bucketing and launch order): that class is
    solved first, its optimum proven on small instances, and its plan starts the search."""
    trace, cluster = case
    mode = "per-layer" if per_layer else "wait-for-all"
    plain = build_instance(trace, cluster, SolveOptions(next_forward=mode, reorder=True,
                                                        merge_layers=False))
    if plain.n > 5:
        return
    best = brute_force(plain, reorder=True)
    opts = SolveOptions(next_forward=mode, reorder=True, partition_bytes=piece,
                        time_limit_s=20.0, work_limit_s=2.0,
                        cp_sat={"max_deterministic_time": 0.5})
    res = solve(trace, cluster, opts)
    assert res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-3)
    assert res.objective_s <= best * plain.tick * (1 + 1e-3)


@settings(max_examples=12, deadline=None)
@given(case=pipelines())
def test_stage_programmes_bound_below_brute_force(case: tuple[Trace, Cluster]) -> None:
    """Without the enumeration, reordered per-layer plans of several stages take the bound of
    the unimodal programme on every one-stage relaxation: never above the brute-force optimum
    over every bucketing and launch order, and OPTIMAL only there."""
    trace, cluster = case
    opts = SolveOptions(next_forward="per-layer", reorder=True, merge_layers=False,
                        time_limit_s=20.0, work_limit_s=2.0,
                        cp_sat={"max_deterministic_time": 0.5})
    inst = build_instance(trace, cluster, opts)
    if inst.n > 5:
        return
    best = brute_force(inst, reorder=True)
    with mock.patch.object(solver, "ENUMERATION_PLANS", 0):
        res = solve(trace, cluster, opts)
    assert res.bound_method != "enumeration"
    assert res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-3)
    assert round(res.bound_s / res.tick_s) <= best
    if res.status == "OPTIMAL":
        assert round(res.objective_s / res.tick_s) == best
