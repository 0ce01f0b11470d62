"""The CP-SAT model of sharded plans (``optimize/sharding/cpsat.py``) against brute force over
every unit partition, depth pair and stream layout on small random instances (on the model's
ticks, where the closed-form step is exact), with and without a memory cap; its plan against
the simulator; its place in ``solve``."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
from ortools.sat.python import cp_model

from schedopt.errors import SchedoptError
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.result import Method, Status
from schedopt.optimize.sharding import solve as sharded_solve
from schedopt.optimize.sharding.cpsat import ShardedModel, choose_tick, solve_cpsat, ticked
from schedopt.optimize.sharding.evaluate import Config, ShardedInstance, build_sharded, step_time
from schedopt.optimize.sharding.search import _depths, partitions
from schedopt.simulate.simulator import simulate

from .test_optimize_sharded import MS, _cluster, _trace

#: Deterministic limit of the model in these tests (far above what they need).
WORK = 400.0


def _case(seed: int, mode: str, n_max: int = 7):  # type: ignore[no-untyped-def]
    """A random instance of 2..``n_max`` layers (tensorless layers included), ring or tree,
    with or without latency, 1-2 micro-batches."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, n_max + 1))
    layers = [(int(rng.integers(1, 30)) / 10, int(rng.integers(1, 30)) / 10,
               int(rng.choice([0, 250_000, 1_000_000, 3_000_000])) if i else 500_000)
              for i in range(n)]
    tr = _trace(layers, update_s=int(rng.integers(0, 30)) / 10 * MS)
    cl = _cluster(float(rng.choice([2e8, 1e9, 5e9])), int(rng.integers(2, 9)),
                  str(rng.choice(["ring", "tree"])), float(rng.choice([0.0, 2e-5])))
    return tr, cl, build_sharded(tr, cl, mode, accumulate=int(rng.integers(1, 3)))


def _brute(inst: ShardedInstance, cap: int | None,
           knobs: tuple[int, int, int] | None = None) -> float | None:
    """The least step over every configuration (of one class with ``knobs``) within ``cap``."""
    best = None
    for starts in partitions(inst):
        depths = _depths(inst, len(starts)) if knobs is None else [knobs[:2]]
        for p, q in depths:
            for streams in (1, 2) if knobs is None else (knobs[2],):
                st = step_time(inst, Config(starts, p, q, streams))
                if (cap is None or st.peak_bytes <= cap) and (best is None or st.step_s < best):
                    best = st.step_s
    return best


def _caps(inst: ShardedInstance) -> list[int | None]:
    """No cap, a cap at 70% of the largest one-unit-per-layer-group peak, and one below every
    plan's peak (infeasible)."""
    peaks = [step_time(inst, Config(s, 1, 1, 1)).peak_bytes for s in partitions(inst)]
    least = min(step_time(inst, Config(s, p, q, st)).peak_bytes for s in partitions(inst)
                for p, q in _depths(inst, len(s)) for st in (1, 2))
    return [None, int(0.7 * max(peaks)), least - 1]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode", ["full", "grad-op"])
def test_optimum_equals_brute_force_and_the_plan_its_value(seed: int, mode: str) -> None:
    tr, cl, inst = _case(seed, mode, n_max=6 if seed % 3 else 7)
    ti = ticked(inst, choose_tick(inst))
    for cap in _caps(ti):
        want = _brute(ti, cap)
        sol, _ = solve_cpsat(inst, cap, work_s=WORK, time_limit_s=120, tick=ti.tick)
        if want is None:  # no plan fits: proven
            assert sol.status == "INFEASIBLE" and sol.config is None
            continue
        assert sol.status == "OPTIMAL" and sol.value == want == sol.bound
        assert sol.config is not None
        st = step_time(ti, sol.config)  # the model's objective is the closed form's
        assert st.step_s == sol.value
        assert cap is None or st.peak_bytes <= cap
        # and, in seconds, the simulator's (within the rounding of the ticks)
        sim = simulate(tr, cl, inst.to_plan(sol.config)).iteration_time_s
        assert sim == pytest.approx(ti.period(sol.value) * ti.tick, rel=1e-3)


