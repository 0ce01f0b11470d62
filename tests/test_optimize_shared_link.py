"""A PCIe link shared by the batch copy and the gradients (parameter servers after a local
reduce, prefetch 1): the link's work with the fewest buckets a period allows bounds every plan,
checked against the simulator and against brute force over every bucketing and launch order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster, PSConfig
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.bounds import lower_bound
from schedopt.optimize.dp import solve_fifo_per_layer
from schedopt.optimize.instance import Instance, build_instance
from schedopt.optimize.shared_link import (
    fewer_buckets,
    fewest_bucket_count,
    link_work,
    shared_link_applies,
    shared_link_bound,
)
from schedopt.simulate.simulator import simulate

from .strategies import comparable_layers


@st.composite
def shared_links(draw: st.DrawFn) -> tuple[Trace, Cluster]:
    """At most 5 tensors in 1-3 layers whose communication and batch copy are comparable with
    the compute, on parameter servers after a local reduce (push and pull on the PCIe link
    that the batch copy uses)."""
    layers = draw(comparable_layers(3_000_000))
    trace = Trace.model_validate({
        "name": "s", "batch_size": 1, "layers": layers, "io_s": draw(st.floats(0.0, 5e-3)),
        "h2d_s": draw(st.floats(0.0, 5e-3)), "update_s": draw(st.sampled_from([0.0, 1e-3]))})
    cluster = Cluster.model_validate({
        "name": "s", "nodes": draw(st.integers(2, 4)), "gpus_per_node": draw(st.integers(2, 4)),
        "collective": "ps", "shared_pcie": True,
        "ps": {"servers": draw(st.integers(1, 4)), "colocated": draw(st.booleans())},
        "intra_link": {"bandwidth_Bps": draw(st.floats(1e9, 2e10)),
                       "latency_s": draw(st.sampled_from([0.0, 1e-5, 3e-4]))},
        "inter_link": {"bandwidth_Bps": draw(st.floats(1e9, 2e10)),
                       "latency_s": draw(st.sampled_from([0.0, 1e-5, 3e-4]))}})
    return trace, cluster


def every_plan(inst):
    """Every bucketing of ``inst``'s units in every launch order."""
    for bits in itertools.product([False, True], repeat=inst.n - 1):
        segs = inst.segments_from_cuts(np.array(bits, dtype=bool))
        for perm in itertools.permutations(range(len(segs))):
            yield [segs[k] for k in perm]


def options(per_layer: bool, **kw) -> SolveOptions:
    """Reordering with the next batch prefetched (the copy then shares the link)."""
    return SolveOptions(next_forward="per-layer" if per_layer else "wait-for-all",
                        reorder=True, prefetch=1, merge_layers=False, **kw)


@settings(max_examples=60, deadline=None)
@given(case=shared_links(), per_layer=st.booleans())
def test_shared_link_bound_is_valid(case: tuple[Trace, Cluster], per_layer: bool) -> None:
    """Every plan has at least the fewest buckets its period allows, and pays the link's work
    for them; the bound never exceeds the brute-force optimum."""
    trace, cluster = case
    inst = build_instance(trace, cluster, options(per_layer))
    if inst.n > 5 or not shared_link_applies(inst):
        return
    best = np.iinfo(np.int64).max
    for segs in every_plan(inst):
        period = int(inst.evaluate(segs).period)
        count = fewest_bucket_count(inst, period)
        assert count is not None and count <= len(segs)
        assert period >= link_work(inst, len(segs))
        best = min(best, period)
    assert shared_link_bound(inst, 0, best) <= best
    assert shared_link_bound(inst, lower_bound(inst, best), best) <= best


def drawn_segments(inst: Instance, data: st.DataObject) -> list[tuple[int, int]]:
    """Buckets in readiness order from cuts drawn at random."""
    cuts = np.array(data.draw(st.lists(st.booleans(), min_size=inst.n - 1,
                                       max_size=inst.n - 1)), dtype=bool)
    return inst.segments_from_cuts(cuts)


@settings(max_examples=30, deadline=None)
@given(case=shared_links(), per_layer=st.booleans(), data=st.data())
def test_the_simulated_period_pays_the_link_work(case: tuple[Trace, Cluster], per_layer: bool,
                                                 data: st.DataObject) -> None:
    """The simulator, not only the closed form: the PCIe link carries the batch copy and
    every bucket in each period."""
    trace, cluster = case
    inst = build_instance(trace, cluster, options(per_layer))
    if not shared_link_applies(inst):
        return
    segs = drawn_segments(inst, data)
    segs = [segs[k] for k in data.draw(st.permutations(range(len(segs))))]
    sim = simulate(trace, cluster, inst.to_plan(segs)).iteration_time_s
    c = inst.consts_s
    work = c.h2d + len(segs) * inst.alpha + inst.beta * inst.total_bytes
    assert sim >= work * (1 - 1e-9)


