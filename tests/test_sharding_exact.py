"""The exact programme over unit boundaries (``optimize/sharding/exact.py``) against brute
force on small instances, its objective against the simulator, its place in ``solve``; and the
starts that repeat one cut pattern per block (``search.pattern_starts``)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.control import Halt
from schedopt.optimize.result import Method
from schedopt.optimize.sharding import solve as sharded_solve
from schedopt.optimize.sharding.evaluate import Config, build_sharded, step_time
from schedopt.optimize.sharding.exact import Knobs, best_units, separable_classes
from schedopt.optimize.sharding.search import (
    partitions,
    pattern_layouts,
    pattern_starts,
    repeated_blocks,
    shortened,
)
from schedopt.simulate.simulator import simulate

from .test_optimize_sharded import MS, _cluster, _trace


def _random_case(seed: int):  # type: ignore[no-untyped-def]
    """A random instance of 1-6 layers: zero compute, zero backward and tensorless layers
    included; ring or tree, with and without latency; 1-3 micro-batches."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    layers = [(int(rng.integers(0, 30)) / 10,
               int(rng.integers(0, 30)) / 10 if rng.random() < 0.85 else 0.0,
               int(rng.choice([0, 250_000, 1_000_000, 3_000_000])) if i else 500_000)
              for i in range(n)]
    tr = _trace(layers, update_s=int(rng.integers(0, 30)) / 10 * MS)
    cl = _cluster(float(rng.choice([2e8, 1e9, 5e9])), int(rng.integers(2, 9)),
                  str(rng.choice(["ring", "tree"])), float(rng.choice([0.0, 2e-5])))
    return tr, cl, build_sharded(tr, cl, "full", accumulate=int(rng.integers(1, 4)))


def _class_brute(inst, k: Knobs, cap: int | None) -> float | None:  # type: ignore[no-untyped-def]
    """The least step of class ``k`` over every partition within ``cap``."""
    steps = [step_time(inst, Config(s, k.forward_prefetch, k.backward_prefetch, k.streams))
             for s in partitions(inst)]
    ok = [s.step_s for s in steps if cap is None or s.peak_bytes <= cap]
    return min(ok) if ok else None


@pytest.mark.parametrize("seed", range(40))
def test_exact_programme_equals_brute_force_and_simulation(seed: int) -> None:
    tr, cl, inst = _random_case(seed)
    classes = separable_classes(inst)
    assert len(classes) == (6 if np.all(inst.b > 0) else 4)
    for k in classes:
        found = best_units(inst, k)
        assert found is not None
        value, config = found
        assert value == pytest.approx(_class_brute(inst, k, None), rel=1e-12, abs=1e-15)
        assert step_time(inst, config).step_s == pytest.approx(value, rel=1e-12, abs=1e-15)
        sched = simulate(tr, cl, inst.to_plan(config))  # objective = simulation
        assert sched.iteration_time_s == pytest.approx(inst.period(value), rel=1e-9)


@pytest.mark.parametrize("seed", range(40, 70))
@pytest.mark.parametrize("frac", [0.5, 0.8])
def test_exact_programme_under_a_cap_is_a_relaxation_exact_when_its_plan_fits(
        seed: int, frac: float) -> None:
    _, _, inst = _random_case(seed)
    peaks = [step_time(inst, Config(s, 1, 1, 1)).peak_bytes for s in partitions(inst)]
    cap = max(1, int(frac * max(peaks)))
    for k in separable_classes(inst):
        want = _class_brute(inst, k, cap)
        found = best_units(inst, k, cap)
        if found is None:  # no unit fits alone: no plan of the class fits
            assert want is None
            continue
        value, config = found
        if want is not None:
            assert value <= want * (1 + 1e-12) + 1e-15
        if step_time(inst, config).peak_bytes <= cap:
            assert value == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_separable_classes_only_for_full_sharding() -> None:
    tr, cl = _trace([(1, 2, 1000), (1, 0, 1000)]), _cluster()
    assert separable_classes(build_sharded(tr, cl, "grad-op")) == []
    assert len(separable_classes(build_sharded(tr, cl, "full", accumulate=2))) == 4
    # a layer without backward: a gather could tie with a reduce-scatter on two streams
    assert {k.streams for k in separable_classes(build_sharded(tr, cl, "full"))} == {1}


def test_exact_programme_stops_when_asked() -> None:
    tr = _trace([(1, 2, 1_000_000)] * 30)
    inst = build_sharded(tr, _cluster(), "full")
    calls = {"n": 0}

    def check() -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise Halt

    with pytest.raises(Halt):
        best_units(inst, Knobs(1, 1, 1), None, check)
    assert calls["n"] == 3


