"""The CP-SAT model: same optimum as the exact programmes and brute force, a feasible warm
start, deterministic runs, clear errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.bounds import stage_bound
from schedopt.optimize.dp import solve_fifo_per_layer, solve_wait_for_all
from schedopt.optimize.instance import Instance, build_instance
from schedopt.optimize.model import CommModel
from schedopt.optimize.units import build_units
from schedopt.policies import make_plan

from .strategies import clusters, traces

#: Deterministic limits: one worker, a seed, a deterministic time budget.
LIMITS = {"time_limit_s": 30.0, "workers": 1, "seed": 0,
          "extra": {"max_deterministic_time": 20.0}}


def solve_model(inst, *, reorder: bool, start, order: str | None = None
                ) -> tuple[str, int | None, int]:
    """Solve the full model from ``start``; check the warm start first."""
    value = int(inst.evaluate(start).period)
    cm = CommModel(inst, order=order or ("any" if reorder else "fifo"), horizon=value)
    cm.add_hint(start)
    assert cm.check_hint(), "the warm start must be a feasible solution"
    sol = cm.solve(**LIMITS)
    assert sol.segs is not None
    assert int(inst.evaluate(sol.segs).period) == sol.objective
    return sol.status, sol.objective, sol.bound


@settings(max_examples=25, deadline=None)
@given(trace=traces(max_layers=5), cluster=clusters(fitted=True),
       prefetch=st.sampled_from([0, 1]), reorder=st.booleans())
def test_cp_sat_equals_dp_on_the_default_class(trace: Trace, cluster: Cluster, prefetch: int,
                                               reorder: bool) -> None:
    """Wait-for-all, one link: CP-SAT's proven optimum is the DP's, on the same integers; the
    model starts from a deliberately poor plan (one bucket)."""
    inst = build_instance(trace, cluster, SolveOptions(prefetch=prefetch))
    dp_val, _ = solve_wait_for_all(inst)
    status, obj, bound = solve_model(inst, reorder=reorder, start=[(0, inst.n - 1)])
    assert status == "OPTIMAL"
    assert obj == bound == dp_val


@settings(max_examples=25, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True),
       prefetch=st.sampled_from([0, 1]))
def test_cp_sat_equals_dp_per_layer_fifo(trace: Trace, cluster: Cluster, prefetch: int) -> None:
    """Per-layer, readiness order, no update step: CP-SAT agrees with the bisected DP."""
    trace = trace.model_copy(update={"update_s": 0.0})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer",
                                                       prefetch=prefetch))
    dp_val, _, exact = solve_fifo_per_layer(inst)
    status, obj, _ = solve_model(inst, reorder=False, start=[(0, inst.n - 1)])
    assert status == "OPTIMAL"
    assert obj == dp_val if exact else obj <= dp_val


@settings(max_examples=20, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True),
       prefetch=st.sampled_from([0, 1]), reorder=st.booleans(),
       piece=st.one_of(st.none(), st.integers(2_000_000, 6_000_000)))
def test_cp_sat_equals_brute_force_per_layer(trace: Trace, cluster: Cluster, prefetch: int,
                                             reorder: bool, piece: int | None) -> None:
    """Per-layer with updates, reordering and pieces: CP-SAT's optimum is the best of every
    bucketing in every allowed order (the exact update windows)."""
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer",
                                                       prefetch=prefetch, reorder=reorder,
                                                       partition_bytes=piece))
    if inst.n > 6:
        return
    best = None
    for bits in itertools.product([False, True], repeat=inst.n - 1):
        segs = inst.segments_from_cuts(np.array(bits, dtype=bool))
        orders = itertools.permutations(range(len(segs))) if reorder else [range(len(segs))]
        for order in orders:
            val = inst.evaluate([segs[k] for k in order]).period
            best = val if best is None else min(best, val)
    _, start, _ = solve_fifo_per_layer(inst)
    status, obj, bound = solve_model(inst, reorder=reorder, start=start)
    assert status == "OPTIMAL"
    assert obj == bound == best
    if reorder:  # the unimodal launch order: as good without updates, a bound with relaxed ones
        status, obj, bound = solve_model(inst, reorder=True, start=start, order="unimodal")
        assert status == "OPTIMAL"
        if inst.consts.U == 0:
            assert obj == best
        else:
            assert obj >= best
        cm = CommModel(inst, order="unimodal", horizon=int(best), exact_updates=False)
        cm.add_hint(start if inst.evaluate(start).period <= best else [(0, inst.n - 1)])
        relaxed = cm.solve(**LIMITS)
        assert relaxed.status == "OPTIMAL" and relaxed.objective <= best


def test_every_expressible_baseline_is_a_feasible_warm_start(tiny_trace: Trace,
                                                              fitted_cluster: Cluster) -> None:
    """The baselines the options can express hint every variable feasibly."""
    opts = SolveOptions(merge_layers=False)
    inst = build_instance(tiny_trace, fitted_cluster, opts)
    for name in ("caffe-mpi", "sync-easgd", "ddp", "mgwfbp", "horovod"):
        plan = make_plan(tiny_trace, fitted_cluster, name)
        segs, reason = inst.segments_of_plan(plan)
        assert segs, reason
        cm = CommModel(inst, order="fifo", horizon=int(inst.evaluate(segs).period))
        cm.add_hint(segs)
        assert cm.check_hint(), name


def test_one_worker_and_a_seed_are_deterministic(tiny_trace: Trace,
                                                 fitted_cluster: Cluster) -> None:
    """Two runs with one worker and the same seed return the same plan and figures."""
    opts = SolveOptions(next_forward="per-layer", reorder=True, partition_bytes=1_000_000,
                        time_limit_s=5.0, workers=1, seed=7,
                        cp_sat={"max_deterministic_time": 2.0})
    from schedopt.optimize import solve

    a, b = solve(tiny_trace, fitted_cluster, opts), solve(tiny_trace, fitted_cluster, opts)
    assert a.plan.buckets == b.plan.buckets
    assert (a.objective_s, a.bound_s, str(a.status)) == (b.objective_s, b.bound_s, str(b.status))


def test_invalid_model_raises_with_cp_sat_message(tiny_trace: Trace,
                                                  fitted_cluster: Cluster) -> None:
    """A model CP-SAT cannot represent (times beyond its integer range) is refused with CP-SAT's
    own validation message."""
    units = build_units(tiny_trace, fitted_cluster, SolveOptions(next_forward="per-layer"))
    inst = Instance(units, 1e-20)  # durations of about 1e17 ticks, beyond CP-SAT's range
    with pytest.raises(SchedoptError, match=r"CP-SAT rejected the model: .*domain"):
        CommModel(inst, order="any", horizon=int(4.7e18))


def test_unknown_cp_sat_parameter_is_refused() -> None:
    with pytest.raises(ValidationError, match="unknown CP-SAT parameter"):
        SolveOptions(cp_sat={"no_such_parameter": 1})


def test_zero_cost_buckets_still_occupy_the_link() -> None:
    """A bucket whose cost rounds to zero ticks must not hide inside another one's interval (an
    empty interval never overlaps anything): every bucket costs at least one tick, so the model's
    objective is the exact period of the plan it returns."""
    trace = Trace.model_validate({
        "name": "tiny", "batch_size": 8, "update_s": 0.015625, "io_s": 0.0, "h2d_s": 0.0,
        "layers": [{"name": "l0", "forward_s": 0.0, "backward_s": 0.0, "tensors": [
            {"name": "w", "bytes": 4, "dtype": "float32"},
            {"name": "b", "bytes": 468, "dtype": "float32"}]}]})
    cluster = Cluster.model_validate({
        "name": "tiny", "nodes": 2, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 0.0},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 0.0},
        "allreduce": {"alpha_s": 0.0, "beta_s_per_byte": 1.670784580973e-09}})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True,
                                                       prefetch=0))
    assert inst.a >= 1
    for start in ([(0, inst.n - 1)], [(0, 0), (1, inst.n - 1)]):
        status, obj, bound = solve_model(inst, reorder=True, start=start)
        assert status == "OPTIMAL"
        assert obj == bound


@settings(max_examples=30, deadline=None)
@given(trace=traces(max_layers=3), cluster=clusters(fitted=False),
       layout=st.sampled_from(["hierarchical", "ps"]), servers=st.integers(1, 3),
       per_layer=st.booleans(), prefetch=st.sampled_from([0, 1]))
def test_several_stages_cp_sat_equals_brute_force(trace: Trace, cluster: Cluster, layout: str,
                                                  servers: int, per_layer: bool,
                                                  prefetch: int) -> None:
    """Stages on several resources (the pipelined hierarchical all-reduce, dedicated servers):
    in readiness order CP-SAT's proven optimum is the best bucketing by brute force, judged by
    the exact multi-stage period (itself checked against the simulator), from one bucket."""
    data = cluster.model_dump()
    cluster = Cluster.model_validate({
        **data, "collective": layout, "allreduce": None, "shared_pcie": False,
        "pipelined_hierarchical": True, "ps": {"servers": servers, "colocated": False},
        "nodes": max(2, data["nodes"]),
        # hierarchical: three stages need several GPUs a node; servers: two disjoint stages
        # need no local reduce, so one GPU a node
        "gpus_per_node": max(2, data["gpus_per_node"]) if layout == "hierarchical" else 1})
    opts = SolveOptions(next_forward="per-layer" if per_layer else "wait-for-all",
                        prefetch=prefetch, merge_layers=False)
    inst = build_instance(trace, cluster, opts)
    if len(inst.stages) < 2 or inst.n > 6:
        return
    best = min(inst.evaluate(inst.segments_from_cuts(np.array(bits, dtype=bool))).period
               for bits in itertools.product([False, True], repeat=inst.n - 1))
    status, obj, bound = solve_model(inst, reorder=False, start=[(0, inst.n - 1)])
    assert status == "OPTIMAL"
    assert obj == bound == best


@settings(max_examples=25, deadline=None)
@given(trace=traces(max_layers=3), cluster=clusters(fitted=False),
       layout=st.sampled_from(["hierarchical", "ps"]), per_layer=st.booleans(),
       reorder=st.booleans())
def test_several_stages_bound_is_valid(trace: Trace, cluster: Cluster, layout: str,
                                       per_layer: bool, reorder: bool) -> None:
    """With several stages the one-stage relaxations (each stage alone, the stages of a shared
    resource as one task) never exceed the best plan by brute force over every bucketing and,
    with reordering, every launch order; neither does the bound ``solve`` reports."""
    data = cluster.model_dump()
    cluster = Cluster.model_validate({
        **data, "collective": layout, "allreduce": None, "shared_pcie": False,
        "pipelined_hierarchical": True, "ps": {"servers": 2, "colocated": False},
        "nodes": max(2, data["nodes"]),
        "gpus_per_node": max(2, data["gpus_per_node"]) if layout == "hierarchical" else 1})
    opts = SolveOptions(next_forward="per-layer" if per_layer else "wait-for-all",
                        reorder=reorder, merge_layers=False, time_limit_s=5.0,
                        cp_sat={"max_deterministic_time": 2.0})
    inst = build_instance(trace, cluster, opts)
    if len(inst.stages) < 2 or inst.n > 5:
        return
    best = np.inf
    for bits in itertools.product([False, True], repeat=inst.n - 1):
        segs = inst.segments_from_cuts(np.array(bits, dtype=bool))
        for perm in itertools.permutations(range(len(segs))) if reorder else [range(len(segs))]:
            best = min(best, inst.evaluate([segs[k] for k in perm]).period)
    assert stage_bound(trace, cluster, opts, inst) <= best
    res = solve(trace, cluster, opts)
    assert res.tick_s == inst.tick
    assert round(res.bound_s / res.tick_s) <= best


def _tiny_with(tiny_trace: Trace, **extra: object) -> Trace:
    return Trace.model_validate({**tiny_trace.model_dump(), **extra})


@pytest.mark.parametrize(("cluster_extra", "trace_extra", "opts", "order"), [
    # per-layer with an update step: update windows, exact; the unimodal order's fronts
    ({}, {"update_s": 0.002}, {"next_forward": "per-layer"}, "any"),
    ({}, {"update_s": 0.002}, {"next_forward": "per-layer"}, "unimodal"),
    # shared PCIe with prefetch: the link_free variable
    ({"allreduce": None, "shared_pcie": True, "nodes": 1, "gpus_per_node": 4},
     {"h2d_s": 0.001, "io_s": 0.001}, {"prefetch": 1}, "fifo"),
    # several stages on shared resources: stage times and the ahead / behind ends
    ({"allreduce": None, "collective": "hierarchical", "pipelined_hierarchical": True,
      "nodes": 2, "gpus_per_node": 2}, {}, {"next_forward": "per-layer"}, "fifo"),
])
def test_the_warm_start_hints_every_variable(tiny_trace: Trace, fitted_cluster: Cluster,
                                             cluster_extra: dict, trace_extra: dict,
                                             opts: dict, order: str) -> None:
    """Every variable of the model gets a hint from the plan's values, and the hint is a
    feasible solution: a family without values would leave variables unhinted or fail."""
    trace = _tiny_with(tiny_trace, **trace_extra)
    cluster = Cluster.model_validate({**fitted_cluster.model_dump(), **cluster_extra})
    inst = build_instance(trace, cluster, SolveOptions(merge_layers=False, **opts))
    segs = [(0, 0), (1, inst.n - 1)]
    cm = CommModel(inst, order=order, horizon=int(inst.evaluate(segs).period))
    cm.add_hint(segs)
    proto = cm.m.proto
    hinted = set(proto.solution_hint.vars)
    assert len(proto.variables) > 3 * inst.n
    assert hinted == set(range(len(proto.variables)))
    assert cm.check_hint()
