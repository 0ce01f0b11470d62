"""Sharded plans, accumulation and the communication dtype against hand-computed schedules.

Sharded plans are checked against schedules worked out by hand (in the comments), not against
the networkx DAG oracle of schedopt/dag.py: the DAG fixes every resource's order in advance,
while a sharded plan's network order follows the issue times (one stream) or a priority among
the tasks issued by then (two streams), which depend on the schedule itself. The hand cases
below cover both rules, prefetch 0 and 1, both modes, accumulation, the dtype and the peak.

Units of the fixture: the fitted all-reduce is ``T(n) = 2 ms + n · 1 ns/B`` on 2 ranks, so an
all-gather or reduce-scatter of ``n`` bytes takes ``AG(n) = (2 ms + n ns) / 2``: 3 ms for 4 MB,
5 ms for 8 MB.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, Sharding
from schedopt.model.sharded import Network, peak_bytes
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.policies.units import merge_tensorless
from schedopt.simulate.dag import build_dag, check_schedule, longest_path_starts
from schedopt.simulate.simulator import Model, recost, simulate, simulate_model

from .strategies import clusters, traces

PAPER = ["cntk", "caffe-mpi", "sync-easgd", "mxnet", "tensorflow"]
MS = 1e-3
MB4 = 4_000_000


def _cluster(**kw: object) -> Cluster:
    data = {"name": "c", "nodes": 1, "gpus_per_node": 2,
            "intra_link": {"bandwidth_Bps": 1e9},
            "allreduce": {"alpha_s": 2 * MS, "beta_s_per_byte": 1e-9}, **kw}
    return Cluster.model_validate(data)


def _trace(layers: list[tuple[float, float, int]], update_s: float = 0.0,
           dtype: str = "float32") -> Trace:
    """Layers ``l0, l1, ...`` of (forward ms, backward ms, bytes of tensor ``lK.w``)."""
    return Trace.model_validate({
        "name": "t", "batch_size": 1, "update_s": update_s,
        "layers": [{"name": f"l{i}", "forward_s": f * MS, "backward_s": b * MS,
                    "tensors": [{"name": f"l{i}.w", "bytes": n, "dtype": dtype}]}
                   for i, (f, b, n) in enumerate(layers)]})


def _sharded(trace: Trace, units: list[list[int]], mode: str = "full", p: int = 1, q: int = 1,
             streams: int = 2, **kw: object) -> Plan:
    names = [[f"l{i}" for i in unit] for unit in units]
    buckets = [[f"l{i}.w" for i in unit] for unit in reversed(units)]
    sharding = Sharding(mode=mode, units=names, forward_prefetch=p,  # type: ignore[arg-type]
                        backward_prefetch=q, streams=streams)  # type: ignore[arg-type]
    return Plan(policy="test", buckets=buckets, sharding=sharding, **kw)  # type: ignore[arg-type]


def test_cost_is_half_the_allreduce_with_the_overhead_once() -> None:
    fit = _cluster(collective_overhead_s=1 * MS)
    # overhead + (T(n) + overhead - overhead) / 2
    assert fit.shard_collective_time(MB4) == pytest.approx(1 * MS + 3 * MS, rel=1e-12)
    ring = Cluster.model_validate({"name": "r", "nodes": 1, "gpus_per_node": 4,
                                   "intra_link": {"bandwidth_Bps": 1e9, "latency_s": 1e-5}})
    # ring: (p-1) steps of latency and (p-1)/p of the bytes
    assert ring.shard_collective_time(MB4) == pytest.approx(3 * 1e-5 + 0.75 * MB4 / 1e9)
    assert ring.single_gpu().shard_collective_time(MB4) == 0.0
    with pytest.raises(SchedoptError, match="ps"):
        ring.shard_collective_time(MB4, "ps")


def test_one_unit_without_prefetch() -> None:
    # AGf 0-3, F 3-13, AGb 13-16 (issued at the backward's start), B 16-36, RS 36-39,
    # step on the shard 4 ms / 2 ranks: 39-41
    tr = _trace([(10, 20, MB4)], update_s=4 * MS)
    sched = simulate(tr, _cluster(), _sharded(tr, [[0]], p=0, q=0), record=True)
    assert sched.iteration_time_s == pytest.approx(41 * MS, rel=1e-12)
    assert sched.first_iteration_s == pytest.approx(41 * MS, rel=1e-12)
    assert sched.tasks[("rs", 0, 0)] == pytest.approx((36 * MS, 39 * MS))
    # parameters 0-13 and 13-36, gradients 16-39: two copies at once
    assert sched.peak_memory_bytes == 2 * MB4
    assert sched.shard_bytes == MB4 / 2
    assert sched.breakdown.update_s == pytest.approx(2 * MS)
    assert sched.breakdown.exposed_comm_s == pytest.approx(9 * MS, rel=1e-9)


@pytest.mark.parametrize(("mode", "period", "peak"), [
    # full: AGf0 0-5, F0 5-15, AGf1 5-8 (issued at F0's start), F1 15-25; AGb1 25-28,
    # B1 28-48, AGb0 28-33 (at B1's start), RS1 48-51, B0 48-68, RS0 68-73; step 73-75.
    # Memory (MB/4): u0 fwd [0,15) 2, u1 fwd [5,25) 1, u1 bwd [25,48) 1, u0 bwd [28,68) 2,
    # grads u1 [28,51) 1, u0 [48,73) 2: at [48,51) 2 + 1 + 2 = 5.
    ("full", 75, 5),
    # grad-op: no AGb; B1 25-45, RS1 45-48, B0 45-65, RS0 65-70; step 70-72.
    # Memory: u0 params [0,65) 2, u1 [5,45) 1, grads u1 [25,48) 1, u0 [45,70) 2: at [45,48)
    # 2 + 1 + 2 = 5.
    ("grad-op", 72, 5),
])
def test_two_units_with_prefetch_one(mode: str, period: float, peak: int) -> None:
    tr = _trace([(10, 20, 2 * MB4), (10, 20, MB4)], update_s=4 * MS)
    sched = simulate(tr, _cluster(), _sharded(tr, [[0], [1]], mode=mode), record=True)
    assert sched.iteration_time_s == pytest.approx(period * MS, rel=1e-12)
    assert sched.peak_memory_bytes == peak * MB4
    assert sched.tasks[("ag", 1, 1, 0, "fwd")][1] - sched.tasks[("ag", 1, 1, 0, "fwd")][0] == (
        pytest.approx(3 * MS))
    # a step's tasks repeat one period later
    assert sched.tasks[("rs", 2, 0)][0] - sched.tasks[("rs", 1, 0)][0] == pytest.approx(
        period * MS, rel=1e-9)


def test_prefetch_hides_gathers_that_no_prefetch_exposes() -> None:
    tr = _trace([(10, 20, 2 * MB4), (10, 20, MB4)])
    # no prefetch: AGf0 0-5, F0 5-15, AGf1 15-18, F1 18-28, AGb1 28-31, B1 31-51,
    # AGb0 51-56 (issued at B1's end, after RS1 51-54, served first by priority), B0 56-76,
    # RS0 76-81
    none = simulate(tr, _cluster(), _sharded(tr, [[0], [1]], p=0, q=0))
    assert none.iteration_time_s == pytest.approx(81 * MS, rel=1e-12)
    # with one stream RS1 (issued first) goes before AGb0: AGb0 54-59, B0 59-79, RS0 79-84
    one = simulate(tr, _cluster(), _sharded(tr, [[0], [1]], p=0, q=0, streams=1))
    assert one.iteration_time_s == pytest.approx(84 * MS, rel=1e-12)


def test_streams_one_and_two_differ() -> None:
    # 3 units of 4 MB (AG = RS = 3 ms), forward 10 ms each; backward 1, 1, 10 ms (u2, u1, u0).
    # Forward: AGf0 0-3, F0 3-13, AGf1 3-6, F1 13-23, AGf2 13-16, F2 23-33.
    # Backward: AGb2 33-36, B2 36-37, AGb1 36-39 (B2's start), RS2 issued 37, B1 39-40,
    # AGb0 issued 39, RS1 issued 40. At 39 the network holds RS2 (37) and AGb0 (39):
    #   one stream: RS2 39-42, AGb0 42-45, B0 45-55, RS1 45-48, RS0 55-58 -> 58
    #   two streams: AGb0 39-42, RS2 42-45, B0 42-52, RS1 45-48, RS0 52-55 -> 55
    tr = _trace([(10, 10, MB4), (10, 1, MB4), (10, 1, MB4)])
    units = [[0], [1], [2]]
    one = simulate(tr, _cluster(), _sharded(tr, units, streams=1))
    two = simulate(tr, _cluster(), _sharded(tr, units, streams=2))
    assert one.iteration_time_s == pytest.approx(58 * MS, rel=1e-12)
    assert two.iteration_time_s == pytest.approx(55 * MS, rel=1e-12)


@pytest.mark.parametrize(("mode", "period", "peak"), [
    # full, one unit, k = 2: per micro-batch AGf 3 + F 10 + AGb 3 + B 20; RS 3 after the last
    # (2 · 36 + 3 = 75). Gradients from the first B (16) to RS's end stay alive through the
    # second micro-batch's gathers: 2 copies.
    ("full", 75, 2),
    # grad-op: one gather for both micro-batches: 3 + 2 · 30 + 3 = 66; parameters and
    # gradients: 2 copies.
    ("grad-op", 66, 2),
])
def test_accumulation_of_a_sharded_plan(mode: str, period: float, peak: int) -> None:
    tr = _trace([(10, 20, MB4)])
    plan = _sharded(tr, [[0]], mode=mode, p=0, q=0, accumulate=2)
    sched = simulate(tr, _cluster(), plan, record=True)
    assert sched.iteration_time_s == pytest.approx(period * MS, rel=1e-12)
    assert sched.peak_memory_bytes == peak * MB4
    assert sched.breakdown.forward_s == pytest.approx(20 * MS)
    assert ("fwd", 1, 0, 0) in sched.tasks and ("fwd", 1, 0) in sched.tasks


def test_accumulation_of_an_allreduce_plan() -> None:
    # layers l0, l1: forward 10 ms, backward 20 ms; l0 8 MB (T = 10 ms), l1 28 MB (T = 30 ms);
    # one bucket per layer (WFBP). k = 1: F 0-20, B1 20-40, B0 40-60, comm1 40-70, comm0 70-80.
    # k = 2: the first micro-batch runs 0-60 without communication; then F 60-80, B1 80-100,
    # B0 100-120, comm1 100-130, comm0 130-140.
    tr = _trace([(10, 20, 8_000_000), (10, 20, 28_000_000)])
    cl = _cluster()
    base = Plan(policy="wfbp", buckets=[["l1.w"], ["l0.w"]])
    one = simulate(tr, cl, base)
    two = simulate(tr, cl, base.model_copy(update={"accumulate": 2}), record=True)
    assert one.iteration_time_s == pytest.approx(80 * MS, rel=1e-12)
    assert two.iteration_time_s == pytest.approx(140 * MS, rel=1e-12)
    assert two.breakdown.backward_s == pytest.approx(80 * MS)
    assert two.breakdown.exposed_comm_s == pytest.approx(20 * MS, rel=1e-9)
    assert two.tasks[("comm", 0, 0, 0)] == pytest.approx((100 * MS, 130 * MS))
    assert two.tasks[("bwd", 0, 1, 0)] == pytest.approx((20 * MS, 40 * MS))
    assert two.peak_memory_bytes is None


def test_accumulation_with_overlap_slowdown_matches_without_contention() -> None:
    # slowdown 2: micro-batch 0 has no communication, so only the last backward slows down
    tr = _trace([(10, 20, 8_000_000), (10, 20, 28_000_000)])
    base = Plan(policy="wfbp", buckets=[["l1.w"], ["l0.w"]], accumulate=2)
    slow = simulate(tr, _cluster(overlap_slowdown=2.0), base)
    # B0 of the last micro-batch (100-120 without slowdown) overlaps comm1 (100-130): 15 ms of
    # its work at half speed by 130, the last 5 ms at full speed, 130-135; comm0 135-145
    assert slow.iteration_time_s == pytest.approx(145 * MS, rel=1e-12)


def test_comm_dtype_halves_the_bytes() -> None:
    # cntk-like: no overlap; F 10 + B 20 + T(8 MB in bf16 = 4 MB) = 6 ms
    tr = _trace([(10, 20, 8_000_000)])
    plan = Plan(policy="x", buckets=[["l0.w"]], overlap=False)
    full = simulate(tr, _cluster(), plan)
    half = simulate(tr, _cluster(), plan.model_copy(update={"comm_dtype": "bfloat16"}))
    assert full.iteration_time_s == pytest.approx(40 * MS, rel=1e-12)
    assert half.iteration_time_s == pytest.approx(36 * MS, rel=1e-12)
    # sharded: the reduce-scatter moves bf16 (AG(4 MB) = 3 ms), the gathers fp32 (5 ms):
    # AGf 0-5, F 5-15, AGb 15-20, B 20-40, RS 40-43
    sh = simulate(tr, _cluster(), _sharded(tr, [[0]], p=0, q=0, comm_dtype="bfloat16"))
    assert sh.iteration_time_s == pytest.approx(43 * MS, rel=1e-12)


def test_one_rank_has_no_communication() -> None:
    tr = _trace([(10, 20, MB4), (10, 20, MB4)], update_s=4 * MS)
    sched = simulate(tr, _cluster().single_gpu(), _sharded(tr, [[0], [1]]))
    assert sched.iteration_time_s == pytest.approx(64 * MS, rel=1e-12)


def test_network_serves_by_issue_or_priority() -> None:
    for streams, first in ((1, "rs"), (2, "ag")):
        net = Network(streams, free=5.0)
        net.issue(("rs",), 1.0, 2.0, True)
        net.issue(("ag",), 3.0, 1.0, False)
        net.drain()
        assert net.done[(first,)][0] == 5.0


def test_peak_counts_releases_before_allocations() -> None:
    assert peak_bytes([(0, 1, 5), (1, 2, 7)]) == 7
    assert peak_bytes([(0, 2, 5), (1, 3, 7), (2, 4, 1)]) == 12
    assert peak_bytes([]) == 0


@pytest.mark.parametrize(("update", "field"), [
    ({"next_forward": "per-layer"}, "plan.next_forward"),  # the step waits for all
    ({"overlap": False}, "plan.overlap"),  # reduce-scatters overlap the backward
    ({"collective": "ps"}, "collective"),  # no all-gather on a parameter server
])
def test_sharded_plan_refuses(update: dict, field: str) -> None:
    tr = _trace([(10, 20, MB4)])
    plan = _sharded(tr, [[0]]).model_copy(update=update)
    with pytest.raises(SchedoptError, match=field):
        simulate(tr, _cluster(), plan)


def test_sharded_plan_refuses_the_overlap_slowdown() -> None:
    tr = _trace([(10, 20, MB4)])
    with pytest.raises(SchedoptError, match="overlap_slowdown"):
        simulate(tr, _cluster(overlap_slowdown=1.5), _sharded(tr, [[0]]))


@settings(max_examples=40, deadline=None)
@given(trace=traces(), cluster=clusters(), spec=st.sampled_from(PAPER),
       accumulate=st.integers(1, 3), dtype=st.sampled_from([None, "float16", "float64"]))
def test_accumulation_and_dtype_match_the_dag(trace: Trace, cluster: Cluster, spec: str,
                                              accumulate: int, dtype: str | None) -> None:
    """All-reduce plans with micro-batches and a communication dtype: the simulator's starts
    are the DAG's longest paths (schedopt/dag.py unrolls the micro-batches)."""
    plan = make_plan(trace, cluster, spec).model_copy(
        update={"accumulate": accumulate, "comm_dtype": dtype})
    sched = simulate(trace, cluster, plan, record=True, max_iterations=8)
    starts = longest_path_starts(build_dag(trace, cluster, plan, iterations=sched.iterations))
    assert len(starts) == len(sched.tasks)
    for key, start in starts.items():
        assert sched.tasks[key][0] == pytest.approx(start, abs=1e-12), key
    assert check_schedule(trace, cluster, plan, sched) == []


