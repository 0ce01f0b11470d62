"""The CP-SAT model of one instance: build, warm-start, solve, read back the plan."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from schedopt.errors import SchedoptError
from schedopt.optimize.constraints import Constraints
from schedopt.optimize.control import Control
from schedopt.optimize.instance import Instance, Segments
from schedopt.optimize.objective import add_objective
from schedopt.optimize.variables import (
    ModelVariables,
    ScheduleValues,
    make_variables,
    shared_stage_pairs,
)
from schedopt.simulate.simulator import chain_ends

__all__ = ["CommModel", "ModelSolution", "schedule_values"]

log = logging.getLogger("schedopt.optimize")

_STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
    cp_model.UNKNOWN: "UNKNOWN",
}


#: Wall-clock seconds per unit of CP-SAT's deterministic time on these models (measured with
#: one worker: windows of 80-160 units took 7-12 s per unit), so that deterministic limits
#: follow the time limit.
WALL_PER_DTIME = 10.0


@dataclass
class ModelSolution:
    """What one CP-SAT run returned.

    Attributes
    ----------
    status
        CP-SAT's status name.
    segs
        The plan (segments in launch order), or None without a solution.
    objective, bound
        Objective and best bound (ticks).
    wall_s
        Wall-clock time of the run.
    interrupted
        The search stopped early without proof (Ctrl-C): callers stop searching too.
    work_s
        CP-SAT's deterministic time times :data:`WALL_PER_DTIME` (the same for the same model,
        seed and one worker).
    """

    status: str
    segs: Segments | None
    objective: int | None
    bound: int
    wall_s: float
    interrupted: bool = False
    work_s: float = 0.0


def unimodal_order(inst: Instance, segs: Segments) -> Segments:
    """The unimodal launch order with the same sides: the buckets launched before the last-ready
    one in readiness order, then it, then the others in reverse readiness order (never worse
    when tails grow with readiness, docs/formulation.md)."""
    peak = next(k for k, s in enumerate(segs) if s[1] == inst.n - 1)
    return sorted(segs[: peak + 1]) + sorted(segs[peak + 1:], reverse=True)


def schedule_values(inst: Instance, segs: Segments) -> ScheduleValues:
    """Values of every model variable for the plan ``segs`` (left-justified schedule), from
    its evaluation (:meth:`Instance.evaluate`: the buckets, their first stage, the period).

    Used as the warm start; :meth:`CommModel.check_hint` proves that it is feasible. The
    period is the exact one, which also satisfies the relaxed update tails.
    """
    n = inst.n
    ev = inst.evaluate(segs)
    lo, hi = ev.plan.lo, ev.plan.hi
    several = ev.stage_times is not None
    if ev.stage_times is not None:  # several stages: the first is the link variables'
        p0, a0 = inst.stage_p[0], int(inst.stage_a[0])
        pp = np.r_[0, np.cumsum(p0)]
        dur, ends = a0 + pp[hi + 1] - pp[lo], ev.stage_times[1][0]
    else:
        p0, a0 = inst.p, inst.a
        dur, ends = ev.plan.dur, ev.plan.ends
    period = int(ev.period)
    link_free = None
    if inst.terms.shared:  # the least link_free the period allows; the chain starts from it
        link_free = inst.terms.link_free_hint(int(ends.max()), period)
        ends = np.rint(chain_ends(float(link_free), dur.astype(float),
                                  inst.r[hi].astype(float))).astype(np.int64)
    start = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    ready = np.empty(n, dtype=np.int64)
    cut = np.zeros(n, dtype=bool)
    for k in range(len(segs)):
        t = ends[k] - dur[k]
        for i in range(lo[k], hi[k] + 1):
            start[i] = t
            t += p0[i] + (a0 if i == lo[k] else 0)
            end[i] = t
            ready[i] = inst.r[hi[k]]
        cut[hi[k]] = True
    c = inst.consts
    val = ScheduleValues(cut=cut[:-1], start=start, end=end, ready=ready, period=period,
                         makespan=int(max(c.B, ev.ends.max() if several else ends.max())),
                         link_free=link_free)
    done = end
    if ev.stage_times is not None:
        _stage_values(inst, segs, *ev.stage_times, val)
        done = val.stage_end[-1]
    if inst.per_layer and c.U > 0:
        _update_values(inst, cut, done, val)
    _front_values(inst, segs, cut, end, val)
    return val


def _update_values(inst: Instance, cut: np.ndarray, done: np.ndarray,
                   val: ScheduleValues) -> None:
    """Values of the update-window variables (per-layer mode with an update step): the
    updates run by gating layer, each bucket's once it is done and the window is free."""
    n, c = inst.n, inst.consts
    upd = inst.upd_prefix
    before = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        before[i + 1] = upd[i] if cut[i] else before[i]
    fwd = inst.fwd_before.tolist()
    us, ue, fs = {}, {}, {}
    prev_layer, prev_fs = None, 0
    for lay, (a_l, z_l) in inst.gate_runs:
        window = c.B + fwd[lay] if prev_layer is None else prev_fs + fwd[lay] - fwd[prev_layer]
        t = window
        ends_here = sorted((int(done[i]), i) for i in range(a_l, z_l + 1) if cut[i])
        for e_i, i in ends_here:
            s_i = max(t, e_i)
            us[i] = s_i
            t = s_i + int(upd[i] - before[i])
            ue[i] = t
        for i in range(a_l, z_l + 1):
            if i not in us:  # absent interval: its constraints are not enforced
                us[i] = 0
                ue[i] = 0
        fs[lay] = int(max(t, window + before[z_l + 1] - before[a_l]))
        prev_layer, prev_fs = lay, fs[lay]
    val.upd_before, val.update_start, val.update_end, val.fwd_start = before, us, ue, fs


