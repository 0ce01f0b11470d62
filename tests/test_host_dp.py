"""The exact programme of the wait-for-all class with a host side
(:mod:`schedopt.optimize.host_dp`), checked against the simulator on every bucketing and launch
order of small random instances, and ``solve``'s OPTIMAL claims with host costs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, Status, solve
from schedopt.optimize.host_dp import host_programme, pareto, solve_host_programme
from schedopt.optimize.instance import Instance, build_instance
from schedopt.simulate.simulator import simulate

from .host_instances import brute_force_optimum, draw_host_times, every_plan, resnet_with_host
from .strategies import comparable_layers

#: Relative tolerance of the comparisons (the simulator's sums against the programme's).
TOL = 1e-9


@st.composite
def host_cases(draw: st.DrawFn) -> tuple[Trace, Cluster, SolveOptions, int]:
    """1-3 layers of 1-2 tensors (a layer without gradients at times), host times from far
    below to above the device's, calls and hooks from free to dearer than a bucket, a data
    path, prefetch 0 or 1, pieces of at most 1 MB at times, one or two micro-batches."""
    layers = draw(comparable_layers(500_000))
    if len(layers) > 1 and draw(st.booleans()):
        layers[0]["tensors"] = []
    draw_host_times(draw, layers)
    trace = Trace.model_validate({
        "name": "h", "batch_size": 1, "layers": layers,
        "update_s": draw(st.sampled_from([0.0, 5e-4])),
        "host_update_s": draw(st.sampled_from([0.0, 3e-4, 2e-3])),
        "io_s": draw(st.sampled_from([0.0, 1e-3, 6e-3])),
        "h2d_s": draw(st.sampled_from([0.0, 5e-4]))})
    cluster = Cluster.model_validate({
        "name": "h", "nodes": draw(st.integers(2, 4)), "gpus_per_node": 2,
        "intra_link": {"bandwidth_Bps": draw(st.floats(2e9, 2e10))},
        "inter_link": {"bandwidth_Bps": draw(st.floats(1e9, 1e10)),
                       "latency_s": draw(st.sampled_from([0.0, 1e-5, 3e-4]))},
        "launch_overhead_s": draw(st.sampled_from([0.0, 2e-5, 5e-4, 2e-3])),
        "hook_overhead_s": draw(st.sampled_from([0.0, 1e-5, 2e-4])),
        "bucket_compute_s": draw(st.sampled_from([0.0, 0.0, 3e-5, 1e-3]))})
    opts = SolveOptions(reorder=True, merge_layers=False, prefetch=draw(st.sampled_from([0, 1])),
                        partition_bytes=draw(st.sampled_from([None, None, 1_000_000])))
    return trace, cluster, opts, draw(st.sampled_from([1, 1, 2]))


def _knobs(opts: SolveOptions) -> dict:
    return {"next_forward": opts.next_forward, "reorder": opts.reorder,
            "partition_bytes": opts.partition_bytes}


def _plan(inst: Instance, segs, opts: SolveOptions, accumulate: int = 1):
    plan = inst.to_plan(segs, knobs=_knobs(opts))
    return plan.model_copy(update={"accumulate": accumulate}) if accumulate > 1 else plan


@settings(max_examples=120, deadline=None)
@given(case=host_cases())
def test_the_programme_is_the_optimum_of_every_plan(case) -> None:
    """The programme's value is at most every plan's period (every bucketing, launch order,
    partition), and its plan simulates at that value, which is therefore the optimum; with
    prefetch 0 the value is the simulator's period by construction (``exact``)."""
    trace, cluster, opts, accumulate = case
    inst = build_instance(trace, cluster, opts, merge=False)
    if inst.n > 5:
        return
    periods = [simulate(trace, cluster, _plan(inst, segs, opts, accumulate)).iteration_time_s
               for segs in every_plan(inst)]
    best = min(periods)
    prog = host_programme(inst, _plan(inst, [(0, inst.n - 1)], opts, accumulate))
    if prog is None:  # nothing but the model: the model is exact
        assert not (trace.has_host or cluster.has_host or cluster.bucket_compute_s)
        return
    assert prog.exact == (opts.prefetch == 0)
    sol = solve_host_programme(prog, max(periods))
    assert sol is not None
    assert sol.value_s <= best * (1 + TOL)
    own = simulate(trace, cluster, _plan(inst, sol.segs, opts, accumulate)).iteration_time_s
    if prog.exact:
        assert own == pytest.approx(sol.value_s, rel=TOL)
    assert own == pytest.approx(best, rel=TOL)
    # below its own value the programme finds nothing (the pruning keeps every bucketing
    # whose value is at most the limit)
    assert solve_host_programme(prog, sol.value_s * (1 - 1e-6)) is None


