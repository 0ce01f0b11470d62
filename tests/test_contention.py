"""Contention both ways: communication at speed 1/s_c while compute runs (fluid, exact)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.model.cluster import Cluster
from schedopt.model.contention import Contention
from schedopt.model.plan import Plan, Schedule
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import Model, simulate

from .strategies import clusters, traces
from .test_overlap_slowdown import check_fluid, two_layers


def contended(cluster: Cluster, s: float, s_c: float) -> Cluster:
    return Cluster.model_validate({**cluster.model_dump(), "overlap_slowdown": s,
                                   "comm_slowdown": s_c})


def test_comm_slowed_by_compute_closed_form(fitted_cluster: Cluster) -> None:
    # c's all-reduce (3 ms) starts when c's backward ends (4 ms: F 2 + b_c 2) and meets a's
    # backward (4 ms) at speed 1/2: 2 ms of its work by 8 ms, the last 1 ms alone: ends at 9 ms
    tr, cl = two_layers(2_000_000), contended(fitted_cluster, 1.0, 2.0)
    got = simulate(tr, cl, make_plan(tr, cl, "caffe-mpi"), record=True)
    assert got.iteration_time_s == pytest.approx(0.009, rel=1e-12)
    start, end = got.tasks[("comm", 2, 0, 0)]
    assert end - start == pytest.approx(0.005, rel=1e-9)
    free = simulate(tr, fitted_cluster, make_plan(tr, fitted_cluster, "caffe-mpi"))
    assert free.iteration_time_s == pytest.approx(0.008, rel=1e-12)  # the comm hides


def test_symmetric_contention_closed_form(fitted_cluster: Cluster) -> None:
    # s = s_c = 2: the 3 ms all-reduce and a's 4 ms backward share the machine from 4 ms;
    # the all-reduce ends at 10 ms (3 ms of work at 1/2) with 3 ms of the backward done, the
    # last 1 ms alone: 11 ms = F + B + C, what no overlap costs
    tr, cl = two_layers(2_000_000), contended(fitted_cluster, 2.0, 2.0)
    got = simulate(tr, cl, make_plan(tr, cl, "caffe-mpi"), record=True)
    assert got.iteration_time_s == pytest.approx(0.011, rel=1e-12)
    assert got.tasks[("comm", 2, 0, 0)][1] - got.tasks[("bwd", 2, 0)][0] == pytest.approx(0.006)
    cntk = simulate(tr, cl, make_plan(tr, cl, "cntk")).iteration_time_s
    assert got.iteration_time_s == pytest.approx(cntk, rel=1e-12)


def check_comm_fluid(trace: Trace, cluster: Cluster, schedule: Schedule, plan: Plan) -> None:
    """Each communication task does exactly its work: length - busy + busy / s_c, with busy
    its overlap with the compute tasks."""
    m = Model.build(trace, cluster, plan)
    compute = [v for k, v in schedule.tasks.items()
               if k[0] in ("fwd", "bwd", "update") and v[1] > v[0]]
    for key, (a, b) in schedule.tasks.items():
        if key[0] != "comm":
            continue
        busy = sum(max(0.0, min(b, y) - max(a, x)) for x, y in compute)
        work = float(m.comm_dur[key[2], key[3]])
        got = (b - a) - busy + busy / cluster.comm_slowdown
        assert got == pytest.approx(work, rel=1e-9, abs=1e-12), key


@settings(max_examples=40, deadline=None)
@given(trace=traces(max_layers=5), cluster=clusters(), s=st.floats(1.0, 4.0),
       s_c=st.floats(1.0, 4.0),
       policy=st.sampled_from(["caffe-mpi", "mgwfbp", "ddp", "horovod", "bytescheduler",
                               "cntk", "mxnet", "deepspeed"]))
def test_every_task_does_its_work(trace: Trace, cluster: Cluster, s: float, s_c: float,
                                  policy: str) -> None:
    """Compute and communication both follow the fluid rates; the parts sum to the period;
    the period lies between the free-overlap one and the no-overlap sum of its parts."""
    cl = contended(cluster, s, s_c)
    plan = make_plan(trace, cl, policy)
    got = simulate(trace, cl, plan, record=True)
    check_fluid(trace, cl, got, plan)
    check_comm_fluid(trace, cl, got, plan)
    assert got.breakdown.total_s == pytest.approx(got.iteration_time_s, rel=1e-9, abs=1e-12)
    free = simulate(trace, cluster, make_plan(trace, cluster, policy)).iteration_time_s
    assert got.iteration_time_s >= free * (1 - 1e-9) - 1e-12


@settings(max_examples=30, deadline=None)
@given(trace=traces(max_layers=5),
       policy=st.sampled_from(["caffe-mpi", "mgwfbp", "ddp", "horovod", "cntk", "deepspeed"]))
def test_processor_sharing_conserves_work(trace: Trace, policy: str) -> None:
    """s = s_c = 2 on one communication stage, no data stream: every instant does one unit of
    work, so a wait-for-all plan takes F + B + U + sum of its communication, overlap or not."""
    trace = Trace.model_validate({**trace.model_dump(), "io_s": 0.0, "h2d_s": 0.0})
    one_stage = Cluster.model_validate({
        "name": "fit", "nodes": 4, "gpus_per_node": 1, "intra_link": {"bandwidth_Bps": 1e10},
        "inter_link": {"bandwidth_Bps": 1e9},
        "allreduce": {"alpha_s": 1e-3, "beta_s_per_byte": 1e-9}})
    cl = contended(one_stage, 2.0, 2.0)
    plan = make_plan(trace, cl, policy)
    if plan.next_forward != "wait-for-all":
        return
    got = simulate(trace, cl, plan)
    m = Model.build(trace, cl, plan)
    total = float(trace.forward.sum() + trace.backward.sum()) + trace.update_s + float(
        m.comm_dur.sum())
    assert got.iteration_time_s == pytest.approx(total, rel=1e-9, abs=1e-12)


def test_engine_by_hand() -> None:
    """Two tasks on one lane, the second released by the first; compute in between."""
    ends: list[tuple[object, float, float]] = []
    net = Contention(2.0, 4.0, lambda k, a, b: ends.append((k, a, b)))
    net.add("x", 1.0, ("net",))
    net.add("y", 1.0, ("net",), after="x")
    net.release("x")
    # 2 s of compute while x runs at 1/4 and compute at 1/2: compute ends at 4 s, x has done 1
    assert net.flow(2.0) == pytest.approx(4.0)
    assert net.end_of("x") == pytest.approx(4.0)
    # y starts at 4 with compute idle: full speed, ends at 5
    assert net.flow(wait="y") == pytest.approx(5.0)
    assert ends == [("x", 0.0, pytest.approx(4.0)), ("y", pytest.approx(4.0), pytest.approx(5.0))]
    with pytest.raises(RuntimeError, match="cannot end"):
        net.add("z", 1.0, ("net",))  # never released
        net.flow(wait="z")


def test_timed_release_and_fixed_task() -> None:
    """A data copy released at 3 s shares the lane, runs at full speed and slows nothing."""
    net = Contention(3.0, 3.0)
    net.add("copy", 2.0, ("pcie",), at=3.0, fixed=True)
    assert net.flow(4.0) == pytest.approx(4.0)  # compute alone: the copy does not slow it
    assert net.flow(wait="copy") == pytest.approx(5.0)
    assert math.isclose(net.end_of("copy") or 0.0, 5.0)


def test_fingerprint_and_bounds(fitted_cluster: Cluster) -> None:
    assert contended(fitted_cluster, 1.0, 1.0).fingerprint() == fitted_cluster.fingerprint()
    assert contended(fitted_cluster, 1.0, 1.5).fingerprint() != fitted_cluster.fingerprint()
    with pytest.raises(ValueError, match="comm_slowdown"):
        contended(fitted_cluster, 1.0, 0.5)
