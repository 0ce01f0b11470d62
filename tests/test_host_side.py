"""The host side of an iteration (docs/model.md, "Host side"): launches, hooks, collective calls
and the optimizer step's host time."""

from __future__ import annotations

import math

import pytest

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

LAYERS = [(1e-3, 2e-3, 1), (2e-3, 3e-3, 2), (1e-3, 1e-3, 1)]


def _trace(host: float = 0.0, update: float = 0.0) -> Trace:
    return Trace.model_validate({
        "name": "h", "batch_size": 1, "host_update_s": update,
        "layers": [{"name": f"l{i}", "forward_s": f, "backward_s": b,
                    "host_forward_s": host * f, "host_backward_s": host * b,
                    "tensors": [{"name": f"l{i}.t{j}", "bytes": 4 << 20} for j in range(n)]}
                   for i, (f, b, n) in enumerate(LAYERS)]})


def _cluster(gpus: int = 1, **extra: float) -> Cluster:
    return Cluster.model_validate({"name": "c", "nodes": 1, "gpus_per_node": gpus,
                                   "intra_link": {"bandwidth_Bps": 1e10}, **extra})


def test_zero_host_costs_are_the_old_model() -> None:
    tr, cl = _trace(), _cluster(2)
    plain = Trace.model_validate(tr.model_dump())
    assert "host_forward_s" not in tr.model_dump_json()  # hashes unchanged
    assert simulate(tr, cl, make_plan(tr, cl, "ddp")) .iteration_time_s == simulate(
        plain, cl, make_plan(plain, cl, "ddp")).iteration_time_s


def test_a_host_bound_step_is_the_host_time_plus_the_last_kernel() -> None:
    """Host twice as slow as the GPU on every layer, one GPU: the GPU runs each kernel right
    after its launch, so the step is every launch plus the last backward (docs/model.md)."""
    tr = _trace(host=2.0, update=5e-4)
    cl = _cluster(1, hook_overhead_s=1e-4)
    sched = simulate(tr, cl, make_plan(tr, cl, "ddp"))
    hooks = 1e-4 * sum(n for *_, n in LAYERS)
    launches = 2 * sum(f + b for f, b, _ in LAYERS) + hooks
    last = LAYERS[0][1]  # the backward of layer 0 runs after its launch; the step's host
    expect = max(launches + last, launches + 5e-4)  # time hides behind it (update_s = 0)
    assert sched.iteration_time_s == pytest.approx(expect, rel=1e-12)
    assert sched.breakdown.host_stall_s > 0
    assert sum(sched.breakdown.as_dict().values()) == pytest.approx(sched.iteration_time_s)


def test_launch_costs_can_rank_many_small_buckets_behind() -> None:
    """Without launch costs 1 MiB buckets (4 calls) beat 25 MiB (1 call) here; at 1 ms per call
    on the host, which delays the later backward launches, the ranking flips."""
    tr = _trace(host=1.0)

    def ranked(launch: float) -> bool:
        cl = _cluster(4, launch_overhead_s=launch)
        small, large = (simulate(tr, cl, make_plan(tr, cl, f"ddp:bucket_cap_mb={c}"))
                        .iteration_time_s for c in (1, 25))
        return small < large

    assert ranked(0.0) and not ranked(1e-3)


@pytest.mark.parametrize("value", [-1e-6, math.nan, math.inf, 1.5])
@pytest.mark.parametrize("name", ["launch_overhead_s", "hook_overhead_s"])
def test_bad_host_costs_name_the_field(name: str, value: float) -> None:
    with pytest.raises((SchedoptError, ValueError), match=name):
        _cluster(2, **{name: value})


# ------------------------------------------------------------------- the optimizer with a host
def _small(host: float, update: float, launch: float, hook: float, gpus: int = 4,
           alpha: float = 2e-4) -> tuple[Trace, Cluster]:
    """Five layers, seven tensors: every contiguous bucketing can be simulated."""
    layers = [(1e-3, 2e-3, (3 << 20, 4 << 10)), (2e-3, 3e-3, (6 << 20,)),
              (5e-4, 1e-3, (1 << 20, 2 << 20)), (1e-3, 2e-3, (5 << 20,)),
              (5e-4, 5e-4, (1 << 19,))]
    tr = Trace.model_validate({
        "name": "h8", "batch_size": 1, "update_s": 3e-4, "host_update_s": update,
        "layers": [{"name": f"l{i}", "forward_s": f, "backward_s": b,
                    "host_forward_s": host * f, "host_backward_s": host * b,
                    "tensors": [{"name": f"l{i}.t{j}", "bytes": n} for j, n in enumerate(ts)]}
                   for i, (f, b, ts) in enumerate(layers)]})
    cl = Cluster.model_validate({
        "name": "c8", "nodes": gpus, "gpus_per_node": 1, "intra_link": {"bandwidth_Bps": 1e10},
        "inter_link": {"bandwidth_Bps": 2e9},
        "allreduce": {"alpha_s": alpha, "beta_s_per_byte": 1e-9},
        "launch_overhead_s": launch, "hook_overhead_s": hook})
    return tr, cl


