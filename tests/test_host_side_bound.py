"""The host side's bound (:mod:`schedopt.optimize.host_side`): the launching thread's work with
the fewest buckets a period allows, and its cycle with the device, checked against the
simulator on every bucketing and launch order of small random instances, and ``solve``'s bound
and OPTIMAL claims against the same brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, Status, solve
from schedopt.optimize.host_side import host_bound, host_work
from schedopt.optimize.instance import build_instance
from schedopt.optimize.relax import first_bucket_candidates, without_added_time
from schedopt.simulate.simulator import simulate

from .host_instances import draw_host_times, every_plan, resnet_with_host
from .strategies import comparable_layers

#: Relative tolerance of the comparisons (the simulator's sums against the bound's).
TOL = 1e-9


@st.composite
def host_cases(draw: st.DrawFn) -> tuple[Trace, Cluster]:
    """1-3 layers of 1-2 tensors, host times from far below to above the device's, calls and
    hooks from free to dearer than a bucket's communication, on one all-reduce stage or a
    pipelined hierarchical all-reduce (three stages)."""
    layers = draw(comparable_layers(2_000_000))
    draw_host_times(draw, layers)
    trace = Trace.model_validate({
        "name": "h", "batch_size": 1, "layers": layers,
        "update_s": draw(st.sampled_from([0.0, 5e-4])),
        "host_update_s": draw(st.sampled_from([0.0, 3e-4, 2e-3]))})
    doc = {"name": "h", "nodes": draw(st.integers(2, 4)), "gpus_per_node": 2,
           "intra_link": {"bandwidth_Bps": draw(st.floats(2e9, 2e10))},
           "inter_link": {"bandwidth_Bps": draw(st.floats(1e9, 1e10)),
                          "latency_s": draw(st.sampled_from([0.0, 1e-5, 3e-4]))},
           "launch_overhead_s": draw(st.sampled_from([0.0, 2e-5, 5e-4, 2e-3])),
           "hook_overhead_s": draw(st.sampled_from([0.0, 1e-5, 2e-4]))}
    if draw(st.booleans()):
        doc.update(collective="hierarchical", pipelined_hierarchical=True)
    return trace, Cluster.model_validate(doc)


def _options(per_layer: bool, reorder: bool, **kw) -> SolveOptions:
    return SolveOptions(next_forward="per-layer" if per_layer else "wait-for-all",
                        reorder=reorder, merge_layers=False, **kw)


def _knobs(opts: SolveOptions) -> dict:
    return {"next_forward": opts.next_forward, "reorder": opts.reorder,
            "partition_bytes": opts.partition_bytes}


@settings(max_examples=80, deadline=None)
@given(case=host_cases(), per_layer=st.booleans(), reorder=st.booleans(),
       accumulate=st.sampled_from([1, 1, 2]))
def test_every_plan_pays_the_host_work_and_cycle(case: tuple[Trace, Cluster], per_layer: bool,
                                                 reorder: bool, accumulate: int) -> None:
    """Every plan of every bucketing and launch order simulates at or above the thread's work
    for its own bucket count and the cycle bound; the bisected bound with the fewest buckets
    a period allows stays at or below the best of them (plans of ``accumulate`` micro-batches,
    which the host work lays out too). The work is the class's: every plan gives the same."""
    trace, cluster = case
    opts = _options(per_layer, reorder)
    inst = build_instance(trace, cluster, opts, merge=False)
    if inst.n > 5 or not inst.stages:
        return
    work = None
    best = np.inf
    for segs in every_plan(inst, reorder):
        plan = inst.to_plan(segs, knobs=_knobs(opts))
        if accumulate > 1:
            plan = plan.model_copy(update={"accumulate": accumulate})
        own = host_work(trace, cluster, plan)
        if own is None:
            return
        if work is None:
            work = own
        # the class's work: the same whatever the plan's buckets and order
        assert own.fixed_s == pytest.approx(work.fixed_s, rel=TOL, abs=1e-15)
        assert own.cycle_s == pytest.approx(work.cycle_s, rel=TOL, abs=1e-15)
        period = simulate(trace, cluster, plan).iteration_time_s
        assert period >= work.bound(len(segs)) * (1 - TOL), (segs, period, work)
        # knowing how many units layer 0 has (one: one bucket holds them) tightens it
        counted = host_work(trace, cluster, plan, first_units=int((inst.layer == 0).sum()))
        assert counted is not None and counted.cycle_s >= own.cycle_s * (1 - TOL)
        assert period >= counted.bound(len(segs)) * (1 - TOL), (segs, period, counted)
        best = min(best, period)
    assert work is not None
    fine = inst if len(inst.stages) == 1 and accumulate == 1 else None
    assert host_bound(work, fine, best) <= best * (1 + TOL)


@settings(max_examples=25, deadline=None)
@given(case=host_cases(), per_layer=st.booleans())
def test_solve_with_host_costs_never_claims_beyond_brute_force(case: tuple[Trace, Cluster],
                                                               per_layer: bool) -> None:
    """``solve``'s bound (now with the host side's) stays at or below the brute-force optimum
    of its class, and OPTIMAL is claimed only at that optimum."""
    trace, cluster = case
    opts = _options(per_layer, True, time_limit_s=5, workers=1, seed=0)
    inst = build_instance(trace, cluster, opts, merge=False)
    if inst.n > 5 or not inst.stages:
        return
    brute = min(simulate(trace, cluster, inst.to_plan(segs, knobs=_knobs(opts))).iteration_time_s
                for segs in every_plan(inst, True))
    res = solve(trace, cluster, opts)
    # without host costs the integer model's own rounding (the tick budget) is in the figures
    tol = 1e-6 if cluster.has_host or trace.has_host else 1e-3
    assert res.bound_s <= brute * (1 + tol)
    if res.status == Status.OPTIMAL:
        assert res.iteration_time_s <= brute * (1 + tol)


