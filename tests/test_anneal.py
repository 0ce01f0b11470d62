"""Simulated annealing over bucketings and launch orders (:mod:`schedopt.optimize.anneal`):
valid plans, never worse than the start, the same plan for the same seed, the enumeration's
optimum on small instances, an end on plans no move applies to, runs stopped by their work,
``solve``'s runs of one length, the launch orders by Jackson's rules that polish each run
(:func:`schedopt.optimize.heuristics.jackson_orders`), and the shifts of units across the
borders of buckets and the fresh starts where start-up costs weigh
(:func:`schedopt.optimize.anneal.regime`)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import schedopt.optimize.anneal as anneal_module
from schedopt.optimize import SolveOptions
from schedopt.optimize.anneal import SHIFT_SHARE, SHIFT_UNITS, EvalCost, anneal, fresh_start, regime
from schedopt.optimize.flowshop import enumerate_plans
from schedopt.optimize.heuristics import jackson_orders
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


def test_a_run_stopped_by_its_work_is_the_start_of_a_longer_one() -> None:
    """With a work limit (:class:`~schedopt.optimize.anneal.EvalCost`) a run stops before the
    evaluation that would pass it, having charged what it evaluated; the temperature falls over
    ``max_evals`` whatever the limit, so a larger limit continues the same run and never ends
    worse."""
    inst = _instance("pipelined", 2, layers=6)
    start = _one_per_unit_backwards(inst)
    seen: list[int] = []
    values = []
    for limit in (0.02, 0.05, 0.2, 1.0):
        cost = EvalCost(1e-4, 1e-6, limit)
        stats: dict[str, int] = {}
        val, segs = anneal(inst, start, max_evals=4000, seed=3, stats=stats, cost=cost)
        assert _covers(inst, segs) and val == int(inst.evaluate(segs).period)
        assert cost.work(stats["evals"], stats["buckets"]) <= limit
        assert stats["evals"] < 4000 or limit == 1.0  # 4,000 evaluations charge 0.4 s or more
        seen.append(stats["evals"])
        values.append(val)
    assert seen == sorted(seen) and len(set(seen)) == 4
    assert values == sorted(values, reverse=True)
    assert (values[-1], stats["evals"]) == (anneal(inst, start, max_evals=4000, seed=3)[0], 4000)


def test_the_buckets_evaluated_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """``stats["buckets"]`` sums the buckets of every plan the run evaluated (the start's
    included), the count its charge per bucket is taken on."""
    inst = _instance("ps-dedicated", 4, layers=5)
    sizes: list[int] = []
    real = Instance.evaluate

    def counting(self, segs, **kw):  # type: ignore[no-untyped-def]
        sizes.append(len(segs))
        return real(self, segs, **kw)

    monkeypatch.setattr(Instance, "evaluate", counting)
    stats: dict[str, int] = {}
    anneal(inst, _one_per_unit_backwards(inst), max_evals=500, seed=1, stats=stats)
    assert stats["evals"] == len(sizes) == 500 and stats["buckets"] == sum(sizes)


def test_solve_runs_the_annealing_from_one_plan_with_successive_seeds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``solve`` anneals from the same plan with seeds ``seed``, ``seed + 1``, ..., every run
    as long (:data:`~schedopt.optimize.solver.ANNEAL_RUN_EVALS_PER_UNIT`), as many runs as its
    work allows, and its plan is at least as good as every run's best."""
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
    assert [c["seed"] for c in calls] == [5 + r for r in range(len(calls))]
    assert 2 <= len(calls) <= solver_module.ANNEAL_RUNS
    inst = calls[0]["inst"]
    assert all(c["start"] == calls[0]["start"] and
               c["evals"] == solver_module.ANNEAL_RUN_EVALS_PER_UNIT * inst.n for c in calls)
    segs, _ = inst.segments_of_plan(res.plan)
    assert int(inst.evaluate(segs).period) <= min(c["value"] for c in calls)


