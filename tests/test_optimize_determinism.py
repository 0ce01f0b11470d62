"""Determinism under load: every search step stops on a deterministic limit, so the same inputs,
seed and one worker give the same plan and bound however fast the wall clock runs; the wall
clock is only a safety stop, reported when it fires."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

import schedopt.optimize.robust as robust_mod
from schedopt.files import load_cluster, load_trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.budget import WORK_FRACTION, Budget
from schedopt.optimize.robust import robust_solve
from schedopt.simulate.scenarios import corner_scenarios

#: The deterministic work of the determinism tests (s), and a wall-clock limit so generous that
#: it holds at load average 8 on 2 cores (the solve takes about 2 s unloaded).
WORK_S, WALL_S = 2.1, 60.0


def _solve(limit: float = WALL_S, work: float | None = WORK_S):
    trace = load_trace("resnet50-v100-b64").scaled(compute=0.4)
    cluster = load_cluster("10gbe-k80-family", nodes=8)
    opts = SolveOptions(next_forward="per-layer", reorder=True, lns=True, baselines=False,
                        time_limit_s=limit, work_limit_s=work, workers=1, seed=0)
    return solve(trace, cluster, opts)


def _plan_key(res) -> tuple:
    return res.plan.buckets, res.plan.partition, res.plan.stage_orders


def test_same_plan_and_bound_with_a_slow_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock running 4 times too fast (a machine loaded to four times the wall time per step)
    changes neither the plan nor the bound, and no safety stop fires: the work limit, not the
    time limit, ends the search."""
    plain = _solve()
    real = time.perf_counter
    t0 = real()
    monkeypatch.setattr(time, "perf_counter", lambda: t0 + 4.0 * (real() - t0))
    slow = _solve()
    monkeypatch.undo()
    assert not plain.wall_stop and not slow.wall_stop
    assert plain.work_s > 0 and slow.work_s == plain.work_s
    assert _plan_key(slow) == _plan_key(plain)
    assert slow.bound_s == plain.bound_s and slow.objective_s == plain.objective_s


def test_wall_clock_safety_stop_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clock so fast that the time limit passes before the deterministic limits: the result
    says so (``wall_stop`` and a note) and is still a valid plan."""
    real = time.perf_counter
    t0 = real()
    monkeypatch.setattr(time, "perf_counter", lambda: t0 + 50.0 * (real() - t0))
    res = _solve(limit=3.0)
    monkeypatch.undo()
    assert res.wall_stop
    assert any("safety stop" in n for n in res.notes)
    assert res.bound_s <= res.objective_s


def test_work_limit_bounds_the_work_and_defaults_to_a_fraction_of_the_time_limit() -> None:
    """The work charged never exceeds ``work_limit_s`` (by more than the last step's overrun),
    a larger work limit searches longer, and without one the work is the time limit's
    fraction."""
    small = _solve(work=0.2)  # (the large one proves its plan optimal in about 0.5 s)
    large = _solve(work=WORK_S)
    assert 0 < small.work_s <= 0.2 * 1.5 and small.work_s < large.work_s
    assert not small.wall_stop and large.bound_s >= small.bound_s - 1e-12
    default = SolveOptions()
    assert default.work_limit_s is None
    assert Budget(3.0).work_limit_s == pytest.approx(WORK_FRACTION * 3.0)
    assert Budget(3.0, 1.5).work_limit_s == 1.5


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_work_limit_is_refused(value: float) -> None:
    """A work limit that is not a finite positive number is refused, naming the field."""
    with pytest.raises(ValidationError, match="work_limit_s"):
        SolveOptions(work_limit_s=value)


@pytest.mark.parametrize("cluster_name", ["k80-4x4-10gbe", "dgx-a100-4n-hierarchical"])
def test_partitioning_never_worse_than_the_unpartitioned_optimum(tiny_trace, cluster_name: str
                                                                 ) -> None:
    """With ``partition_bytes`` the plan is never slower than the unpartitioned solve's, and
    the gain of partitioning is reported (the unpartitioned optimum minus the plan's period)."""
    cluster = load_cluster(cluster_name)
    kw = {"next_forward": "per-layer", "reorder": True, "baselines": False,
          "time_limit_s": WALL_S, "work_limit_s": WORK_S}
    plain = solve(tiny_trace, cluster, SolveOptions(**kw))
    cut = solve(tiny_trace, cluster, SolveOptions(partition_bytes=100_000, **kw))
    assert plain.partition_gain_s is None
    assert cut.iteration_time_s <= plain.iteration_time_s * (1 + 1e-9)
    assert cut.partition_gain_s is not None and cut.partition_gain_s >= 0.0
    assert cut.partition_gain_s == pytest.approx(
        max(0.0, plain.objective_s - cut.objective_s), abs=2 * cut.tick_s)
    assert any("partitioning gains" in n for n in cut.notes)


def test_robust_search_shares_the_work_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--robust`` with a work limit: the scenario solves and the local search share it, so a
    clock running 4 times too fast changes neither the plan, nor the worst case, nor the
    bound."""
    trace = load_trace("bert-base-v100-fp16")
    cluster = load_cluster("10gbe-k80-family", nodes=8)
    scenarios = corner_scenarios(trace, cluster, 20, vary=["beta", "compute"])
    opts = SolveOptions(next_forward="per-layer", reorder=True, time_limit_s=WALL_S,
                        work_limit_s=0.5)
    limits: list[float | None] = []
    inner = robust_mod.solve

    def spy(trace, cluster, options):
        limits.append(options.work_limit_s)
        return inner(trace, cluster, options)

    monkeypatch.setattr(robust_mod, "solve", spy)
    plain = robust_solve(scenarios, opts)
    assert limits and all(w is not None for w in limits)
    assert sum(w for w in limits if w is not None) <= opts.work_limit_s
    real = time.perf_counter
    t0 = real()
    monkeypatch.setattr(time, "perf_counter", lambda: t0 + 4.0 * (real() - t0))
    slow = robust_solve(scenarios, opts)
    monkeypatch.undo()
    assert not plain.wall_stop and not slow.wall_stop
    half = len(limits) // 2  # the spy saw both searches: the same sub-solves, same limits
    assert limits[:half] == limits[half:]
    assert slow.plan.buckets == plain.plan.buckets
    assert slow.worst_s == plain.worst_s and slow.bound_s == plain.bound_s