def _front_values(inst: Instance, segs: Segments, cut: np.ndarray, end: np.ndarray,
                  val: ScheduleValues) -> None:
    """Values of the unimodal-order variables: the launch side of every unit and the fronts."""
    n = inst.n
    peak = next((k for k, sg in enumerate(segs) if sg[1] == n - 1), len(segs) - 1)
    early = np.zeros(n, dtype=bool)
    for lo_k, hi_k in segs[: peak + 1]:
        early[lo_k:hi_k + 1] = True
    ef = np.zeros(n, dtype=np.int64)
    front = 0
    for i in range(n):
        if early[i]:
            front = max(front, int(end[i]))
        ef[i] = front
    lf = np.zeros(n + 1, dtype=np.int64)
    lf[n] = int(end[n - 1])
    for i in range(n - 1, -1, -1):
        lf[i] = max(lf[i + 1], 0 if early[i] else int(end[i]))
    need = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        need[i] = lf[i + 1] if (i == n - 1 or cut[i]) else need[i + 1]
    val.early, val.early_front, val.late_front, val.late_need = early, ef, lf, need


def _stage_values(inst: Instance, segs: Segments, st_start: np.ndarray,
                  st_end: np.ndarray, val: ScheduleValues) -> None:
    """Values of the stage variables for the readiness-order plan ``segs`` (its schedule
    ``st_start``, ``st_end`` per stage and bucket)."""
    n, n_s = inst.n, len(inst.stages)
    bucket = np.empty(n, dtype=np.int64)
    for k, (lo_k, hi_k) in enumerate(segs):
        bucket[lo_k:hi_k + 1] = k
    s_start, s_end = [], []
    for s in range(1, n_s):
        begin, finish = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        for k, (lo_k, hi_k) in enumerate(segs):
            t = int(st_start[s][k]) + int(inst.stage_a[s])
            begin[lo_k] = st_start[s][k]
            for i in range(lo_k, hi_k + 1):
                if i > lo_k:
                    begin[i] = t
                t += int(inst.stage_p[s][i])
                finish[i] = t
        s_start.append(begin)
        s_end.append(finish)
    m = len(segs)
    val.stage_start, val.stage_end = s_start, s_end
    val.stage_bucket_end = [st_end[s][bucket] for s in range(n_s)]
    for s, s2, d in shared_stage_pairs(inst):
        for k in range(1, d + 1):
            val.ahead[(s, k)] = st_end[s][np.minimum(bucket + k, m - 1)]
        for k in range(1, d + 2):
            before = bucket - k
            val.behind[(s2, k)] = np.where(before >= 0, st_end[s2][np.maximum(before, 0)], 0)


