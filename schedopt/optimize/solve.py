"""``solve``: the best plan the options allow, with a proven bound (docs/formulation.md).

Method by class (``method="auto"``):

* no communication (one rank): any plan; the period is the compute.
* one stage, wait-for-all: the exact O(n) dynamic programme (:mod:`.dp`); reordering and
  partitioning cannot help in this class.
* one stage, per-layer, readiness order, no update step: the exact bisected programme.
* one stage, per-layer otherwise: the local search (:mod:`.heuristics`), the unimodal
  programme (:mod:`.unimodal`, exact without update step and data path, a bound otherwise),
  CP-SAT (:mod:`.model`) warm-started from the best plan so far, and the windowed LNS
  (:mod:`.lns`) on large instances; the bound is the best of the programmes', CP-SAT's and the
  DP lower bound over bucketings.
* two stages that share a resource (parameter servers, colocated or after a local reduce):
  one task per bucket (:func:`.instance.one_chain`), solved as one stage;
* other multi-stage layouts (dedicated servers without a local reduce, pipelined
  hierarchical): the one-stage programme on the summed cost, the local search judged by the
  exact multi-stage period (:meth:`.Instance.stage_schedule`), and CP-SAT with every stage in
  readiness order (a proof without reordering); the bound also takes one-stage relaxations
  (:func:`.bounds.stage_bound`).

Every plan is judged by the simulator; the result is never worse than the best baseline the
options can express. ``SolveResult.method`` names what produced the plan returned (``dp``,
``local-search``, ``cp-sat``, ``cp-sat+lns``, ``hint``, ``dp-heuristic``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cluster import Cluster
from ..simulate import simulate
from ..trace import Trace
from .baselines import Baseline, evaluate_baselines
from .bounds import constant_bound, lower_bound, stage_bound
from .dp import solve_fifo_per_layer, solve_wait_for_all
from .heuristics import local_search, schrage_order
from .instance import Instance, Segments, build_instance
from .lns import windowed_lns
from .model import CommModel, unimodal_order
from .options import SolveOptions, SolveResult, Status
from .unimodal import unimodal_exact

__all__ = ["solve"]

log = logging.getLogger("schedopt.optimize")

#: Units above which ``lns=None`` switches to the windowed search.
LNS_UNITS = 300

#: Largest instance for the local search over cuts.
LOCAL_SEARCH_UNITS = 1000

#: Largest instance for the full CP-SAT model (larger ones: LNS and the DP bounds only).
FULL_MODEL_UNITS = 2000

#: Largest instance for the DP lower bound over bucketings (O(n^2) per bisection step).
BOUND_DP_UNITS = 6000

#: Relative tolerance of "objective and simulation agree".
AGREE = 1e-3


@dataclass
class _Outcome:
    """A method's answer: plan, period and bound in ticks of ``inst``."""

    inst: Instance
    segs: Segments
    value: int
    bound: int
    method: str
    notes: list[str] = field(default_factory=list)


def solve(trace: Trace, cluster: Cluster, options: SolveOptions | None = None,
          **kwargs: Any) -> SolveResult:
    """Find the best plan for ``trace`` on ``cluster`` under ``options``.

    Parameters
    ----------
    trace, cluster
        The instance.
    options
        A :class:`SolveOptions`; keyword arguments build one when it is None.

    Returns
    -------
    SolveResult
        Status (``OPTIMAL`` only when proven), the plan, the model's objective and the
        simulator's verdict, bound, gap, time, method and the baselines.

    Raises
    ------
    SchedoptError
        Bad options, or a model CP-SAT rejects (with its validation message).
    """
    opts = options if options is not None else SolveOptions(**kwargs)
    t0 = time.perf_counter()
    deadline = t0 + opts.time_limit_s
    fine = build_instance(trace, cluster, opts, merge=False)
    baselines = evaluate_baselines(trace, cluster, opts, fine) if opts.baselines else []
    expr = [b for b in baselines if b.row.expressible]
    hint = min(expr, key=lambda b: b.row.iteration_time_s) if expr else None
    try:
        if not fine.stages:
            out = _solve_trivial(fine)
        elif len(fine.stages) > 1:
            out = _solve_multi_stage(trace, cluster, opts, hint, deadline)
        else:
            out = _solve_single(trace, cluster, opts, fine, hint, deadline)
    except KeyboardInterrupt:  # the DP and the LNS loop: fall back to the hint
        if hint is None:
            raise
        log.warning("interrupted: returning the best expressible baseline")
        out = _Outcome(fine, hint.segs or [], int(fine.evaluate(hint.segs).period)
                       if hint.segs else 0, int(constant_bound(fine)), "interrupted")
    return _result(trace, cluster, opts, out, hint, baselines, t0)


