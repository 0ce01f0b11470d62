"""The unimodal programme's exact pruning (dominance across cut positions, the slack between
``e`` and ``nu``): every test answers as the programme without it, on random instances with
more units than brute force reaches, and the bound stays the brute-force optimum."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedopt.optimize.unimodal as unimodal_mod
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions
from schedopt.optimize.bounds import constant_bound
from schedopt.optimize.instance import build_instance
from schedopt.optimize.unimodal import Outcome, feasibility, unimodal_exact

from .strategies import clusters, traces
from .test_optimize_unimodal import brute

#: The pruning rules (module constants of :mod:`schedopt.optimize.unimodal`).
RULES = ("CROSS_DOMINANCE", "TIGHT_PRUNE", "PEAK_APART", "PEAK_REACH", "PEAK_UPDATES",
         "EDF_PRUNE", "LATE_UPDATES", "NU_CAP", "BACKWARD")


def _outcome(monkeypatch: pytest.MonkeyPatch, on: bool, inst, lam: int, grid: int,
             levels: int) -> tuple[Outcome, int | None, int]:
    """One test with the pruning rules on or off: its outcome, the exact period of its plan
    and the states it examined (the backward programme's grid values not counted)."""
    for rule in RULES:
        monkeypatch.setattr(unimodal_mod, rule, on)
    monkeypatch.setattr(unimodal_mod, "CELLS_PER_STATE", 1 << 62)
    work = [0]
    outcome, segs = feasibility(inst, lam, want_plan=True, grid=grid, levels=levels,
                                work=work, max_states=10**9)
    return outcome, (int(inst.evaluate(segs).period) if segs else None), work[0]


def _same_answer(on: Outcome, off: Outcome, lam: int, exact_bound: int, relaxed: bool) -> bool:
    """Whether a rule kept the answer: the same outcome, or, in a relaxed test (a grid or
    update levels), an infeasible one where the exact programme is infeasible too (the
    backward programme's needs are those of the exact programme, sharper than the
    relaxation's)."""
    return on is off or (relaxed and on is Outcome.INFEASIBLE and off is Outcome.FEASIBLE
                         and lam < exact_bound)


def _random_trace(seed: int, max_tensors: int = 2) -> tuple[Trace, Cluster]:
    """A trace of 8-30 layers with 0 to ``max_tensors`` tensors each, random sizes and
    times, an update step or none, on a link whose start-up cost is random too (enough slack
    for many states)."""
    rng = np.random.default_rng(seed)
    fw = float(rng.uniform(1e-4, 1e-3))
    layers = [{"name": f"l{i}", "forward_s": fw * float(rng.uniform(0.2, 2.0)),
               "backward_s": 2 * fw * float(rng.uniform(0.2, 2.0)),
               "tensors": [{"name": f"l{i}.t{j}",
                            "bytes": 4 * int(rng.integers(1_000, 600_000)), "dtype": "float32"}
                           for j in range(int(rng.integers(1 if i == 0 else 0,
                                                           max_tensors + 1)))]}
              for i in range(int(rng.integers(8, 31)))]
    trace = Trace.model_validate({
        "name": "r", "batch_size": 8, "layers": layers,
        "update_s": float(rng.choice([0.0, rng.uniform(1e-4, 3e-3)]))})
    cluster = Cluster.model_validate({
        "name": "c", "nodes": 2, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 0.0},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 0.0},
        "allreduce": {"alpha_s": float(rng.uniform(2e-5, 5e-4)), "beta_s_per_byte": 1e-9}})
    return trace, cluster

def _random_case(seed: int) -> tuple[Any, int, int, Any]:
    """:func:`_random_trace`'s instance (per-layer + reorder), the bracket from the constant
    bound to one bucket, and the exact programme's result (no grid) with the rules as set."""
    trace, cluster = _random_trace(seed)
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    lo = constant_bound(inst) - 1
    hi = int(inst.evaluate([(0, inst.n - 1)]).period)
    ref = unimodal_exact(inst, lo, hi, grid_rel=0.0)
    assert ref is not None
    return inst, lo, hi, ref


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), grid=st.sampled_from([0, 0, 3, 50]),
       levels=st.sampled_from([0, 0, 2]),
       fractions=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4))
