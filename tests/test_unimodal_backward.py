"""The backward programme (:mod:`schedopt.optimize.backward`): at a grid of one tick it
decides exactly as the forward programme, its needs never drop a state that leads to a plan
(at the ``lam`` they were computed for or any below, layers of any size), and the exact
search with them proves the same bounds."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedopt.optimize.unimodal as unimodal_mod
from schedopt.optimize import SolveOptions
from schedopt.optimize.backward import Needs, cells_bound
from schedopt.optimize.bounds import constant_bound
from schedopt.optimize.instance import build_instance
from schedopt.optimize.unimodal import Outcome, backward_needs, feasibility, unimodal_exact

from .test_unimodal_pruning import _random_trace


def _case(seed: int, max_tensors: int):
    """A random per-layer + reorder instance, its tables and the exact programme's optimum
    without the backward programme."""
    trace, cluster = _random_trace(seed, max_tensors)
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    hi = int(inst.evaluate([(0, inst.n - 1)]).period)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(unimodal_mod, "BACKWARD", False)
        ref = unimodal_exact(inst, constant_bound(inst) - 1, hi, grid_rel=0.0)
    assert ref is not None
    return inst, unimodal_mod._tables(inst, 0), hi, ref


def _plain(inst, lam: int) -> Outcome:
    """The forward test at ``lam`` without the backward programme."""
    return feasibility(inst, lam, backward=False, max_states=10**9)[0]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_tensors=st.sampled_from([2, 4]),
       fractions=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=2))
def test_one_tick_grid_decides_as_the_forward_programme(seed: int, max_tensors: int,
                                                        fractions: list[float]) -> None:
    """With a grid of one tick, the start's need is finite exactly when the forward test is
    feasible (layers of at most two units; with more, the units after the first stay out of
    the backward tails, so it may only admit more)."""
    inst, t, hi, ref = _case(seed, max_tensors)
    exact = bool(t.one_left[t.inside].all())
    lams = {ref.bound - 1, ref.bound} | {int(ref.bound + f * (hi - ref.bound) / 4)
                                         for f in fractions}
    for lam in sorted(lams):
        needs = Needs(t, lam, 1, unimodal_mod._first_lives(t, lam))
        feasible = _plain(inst, lam) is Outcome.FEASIBLE
        assert needs.start_feasible or not feasible, lam
        if exact:
            assert needs.start_feasible == feasible, lam


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_tensors=st.sampled_from([2, 4]),
       above=st.sampled_from([0, 1, 50, 1000]), step=st.sampled_from([1, 7, 200]),
       grid=st.sampled_from([0, 0, 5]))
def test_needs_keep_every_answer(seed: int, max_tensors: int, above: int, step: int,
                                 grid: int) -> None:
    """Needs computed ``above`` ticks over the ``lam`` tested, on any grid, leave the exact
    test's answer as it is at the optimum and one tick below it; a plan they admit meets
    ``lam``. In a grid test they may only turn a feasible answer infeasible where the exact
    programme is infeasible too."""
    inst, t, _, ref = _case(seed, max_tensors)
    for lam in (ref.bound - 1, ref.bound):
        at = lam + above
        needs = Needs(t, at, step, unimodal_mod._first_lives(t, at))
        off = feasibility(inst, lam, grid=grid, backward=False, max_states=10**9)[0]
        on, segs = feasibility(inst, lam, grid=grid, needs=needs, want_plan=True,
                               max_states=10**9)
        if grid == 0:
            assert on is off, (lam, at)
            if on is Outcome.FEASIBLE and ref.exact:
                assert int(inst.evaluate(segs).period) <= lam
        else:
            assert on is off or (on is Outcome.INFEASIBLE and lam < ref.bound), (lam, at)


@pytest.mark.parametrize("seed", [1, 3, 7, 8, 11])
def test_buckets_that_stay_in_a_layer_of_many_units_count(seed: int) -> None:
    """Layers of three or four tensors: the needs of the buckets that stay in a layer (kept
    per level of the inherited update part) make the one-tick backward programme alone prove
    the optimum less one tick infeasible, where needing nothing after such a bucket could not
    (on 32 of 40 random instances, against none)."""
    inst, t, _, ref = _case(seed, 4)
    assert not t.one_left[t.inside].all()
    lam = ref.bound - 1
    assert not Needs(t, lam, 1, unimodal_mod._first_lives(t, lam)).start_feasible
    assert _plain(inst, lam) is Outcome.INFEASIBLE


def test_needs_for_a_smaller_lam_are_refused() -> None:
    """Needs are lower bounds only at their ``lam`` and below."""
    inst, t, _, ref = _case(3, 2)
    needs = Needs(t, ref.bound - 1, 1, unimodal_mod._first_lives(t, ref.bound - 1))
    with pytest.raises(ValueError, match="cannot serve"):
        feasibility(inst, ref.bound, needs=needs)


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 8, 13])
def test_exact_search_with_needs_proves_the_same_bound(seed: int) -> None:
    """With the backward programme on every exact test (as once a test without it has
    outgrown their cost), a bisection ends at the same optimum and bound as without it, and
    its plan's period meets that bound when the tails are exact."""
    inst, _, hi, ref = _case(seed, 4)
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        spy = unimodal_mod.backward_needs

        def counted(*args, **kwargs):
            calls.append(args[1])
            return spy(*args, **kwargs)

        mp.setattr(unimodal_mod, "backward_needs", counted)
        tests = unimodal_mod._Tests(inst, deadline=None, levels=0, grid_rel=0.0, pairs=True)
        tests.needs_pay = True  # as after a test without the needs outgrew their cost
        lo, top = constant_bound(inst) - 1, hi
        while top - lo > 1:  # plain bisection, every test with the needs
            lam = (lo + top) // 2
            if tests.test(lam, top):
                top = min(lam, int(inst.evaluate(tests.segs).period))
            else:
                lo = lam
    assert calls, "the needs were computed"
    assert lo + 1 == ref.bound
    if ref.exact:
        assert top == ref.bound


def test_cells_bound_and_the_deadline() -> None:
    """The work estimate is an upper bound of the grid values computed, a passed deadline or
    a limit on the grid values below their count leaves the needs incomplete (and the test
    TIMEOUT), and a work limit below their cost stops them."""
    inst, t, _, ref = _case(11, 4)
    lam = ref.bound
    fl = unimodal_mod._first_lives(t, lam)
    needs = Needs(t, lam, 3, fl)
    assert 0 < needs.cells <= cells_bound(t, lam, 3, fl)
    assert not Needs(t, lam, 3, fl, deadline=time.perf_counter() - 1).complete
    assert not Needs(t, lam, 3, fl, max_cells=0).complete
    assert Needs(t, lam, 3, fl, max_cells=needs.cells).complete
    assert feasibility(inst, lam, deadline=time.perf_counter() - 1)[0] is Outcome.TIMEOUT
    work = [0]
    assert backward_needs(inst, lam, work=work, max_work=0) is None
    assert work[0] > 0
    assert np.all(np.diff(needs.need(-1, np.array([0, 10**9]))) >= 0)