def test_the_bucket_count_does_not_grow_with_the_period() -> None:
    """``m(lam)`` is non-increasing (the bisection's premise), and the bound is the least
    ``lam`` whose link work with ``m(lam)`` buckets fits in ``lam``."""
    trace, cluster = _dedicated()
    inst = build_instance(trace, cluster, options(True))
    hi = solve_fifo_per_layer(inst)[0]
    lo = lower_bound(inst, hi)
    lams = np.linspace(lo, hi, 25).astype(int)
    counts = [fewest_bucket_count(inst, int(lam)) for lam in lams]
    known = [m for m in counts if m is not None]
    assert known == sorted(known, reverse=True)
    stats: dict[str, int] = {}
    bound = shared_link_bound(inst, lo, hi, stats=stats)
    assert 0 < stats["calls"] <= 2 + int(np.log2(hi - lo + 1)) + 1
    m = fewest_bucket_count(inst, bound)
    assert m is not None and link_work(inst, m) <= bound
    m_below = fewest_bucket_count(inst, bound - 1)
    assert m_below is None or link_work(inst, m_below) > bound - 1


def _dedicated() -> tuple[Trace, Cluster]:
    """ResNet-50 on 4 x 4 K80 with 4 dedicated parameter servers (the benchmark's row)."""
    trace = load_trace("resnet50-v100-b64")
    ps = load_cluster("k80-4x4-10gbe-ps")
    return trace, ps.model_copy(update={"ps": PSConfig(servers=4, colocated=False)})


def test_dedicated_servers_count_the_batch_copy_and_several_buckets() -> None:
    """On the benchmark's dedicated servers the link's work decides the period: the bound is
    above the other bounds, at least the work of two buckets, and below the FIFO plan."""
    trace, cluster = _dedicated()
    inst = build_instance(trace, cluster, options(True))
    assert len(inst.stages) == 1 and shared_link_applies(inst)
    hi = solve_fifo_per_layer(inst)[0]
    lo = lower_bound(inst, hi)
    bound = shared_link_bound(inst, lo, hi)
    assert lo < link_work(inst, 2) <= bound < hi


@settings(max_examples=10, deadline=None)
@given(case=shared_links(), per_layer=st.booleans())
def test_solve_on_a_shared_link_is_sound(case: tuple[Trace, Cluster], per_layer: bool) -> None:
    """``solve``: the objective is the simulated period, the bound never exceeds the
    brute-force optimum, and OPTIMAL is claimed only at that optimum."""
    trace, cluster = case
    opts = options(per_layer, time_limit_s=5.0, cp_sat={"max_deterministic_time": 1.0})
    inst = build_instance(trace, cluster, opts)
    if inst.n > 4 or not shared_link_applies(inst):
        return
    best = min(int(inst.evaluate(s).period) for s in every_plan(inst))
    res = solve(trace, cluster, opts)
    assert res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-3)
    assert round(res.bound_s / res.tick_s) <= best
    if res.status == "OPTIMAL":
        assert round(res.objective_s / res.tick_s) == best


def test_fewer_buckets_drops_buckets_while_the_link_paces_the_plan() -> None:
    """From a 7-bucket plan of the benchmark's dedicated servers whose period is its link's
    work, a plan of fewer buckets whose period is the (smaller) work of those buckets, as the
    simulator has it."""
    trace, cluster = _dedicated()
    inst = build_instance(trace, cluster, options(True))
    start = [(0, 1), (14, 27), (42, 68), (69, 129), (130, 160), (28, 41), (2, 13)]
    assert inst.evaluate(start).period == link_work(inst, len(start))
    stats: dict[str, int] = {}
    val, segs = fewer_buckets(inst, start, reorder=True, max_evals=20_000, stats=stats)
    assert len(segs) < len(start)
    assert val == inst.evaluate(segs).period == link_work(inst, len(segs))
    assert sorted(u for lo, hi in segs for u in range(lo, hi + 1)) == list(range(inst.n))
    sim = simulate(trace, cluster, inst.to_plan(segs)).iteration_time_s
    assert val * inst.tick == pytest.approx(sim, rel=5e-4)
    assert 0 < stats["evals"] <= 20_000 and stats["deadline_stop"] == 0
    # a deterministic limit: the same plan again, and nothing beyond the evaluations allowed
    assert fewer_buckets(inst, start, reorder=True, max_evals=20_000) == (val, segs)
    few: dict[str, int] = {}
    assert fewer_buckets(inst, start, reorder=True, max_evals=50, stats=few)[0] >= val
    assert few["evals"] <= 50 + 2


@settings(max_examples=40, deadline=None)
@given(case=shared_links(), per_layer=st.booleans(), reorder=st.booleans(), data=st.data())
def test_fewer_buckets_never_returns_a_worse_plan(case: tuple[Trace, Cluster], per_layer: bool,
                                                  reorder: bool, data: st.DataObject) -> None:
    """Any starting plan: the plan returned covers every unit once, its period is the exact
    one, no worse than the start's, and in readiness order without reordering."""
    trace, cluster = case
    inst = build_instance(trace, cluster, options(per_layer))
    if not shared_link_applies(inst):
        return
    start = drawn_segments(inst, data)
    val, segs = fewer_buckets(inst, start, reorder=reorder, max_evals=500)
    assert val == inst.evaluate(segs).period <= inst.evaluate(start).period
    assert sorted(u for lo, hi in segs for u in range(lo, hi + 1)) == list(range(inst.n))
    if not reorder:
        assert segs == sorted(segs)
