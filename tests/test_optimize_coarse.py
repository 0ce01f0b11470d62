"""The unimodal programme on coarse units (runs of whole layers), against brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import MonkeyPatch

import schedopt.optimize.unimodal as unimodal_mod
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.bounds import constant_bound
from schedopt.optimize.coarse import coarse_programme, layer_groups
from schedopt.optimize.instance import build_instance
from schedopt.simulate.simulator import simulate

from .strategies import clusters, traces
from .test_optimize_unimodal import brute

PER_LAYER_REORDER = SolveOptions(next_forward="per-layer", reorder=True)


@settings(max_examples=40, deadline=None)
@given(trace=traces(max_layers=8), size=st.integers(1, 9))
def test_layer_groups_start_at_layers_and_cover_them(trace: Trace, size: int) -> None:
    """Groups start at 0, at layers' first units only, increase, and are at most ``size``."""
    cluster = Cluster.model_validate({
        "name": "c", "nodes": 2, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 0.0},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 0.0},
        "allreduce": {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9}})
    inst = build_instance(trace, cluster, PER_LAYER_REORDER)
    g = layer_groups(inst, size)
    firsts = set(np.flatnonzero(np.r_[True, inst.layer[1:] != inst.layer[:-1]]).tolist())
    assert g[0] == 0
    assert np.all(np.diff(g) > 0)
    assert set(g.tolist()) <= firsts
    assert len(g) <= max(1, size)
    assert len(g) == min(len(firsts), len(g))  # never more groups than layers


@settings(max_examples=40, deadline=None)
@given(trace=traces(max_layers=5), cluster=clusters(fitted=True), size=st.integers(1, 4),
       with_update=st.booleans())
def test_coarse_plans_are_fine_plans_judged_exactly(trace: Trace, cluster: Cluster, size: int,
                                                    with_update: bool) -> None:
    """A coarse plan tiles the fine units, cuts only between layer groups, is worth what the
    fine instance says, never beats the optimum over every bucketing and launch order, and is
    returned only when it beats the plan it started from."""
    trace = trace.model_copy(update={"io_s": 0.0, "h2d_s": 0.0})
    if not with_update:
        trace = trace.model_copy(update={"update_s": 0.0})
    inst = build_instance(trace, cluster, PER_LAYER_REORDER)
    if inst.n > 6 or not inst.stages:
        return
    best = int(brute(inst)[0])
    hi = int(inst.evaluate([(0, inst.n - 1)]).period)  # one bucket
    res = coarse_programme(inst, constant_bound(inst) - 1, hi, deadline=None, max_work=None,
                           sizes=(size,))
    if not res.segs:
        assert res.value == hi
        return
    assert sorted(lo for lo, _ in res.segs) == sorted({lo for lo, _ in res.segs})
    assert sum(h - lo + 1 for lo, h in res.segs) == inst.n
    starts = set(layer_groups(inst, size).tolist())
    assert {lo for lo, _ in res.segs} <= starts
    assert res.value == int(inst.evaluate(res.segs).period)
    assert best <= res.value < hi


@settings(max_examples=25, deadline=None)
@given(trace=traces(max_layers=4, data_costs=False), cluster=clusters(fitted=True))
def test_coarse_programme_with_one_group_per_layer_is_exact(trace: Trace,
                                                            cluster: Cluster) -> None:
    """Without an update step or data path, and with one tensor per layer, groups of one
    layer are the fine units: the coarse programme finds the optimum over every order."""
    trace = trace.model_copy(update={"layers": [
        layer.model_copy(update={"tensors": layer.tensors[:1]}) for layer in trace.layers]})
    if trace.num_tensors == 0:
        return
    inst = build_instance(trace, cluster, PER_LAYER_REORDER)
    if inst.n > 6 or inst.n < 2 or not inst.stages:
        return
    best = int(brute(inst)[0])
    hi = int(inst.evaluate([(0, inst.n - 1)]).period)
    res = coarse_programme(inst, constant_bound(inst) - 1, hi, deadline=None, max_work=None,
                           sizes=(len(trace.layers) + 1,))
    assert (res.value if res.segs else hi) == best