@pytest.mark.parametrize("seed", range(12, 20))
@pytest.mark.parametrize("knobs", [(2, 2, 2), (2, 1, 1), (0, 2, 2), (3, 0, 1)])
def test_one_class_equals_brute_force(seed: int, knobs: tuple[int, int, int]) -> None:
    # depth 2, two streams with backward prefetch: classes the exact programme cannot solve
    _, _, inst = _case(seed, "full", n_max=6)
    ti = ticked(inst, choose_tick(inst))
    for cap in _caps(ti)[:2]:
        want = _brute(ti, cap, knobs)
        sol, _ = solve_cpsat(inst, cap, work_s=WORK, time_limit_s=120, tick=ti.tick,
                             knobs=knobs)
        if want is None:
            assert sol.status == "INFEASIBLE"
            continue
        assert sol.status == "OPTIMAL" and sol.value == want
        assert sol.config is not None
        units = len(sol.config.starts)
        assert (sol.config.forward_prefetch, sol.config.backward_prefetch) == (
            min(knobs[0], units), min(knobs[1], units))
        assert sol.config.streams == knobs[2]
        assert step_time(ti, sol.config).step_s == want


@pytest.mark.parametrize("seed", range(20, 26))
def test_hint_is_feasible_and_has_its_value(seed: int) -> None:
    _, _, inst = _case(seed, "full")
    ti = ticked(inst, choose_tick(inst))
    starts = list(partitions(ti))
    c = Config(starts[seed % len(starts)], 2, 1, 2)
    model = ShardedModel(ti, None)
    model.hint(c)
    solver = cp_model.CpSolver()
    solver.parameters.fix_variables_to_their_hinted_value = True
    solver.parameters.num_workers = 1
    assert solver.solve(model.m) == cp_model.OPTIMAL
    assert solver.value(model.end) + model.upd == step_time(ti, c).step_s
    got = model.config(solver)
    assert got.starts == c.starts and got.streams == 2


def test_solve_uses_cpsat_past_enumeration_and_proves_the_optimum() -> None:
    tr, cl, inst = _case(0, "full")
    ti = ticked(inst, choose_tick(inst))
    cap = _caps(ti)[1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sharded_solve, "EXACT_WORK", 0)  # no enumeration: CP-SAT must prove it
        res = solve(tr, cl, SolveOptions(sharding="full", memory_cap_bytes=cap,
                                         accumulate=inst.accumulate, time_limit_s=60,
                                         work_limit_s=60, baselines=False))
    assert res.status is Status.OPTIMAL and res.bound_method is Method.CP_SAT
    assert not res.wall_stop and res.gap == 0
    config = sharded_solve.config_of_plan(inst, res.plan)
    assert config is not None
    assert step_time(ti, config).step_s == _brute(ti, cap)
    assert step_time(inst, config).peak_bytes <= cap
    assert simulate(tr, cl, res.plan).iteration_time_s == res.iteration_time_s


def test_cap_no_plan_fits_is_a_one_line_error_with_the_proof() -> None:
    for seed in range(40):  # an instance whose least peak is above the closed-form floor
        tr, cl, inst = _case(seed, "full", n_max=5)
        least = _caps(inst)[2]
        if least >= sharded_solve.peak_floor(inst):
            break
    with pytest.MonkeyPatch.context() as mp, pytest.raises(
            SchedoptError, match=r"memory_cap_bytes: no sharded plan .* CP-SAT proved"):
        mp.setattr(sharded_solve, "EXACT_WORK", 0)
        solve(tr, cl, SolveOptions(sharding="full", memory_cap_bytes=least,
                                   accumulate=inst.accumulate, time_limit_s=60,
                                   work_limit_s=30, baselines=False))


def test_sigint_in_cpsat_returns_the_best_plan_so_far() -> None:
    layers = [(0.3 + 0.1 * (i % 4), 0.8 + 0.2 * (i % 3), 400_000 * (1 + i % 5))
              for i in range(20)]
    tr, cl = _trace(layers, update_s=2 * MS), _cluster(3e8, 8, latency=2e-5)
    real, calls = sharded_solve.solve_cpsat, {"n": 0}

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sharded_solve, "solve_cpsat", interrupted)
        res = solve(tr, cl, SolveOptions(sharding="full", memory_cap_bytes=4_000_000,
                                         time_limit_s=120, work_limit_s=200, baselines=False))
    assert calls["n"] == 1 and res.interrupted and not res.wall_stop
    assert any("interrupted" in note for note in res.notes)
    assert res.status is Status.FEASIBLE and res.bound_s <= res.objective_s
    assert simulate(tr, cl, res.plan).iteration_time_s == res.iteration_time_s