class CommModel:
    """The CP-SAT model of ``inst`` (docs/formulation.md).

    Parameters
    ----------
    inst
        The instance (integer data).
    order
        ``fifo``, ``any`` or ``unimodal`` (see :class:`~.constraints.Constraints`); with several
        communication stages only ``fifo`` (every stage modelled, shared resources in the
        simulator's order).
    exact_updates
        Model the update windows of per-layer mode exactly; False keeps only the updates of
        earlier-gated buckets in every tail (a relaxation, valid for every launch order).
    horizon
        Upper bound of every time variable: the period of a known plan (ticks).
    period_lb
        A proven lower bound of the period (ticks).
    fixed_cuts, fixed_early
        Restrictions used by the large-neighbourhood search (see :class:`Constraints`).
    without
        Families to leave out (see :class:`Constraints`).
    """

    def __init__(self, inst: Instance, *, order: str, horizon: int, period_lb: int = 0,
                 exact_updates: bool = True, fixed_cuts: dict[int, bool] | None = None,
                 fixed_early: dict[int, bool] | None = None,
                 without: frozenset[str] = frozenset()) -> None:
        self.inst = inst
        self.order = order
        self.exact_updates = exact_updates
        self.m = cp_model.CpModel()
        try:
            self.v: ModelVariables = make_variables(
                self.m, inst, horizon, min(period_lb, horizon), windows=exact_updates,
                unimodal=order == "unimodal")
            Constraints(self.m, inst, self.v, order=order, fixed_cuts=fixed_cuts,
                        fixed_early=fixed_early, without=without).add_all()
            add_objective(self.m, inst, self.v, reorder=order != "fifo")
        except (TypeError, OverflowError) as exc:  # integers beyond CP-SAT's range
            raise SchedoptError(f"CP-SAT rejected the model: {exc}", "optimize.model",
                                inst.trace.name) from None
        msg = self.m.validate()
        if msg:
            raise SchedoptError(f"CP-SAT rejected the model: {msg}", "optimize.model",
                                inst.trace.name)

    # ------------------------------------------------------------------------ warm start
    def add_hint(self, segs: Segments) -> None:
        """Hint every variable with the schedule of ``segs`` (:func:`schedule_values`, in the
        unimodal order when the model has it)."""
        if self.order == "unimodal":
            segs = unimodal_order(self.inst, segs)
        self.v.hint(self.m, schedule_values(self.inst, segs))

    def check_hint(self, time_limit_s: float = 5.0) -> bool:
        """True when the hint alone is a feasible solution (solved with every variable fixed to
        its hinted value)."""
        solver = cp_model.CpSolver()
        solver.parameters.fix_variables_to_their_hinted_value = True
        solver.parameters.num_workers = 1
        solver.parameters.max_time_in_seconds = time_limit_s
        status = solver.solve(self.m)
        return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)

    # ---------------------------------------------------------------------------- solve
    def solve(self, *, time_limit_s: float, workers: int = 1, seed: int = 0,
              relative_gap: float = 0.0, extra: dict[str, Any] | None = None,
              log_search: bool = False, stop_at: int | None = None,
              control: Control | None = None, work_s: float | None = None,
              on_improve: Callable[[Segments, int], None] | None = None) -> ModelSolution:
        """Run CP-SAT; return the best plan, the objective and the bound (ticks).

        Every incumbent is judged by the exact period (:meth:`Instance.evaluate`), whose
        rounding can be a tick finer than the model's; the plan returned is the best so judged,
        and the search stops as soon as one reaches ``stop_at`` (a proven bound: the plan is
        then optimal although CP-SAT's own objective is not yet down to it).

        With a ``control`` (:class:`~.control.Control`), Ctrl-C and the solve's deadline stop
        the search, which returns its best solution as on a time limit; the result is then
        marked ``interrupted`` (the caller stops searching too). ``on_improve``, when given, is
        called in this thread with each better plan and its period (ticks), as found.
        ``work_s``, when given, is the deterministic limit (CP-SAT's ``max_deterministic_time``
        times :data:`WALL_PER_DTIME`) and ``time_limit_s`` only a wall-clock safety stop.
        """
        solver = cp_model.CpSolver()
        judge = _Judge(self, stop_at)
        judge.on_improve = on_improve
        prm = solver.parameters
        prm.max_time_in_seconds = max(0.01, time_limit_s)
        if work_s is not None:
            prm.max_deterministic_time = max(1e-4, work_s / WALL_PER_DTIME)
        prm.num_workers = workers
        prm.random_seed = seed
        prm.relative_gap_limit = relative_gap
        prm.log_search_progress = log_search or log.isEnabledFor(logging.DEBUG)
        for key, value in (extra or {}).items():
            setattr(prm, key, value)
        if prm.log_search_progress:
            prm.log_to_stdout = False
            solver.log_callback = lambda line: log.debug("cp-sat: %s", line)
        if control is not None:
            status = control.run_solver(solver, self.m, judge, poll=judge.poll)
        else:
            status = solver.solve(self.m, judge)
        judge.poll()
        name = _STATUS.get(status, "UNKNOWN")
        if name == "MODEL_INVALID":
            raise SchedoptError(f"CP-SAT rejected the model: {self.m.validate()}",
                                "optimize.model", self.inst.trace.name)
        bound = int(np.floor(solver.best_objective_bound + 1e-9)) if name != "INFEASIBLE" else 0
        interrupted = control is not None and control.halted
        if name not in ("OPTIMAL", "FEASIBLE"):
            return ModelSolution(name, None, None, bound, solver.wall_time, interrupted,
                                 solver.deterministic_time * WALL_PER_DTIME)
        segs = self.read_plan(solver)
        if judge.segs is not None and judge.best_value < self.inst.evaluate(segs).period:
            segs = judge.segs
        return ModelSolution(name, segs, round(solver.objective_value), bound,
                             solver.wall_time, interrupted,
                             solver.deterministic_time * WALL_PER_DTIME)

    def read_plan(self, solver: cp_model.CpSolver | cp_model.CpSolverSolutionCallback
                  ) -> Segments:
        """The segments of the solution in launch order (by start time)."""
        cuts = np.array([solver.boolean_value(x) for x in self.v.cut], dtype=bool)
        segs = self.inst.segments_from_cuts(cuts)
        starts = [solver.value(self.v.start[lo]) for lo, _ in segs]
        order = sorted(range(len(segs)), key=lambda k: (starts[k], segs[k][0]))
        return [segs[k] for k in order]