def test_dag_refuses_sharded_plans() -> None:
    tr = _trace([(10, 20, MB4)])
    with pytest.raises(SchedoptError, match=r"plan\.sharding"):
        build_dag(tr, _cluster(), _sharded(tr, [[0]]))


@st.composite
def _sharded_instances(draw: st.DrawFn) -> tuple[Trace, Cluster, Plan]:
    """A random trace and cluster (no ps) and a random sharded plan over them."""
    trace = draw(traces())
    cluster = draw(clusters())
    if cluster.collective == "ps":
        cluster = cluster.model_copy(update={"collective": "ring"})
    if cluster.overlap_slowdown != 1.0:
        cluster = cluster.model_copy(update={"overlap_slowdown": 1.0})
    n_l = len(trace.layers)
    cuts = draw(st.lists(st.booleans(), min_size=n_l - 1, max_size=n_l - 1))
    runs: list[list[int]] = [[0]]
    for lay, cut in enumerate(cuts, start=1):
        runs.append([lay]) if cut else runs[-1].append(lay)
    units = merge_tensorless(trace, runs)
    names = [[trace.layers[i].name for i in u] for u in units]
    sharding = Sharding(mode=draw(st.sampled_from(["full", "grad-op"])), units=names,
                        forward_prefetch=draw(st.integers(0, 3)),
                        backward_prefetch=draw(st.integers(0, 3)),
                        streams=draw(st.sampled_from([1, 2])))
    buckets = [list(t) for t in reversed(sharding.check_against(trace))]
    plan = Plan(policy="random", buckets=buckets, sharding=sharding,
                accumulate=draw(st.integers(1, 3)), prefetch=draw(st.sampled_from([0, 1])),
                comm_dtype=draw(st.sampled_from([None, "float16"])))
    return trace, cluster, plan