def test_more_work_runs_the_same_annealing_runs_and_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs do not depend on the work: with twice the work, ``solve`` runs the same runs
    (seeds and lengths) first, then more, and its plan is no worse."""
    import schedopt.optimize.solver as solver_module
    from schedopt.optimize import solve

    cluster = bench_multistage.layout_cluster("pipelined")
    trace = bench_multistage.random_trace(1, 2, cluster, layers=10)
    out = {}
    for work in (2.0, 4.0):
        calls: list[tuple[int, int]] = []

        def recording(inst: Instance, segs: list[tuple[int, int]],  # type: ignore[no-untyped-def]
                      calls: list[tuple[int, int]] = calls, **kw):
            val, best = anneal(inst, segs, **kw)
            calls.append((kw["seed"], val))
            return val, best

        monkeypatch.setattr(solver_module, "anneal", recording)
        opts = SolveOptions(next_forward="per-layer", reorder=True, workers=1, seed=0,
                            baselines=False, time_limit_s=60, work_limit_s=work)
        out[work] = (solve(trace, cluster, opts).iteration_time_s, calls)
    (short, few), (long, more) = out[2.0], out[4.0]
    assert len(more) > len(few) >= 1
    assert more[:len(few) - 1] == few[:-1]  # the last short run may stop at its work
    assert few[-1][0] == more[len(few) - 1][0] and more[len(few) - 1][1] <= few[-1][1]
    assert long <= short


def test_jackson_orders_sort_around_the_last_ready_bucket() -> None:
    """The buckets launched after the one holding the last unit go largest last unit first
    (largest delivery tail first), those before it in readiness order; alone and together, each
    a new order of the same buckets."""
    segs = [(3, 4), (0, 0), (9, 9), (5, 6), (1, 2), (7, 8)]  # (9, 9): the last-ready bucket
    after, before, both = jackson_orders(segs)
    assert after == [(3, 4), (0, 0), (9, 9), (7, 8), (5, 6), (1, 2)]
    assert before == [(0, 0), (3, 4), (9, 9), (5, 6), (1, 2), (7, 8)]
    assert both == [(0, 0), (3, 4), (9, 9), (7, 8), (5, 6), (1, 2)]
    assert jackson_orders([(0, 0), (5, 9), (3, 4), (1, 2)]) == []  # already in both orders
    assert jackson_orders([(0, 9)]) == []
    # one side out of order: one candidate (the two that change it are the same order)
    assert jackson_orders([(2, 3), (0, 1), (4, 5)]) == [[(0, 1), (2, 3), (4, 5)]]


@pytest.mark.parametrize(("layout", "ratio"), [("ps-dedicated", 8), ("pipelined", 2)])
def test_the_largest_tail_first_after_the_last_ready_bucket_mostly_helps(layout: str,
                                                                          ratio: int) -> None:
    """On random plans (bucketings and launch orders) of six-layer instances, launching the
    buckets after the last-ready one largest tail first (the first order of
    :func:`~schedopt.optimize.heuristics.jackson_orders`) shortens the period far more often than
    it lengthens it: on the dedicated servers (two links) over 50 times as often, on the
    pipelined all-reduce, whose all-gathers wait for the next reduce-scatter on the shared link,
    about three times (the reverse order makes most plans longer on both). Several stages make
    it a rule, not an optimum, so ``solve`` only offers these orders."""
    import random

    shorter = longer = 0
    for seed in range(3):
        inst = _instance(layout, seed, layers=6)
        rng = random.Random(seed)
        for _ in range(100):
            segs = list(inst.segments_from_cuts(np.array([rng.random() < 0.4
                                                          for _ in range(inst.n - 1)])))
            rng.shuffle(segs)
            orders = jackson_orders(segs)
            last = max(hi for _, hi in segs)
            p = next(k for k, (_, hi) in enumerate(segs) if hi == last)
            if not orders or orders[0][:p + 1] != segs[:p + 1]:
                continue  # the after part was in order already
            before, after = inst.evaluate(segs).period, inst.evaluate(orders[0]).period
            shorter += after < before
            longer += after > before
    assert shorter >= 60 and shorter >= ratio * longer


def test_a_shift_moves_a_few_units_across_one_border() -> None:
    """Every shift leaves a valid plan of as many buckets: two buckets that hold neighbouring
    units trade one to :data:`~schedopt.optimize.anneal.SHIFT_UNITS` units across their border,
    each at its launch position, the giver keeping a unit; and a bucket with no neighbour on
    the drawn side, or too small to give, draws nothing."""
    import random

    rng = random.Random(0)
    n = 30
    moved = set()
    for trial in range(300):
        cuts = sorted(rng.sample(range(1, n), 7))
        segs = [(a, b - 1) for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        rng.shuffle(segs)
        out = anneal_module._shift(list(segs), random.Random(trial))
        if out is None:
            continue
        assert len(out) == len(segs)
        assert sorted(u for lo, hi in out for u in range(lo, hi + 1)) == list(range(n))
        changed = [k for k in range(len(segs)) if out[k] != segs[k]]
        assert len(changed) == 2
        a, b = (segs[k] for k in changed)
        assert a[1] + 1 == b[0] or b[1] + 1 == a[0]  # neighbours in readiness order
        d = abs((out[changed[0]][1] - out[changed[0]][0]) - (a[1] - a[0]))
        assert 1 <= d <= SHIFT_UNITS
        moved.add(d)
    assert moved == set(range(1, SHIFT_UNITS + 1))
    assert all(anneal_module._shift([(0, 0)], random.Random(s)) is None for s in range(20))


@pytest.mark.parametrize("share", [-0.1, 0.4, 0.7, float("nan")])
def test_a_shift_share_outside_its_range_is_refused(share: float) -> None:
    """The shifts are taken from the splits and merges (40% of the draws): a share outside
    ``[0, 0.4)`` is an error naming it, not a skewed or broken draw."""
    inst = _instance("pipelined", 0)
    with pytest.raises(ValueError, match="shift must be in"):
        anneal(inst, _one_per_unit_backwards(inst), max_evals=10, seed=0, shift=share)


def test_the_regime_follows_the_weight_of_start_up_costs() -> None:
    """The pipelined all-reduce (start-up costs of 1.8-5.5 units' transfers on the 60-layer
    benchmark rows) shifts borders and restarts; the dedicated servers (0.005-0.014 there,
    0.03 on this three-layer instance) do none of it, and their runs draw exactly the moves of
    a run without shifts."""
    pipelined, dedicated = _instance("pipelined", 0), _instance("ps-dedicated", 0)
    assert regime(pipelined) == anneal_module.Regime(SHIFT_SHARE, True)
    assert regime(dedicated) == anneal_module.Regime(0.0, False)
    assert anneal_module.startup_weight(pipelined) > 1 > 0.1 > anneal_module.startup_weight(
        dedicated)
    start = _one_per_unit_backwards(dedicated)
    assert anneal(dedicated, start, max_evals=800, seed=3, shift=regime(dedicated).shift) == \
        anneal(dedicated, start, max_evals=800, seed=3)
    assert fresh_start(dedicated) == start


def test_shifts_help_where_start_up_costs_weigh() -> None:
    """On eight-layer pipelined instances, from one bucket per unit in reverse, runs of 3,000
    evaluations with shifts end shorter than the same runs without them far more often than
    longer (measured: 12 of 12 shorter; with a shift that draws nothing, 7 shorter and 4
    longer)."""
    shorter = longer = 0
    for seed in range(6):
        inst = _instance("pipelined", seed, layers=8)
        start = _one_per_unit_backwards(inst)
        for run in range(2):
            plain, _ = anneal(inst, start, max_evals=3000, seed=run)
            val, segs = anneal(inst, start, max_evals=3000, seed=run, shift=SHIFT_SHARE)
            assert _covers(inst, segs) and val == int(inst.evaluate(segs).period)
            shorter += val < plain
            longer += val > plain
    assert shorter >= 10 and longer <= 1


def test_solve_anneals_in_the_instances_regime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where start-up costs weigh, ``solve`` runs every run with the regime's shifts, the first
    from the best plan and the others from one bucket per unit."""
    import schedopt.optimize.solver as solver_module
    from schedopt.optimize import solve

    calls: list[dict] = []

    def recording(inst: Instance, segs: list[tuple[int, int]], **kw):  # type: ignore[no-untyped-def]
        calls.append({"shift": kw["shift"], "start": list(segs), "fresh": fresh_start(inst),
                      "run": kw["seed"]})
        return anneal(inst, segs, **kw)

    monkeypatch.setattr(solver_module, "anneal", recording)
    cluster = bench_multistage.layout_cluster("pipelined")
    trace = bench_multistage.random_trace(1, 2, cluster, layers=10)
    opts = SolveOptions(next_forward="per-layer", reorder=True, workers=1, seed=0,
                        baselines=False, time_limit_s=60, work_limit_s=4)
    solve(trace, cluster, opts)
    assert len(calls) >= 2
    assert all(c["shift"] == SHIFT_SHARE for c in calls)
    assert calls[0]["start"] != calls[0]["fresh"]
    assert all(c["start"] == c["fresh"] for c in calls[1:])