class _Judge(cp_model.CpSolverSolutionCallback):
    """Judges every incumbent by the exact period; keeps the best and stops the search once
    one reaches ``stop_at``."""

    def __init__(self, model: CommModel, stop_at: int | None) -> None:
        super().__init__()
        self.model = model
        self.stop_at = stop_at
        # (period, plan), replaced as one object: the waiting thread reads it meanwhile
        self._best: tuple[float, Segments | None] = (np.inf, None)
        self.reached = False
        self.on_improve: Callable[[Segments, int], None] | None = None
        self._told = np.inf

    @property
    def best_value(self) -> float:
        """Exact period of the best incumbent (ticks; inf before the first)."""
        return self._best[0]

    @property
    def segs(self) -> Segments | None:
        """The best incumbent's plan."""
        return self._best[1]

    def poll(self) -> None:
        """Report a better plan to ``on_improve`` (called from the waiting thread)."""
        best, segs = self._best
        if self.on_improve is not None and segs is not None and best < self._told:
            self._told = best
            self.on_improve(segs, int(best))

    def on_solution_callback(self) -> None:
        segs = self.model.read_plan(self)
        value = self.model.inst.evaluate(segs).period
        if value < self._best[0]:
            self._best = (value, segs)
        if self.stop_at is not None and value <= self.stop_at:
            self.reached = True
            self.stop_search()
