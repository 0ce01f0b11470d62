"""``solve``: never worse than an expressible baseline, one truth with the simulator, a valid
schedule, honest statuses under time limits."""

from __future__ import annotations

import json

import pytest

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, Status, solve
from schedopt.optimize.dp import solve_wait_for_all
from schedopt.optimize.instance import build_instance
from schedopt.simulate.dag import check_schedule
from schedopt.simulate.simulator import simulate

CLUSTERS = ["k80-4x4-10gbe", "dgx1-v100", "k80-4x4-10gbe-ps", "dgx-a100-4n-hierarchical"]
OPTIONS = [
    {},
    {"next_forward": "per-layer"},
    {"next_forward": "per-layer", "reorder": True},
    {"next_forward": "per-layer", "reorder": True, "partition_bytes": 2_000_000},
]


def small_trace(tiny_trace: Trace) -> Trace:
    """The hand-made trace with an update step and a data path, to exercise every term."""
    return tiny_trace.model_copy(update={"update_s": 0.0005, "io_s": 0.003, "h2d_s": 0.001})


def check_result(trace: Trace, cluster: Cluster, res) -> None:
    """The invariants every result must keep."""
    sched = simulate(trace, cluster, res.plan, record=True)
    assert sched.iteration_time_s == pytest.approx(res.iteration_time_s, rel=1e-12)
    assert check_schedule(trace, cluster, res.plan, sched) == []
    # one truth: the model's figure and the simulator's verdict, computed independently
    assert res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-3)
    assert res.bound_s <= res.objective_s * (1 + 1e-12)
    for row in res.baselines:
        if row.expressible:
            assert res.iteration_time_s <= row.iteration_time_s * (1 + 1e-9), row.policy
    if res.status == Status.OPTIMAL:
        assert res.gap == 0.0
    json.dumps(res.to_dict())


@pytest.mark.parametrize("cluster_name", CLUSTERS)
@pytest.mark.parametrize("kw", OPTIONS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in
                                                                   kw.items()) or "default")
def test_matrix_never_worse_than_expressible_baselines(tiny_trace: Trace, cluster_name: str,
                                                       kw: dict) -> None:
    trace = small_trace(tiny_trace)
    cluster = load_cluster(cluster_name)
    res = solve(trace, cluster, SolveOptions(time_limit_s=3.0, **kw))
    check_result(trace, cluster, res)
    assert res.plan.next_forward == (kw.get("next_forward") or "wait-for-all")


def test_default_class_is_optimal_and_beats_ddp_on_resnet50() -> None:
    trace = load_trace("resnet50-v100-b64")
    cluster = load_cluster("k80-4x4-10gbe")
    res = solve(trace, cluster, SolveOptions())
    check_result(trace, cluster, res)
    assert res.status == Status.OPTIMAL and res.method == "dp"
    ddp = next(b for b in res.baselines if b.policy == "ddp")
    assert ddp.expressible and res.iteration_time_s <= ddp.iteration_time_s
    assert {b.policy for b in res.baselines if b.expressible} >= {"caffe-mpi", "sync-easgd",
                                                                  "ddp", "horovod", "mgwfbp"}


def test_colocated_parameter_servers_are_solved_exactly() -> None:
    """Push and pull through colocated servers hold the same resources, so a bucket is one task:
    the whole single-link machinery applies and proves its optimum, which beats the DP on the
    summed costs that several stages otherwise get."""
    trace = load_trace("resnet50-v100-b64")
    cluster = load_cluster("k80-4x4-10gbe-ps")
    assert len(cluster.comm_stages()) == 2
    res = solve(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True,
                                             time_limit_s=10.0))
    check_result(trace, cluster, res)
    assert res.status == Status.OPTIMAL and res.method != "dp-heuristic"
    fifo = solve(trace, cluster, SolveOptions(next_forward="per-layer", time_limit_s=10.0))
    assert res.iteration_time_s < 0.9 * fifo.iteration_time_s