@settings(max_examples=60, deadline=None)
@given(inst=_sharded_instances())
def test_sharded_invariants(inst: tuple[Trace, Cluster, Plan]) -> None:
    """On random sharded plans: compute and the step bound the period from below, the parts sum
    to it, the detected period is the long-run average, tasks never overlap on the network or
    the compute stream, and the peak lies between the largest unit and twice the model."""
    trace, cluster, plan = inst
    k, r = plan.accumulate, cluster.world_size
    sched = simulate(trace, cluster, plan, record=True, min_iterations=12, max_iterations=12)
    period = sched.iteration_time_s
    assert period >= k * trace.compute_s + trace.update_s / r - 1e-12
    assert sum(sched.breakdown.as_dict().values()) == pytest.approx(period, abs=1e-12)
    assert sched.breakdown.exposed_comm_s >= -1e-12
    ends = [max(e for key, (_, e) in sched.tasks.items() if key[0] == "bwd" and key[1] == i)
            for i in (5, 11)]
    assert (ends[1] - ends[0]) / 6 == pytest.approx(period, rel=1e-9, abs=1e-12)
    for res in ("compute", "net"):
        spans = sorted(v for key, v in sched.tasks.items()
                       if (key[0] in ("ag", "rs")) == (res == "net")
                       and sched.resources[key] != ("cpu",) and sched.resources[key] != ("pcie",)
                       and v[1] > v[0])
        for (_, e1), (s2, _) in itertools.pairwise(spans):
            assert s2 >= e1 - 1e-12 * max(1.0, e1)
    p_u = [sum(t.bytes for t in trace.tensor_list if t.name in set(b)) for b in plan.buckets]
    assert sched.peak_memory_bytes is not None
    assert sched.peak_memory_bytes <= 2 * sum(p_u)
    if r > 1:  # every all-gather takes time: a unit's parameters are alive a while
        assert sched.peak_memory_bytes >= max(p_u)