@settings(max_examples=40, deadline=None)
@given(case=host_cases())
def test_solve_proves_the_brute_force_optimum(case) -> None:
    """With host costs or a compute time per bucket (and nothing else the model leaves out),
    ``solve`` in wait-for-all mode returns the brute-force optimum of its class, proven."""
    trace, cluster, opts, _ = case
    if not (trace.has_host or cluster.has_host or cluster.bucket_compute_s):
        return
    opts = opts.model_copy(update={"time_limit_s": 5, "workers": 1, "seed": 0})
    brute = brute_force_optimum(trace, cluster, opts)
    if brute is None:
        return
    res = solve(trace, cluster, opts)
    assert res.status == Status.OPTIMAL
    assert res.iteration_time_s == pytest.approx(brute, rel=TOL)
    assert res.bound_s <= brute * (1 + TOL)


def test_pareto_keeps_exactly_the_undominated() -> None:
    """The front against a quadratic check: a point is kept iff no other point is at most it in
    all three coordinates (of equal points, the first)."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        c = rng.integers(0, 4, n)
        d = rng.integers(0, 6, n).astype(float)
        f = rng.integers(0, 6, n).astype(float)
        keep = set(pareto(c, d, f).tolist())
        for i in range(n):
            beaten = any((c[j] <= c[i] and d[j] <= d[i] and f[j] <= f[i])
                         and ((c[j], d[j], f[j]) != (c[i], d[i], f[i]) or j < i)
                         for j in range(n) if j != i)
            assert (i in keep) == (not beaten), (i, c, d, f)


def _resnet(host: float) -> tuple[Trace, Cluster, SolveOptions]:
    """:func:`.host_instances.resnet_with_host`, wait-for-all."""
    tr, cl = resnet_with_host(host)
    return tr, cl, SolveOptions(time_limit_s=10, workers=1, seed=0)


def test_a_resnet_whose_host_runs_close_behind_is_proven() -> None:
    """Host times 0.95 times the device's: neither the model without a host nor the host
    side's bounds meet the best plan; the programme proves it."""
    tr, cl, opts = _resnet(0.95)
    res = solve(tr, cl, opts)
    assert res.status == Status.OPTIMAL
    assert res.bound_method == "dp"
    assert any("exact programme with the host side" in note for note in res.notes)
    assert res.bound_s == pytest.approx(res.iteration_time_s, rel=TOL)


def test_the_programme_needs_its_class_and_respects_its_limits() -> None:
    """None outside the class (per-layer mode, several stages) and when the state limit or the
    stop ends it."""
    tr, cl, opts = _resnet(0.95)
    inst = build_instance(tr, cl, opts, merge=False)
    plan = inst.to_plan([(0, inst.n - 1)], knobs=_knobs(opts))
    prog = host_programme(inst, plan)
    assert prog is not None
    assert host_programme(inst, plan.model_copy(update={"next_forward": "per-layer"})) is None
    two = Cluster.model_validate({**cl.model_dump(), "nodes": 2, "collective": "hierarchical",
                                  "pipelined_hierarchical": True,
                                  "inter_link": {"bandwidth_Bps": 1e10}})
    inst2 = build_instance(tr, two, opts, merge=False)
    assert host_programme(inst2, inst2.to_plan([(0, inst2.n - 1)], knobs=_knobs(opts))) is None
    hi = simulate(tr, cl, plan).iteration_time_s
    stats: dict[str, int] = {}
    sol = solve_host_programme(prog, hi, stats=stats)
    assert sol is not None and sol.states > 10 and stats["candidates"] > sol.states
    assert solve_host_programme(prog, hi, max_states=10) is None
    assert solve_host_programme(prog, hi, stop=lambda: True) is None