def _brute_force(tr: Trace, cl: Cluster, next_forward: str) -> float:
    """The best simulated period over every contiguous bucketing in ready order."""
    from schedopt.optimize import SolveOptions
    from schedopt.optimize.instance import build_instance

    inst = build_instance(tr, cl, SolveOptions(next_forward=next_forward), merge=False)
    n = inst.n
    best = math.inf
    for mask in range(1 << (n - 1)):
        cuts = [i for i in range(n - 1) if mask >> i & 1]
        segs, lo = [], 0
        for c in [*cuts, n - 1]:
            segs.append((lo, c))
            lo = c + 1
        plan = inst.to_plan(segs)
        best = min(best, simulate(tr, cl, plan).iteration_time_s)
    return best


@pytest.mark.parametrize("next_forward", ["wait-for-all", "per-layer"])
@pytest.mark.parametrize("costs", [
    (0.0, 0.0, 0.0, 0.0),  # no host: the exact model
    (0.2, 1e-4, 2e-5, 5e-6),  # host well ahead of the GPU: its costs hide
    (1.5, 2e-4, 5e-4, 2e-5),  # host-bound, dear calls
    (0.5, 0.0, 2e-3, 0.0),  # calls dearer than a bucket's communication
], ids=["none", "hidden", "host-bound", "dear-calls"])
def test_the_optimizer_with_host_costs_against_brute_force(next_forward: str,
                                                           costs: tuple) -> None:
    """The optimizer's objective is the simulator's period of its plan, its bound is below the
    best of all 64 contiguous bucketings (host costs only add time to the model without a
    host), and OPTIMAL is claimed only at that best."""
    from schedopt.optimize import SolveOptions, Status, solve

    tr, cl = _small(*costs)
    assert tr.num_tensors <= 8
    res = solve(tr, cl, SolveOptions(next_forward=next_forward, time_limit_s=5, workers=1,
                                     seed=0))
    sim = simulate(tr, cl, res.plan).iteration_time_s
    assert res.iteration_time_s == pytest.approx(sim, rel=1e-12)
    assert res.objective_s == pytest.approx(sim, rel=1e-3)  # one truth
    brute = _brute_force(tr, cl, next_forward)
    assert res.bound_s <= brute * (1 + 1e-3)
    if res.status == Status.OPTIMAL:
        assert res.objective_s <= brute * (1 + 1e-3)
    if any(costs) and not (cl.has_host or tr.has_host):  # pragma: no cover - fixture check
        raise AssertionError("host costs were dropped")
    if costs[3] or costs[2]:
        assert any("host side" in note for note in res.notes)


def test_hidden_host_costs_still_prove_the_optimum() -> None:
    """Calls and hooks whose host time never delays the device leave the optimum of the model
    without a host, which the bound then meets: OPTIMAL, proven. (A forward launch is not such
    a cost: the step's first launch follows the previous step's end.)"""
    from schedopt.optimize import SolveOptions, Status, solve

    tr, cl = _small(0.0, 0.0, 1e-6, 1e-7)
    res = solve(tr, cl, SolveOptions(time_limit_s=5, workers=1, seed=0))
    assert res.status == Status.OPTIMAL
    assert res.objective_s == pytest.approx(_brute_force(tr, cl, "wait-for-all"), rel=1e-3)


def test_dear_calls_make_the_optimizer_join_buckets() -> None:
    """A host-bound step with calls dearer than the link's start-up: the plan judged with the
    host side has fewer buckets than the model's own without it, simulates faster, and is the
    best of all contiguous bucketings here."""
    from schedopt.optimize import SolveOptions, solve

    tr, cl = _small(1.5, 0.0, 2e-3, 0.0, alpha=1e-5)
    free = Cluster.model_validate({**cl.model_dump(), "launch_overhead_s": 0.0})
    with_calls = solve(tr, cl, SolveOptions(time_limit_s=5, workers=1, seed=0))
    without = solve(tr, free, SolveOptions(time_limit_s=5, workers=1, seed=0))
    assert len(with_calls.plan.buckets) < len(without.plan.buckets)
    moved = without.plan.model_copy(update={"cluster_hash": with_calls.plan.cluster_hash})
    assert with_calls.iteration_time_s < simulate(tr, cl, moved).iteration_time_s
    assert with_calls.iteration_time_s == pytest.approx(_brute_force(tr, cl, "wait-for-all"),
                                                        rel=1e-3)
