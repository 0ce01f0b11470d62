"""The overlap slowdown: compute runs at speed 1/s while communication runs (fluid, exact)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, Schedule
from schedopt.model.trace import Trace
from schedopt.policies import POLICIES, make_plan
from schedopt.simulate.simulator import Model, _ContentionSimulator, _Simulator, simulate

from .strategies import clusters, traces


def with_slowdown(cluster: Cluster, s: float) -> Cluster:
    return Cluster.model_validate({**cluster.model_dump(), "overlap_slowdown": s})


def two_layers(bytes_c: int) -> Trace:
    """Layer a (first, no gradient) and layer c (last, one tensor): c's all-reduce overlaps a's
    backward and nothing else."""
    return Trace.model_validate({
        "name": "two", "batch_size": 1,
        "layers": [
            {"name": "a", "forward_s": 0.001, "backward_s": 0.004, "tensors": []},
            {"name": "c", "forward_s": 0.001, "backward_s": 0.002,
             "tensors": [{"name": "c.w", "bytes": bytes_c}]},
        ],
    })


def test_partly_overlapped_closed_form(fitted_cluster: Cluster) -> None:
    # comm of c: 1 ms + 2 ms = 3 ms, from the end of c's backward (2 ms after backward start);
    # a's backward (4 ms of work) runs 3 ms at speed 1/2 (1.5 ms of work), then 2.5 ms at 1.
    tr, cl = two_layers(2_000_000), with_slowdown(fitted_cluster, 2.0)
    got = simulate(tr, cl, make_plan(tr, cl, "caffe-mpi"))
    # F + b_c + b_a + c (1 - 1/s) = 2 + 2 + 4 + 1.5 ms
    assert got.iteration_time_s == pytest.approx(0.0095, rel=1e-12)
    assert got.breakdown.total_s == pytest.approx(got.iteration_time_s, rel=1e-12)
    assert got.breakdown.exposed_comm_s == pytest.approx(0.0015, rel=1e-9)


def test_fully_overlapped_closed_form(fitted_cluster: Cluster) -> None:
    # comm of c: 1 + 9 = 10 ms >= s * b_a = 8 ms: a's backward runs wholly at speed 1/2
    tr, cl = two_layers(9_000_000), with_slowdown(fitted_cluster, 2.0)
    got = simulate(tr, cl, make_plan(tr, cl, "caffe-mpi"), record=True)
    assert got.tasks[("bwd", 2, 0)][1] - got.tasks[("bwd", 2, 0)][0] == pytest.approx(0.008)
    # F + b_c + c = 2 + 2 + 10 ms: the communication is the critical path
    assert got.iteration_time_s == pytest.approx(0.014, rel=1e-12)


@pytest.mark.parametrize("s", [1.0, 1.5, 3.0])
def test_no_overlap_plan_is_not_slowed(fitted_cluster: Cluster, s: float) -> None:
    # cntk communicates after the whole backward: nothing overlaps, s changes nothing
    tr = two_layers(2_000_000)
    base = simulate(tr, fitted_cluster, make_plan(tr, fitted_cluster, "cntk")).iteration_time_s
    cl = with_slowdown(fitted_cluster, s)
    assert simulate(tr, cl, make_plan(tr, cl, "cntk")).iteration_time_s == pytest.approx(
        base, rel=1e-12)


SHIPPED = [("resnet50-v100-b64", "dgx1-v100"), ("googlenet-k80-10gbe-4n", "k80-4x4-10gbe-ps"),
           ("bert-base-v100-fp16", "dgx1-v100-4n-ib-edr"),
           ("vgg16-k80-b32", "dgx-a100-4n-hierarchical")]


@pytest.mark.parametrize(("trace", "cluster"), SHIPPED)
def test_s_one_reproduces_the_simulator_exactly(trace: str, cluster: str) -> None:
    """The event-driven evaluation at s = 1 equals the vectorised one on shipped instances."""
    tr, cl = load_trace(trace), load_cluster(cluster)
    for name in POLICIES:
        m = Model.build(tr, cl, make_plan(tr, cl, name))
        a = _Simulator(m, True).run(3, 256)
        b = _ContentionSimulator(m, True).run(3, 256)
        assert b.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-12), name
        assert b.first_iteration_s == pytest.approx(a.first_iteration_s, rel=1e-12), name
        assert a.tasks.keys() == b.tasks.keys()
        for key, (s0, e0) in a.tasks.items():
            assert b.tasks[key] == pytest.approx((s0, e0), rel=1e-12, abs=1e-15), key


def check_fluid(trace: Trace, cluster: Cluster, schedule: Schedule, plan: Plan) -> None:
    """Independent check: every compute task's length is its work plus (1 - 1/s) times its
    overlap with the union of communication intervals, i.e. work = free + busy / s."""
    comm = sorted(v for k, v in schedule.tasks.items() if k[0] == "comm" and v[1] > v[0])
    union: list[list[float]] = []
    for a, b in comm:
        if union and a <= union[-1][1]:
            union[-1][1] = max(union[-1][1], b)
        else:
            union.append([a, b])
    update_dur = Model.build(trace, cluster, plan).update_dur
    for key, (a, b) in schedule.tasks.items():
        if key[0] not in ("fwd", "bwd", "update"):
            continue
        if key[0] == "fwd":
            work = trace.layers[key[2]].forward_s
        elif key[0] == "bwd":
            work = trace.layers[key[2]].backward_s
        else:
            work = trace.update_s if key[2] < 0 else float(update_dur[key[2]])
        busy = sum(max(0.0, min(b, y) - max(a, x)) for x, y in union)
        s = cluster.overlap_slowdown
        assert (b - a) - busy + busy / s == pytest.approx(work, rel=1e-9, abs=1e-12), key


@settings(max_examples=40, deadline=None)
@given(trace=traces(max_layers=5), cluster=clusters(), s=st.floats(1.0, 4.0),
       policy=st.sampled_from(["caffe-mpi", "mgwfbp", "ddp", "horovod", "bytescheduler",
                               "cntk", "mxnet", "deepspeed", "megatron"]))
def test_fluid_semantics_and_bounds(trace: Trace, cluster: Cluster, s: float,
                                    policy: str) -> None:
    """Each compute task does exactly its work; T(1) <= T(s) <= T with every compute time x s."""
    slow = with_slowdown(cluster, s)
    plan = make_plan(trace, slow, policy)
    got = simulate(trace, slow, plan, record=True)
    check_fluid(trace, slow, got, plan)
    assert got.breakdown.total_s == pytest.approx(got.iteration_time_s, rel=1e-9, abs=1e-12)
    base = simulate(trace, cluster, make_plan(trace, cluster, policy)).iteration_time_s
    scaled = Trace.model_validate({
        **trace.model_dump(),
        "layers": [{**lay.model_dump(), "forward_s": lay.forward_s * s,
                    "backward_s": lay.backward_s * s} for lay in trace.layers],
        "update_s": trace.update_s * s,
    })
    upper = simulate(scaled, cluster, make_plan(scaled, cluster, policy)).iteration_time_s
    assert base * (1 - 1e-9) - 1e-12 <= got.iteration_time_s <= upper * (1 + 1e-9) + 1e-12


def test_rejects_slowdown_below_one() -> None:
    with pytest.raises(ValueError, match="overlap_slowdown"):
        Cluster.model_validate({"name": "x", "nodes": 1, "gpus_per_node": 2,
                                "intra_link": {"bandwidth_Bps": 1e9}, "overlap_slowdown": 0.5})


def test_fingerprint_sees_the_new_fields_only_when_set(fitted_cluster: Cluster) -> None:
    slow = with_slowdown(fitted_cluster, 1.2)
    over = Cluster.model_validate({**fitted_cluster.model_dump(), "collective_overhead_s": 1e-4})
    prints = {fitted_cluster.fingerprint(), slow.fingerprint(), over.fingerprint()}
    assert len(prints) == 3
    # at the defaults the hash is that of the document without the new fields
    same = Cluster.model_validate({**fitted_cluster.model_dump(), "overlap_slowdown": 1.0})
    assert same.fingerprint() == fitted_cluster.fingerprint()