def test_pruning_keeps_every_answer(seed: int, grid: int, levels: int,
                                    fractions: list[float]) -> None:
    """At lam around the optimum and across the bracket, the tests with the pruning rules
    give the same answer as without them (a rule dropping a state that leads to a plan would
    turn a feasible lam infeasible), plans meeting lam, and never more work."""
    trace, cluster = _random_trace(seed)
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    lo = constant_bound(inst) - 1
    hi = int(inst.evaluate([(0, inst.n - 1)]).period)
    with pytest.MonkeyPatch.context() as mp:
        for rule in RULES:
            mp.setattr(unimodal_mod, rule, False)
        ref = unimodal_exact(inst, lo, hi, grid_rel=0.0)
        assert ref is not None
        lams = {ref.bound - 1, ref.bound, ref.bound + 1}
        lams |= {int(ref.bound + f * (hi - ref.bound) / 20) for f in fractions}
        for lam in sorted(lams):
            off = _outcome(mp, False, inst, lam, grid, levels)
            on = _outcome(mp, True, inst, lam, grid, levels)
            assert _same_answer(on[0], off[0], lam, ref.bound, grid + levels > 0), (
                lam, on, off)
            assert on[2] <= off[2]
            if on[0] is Outcome.FEASIBLE and grid == 0 and levels == 0 and ref.exact:
                assert on[1] is not None and on[1] <= lam


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), grid=st.sampled_from([0, 0, 3, 50]),
       levels=st.sampled_from([0, 0, 2]),
       rule=st.sampled_from(["PEAK_APART", "PEAK_REACH", "PEAK_UPDATES", "EDF_PRUNE",
                             "LATE_UPDATES", "NU_CAP", "BACKWARD"]),
       fractions=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=4))
def test_each_new_rule_keeps_every_answer(seed: int, grid: int, levels: int, rule: str,
                                          fractions: list[float]) -> None:
    """With the other rules on, one rule on or off gives the same answer at lam around the
    optimum and across the bracket. Keeping the peak's states apart never adds work (they are
    examined once, at the last step); a state killed early no longer dominates others, so
    with the peak's reach the work may grow on a few instances."""
    inst, _, hi, ref = _random_case(seed)
    lams = {ref.bound - 1, ref.bound, ref.bound + 1}
    lams |= {int(ref.bound + f * (hi - ref.bound) / 20) for f in fractions}
    for lam in sorted(lams):
        answers = []
        for on in (False, True):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(unimodal_mod, rule, on)
                work = [0]
                outcome, segs = feasibility(inst, lam, want_plan=True, grid=grid,
                                            levels=levels, work=work, max_states=10**9)
            answers.append((outcome, work[0]))
            if outcome is Outcome.FEASIBLE and grid == 0 and levels == 0 and ref.exact:
                assert int(inst.evaluate(segs).period) <= lam
        assert _same_answer(answers[1][0], answers[0][0], lam, ref.bound,
                            grid + levels > 0), (lam, answers)
        assert rule != "PEAK_APART" or answers[1][1] <= answers[0][1]


@settings(max_examples=30, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True), with_update=st.booleans())
def test_pruned_programme_meets_brute_force(trace: Trace, cluster: Cluster,
                                            with_update: bool) -> None:
    """With the pruning rules (the default), the bound never passes the optimum over every
    bucketing and launch order, and equals it without an update step or data path."""
    if not with_update:
        trace = trace.model_copy(update={"update_s": 0.0, "io_s": 0.0, "h2d_s": 0.0})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    if inst.n > 6 or not inst.stages:
        return
    assert all(getattr(unimodal_mod, rule) for rule in RULES)
    best, _ = brute(inst)
    res = unimodal_exact(inst, constant_bound(inst) - 1, int(best), grid_rel=0.0)
    assert res is not None
    assert max(res.bound, constant_bound(inst)) <= best
    if res.exact:
        assert max(res.bound, constant_bound(inst)) == best