def test_recost_rebuilds_a_sharded_model() -> None:
    """Calibration re-costs a built model on other cluster parameters: a sharded model is
    rebuilt, so its all-gathers follow the new costs."""
    tr = _trace([(10, 20, MB4)])
    plan = _sharded(tr, [[0]], p=0, q=0)
    fast = _cluster(allreduce={"alpha_s": 1 * MS, "beta_s_per_byte": 0.5e-9})
    model = recost(Model.build(tr, _cluster(), plan), fast)
    # AG = RS = (1 ms + 2 ms) / 2 = 1.5 ms: 3 · 1.5 + 10 + 20
    assert simulate_model(model).iteration_time_s == pytest.approx(34.5 * MS, rel=1e-12)
    assert simulate_model(model).iteration_time_s == simulate(tr, fast, plan).iteration_time_s


def test_recost_keeps_the_communication_dtype() -> None:
    """Calibration re-costs a plan with ``comm_dtype``: the bytes on the wire stay the
    communication dtype's (8 MB in bf16 = 4 MB: 3 ms on the fast cluster, not 5 ms)."""
    tr = _trace([(10, 20, 8_000_000)])
    plan = Plan(policy="x", buckets=[["l0.w"]], overlap=False, comm_dtype="bfloat16")
    fast = _cluster(allreduce={"alpha_s": 1 * MS, "beta_s_per_byte": 0.5e-9})
    model = recost(Model.build(tr, _cluster(), plan), fast)
    assert simulate_model(model).iteration_time_s == pytest.approx(33 * MS, rel=1e-12)