def _resnet(host: float, mode: str) -> tuple[Trace, Cluster, SolveOptions]:
    """:func:`.host_instances.resnet_with_host` with ``mode`` (reordered when per-layer)."""
    tr, cl = resnet_with_host(host)
    opts = SolveOptions(next_forward=mode, reorder=mode == "per-layer", time_limit_s=10,
                        workers=1, seed=0)
    return tr, cl, opts


def test_the_first_forward_bounds_and_the_last_bucket_reaches_it() -> None:
    """ResNet-50 with host times half the device's, per-layer: the next step's first forward
    waits for its launch (0.69 ms) after the backward, which the model without a host leaves
    out; the first forward's bound lifts the bound above that model's optimum, and a larger
    last bucket, whose update fills part of that wait, comes within 0.01% of it."""
    tr, cl, opts = _resnet(0.5, "per-layer")
    free = solve(*without_added_time(tr, cl), opts)
    assert free.status == Status.OPTIMAL
    res = solve(tr, cl, opts)
    assert res.bound_method == "host-side"
    assert res.bound_s >= free.iteration_time_s + 4e-4
    assert res.iteration_time_s <= res.bound_s * (1 + 1e-4)
    # the plan's last bucket holds far more than layer 0's one tensor (37 KB)
    last = res.plan.buckets[-1]
    assert "conv1.weight" in last
    size = {t.name: t.bytes for t in tr.tensor_list}
    assert sum(size[name] for name in last) > 1e7


def test_the_first_forward_bound_holds_where_the_update_fills_the_wait() -> None:
    """Three layers, a 2 ms launch of the first forward and a 3 ms update: the plan that puts
    layer 1 with layer 0 hides most of that launch behind their update. Every plan simulates
    at or above the first forward's bound (with one unit in layer 0, and for any number), which
    comes within 1% of the best."""
    tr = Trace.model_validate({"name": "f", "batch_size": 1, "update_s": 3e-3, "layers": [
        {"name": "l0", "forward_s": 1e-3, "backward_s": 1e-3, "host_forward_s": 2e-3,
         "tensors": [{"name": "w0", "bytes": 4000}]},
        {"name": "l1", "forward_s": 1e-3, "backward_s": 1e-3,
         "tensors": [{"name": "w1", "bytes": 4_000_000}]},
        {"name": "l2", "forward_s": 1e-3, "backward_s": 1e-3,
         "tensors": [{"name": "w2", "bytes": 4_000_000}]}]})
    cl = Cluster.model_validate({"name": "c", "nodes": 1, "gpus_per_node": 2,
                                 "intra_link": {"bandwidth_Bps": 1e10}})
    opts = _options(True, True)
    inst = build_instance(tr, cl, opts, merge=False)
    periods = []
    for segs in every_plan(inst, True):
        plan = inst.to_plan(segs, knobs=_knobs(opts))
        period = simulate(tr, cl, plan).iteration_time_s
        for units in (1, None):
            work = host_work(tr, cl, plan, first_units=units)
            assert work is not None
            assert period >= work.bound(len(segs)) * (1 - TOL)
        periods.append(period)
    work = host_work(tr, cl, plan, first_units=1)
    assert work is not None
    # the device's work is 9 ms; the launch alone would make it 11 ms
    assert 9e-3 < work.cycle_s <= min(periods) <= work.cycle_s * 1.01


def test_first_bucket_candidates_join_the_last_units() -> None:
    """Every candidate is a plan of all units whose last bucket, launched last, runs from a cut
    to the last unit (layer 0 whole), the cuts falling and the joined bytes rising."""
    tr, cl, opts = _resnet(0.5, "per-layer")
    inst = build_instance(tr, cl, opts, merge=False)
    segs = [(i, i) for i in range(inst.n)]
    plans = first_bucket_candidates(inst, segs)
    assert len(plans) > 20
    starts = [p[-1][0] for p in plans]
    assert starts == sorted(set(starts), reverse=True)
    assert starts[0] == int(np.flatnonzero(inst.layer == 0)[0])
    for plan in plans:
        units = sorted(u for lo, hi in plan for u in range(lo, hi + 1))
        assert units == list(range(inst.n))
        assert plan[-1][1] == inst.n - 1


@pytest.mark.parametrize("mode", ["wait-for-all", "per-layer"])
def test_a_host_bound_resnet_is_proven(mode: str) -> None:
    """With host times 1.5 times the device's the step is the host's: the plan's period meets
    the host side's bound (the model without a host bounds it 34% lower)."""
    tr, cl, opts = _resnet(1.5, mode)
    res = solve(tr, cl, opts)
    assert res.status == Status.OPTIMAL
    assert res.bound_method == "host-side"
    assert any("host side" in note for note in res.notes)
    work = host_work(tr, cl, res.plan)
    assert work is not None
    assert res.iteration_time_s >= work.bound(len(res.plan.buckets)) * (1 - TOL)