def test_pipelined_stages_are_proven_optimal() -> None:
    """The pipelined hierarchical all-reduce (reduce-scatter and all-gather sharing the intra-
    node link): CP-SAT with every stage proves the optimum, which beats the DP on the summed
    stage costs when the intra-node stages dominate."""
    base = load_cluster("dgx-a100-4n-hierarchical")
    data = base.model_dump()
    slow = data["intra_link"]["bandwidth_Bps"] * 0.02
    cluster = Cluster.model_validate({**data, "intra_link": {**data["intra_link"],
                                                             "bandwidth_Bps": slow}})
    assert len(cluster.comm_stages()) == 3
    trace = load_trace("vgg16-v100-b64").scaled(compute=0.3).model_copy(
        update={"io_s": 0.0, "h2d_s": 0.0})
    res = solve(trace, cluster, SolveOptions(time_limit_s=20.0))
    check_result(trace, cluster, res)
    assert res.status == Status.OPTIMAL
    summed = build_instance(trace, cluster, SolveOptions(), merge=False)
    _, segs = solve_wait_for_all(summed)
    dp_summed = simulate(trace, cluster, summed.to_plan(segs)).iteration_time_s
    assert res.iteration_time_s < 0.97 * dp_summed


def test_time_limit_returns_a_plan_with_a_gap() -> None:
    """A tiny time limit never returns nothing: FEASIBLE, a plan, a bound, a gap."""
    trace = load_trace("resnet50-v100-b64").scaled(compute=0.4)
    cluster = load_cluster("k80-4x4-10gbe")
    res = solve(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True,
                                             time_limit_s=0.3))
    check_result(trace, cluster, res)
    assert res.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert res.plan.num_buckets >= 1
    if res.status == Status.FEASIBLE:
        assert 0.0 < res.gap < 1.0


def test_one_rank_needs_no_communication(tiny_trace: Trace) -> None:
    cluster = load_cluster("dgx1-v100").single_gpu()
    res = solve(tiny_trace, cluster, SolveOptions(next_forward="per-layer"))
    check_result(tiny_trace, cluster, res)
    assert res.status == Status.OPTIMAL
    assert res.iteration_time_s == pytest.approx(tiny_trace.compute_s, rel=1e-9)


@pytest.mark.parametrize("next_forward", ["wait-for-all", "per-layer"])
@pytest.mark.parametrize("prefetch", [0, 1])
def test_shared_pcie_couples_iterations_exactly(tiny_trace: Trace, next_forward: str,
                                                prefetch: int) -> None:
    """When the batch copy shares PCIe with the gradients the model keeps the coupling across
    iterations (the copy of the next batch occupies the link): one truth still holds."""
    trace = tiny_trace.model_copy(update={"h2d_s": 0.02, "io_s": 0.01})
    data = load_cluster("k80-pcie-4gpu").model_dump()
    data["shared_pcie"] = True
    cluster = Cluster.model_validate(data)
    res = solve(trace, cluster, SolveOptions(next_forward=next_forward, prefetch=prefetch,
                                             time_limit_s=3.0))
    check_result(trace, cluster, res)


@pytest.mark.parametrize("reorder", [False, True])
def test_windowed_lns_keeps_plans_valid(reorder: bool) -> None:
    """The large-neighbourhood search (forced on a mid-size instance) returns a valid plan no
    worse than its start, with one truth."""
    from schedopt.optimize.dp import solve_fifo_per_layer
    from schedopt.optimize.instance import build_instance
    from schedopt.optimize.lns import windowed_lns

    trace = load_trace("resnet50-v100-b64").scaled(compute=0.4)
    cluster = load_cluster("10gbe-k80-family", nodes=8)
    opts = SolveOptions(next_forward="per-layer", reorder=reorder)
    inst = build_instance(trace, cluster, opts)
    val, segs, _ = solve_fifo_per_layer(inst)
    import time

    res = windowed_lns(inst, segs, val, reorder=reorder, deadline=time.perf_counter() + 2.0,
                       lower=0, window_units=40)
    assert res.value <= val and res.windows >= 1
    assert int(inst.evaluate(res.segs).period) == res.value
    sim = simulate(trace, cluster, inst.to_plan(res.segs)).iteration_time_s
    assert res.value * inst.tick == pytest.approx(sim, rel=1e-3)
