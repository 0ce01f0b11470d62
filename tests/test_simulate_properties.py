"""Properties of the simulator on random instances (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.dag import build_dag, check_schedule, longest_path_starts
from schedopt.simulate.simulator import simulate

from .strategies import clusters, traces

PAPER = ["cntk", "caffe-mpi", "sync-easgd", "mxnet", "tensorflow"]
specs = st.sampled_from(PAPER).flatmap(
    lambda p: st.sampled_from([p, f"{p}:prefetch=0"])
)


@settings(max_examples=80, deadline=None)
@given(trace=traces(), cluster=clusters(), spec=specs)
def test_matches_longest_path_of_the_dag(trace: Trace, cluster: Cluster, spec: str) -> None:
    plan = make_plan(trace, cluster, spec)
    sched = simulate(trace, cluster, plan, record=True, max_iterations=12)
    starts = longest_path_starts(build_dag(trace, cluster, plan, iterations=sched.iterations))
    for key, start in starts.items():
        assert sched.tasks[key][0] == pytest.approx(start, abs=1e-12), key
    # precedences, durations, one task at a time per resource
    assert check_schedule(trace, cluster, plan, sched) == []


HOST_SPECS = st.sampled_from([*PAPER, "ddp:bucket_cap_mb=1", "ddp:bucket_cap_mb=1,prefetch=0"])
VARIANTS = st.sampled_from([{}, {"accumulate": 2}, {"next_forward": "per-layer"}])


@settings(max_examples=100, deadline=None)
@given(trace=traces(host=True), cluster=clusters(host=True), spec=HOST_SPECS, variant=VARIANTS,
       slow=st.sampled_from([None, (1.0, 1.0), (1.5, 1.0), (1.0, 2.0)]))
def test_host_side_matches_the_dag(trace: Trace, cluster: Cluster, spec: str, variant: dict,
                                   slow: tuple[float, float] | None) -> None:
    """With host costs (launches, hooks, the step's launches) the simulator is still the
    longest path of the DAG, with and without contention; the breakdown still sums."""
    plan = Plan.model_validate(make_plan(trace, cluster, spec).model_dump() | variant)
    if slow is not None:  # the event-driven evaluation (the same at 1, 1)
        cluster = cluster.model_copy(update={"overlap_slowdown": slow[0],
                                             "comm_slowdown": slow[1]})
        plan = plan.model_copy(update={"cluster_hash": None})
    sched = simulate(trace, cluster, plan, record=True, max_iterations=12)
    parts = sched.breakdown.as_dict()
    assert sum(parts.values()) == pytest.approx(sched.iteration_time_s, abs=1e-12)
    for key, (start, _) in sched.tasks.items():  # no device task before its launch
        if key[0] in ("fwd", "bwd") and ("host-" + key[0], *key[1:]) in sched.tasks:
            assert start >= sched.tasks[("host-" + key[0], *key[1:])][1] - 1e-12, key
        if key[0] == "comm" and key[3] == 0 and ("launch", *key[1:3]) in sched.tasks:
            assert start >= sched.tasks[("launch", *key[1:3])][1] - 1e-12, key
    if slow is None or slow == (1.0, 1.0):
        assert check_schedule(trace, cluster, plan, sched) == []
        starts = longest_path_starts(build_dag(trace, cluster, plan,
                                               iterations=sched.iterations))
        for key, start in starts.items():
            assert sched.tasks[key][0] == pytest.approx(start, abs=1e-12), key
    if slow is None:  # host costs never help (without contention: longest paths)
        base = simulate(trace, cluster.model_copy(update={"launch_overhead_s": 0.0,
                                                          "hook_overhead_s": 0.0}),
                        plan.model_copy(update={"cluster_hash": None}))
        assert sched.iteration_time_s >= base.iteration_time_s - 1e-12


@settings(max_examples=80, deadline=None)
@given(trace=traces(), cluster=clusters(), spec=specs)
def test_period_breakdown_and_bounds(trace: Trace, cluster: Cluster, spec: str) -> None:
    plan = make_plan(trace, cluster, spec)
    sched = simulate(trace, cluster, plan)
    period = sched.iteration_time_s
    assert period >= trace.compute_s + trace.update_s - 1e-12
    assert period >= trace.io_s - 1e-12 and period >= trace.h2d_s - 1e-12
    parts = sched.breakdown.as_dict()
    assert sum(parts.values()) == pytest.approx(period, abs=1e-12)
    assert parts["exposed_comm_s"] >= -1e-12 and parts["io_stall_s"] >= -1e-12
    # the detected period equals the long-run average over many iterations
    long = simulate(trace, cluster, plan, record=True, min_iterations=40, max_iterations=40)
    ends_by_iter = [max(e for k, (_, e) in long.tasks.items()
                        if k[0] == "bwd" and k[1] == i) for i in (19, 39)]
    assert (ends_by_iter[1] - ends_by_iter[0]) / 20 == pytest.approx(period, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(trace=traces(), cluster=clusters(), spec=specs,
       factor=st.floats(min_value=0.05, max_value=0.99))
def test_lower_bandwidth_never_faster(trace: Trace, cluster: Cluster, spec: str,
                                      factor: float) -> None:
    plan = make_plan(trace, cluster, spec).model_copy(update={"cluster_hash": None})
    data = cluster.model_dump()
    for link in ("intra_link", "inter_link"):
        data[link]["bandwidth_Bps"] *= factor
    if data["allreduce"]:
        data["allreduce"]["beta_s_per_byte"] /= factor
    slower = Cluster.model_validate(data)
    fast = simulate(trace, cluster, plan).iteration_time_s
    slow = simulate(trace, slower, plan).iteration_time_s
    assert slow >= fast - 1e-12 * max(1.0, fast)


@settings(max_examples=40, deadline=None)
@given(trace=traces(), cluster=clusters(), spec=specs)
def test_deterministic(trace: Trace, cluster: Cluster, spec: str) -> None:
    a = simulate(trace, cluster, make_plan(trace, cluster, spec))
    b = simulate(trace, cluster, make_plan(trace, cluster, spec))
    assert a.iteration_time_s == b.iteration_time_s
    assert a.breakdown == b.breakdown