# ----------------------------------------------------------------------------------- methods
def _solve_trivial(inst: Instance) -> _Outcome:
    """One rank: no communication, every plan has the compute period."""
    segs = [(0, inst.n - 1)]
    val = int(inst.evaluate(segs).period)
    return _Outcome(inst, segs, val, val, "dp")


def _solve_single(trace: Trace, cluster: Cluster, opts: SolveOptions, fine: Instance,
                  hint: Baseline | None, deadline: float) -> _Outcome:
    """One communication stage: the DP where it is exact, CP-SAT otherwise."""
    per_layer = opts.next_forward == "per-layer"
    method = opts.method
    notes: list[str] = []
    if not per_layer:
        merge = opts.merge_layers if opts.merge_layers is not None else True
        inst = build_instance(trace, cluster, opts, merge=merge) if merge else fine
        val, segs = solve_wait_for_all(inst)
        if method != "cp-sat":
            if not merge:
                notes.append("cuts inside layers never help in wait-for-all mode")
            return _Outcome(inst, segs, val, val, "dp", notes)
        return _cp_sat(inst, opts, segs, val, None, deadline, notes)
    inst = fine
    if opts.merge_layers:
        inst = build_instance(trace, cluster, opts, merge=True)
        notes.append("merge_layers: buckets never cut a layer (a restriction in per-layer mode)")
    val, segs, exact = solve_fifo_per_layer(inst)
    if method == "dp" or (method == "auto" and not opts.reorder and exact):
        if exact and not opts.reorder:
            return _Outcome(inst, segs, val, val, "dp", notes)
        lb = lower_bound(inst, val)
        notes.append("dp outside its exact class: best FIFO plan with one bucket end per layer")
        return _Outcome(inst, segs, val, lb, "dp", notes)
    return _cp_sat(inst, opts, segs, val, hint, deadline, notes)