def test_dominance_drops_states_on_a_chain_of_layers() -> None:
    """On thirty layers of one tensor each (every cut between layers), the rules examine
    fewer states than the programme without them, with the same answer at the optimum and
    one tick below it."""
    layers = [{"name": f"l{i}", "forward_s": 3e-4 * (1 + i % 3), "backward_s": 6e-4,
               "tensors": [{"name": f"l{i}.w", "bytes": 4 * (200_000 + 90_000 * (i % 5)),
                            "dtype": "float32"}]} for i in range(30)]
    trace = Trace.model_validate({"name": "chain", "batch_size": 8, "layers": layers,
                                  "update_s": 1e-3})
    cluster = Cluster.model_validate({
        "name": "c", "nodes": 2, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 0.0},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 0.0},
        "allreduce": {"alpha_s": 2e-4, "beta_s_per_byte": 1e-9}})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True))
    with pytest.MonkeyPatch.context() as mp:
        for rule in RULES:
            mp.setattr(unimodal_mod, rule, False)
        hi = int(inst.evaluate([(0, inst.n - 1)]).period)
        ref = unimodal_exact(inst, constant_bound(inst) - 1, hi, grid_rel=0.0)
        assert ref is not None
        for lam in (ref.bound - 1, ref.bound):
            off = _outcome(mp, False, inst, lam, 0, 0)
            on = _outcome(mp, True, inst, lam, 0, 0)
            assert on[0] is off[0]
            assert on[2] < off[2]
        assert np.all(np.diff(inst.layer) != 0)


def _pareto3_brute(e: np.ndarray, nu: np.ndarray, ug: np.ndarray) -> list[int]:
    """The states no earlier state in the order ``(ug, e, -nu)`` dominates, in that order."""
    order = np.lexsort((-nu, e, ug))
    out = []
    for pos, i in enumerate(order):
        if not any(e[j] <= e[i] and nu[j] >= nu[i] and ug[j] <= ug[i] for j in order[:pos]):
            out.append(int(i))
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), span=st.sampled_from([2, 5, 40]))
def test_pareto3_matrix_and_loop_agree_with_brute_force(seed: int, n: int, span: int) -> None:
    """The three-coordinate filter, in one matrix pass and group by group, keeps exactly the
    states (and their order) of a quadratic check; ties and unbounded ``nu`` included."""
    rng = np.random.default_rng(seed)
    e = rng.integers(0, span, n).astype(np.int64)
    nu = rng.integers(0, span, n).astype(np.int64)
    nu[rng.random(n) < 0.1] = unimodal_mod._BIG
    ug = rng.integers(0, max(1, span // 2), n).astype(np.int64)
    want = _pareto3_brute(e, nu, ug)
    assert unimodal_mod._pareto3(e, nu, ug).tolist() == want
    with pytest.MonkeyPatch.context() as mp:  # group by group past the matrix's size
        mp.setattr(unimodal_mod, "PARETO3_MATRIX", 0)
        assert unimodal_mod._pareto3(e, nu, ug).tolist() == want
    order = np.lexsort((-nu, e, ug))
    loop = order[unimodal_mod._pareto3_loop(e[order], nu[order], ug[order])] if n else order
    assert loop.tolist() == want


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), grid_rel=st.sampled_from([0.003, 0.01, 0.05]))
def test_refined_grids_reach_the_exact_threshold(seed: int, grid_rel: float) -> None:
    """When every exact test overflows, the fallback grid tests' bound stays at or below the
    exact programme's; made finer each time they can tell no more (``GRID_REFINE``), they end
    at it (down to a grid of one tick), where the grid phase's grid alone stops below it on
    most of these instances."""
    inst, lo, hi, ref = _random_case(seed)

    def overflowing(case, lam, **kw):  # the exact tests (no grid) overflow
        if not kw.get("grid"):
            return Outcome.TOO_MANY_STATES, []
        return feasibility(case, lam, **kw)

    bounds = {}
    for refine in (unimodal_mod.GRID_REFINE, 1):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(unimodal_mod, "feasibility", overflowing)
            mp.setattr(unimodal_mod, "GRID_REFINE", refine)
            res = unimodal_exact(inst, lo, hi, grid_rel=grid_rel)
        assert res is not None
        assert res.bound <= ref.bound
        if res.segs:
            assert int(inst.evaluate(res.segs).period) >= ref.bound  # a bound of every plan
        bounds[refine] = res.bound
    assert bounds[unimodal_mod.GRID_REFINE] == ref.bound
    assert bounds[1] <= bounds[unimodal_mod.GRID_REFINE]