def test_solve_is_never_worse_than_any_class_optimum() -> None:
    # 25 layers: too many to enumerate, few enough for the exact programme
    layers = [(0.3 + 0.1 * (i % 4), 0.8 + 0.2 * (i % 3), 400_000 * (1 + i % 5))
              for i in range(25)]
    tr, cl = _trace(layers, update_s=2 * MS), _cluster(5e8, 8)
    inst = build_sharded(tr, cl, "full")
    best = min(v for v, _ in (best_units(inst, k) for k in separable_classes(inst)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sharded_solve, "EXACT_WORK", 0)
        res = solve(tr, cl, SolveOptions(sharding="full", time_limit_s=20, baselines=False,
                                         work_limit_s=1.0))
    assert res.objective_s <= inst.period(best) * (1 + 1e-12)
    assert res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-9)
    assert res.method in (Method.DP, Method.LOCAL_SEARCH, Method.UNIFORM_UNITS)


# ------------------------------------------------------------------------- patterns
def _named(blocks: int) -> Trace:
    """An embedding, ``blocks`` blocks of three layers (a norm without backward, two
    weights), a head."""
    layers = [{"name": "embed", "forward_s": 1e-4, "backward_s": 2e-4,
               "tensors": [{"name": "embed.w", "bytes": 4_000_000}]}]
    for i in range(blocks):
        for part, (f, b, nbytes) in {"norm": (1e-4, 0.0, 1_000), "attn": (1e-3, 2e-3, 2_000_000),
                                     "mlp": (2e-3, 4e-3, 4_000_000)}.items():
            layers.append({"name": f"model.layers.{i}.{part}", "forward_s": f, "backward_s": b,
                           "tensors": [{"name": f"model.layers.{i}.{part}.w",
                                        "bytes": nbytes}]})
    layers.append({"name": "lm_head", "forward_s": 1e-3, "backward_s": 2e-3,
                   "tensors": [{"name": "lm_head.w", "bytes": 4_000_000}]})
    return Trace.model_validate({"name": "named", "batch_size": 1, "layers": layers})


def test_repeated_blocks_and_their_patterns() -> None:
    inst = build_sharded(_named(5), _cluster(), "full")
    assert repeated_blocks(inst) == (1, 3, 5)
    layouts = pattern_starts(inst)
    assert len(layouts) == 2 ** 3 - 1  # every non-empty set of cuts in a block of three
    for starts in layouts:
        assert inst.valid(starts) and starts[0] == 0
        assert {1, 16} <= set(starts)  # the run's ends; embed and lm_head units of their own
        offsets = [{s - 1 - 3 * i for s in starts if 1 + 3 * i <= s < 4 + 3 * i}
                   for i in range(5)]
        assert all(o == offsets[1] for o in offsets[1:])  # one pattern in every block
    assert len(set(layouts)) == len(layouts)


def test_no_patterns_without_repeated_blocks() -> None:
    inst = build_sharded(_trace([(1, 2, 1000)] * 4), _cluster(), "full")
    assert repeated_blocks(inst) is None and pattern_starts(inst) == []


def test_sigint_in_the_exact_programme_returns_the_best_plan_so_far() -> None:
    layers = [(0.3 + 0.1 * (i % 4), 0.8 + 0.2 * (i % 3), 400_000 * (1 + i % 5))
              for i in range(25)]
    tr, cl = _trace(layers, update_s=2 * MS), _cluster(5e8, 8)
    real, calls = sharded_solve.best_units, {"n": 0}

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sharded_solve, "best_units", interrupted)
        mp.setattr(sharded_solve, "EXACT_WORK", 0)
        res = solve(tr, cl, SolveOptions(sharding="full", time_limit_s=30, baselines=False))
    assert res.interrupted and not res.wall_stop and calls["n"] == 2
    assert res.method is Method.DP  # the first class's optimum, the only plan known
    assert simulate(tr, cl, res.plan).iteration_time_s == res.iteration_time_s
    assert res.bound_s <= res.objective_s


def test_shortened_keeps_the_ends_and_the_first_blocks() -> None:
    inst = build_sharded(_named(6), _cluster(), "full")
    short = shortened(inst, 2)
    assert short is not None and shortened(inst, 6) is None
    assert short.names == [*inst.names[:7], "lm_head"]
    assert repeated_blocks(short) == (1, 3, 2)
    assert short.sums[-1, 2] == inst.p[:7].sum() + inst.p[-1]
    # the same patterns, block for block
    assert [m for m, _ in pattern_layouts(short)] == [m for m, _ in pattern_layouts(inst)]
