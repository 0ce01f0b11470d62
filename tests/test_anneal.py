"""Simulated annealing over bucketings and launch orders (:mod:`schedopt.optimize.anneal`):
valid plans, never worse than the start, the same plan for the same seed, the enumeration's
optimum on small instances, and an end on plans no move applies to."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import schedopt.optimize.anneal as anneal_module
from schedopt.optimize import SolveOptions
from schedopt.optimize.anneal import anneal
from schedopt.optimize.flowshop import enumerate_plans
from schedopt.optimize.instance import Instance, build_instance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_multistage


def _instance(layout: str, seed: int, layers: int = 3) -> Instance:
    cluster = bench_multistage.layout_cluster(layout)
    trace = bench_multistage.random_trace(seed, 2, cluster, layers=layers)
    opts = SolveOptions(next_forward="per-layer", reorder=True, merge_layers=False)
    return build_instance(trace, cluster, opts, merge=False)


def _covers(inst: Instance, segs: list[tuple[int, int]]) -> bool:
    seen = np.zeros(inst.n, dtype=int)
    for lo, hi in segs:
        if not 0 <= lo <= hi < inst.n:
            return False
        seen[lo:hi + 1] += 1
    return bool((seen == 1).all())


def _one_per_unit_backwards(inst: Instance) -> list[tuple[int, int]]:
    return [(u, u) for u in range(inst.n - 1, -1, -1)]


@pytest.mark.parametrize("layout", ["ps-dedicated", "pipelined"])
def test_annealing_keeps_plans_valid_and_never_worse(layout: str) -> None:
    inst = _instance(layout, 1, layers=6)
    start = _one_per_unit_backwards(inst)
    start_val = int(inst.evaluate(start).period)
    stats: dict[str, int] = {}
    val, segs = anneal(inst, start, max_evals=3000, seed=0, stats=stats)
    assert _covers(inst, segs)
    assert val == int(inst.evaluate(segs).period) <= start_val
    assert val < start_val  # a poor start is improved
    assert stats["evals"] == 3000 and stats["deadline_stop"] == 0


def test_the_same_seed_gives_the_same_plan() -> None:
    inst = _instance("ps-dedicated", 2, layers=6)
    start = _one_per_unit_backwards(inst)
    first = anneal(inst, start, max_evals=1500, seed=7)
    assert anneal(inst, start, max_evals=1500, seed=7) == first


@pytest.mark.parametrize(("layout", "seed"), [("ps-dedicated", 0), ("pipelined", 1)])
def test_small_instances_reach_the_enumeration_optimum(layout: str, seed: int) -> None:
    """Three layers (six units): from one bucket per unit in reverse, 4,000 evaluations reach
    the best of every bucketing and launch order."""
    inst = _instance(layout, seed)
    best, _ = enumerate_plans(inst, True)
    val, segs = anneal(inst, _one_per_unit_backwards(inst), max_evals=4000, seed=0)
    assert val == best and _covers(inst, segs)


def test_a_plan_no_move_applies_to_ends() -> None:
    """One unit in one bucket: no move applies, and the search still ends, with the start."""
    cluster = bench_multistage.layout_cluster("ps-dedicated")
    trace = bench_multistage.random_trace(0, 2, cluster, layers=1)
    opts = SolveOptions(next_forward="per-layer", reorder=True, merge_layers=True)
    inst = build_instance(trace, cluster, opts, merge=True)  # the one layer is one unit
    assert inst.n == 1
    stats: dict[str, int] = {}
    val, segs = anneal(inst, [(0, 0)], max_evals=1000, seed=0, stats=stats)
    assert segs == [(0, 0)] and val == int(inst.evaluate([(0, 0)]).period)
    assert stats["evals"] == 1


def test_the_deadline_is_a_safety_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadline already passed on a fake clock stops the search at its first look at the
    clock (every 64 draws), with the start kept: no real clock is read, so nothing here depends
    on how fast or how loaded this machine is."""
    readings: list[float] = []

    def fake_clock() -> float:
        readings.append(0.0)
        return 0.0

    inst = _instance("pipelined", 0, layers=6)
    start = _one_per_unit_backwards(inst)
    monkeypatch.setattr(anneal_module, "time", types.SimpleNamespace(perf_counter=fake_clock))
    stats: dict[str, int] = {}
    val, segs = anneal(inst, start, max_evals=10**9, seed=0, deadline=-1.0, stats=stats)
    assert stats["deadline_stop"] == 1 and stats["evals"] <= 64
    assert _covers(inst, segs) and val <= int(inst.evaluate(start).period)
    assert len(readings) == 1


def test_solve_runs_the_annealing_from_one_plan_with_successive_seeds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``solve`` anneals :data:`~schedopt.optimize.solver.ANNEAL_RUNS` times from the same plan
    with seeds ``seed``, ``seed + 1``, ..., the evaluations shared equally, and its plan is at
    least as good as every run's best."""
    import schedopt.optimize.solver as solver_module
    from schedopt.optimize import solve

    calls: list[dict] = []

    def recording(inst: Instance, segs: list[tuple[int, int]], **kw):  # type: ignore[no-untyped-def]
        out = anneal(inst, segs, **kw)
        calls.append({"start": list(segs), "seed": kw["seed"], "evals": kw["max_evals"],
                      "value": out[0], "inst": inst})
        return out

    monkeypatch.setattr(solver_module, "anneal", recording)
    cluster = bench_multistage.layout_cluster("ps-dedicated")
    trace = bench_multistage.random_trace(3, 2, cluster, layers=12)
    opts = SolveOptions(next_forward="per-layer", reorder=True, workers=1, seed=5,
                        baselines=False, time_limit_s=60, work_limit_s=4)
    res = solve(trace, cluster, opts)
    assert [c["seed"] for c in calls] == [5 + r for r in range(solver_module.ANNEAL_RUNS)]
    assert solver_module.ANNEAL_RUNS >= 2
    assert all(c["start"] == calls[0]["start"] and c["evals"] == calls[0]["evals"]
               for c in calls)
    inst = calls[0]["inst"]
    segs, _ = inst.segments_of_plan(res.plan)
    assert int(inst.evaluate(segs).period) <= min(c["value"] for c in calls)