def test_solve_offers_the_coarse_plan_above_the_unit_limit(monkeypatch: MonkeyPatch) -> None:
    """With the programme's unit limit below the instance, solve() runs the coarse step: its
    plan simulates to the reported objective, and the bound stays below the brute-force
    optimum."""
    import sys

    solve_mod = sys.modules["schedopt.optimize.solver"]
    layers = [{"name": f"l{i}", "forward_s": 1e-3 * (1 + i % 3), "backward_s": 2e-3,
               "tensors": [{"name": f"l{i}.w", "bytes": 4_000_000 * (1 + i % 2)}]}
              for i in range(6)]
    trace = Trace.model_validate({"name": "six", "batch_size": 8, "layers": layers})
    cluster = Cluster.model_validate({
        "name": "c", "nodes": 2, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 0.0},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 0.0},
        "allreduce": {"alpha_s": 1e-3, "beta_s_per_byte": 1e-9}})
    opts = PER_LAYER_REORDER.model_copy(update={"time_limit_s": 30.0, "workers": 1,
                                                "seed": 0, "work_limit_s": 3.0,
                                                "baselines": False})
    inst = build_instance(trace, cluster, opts)
    best = int(brute(inst)[0]) * inst.tick
    calls = []
    real = solve_mod.coarse_programme

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(kwargs.get("sizes"))
        return real(*args, **kwargs, sizes=(3,))

    # the fine programme gives up above 4 units; the coarse one runs on 3
    monkeypatch.setattr(unimodal_mod, "MAX_UNITS", 4)
    monkeypatch.setattr(solve_mod, "COARSE_UNITS", 4)
    monkeypatch.setattr(solve_mod, "coarse_programme", spy)
    monkeypatch.setattr(solve_mod, "LOCAL_SEARCH_UNITS", 0)
    res = solve(trace, cluster, opts)
    assert calls
    assert res.bound_s <= best * (1 + 1e-9)
    assert res.objective_s >= best * (1 - 1e-9)
    sim = simulate(trace, cluster, res.plan).iteration_time_s
    assert abs(sim - res.iteration_time_s) <= 1e-12 + 1e-9 * sim


def test_coarse_step_is_deterministic_with_a_slow_clock(monkeypatch: MonkeyPatch) -> None:
    """The coarse step stops on its state budget: a clock running 4 times too fast gives the
    same plan, bound and work, and no safety stop fires."""
    import sys
    import time

    from schedopt.files import load_cluster, load_trace

    solve_mod = sys.modules["schedopt.optimize.solver"]
    monkeypatch.setattr(solve_mod, "COARSE_UNITS", 100)  # ResNet-50 has 161 units
    seen: list[int] = []
    real_programme = solve_mod.coarse_programme

    def spy(*args: object, **kwargs: object) -> object:
        out = real_programme(*args, **kwargs)
        seen.append(out.work)
        return out

    monkeypatch.setattr(solve_mod, "coarse_programme", spy)
    trace = load_trace("resnet50-v100-b64").scaled(compute=0.4)
    cluster = load_cluster("10gbe-k80-family", nodes=8)
    opts = SolveOptions(next_forward="per-layer", reorder=True, baselines=False,
                        time_limit_s=60.0, work_limit_s=1.5, workers=1, seed=0)
    plain = solve(trace, cluster, opts)
    real = time.perf_counter
    t0 = real()
    with monkeypatch.context() as m:
        m.setattr(time, "perf_counter", lambda: t0 + 4.0 * (real() - t0))
        slow = solve(trace, cluster, opts)
    assert len(seen) == 2 and seen[0] == seen[1] > 0
    assert not plain.wall_stop and not slow.wall_stop
    assert slow.work_s == plain.work_s
    assert slow.plan.buckets == plain.plan.buckets
    assert slow.bound_s == plain.bound_s and slow.objective_s == plain.objective_s