def _cp_sat(inst: Instance, opts: SolveOptions, dp_segs: Segments, dp_val: int,
            hint: Baseline | None, deadline: float, notes: list[str]) -> _Outcome:
    """CP-SAT (with the unimodal programme and the windowed LNS) from the best of the DP plan,
    the hint and the local search.

    With reordering, some optimal launch order is unimodal when tails grow with readiness
    (docs/formulation.md). The unimodal programme (:mod:`.unimodal`) then gives the optimum, or,
    with an update step (whose exact order can break the argument), a bound from relaxed update
    tails and a plan judged by the exact period; CP-SAT polishes the plan (unimodal order, exact
    update windows) and, when the programme could not finish, supplies plans and bounds: the
    unimodal model with relaxed tails and the general model with exact windows both bound every
    launch order.
    """
    reorder = opts.reorder
    order = "unimodal" if reorder else "fifo"
    cands, labels = [dp_segs], ["dp"]
    if hint is not None and hint.segs is not None:
        hsegs, _ = inst.segments_of_plan(hint.plan)
        if hsegs:
            cands.append(hsegs)
            labels.append("hint")
    if reorder:
        cands.append(schrage_order(inst, dp_segs))
        labels.append("dp")
        cands += [unimodal_order(inst, c) for c in list(cands)]
        labels += list(labels)
    vals = [int(inst.evaluate(c).period) for c in cands]
    k = int(np.argmin(vals))
    start, start_val = cands[k], vals[k]
    lb = lower_bound(inst, start_val, with_dp=inst.n <= BOUND_DP_UNITS)
    if start_val <= lb:
        return _Outcome(inst, start, start_val, lb, "dp", notes)
    # the method that produced the plan returned (the bound's sources are in the notes)
    method = labels[k]
    if reorder and inst.n <= LOCAL_SEARCH_UNITS:
        left = deadline - time.perf_counter()
        val, segs = local_search(inst, start, reorder=True, seed=opts.seed,
                                 deadline=time.perf_counter() + min(2.0, 0.1 * left))
        uni = unimodal_order(inst, segs)
        uval = int(inst.evaluate(uni).period)
        if uval <= val:
            val, segs = uval, uni
        log.info("local search: %d -> %d ticks", start_val, val)
        if val < start_val:
            start, start_val = segs, val
            method = "local-search"
    bound = lb
    programme_done = False
    if reorder and inst.per_layer:
        left = deadline - time.perf_counter()
        res_u = unimodal_exact(inst, lb - 1, start_val,
                               deadline=time.perf_counter() + 0.7 * left)
        if res_u is not None:
            bound = max(bound, min(res_u.bound, start_val))
            programme_done = res_u.segs != [] or res_u.bound >= start_val
            if res_u.segs:
                val = int(inst.evaluate(res_u.segs).period)
                log.info("unimodal programme: bound %d, plan %d ticks", res_u.bound, val)
                if val < start_val:
                    start, start_val = res_u.segs, val
                    method = "dp"
    use_lns = opts.lns if opts.lns is not None else inst.n > LNS_UNITS
    if use_lns and start_val > bound:
        left = deadline - time.perf_counter()
        share = 0.5 if inst.n <= FULL_MODEL_UNITS else 1.0
        res = windowed_lns(inst, start, start_val, reorder=reorder,
                           deadline=time.perf_counter() + share * left, lower=bound,
                           seed=opts.seed, workers=opts.workers)
        log.info("lns: %d windows, %d improvements, %d -> %d ticks", res.windows,
                 res.improvements, start_val, res.value)
        if res.value < start_val:
            method = "cp-sat+lns"
            start, start_val = res.segs, res.value
    left = deadline - time.perf_counter()
    if left <= 0.05 or start_val <= bound or inst.n > FULL_MODEL_UNITS:
        return _Outcome(inst, start, start_val, bound, method, notes)
    relaxed = reorder and inst.per_layer and inst.consts["U"] > 0
    # (order, exact update windows, share of the time left, whether its bound is valid)
    if not relaxed:
        passes = [(order, True, 1.0, True)]
    elif programme_done:
        passes = [("unimodal", True, 0.5, False), ("any", True, 1.0, True)]
    else:
        passes = [("unimodal", False, 0.4, True), ("any", True, 1.0, True)]
    for pass_order, exact_updates, share, valid in passes:
        left = deadline - time.perf_counter()
        if left <= 0.05 or start_val <= bound:
            break
        cm = CommModel(inst, order=pass_order, horizon=start_val,
                       period_lb=bound if valid else 0, exact_updates=exact_updates)
        cm.add_hint(start)
        sol = cm.solve(time_limit_s=share * left, workers=opts.workers, seed=opts.seed,
                       relative_gap=opts.relative_gap, extra=opts.cp_sat, stop_at=bound)
        if valid:
            bound = max(bound, min(sol.bound, start_val))
        if sol.segs is not None:
            val = int(inst.evaluate(sol.segs).period)
            if val < start_val:
                start, start_val = sol.segs, val
                method = "cp-sat"
        if sol.interrupted:
            notes.append("interrupted: the best plan found so far")
            break
    if relaxed and start_val > bound:
        notes.append("bound from relaxed update tails (the updates of same-layer buckets "
                     "launched after a bucket left out, and a late bucket's own when a "
                     "later-ready bucket of its layer is late too); plans judged exactly")
    return _Outcome(inst, start, start_val, bound, method, notes)


def _solve_multi_stage(trace: Trace, cluster: Cluster, opts: SolveOptions,
                       hint: Baseline | None, deadline: float) -> _Outcome:
    """Several stages: the one-stage DP on the summed cost; where the period formula is exact
    (no PCIe link shared with the batch copy) the local search over bucketings judged by the
    exact multi-stage period, then CP-SAT with every stage in readiness order (a proof without
    reordering, a plan with it); the bound also takes one-stage relaxations
    (:func:`.bounds.stage_bound`)."""
    # cuts inside a layer can help a pipeline of stages: whole layers only when asked
    inst = build_instance(trace, cluster, opts, merge=bool(opts.merge_layers))
    # CP-SAT models every stage in readiness order: a proof without --reorder, plans with it
    model = not inst.pcie_coupled and inst.n <= FULL_MODEL_UNITS
    exact = model and not opts.reorder
    if exact:
        notes = ["several communication stages: CP-SAT with every stage in readiness order, "
                 "the stages through shared resources in the simulator's order"]
    elif model:
        notes = ["several communication stages: plans from the local search and from CP-SAT "
                 "in readiness order; the bound from one-stage relaxations"]
    else:
        notes = ["several communication stages: heuristic plans (the DP on the summed stage "
                 "costs, then a local search); the bound from one-stage relaxations"]
    if inst.per_layer:
        _, segs, _ = solve_fifo_per_layer(inst)
    else:
        _, segs = solve_wait_for_all(inst)
    method = "dp-heuristic"
    if inst.pcie_coupled:  # the closed form is not exact there: the simulator judges
        sim = simulate(trace, cluster, inst.to_plan(segs)).iteration_time_s
        val = round(sim / inst.tick)
    else:
        val = int(inst.evaluate(segs).period)
        if hint is not None and hint.segs is not None:
            hsegs, _ = inst.segments_of_plan(hint.plan)
            hval = int(inst.evaluate(hsegs).period) if hsegs else val
            if hval < val:
                segs, val, method = hsegs, hval, "hint"
        left = deadline - time.perf_counter()
        share = min(2.0, 0.2 * left) if model else 0.5 * left
        ls_val, ls_segs = local_search(inst, segs, reorder=opts.reorder, seed=opts.seed,
                                       deadline=time.perf_counter() + share)
        if ls_val < val:
            segs, val, method = ls_segs, ls_val, "local-search"
    bound = stage_bound(trace, cluster, opts, inst)
    if model and val > bound and deadline - time.perf_counter() > 0.05:
        start = sorted(segs)  # the same buckets in readiness order
        start_val = int(inst.evaluate(start).period)
        cm = CommModel(inst, order="fifo", horizon=max(val, start_val), period_lb=bound)
        cm.add_hint(start)
        sol = cm.solve(time_limit_s=deadline - time.perf_counter(), workers=opts.workers,
                       seed=opts.seed, relative_gap=opts.relative_gap, extra=opts.cp_sat,
                       stop_at=bound)
        if exact:
            bound = max(bound, min(sol.bound, val))
        sval = int(inst.evaluate(sol.segs).period) if sol.segs is not None else val
        if sval < val:
            segs, val, method = sol.segs, sval, "cp-sat"
        if sol.interrupted:
            notes.append("interrupted: the best plan found so far")
    return _Outcome(inst, segs, val, min(bound, val), method, notes)


# ------------------------------------------------------------------------------------ result
def _result(trace: Trace, cluster: Cluster, opts: SolveOptions, out: _Outcome,
            hint: Baseline | None, baselines: list[Baseline], t0: float) -> SolveResult:
    inst = out.inst
    tick = inst.tick
    notes = list(out.notes)
    plan = inst.to_plan(out.segs, knobs=_knobs(opts))
    sim = simulate(trace, cluster, plan).iteration_time_s
    value_s = out.value * tick
    method = out.method
    if hint is not None and hint.row.iteration_time_s < sim * (1 - 1e-12):
        notes.append(f"the solver's plan simulated worse than {hint.row.policy}; returning it")
        plan = hint.plan.model_copy(update={"policy": "optimal",
                                            "knobs": {**_knobs(opts), "from": hint.row.policy}})
        sim = hint.row.iteration_time_s
        value_s = sim
        if hint.segs is not None:
            hsegs, _ = inst.segments_of_plan(hint.plan)
            if hsegs:
                value_s = int(inst.evaluate(hsegs).period) * tick
        method = "hint"
    bound_s = min(out.bound * tick, value_s)
    agree = abs(value_s - sim) <= AGREE * sim
    if not agree:
        notes.append(f"model period {value_s:.6g} s and simulation {sim:.6g} s disagree: the "
                     "instance couples iterations beyond the model (shared PCIe with prefetch)")
    gap = max(0.0, (value_s - bound_s) / value_s) if value_s > 0 else 0.0
    status = Status.OPTIMAL if gap <= 0.0 and agree else Status.FEASIBLE
    hint_time = hint.row.iteration_time_s if hint is not None else None
    return SolveResult(
        status=status,
        plan=plan,
        objective_s=value_s,
        iteration_time_s=sim,
        bound_s=bound_s,
        gap=gap,
        solve_time_s=time.perf_counter() - t0,
        method=method,
        hint_policy=hint.row.policy if hint is not None else None,
        hint_iteration_time_s=hint_time,
        improvement_s=max(0.0, hint_time - sim) if hint_time is not None else 0.0,
        baselines=[b.row for b in baselines],
        tick_s=tick,
        notes=notes,
    )


def _knobs(opts: SolveOptions) -> dict[str, Any]:
    return {
        "next_forward": opts.next_forward,
        "reorder": opts.reorder,
        "partition_bytes": opts.partition_bytes,
    }
