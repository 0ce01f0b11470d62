"""``solve`` for sharded plans: :func:`solve_sharded` (called by
:func:`~schedopt.optimize.solve` when ``options.sharding`` is set).

The search runs under the same :class:`~..budget.Budget` and :class:`~..control.Control` as the
all-reduce search: deterministic work limits (evaluations at a fixed charge), the wall clock as
a safety stop, and Ctrl-C or the time limit returning the best plan known, FEASIBLE with its
gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize.budget import AGREE, Budget, Share
from schedopt.optimize.control import Control, Halt
from schedopt.optimize.instance import TICK_BUDGET
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.result import BaselineRow, Method, SolveResult, Status
from schedopt.optimize.sharding.bound import DP_LAYERS, peak_floor, step_bound
from schedopt.optimize.sharding.cpsat import CPSAT_LAYERS, solve_cpsat
from schedopt.optimize.sharding.evaluate import (
    Config,
    ShardedInstance,
    build_sharded,
    config_of_plan,
    step_time,
)
from schedopt.optimize.sharding.exact import best_units, separable_classes
from schedopt.optimize.sharding.search import (
    Scored,
    block_starts,
    count_partitions,
    enumerate_all,
    kick,
    local_search,
    pattern_layouts,
    score,
    shortened,
    uniform_starts,
)
from schedopt.policies import make_plan, sharded_specs
from schedopt.simulate.simulator import simulate

__all__ = ["solve_sharded"]

log = logging.getLogger("schedopt.optimize")

#: Largest enumeration (units summed over its configurations) that proves the optimum.
EXACT_WORK = 60_000

#: Deterministic charge (s) of evaluating one unit of one micro-batch (measured: 73 units of
#: GPT-2 1.5B in 1.1 ms; on the 723-layer Llama 70B trace 42 s of charges at 3e-5 took 9 s
#: on an idle machine; 33-56 us per unit on a loaded one).
EVAL_S_PER_UNIT = 1e-5

#: Deterministic charge (s) of one cell of the bound's programme over unit boundaries
#: (measured: 0.9-1.1 s for the 723 layers of the Llama 70B trace, without a cap or with its
#: six cases under a cap, against 1.9 s charged for 63 million cells).
BOUND_S_PER_CELL = 3e-8

#: Deterministic charge (s) of one cell (``n^4 / 24`` of them) and of one pair of unit
#: boundaries (``n^2``) of the exact programme (:mod:`.exact`; measured per class: 0.06-0.08 s
#: at 40 layers, 0.26-0.40 s at 80, 0.68-1.13 s at 120, load average 4.6 on 2 cores).
EXACT_S_PER_CELL = 1.2e-7
EXACT_S_PER_PAIR = 2e-5

#: A class of the exact programme runs while its charge is at most this share of the work
#: left (the starts and the local search keep the rest).
EXACT_SHARE = 0.5

#: The CP-SAT model (:mod:`.cpsat`) runs on this share of the work left after the local
#: search's restarts (instances of at most :data:`~.cpsat.CPSAT_LAYERS` layers).
CPSAT_SHARE = 0.8

#: The CP-SAT model runs only with at least this much deterministic work (s).
CPSAT_MIN_WORK = 0.05

#: The local search runs from this many starts (the best of distinct unit layouts).
RESTARTS = 4

#: The restarts' share of the work left (the iterated local search gets the rest).
RESTARTS_SHARE = 0.5

#: The iterated local search stops after this many kicks in a row without improvement.
ILS_PATIENCE = 40

#: Most unit evaluations of one descent after a kick.
ILS_STEP_UNITS = 20_000

#: The patterns of repeated blocks kept for trying every depth pair and stream layout.
PATTERN_TOPS = 4

#: Patterns are screened on the instance cut to this many repeated blocks ...
SCREEN_BLOCKS = 4

#: ... and this many of the best are evaluated on the whole instance.
PATTERN_SCREENED = 16

#: The depth pairs tried with every uniform start.
START_DEPTHS = ((0, 0), (1, 1), (2, 2))

Progress = Callable[[float, float, float], None]


@dataclass
class _Search:
    """State of one sharded solve."""

    inst: ShardedInstance
    opts: SolveOptions
    control: Control
    budget: Budget
    progress: Progress | None
    best: Scored | None = None
    method: Method = Method.UNIFORM_UNITS
    bound_s: float = 0.0
    bound_method: Method = Method.BOUNDS
    exact: bool = False
    cap_infeasible: bool = False
    notes: list[str] = field(default_factory=list)
    baselines: list[BaselineRow] = field(default_factory=list)
    starts: list[Scored] = field(default_factory=list)

    @property
    def solved(self) -> bool:
        """The best plan fits the cap and meets the bound (or the relative gap asked for)."""
        best = self.best
        if best is None or best.key[0]:
            return False
        period = best.step.period_s
        return period - self.bound_s <= self.opts.relative_gap * period

    def offer(self, s: Scored, method: Method) -> None:
        """Keep ``s`` when it ranks before the best."""
        if self.best is not None and s.key >= self.best.key:
            return
        with self.control.shield():
            self.best, self.method = s, method
        if self.progress is not None and s.key[0] == 0:
            self.progress(self.budget.elapsed(), s.step.period_s,
                          min(self.bound_s, s.step.period_s))

    def check(self) -> None:
        """Stop when the limit passed or Ctrl-C came."""
        self.control.check()

    @property
    def eval_s(self) -> float:
        """Deterministic charge of evaluating one unit for every micro-batch."""
        return EVAL_S_PER_UNIT * self.inst.accumulate


def solve_sharded(trace: Trace, cluster: Cluster, opts: SolveOptions,
                  progress: Progress | None = None) -> SolveResult:
    """The best sharded plan under ``opts`` (``opts.sharding`` set); see the module.

    Raises
    ------
    SchedoptError
        On the ``ps`` collective, when no plan found fits ``opts.memory_cap_bytes``, or a cap
        with frozen parameters in the trace.
    """
    assert opts.sharding is not None
    inst = build_sharded(trace, cluster, opts.sharding, opts.accumulate, None, opts.prefetch)
    cap, floor = opts.memory_cap_bytes, peak_floor(inst)
    if cap is not None and trace.frozen_list:  # the memory terms read p as gradient bytes
        raise SchedoptError("a memory cap is not modelled for a trace with frozen parameters "
                            "(the search counts gradients as parameter bytes)",
                            "options.memory_cap_bytes", cap)
    if cap is not None and cap < floor:
        raise SchedoptError(f"below the least peak any {opts.sharding} sharded plan can have "
                            f"({floor:,} bytes)", "options.memory_cap_bytes", cap)
    budget = Budget(opts.time_limit_s, opts.work_limit_s)
    with Control(budget.deadline) as control:
        search = _Search(inst, opts, control, budget, progress)
        search.bound_s = inst.period(step_bound(inst, opts.memory_cap_bytes))
        if inst.n <= DP_LAYERS:  # the programme over unit boundaries: O(n^3 / 6) cells
            budget.spend(BOUND_S_PER_CELL * inst.accumulate * inst.n ** 3 / 6)
        control.searching = True
        try:
            _run(search, trace, cluster)
        except Halt:
            pass
        finally:
            control.searching = False
        with control.shield(final=True):
            return _result(search, trace, cluster)


def _run(search: _Search, trace: Trace, cluster: Cluster) -> None:
    """The baselines, then enumerate when small, otherwise the starts and the local search."""
    if search.opts.baselines:
        _baselines(search, trace, cluster)
    inst, budget = search.inst, search.budget
    cap = search.opts.memory_cap_bytes
    count = count_partitions(inst, EXACT_WORK)
    if count <= EXACT_WORK and count * search.eval_s <= budget.work_left():
        best = enumerate_all(inst, cap, search.check)
        budget.spend(count * search.eval_s)
        if best is not None:
            search.offer(best, Method.ENUMERATION)
            search.exact = True
            search.bound_method = Method.ENUMERATION
        return
    starts = _exact(search)
    starts += _starts(search)
    starts += _patterns(search, starts)
    tops: list[Scored] = []
    for cand in sorted(starts, key=lambda x: x.key):  # the best of distinct unit layouts
        if len(tops) < RESTARTS and all(cand.config.starts != t.config.starts for t in tops):
            tops.append(cand)
    for i, start in enumerate(tops):
        if search.solved:
            break
        max_work = int(budget.work(Share(RESTARTS_SHARE / (len(tops) - i))) / search.eval_s)
        out, work = local_search(inst, start, cap, max_work, search.check,
                                 lambda s: search.offer(s, Method.LOCAL_SEARCH))
        budget.spend(work * search.eval_s)
        log.info("sharded local search from start %d: %d unit evaluations, %.6g s", i, work,
                 out.step.period_s)
    _cpsat(search)
    _iterate(search)


def _cpsat(search: _Search) -> None:
    """The CP-SAT model (:mod:`.cpsat`) on :data:`CPSAT_SHARE` of the work left, hinted
    with the best plan and bounded by it: OPTIMAL proves the best plan optimal (on the
    model's ticks, whose rounding stays within :data:`~..instance.TICK_BUDGET` of the
    bound); otherwise its bound, less that rounding, raises the bound; INFEASIBLE without a
    plan within the cap proves that none fits."""
    inst, budget, opts = search.inst, search.budget, search.opts
    cap = opts.memory_cap_bytes
    work = CPSAT_SHARE * budget.work_left()
    if inst.n > CPSAT_LAYERS or search.solved or work < CPSAT_MIN_WORK:
        return
    search.check()
    best = search.best
    hint = best.config if best is not None else None
    sol, ti = solve_cpsat(inst, cap, work_s=work, time_limit_s=search.control.left(),
                          hint=hint, seed=opts.seed, control=search.control)
    budget.spend(sol.work_s)
    log.info("sharded CP-SAT: %s, step %s, bound %d ticks of %.3g s, %.3g s of work",
             sol.status, sol.value, sol.bound, ti.tick, sol.work_s)
    if sol.config is not None:
        search.offer(score(inst, sol.config, cap), Method.CP_SAT)
    best = search.best
    if sol.status == "INFEASIBLE" and (best is None or best.key[0]):
        search.cap_infeasible = True
        return
    if sol.status == "OPTIMAL" and sol.value is not None and best is not None \
            and not best.key[0] and step_time(ti, best.config).step_s <= sol.value:
        search.exact, search.bound_method = True, Method.CP_SAT
        search.bound_s = best.step.period_s
        search.notes.append(f"CP-SAT proved the optimum over every unit partition, depth pair "
                            f"and stream layout on ticks of {ti.tick:.3g} s")
        return
    slack = TICK_BUDGET * step_bound(inst)
    search.bound_s = max(search.bound_s, inst.period(sol.bound * ti.tick - slack))


def _iterate(search: _Search) -> None:
    """Iterated local search from the best plan: kick, descend, keep when better; until the
    work is spent, the bound is met or :data:`ILS_PATIENCE` kicks in a row did not help."""
    inst, budget, cap = search.inst, search.budget, search.opts.memory_cap_bytes
    rng = np.random.default_rng(search.opts.seed)
    idle = 0
    while idle < ILS_PATIENCE and not search.solved and search.best is not None:
        left = int(budget.work_left() / search.eval_s)
        if left <= 0:
            break
        best = search.best
        c = kick(inst, best.config, rng)
        search.check()
        start = score(inst, c, cap)
        out, work = local_search(inst, start, cap, min(left, ILS_STEP_UNITS), search.check,
                                 lambda s: None)
        budget.spend((work + len(c.starts)) * search.eval_s)
        if out.key < best.key:
            search.offer(out, Method.LOCAL_SEARCH)
            idle = 0
        else:
            idle += 1


def sharded_policies() -> list[str]:
    """The sharded baselines as policy specs (:func:`~schedopt.policies.sharded_specs` of
    both modes: FSDP in full and grad-op mode, ZeRO-3, Megatron's distributed optimizer)."""
    specs = [*sharded_specs("full"), *sharded_specs("grad-op")]
    return list(dict.fromkeys(specs))


def _baselines(search: _Search, trace: Trace, cluster: Cluster) -> None:
    """Simulate every sharded baseline (its plan with the options' accumulation); those the
    options express within the cap start the search."""
    inst, cap = search.inst, search.opts.memory_cap_bytes
    for name in sharded_policies():
        search.check()
        try:
            plan = make_plan(trace, cluster, name)
            if plan.accumulate != inst.accumulate:
                plan = plan.model_copy(update={"accumulate": inst.accumulate})
            sched = simulate(trace, cluster, plan)
        except SchedoptError as exc:  # a policy that does not apply here
            log.info("baseline %s skipped: %s", name, exc)
            continue
        config = config_of_plan(inst, plan)
        reason = "" if config is not None else _why_not(inst, plan)
        peak = sched.peak_memory_bytes or 0.0
        if config is not None and cap is not None and peak > cap:
            reason = f"its peak, {peak:,.0f} bytes, exceeds the memory cap"
        search.baselines.append(BaselineRow(policy=name, iteration_time_s=sched.iteration_time_s,
                                            expressible=not reason, reason=reason))
        if config is not None and not reason:
            scored = score(inst, config, cap)
            search.starts.append(scored)
            search.offer(scored, Method.HINT)


def _why_not(inst: ShardedInstance, plan: Plan) -> str:
    """Why the options cannot express a sharded baseline's ``plan``, and what would."""
    assert plan.sharding is not None
    if plan.sharding.root is not None:
        return ("a root group (gathered once, reduced last; the search's units cover every "
                "layer)")
    if plan.sharding.mode != inst.mode:
        return f"{plan.sharding.mode} sharding (--sharding {plan.sharding.mode} searches it)"
    if plan.comm_dtype != inst.comm_dtype:
        return f"gradients reduced in {plan.comm_dtype}"
    return f"data prefetch {plan.prefetch}"


def _exact(search: _Search) -> list[Scored]:
    """The best units of every separable class (:func:`~.exact.separable_classes`: depths at
    most 1, the step a sum of local terms), by the exact programme; a class optimum within
    the cap is proven for its class (logged), and every one starts the local search."""
    inst, cap, budget = search.inst, search.opts.memory_cap_bytes, search.budget
    out: list[Scored] = []
    charge = EXACT_S_PER_CELL * inst.n ** 4 / 24 + EXACT_S_PER_PAIR * inst.n ** 2
    for knobs in separable_classes(inst):
        if charge > EXACT_SHARE * budget.work_left():
            break
        found = best_units(inst, knobs, cap, search.check)
        budget.spend(charge)
        if found is None:
            continue
        value, config = found
        scored = score(inst, config, cap)
        if not scored.key[0]:
            log.info("exact programme: depths %d/%d, %d stream(s): %.9g s, optimal in its class",
                     knobs.forward_prefetch, knobs.backward_prefetch, knobs.streams, value)
        out.append(scored)
        search.offer(scored, Method.DP)
    return out


def _starts(search: _Search) -> list[Scored]:
    """Units of ``g`` blocks and of ``g`` tensor-holding layers, small depths, both stream
    layouts, within the work left (blocks first); the baselines' configurations too."""
    inst, cap, budget = search.inst, search.opts.memory_cap_bytes, search.budget
    out = list(search.starts)
    blocks = block_starts(inst)
    for starts in [*blocks, *(x for x in uniform_starts(inst) if x not in blocks)]:
        for p, q in START_DEPTHS:
            for streams in (1, 2):
                if len(starts) * search.eval_s > budget.work_left():
                    return out
                search.check()
                q_used = q if inst.mode == "full" else 1
                scored = score(inst, Config(starts, p, q_used, streams), cap)
                out.append(scored)
                search.offer(scored, Method.UNIFORM_UNITS)
                budget.spend(len(starts) * search.eval_s)
    return out


def _patterns(search: _Search, starts: list[Scored]) -> list[Scored]:
    """Units repeating one cut pattern per block (:func:`~.search.pattern_layouts`): every
    pattern with the knobs of the best start, screened on the instance cut to
    :data:`SCREEN_BLOCKS` blocks (:func:`~.search.shortened`) when its run is longer; the best
    :data:`PATTERN_SCREENED` on the whole instance; the best :data:`PATTERN_TOPS` of those
    with every depth pair of :data:`START_DEPTHS` and both stream layouts; within the work
    left."""
    inst, cap, budget = search.inst, search.opts.memory_cap_bytes, search.budget
    if not starts or search.solved:
        return []
    k = min(starts, key=lambda x: x.key).config
    short = shortened(inst, SCREEN_BLOCKS)
    layouts = dict(pattern_layouts(inst))
    masks = list(layouts)
    if short is not None:
        screened = []
        for mask, layout in pattern_layouts(short):
            if len(layout) * search.eval_s > budget.work_left():
                break
            search.check()
            screened.append((score(short, Config(layout, k.forward_prefetch,
                                                 k.backward_prefetch, k.streams), cap).key,
                             mask))
            budget.spend(len(layout) * search.eval_s)
        masks = [mask for _, mask in sorted(screened)[:PATTERN_SCREENED]]
    out: list[Scored] = []
    for mask in masks:
        if mask not in layouts:
            continue
        layout = layouts[mask]
        if len(layout) * search.eval_s > budget.work_left():
            return out
        search.check()
        scored = score(inst, Config(layout, k.forward_prefetch, k.backward_prefetch,
                                    k.streams), cap)
        out.append(scored)
        search.offer(scored, Method.UNIFORM_UNITS)
        budget.spend(len(layout) * search.eval_s)
    return out + _pattern_knobs(search, sorted(out, key=lambda x: x.key)[:PATTERN_TOPS])


def _pattern_knobs(search: _Search, tops: list[Scored]) -> list[Scored]:
    """``tops`` with every depth pair of :data:`START_DEPTHS`, (2, 1), (1, 2) and both stream
    layouts, within the work left."""
    inst, cap, budget = search.inst, search.opts.memory_cap_bytes, search.budget
    out: list[Scored] = []
    depths = sorted({*START_DEPTHS, (2, 1), (1, 2)})
    seen = {top.config for top in tops}
    for top in tops:
        for p, q in depths:
            for streams in (1, 2):
                layout = top.config.starts
                c = Config(layout, p, q if inst.mode == "full" else 1, streams)
                if c in seen or len(layout) * search.eval_s > budget.work_left():
                    continue
                seen.add(c)
                search.check()
                scored = score(inst, c, cap)
                out.append(scored)
                search.offer(scored, Method.UNIFORM_UNITS)
                budget.spend(len(layout) * search.eval_s)
    return out


def _result(search: _Search, trace: Trace, cluster: Cluster) -> SolveResult:
    """The result of the best configuration (an error when none fits the cap)."""
    inst, opts = search.inst, search.opts
    cap = opts.memory_cap_bytes
    if search.best is None:  # stopped before the first plan: units of one tensor each
        search.best = score(inst, Config(tuple(uniform_starts(inst)[0]), 1, 1, 2), cap)
        search.notes.append("stopped before the search: one unit per tensor-holding layer")
    best = search.best
    if best.key[0]:
        proof = "; CP-SAT proved that none fits" if search.cap_infeasible else ""
        raise SchedoptError(f"no sharded plan found within the memory cap (smallest peak found:"
                            f" {best.step.peak_bytes:,} bytes{proof})",
                            "options.memory_cap_bytes", cap)
    notes = list(search.notes)
    knobs: dict[str, object] = {"sharding": opts.sharding, "memory_cap_bytes": cap,
                                "accumulate": opts.accumulate}
    plan = inst.to_plan(best.config, knobs)
    value = best.step.period_s
    sched = simulate(trace, cluster, plan)  # the judge
    sim = sched.iteration_time_s
    agree = abs(value - sim) <= AGREE * sim
    if not agree:
        notes.append(f"closed form {value:.6g} s and simulation {sim:.6g} s disagree")
    bound = value if search.exact else min(search.bound_s, value)
    gap = max(0.0, (value - bound) / value) if value > 0 else 0.0
    status = Status.OPTIMAL if gap <= 1e-12 and agree else Status.FEASIBLE
    notes.append(f"peak of unsharded parameters and gradients {sched.peak_memory_bytes:,.0f} "
                 f"bytes" + (f" (cap {cap:,})" if cap is not None else ""))
    control = search.control
    wall_stop = control.halted and not search.exact and not control.interrupted
    if control.interrupted:
        notes.append("interrupted: the best plan found so far")
    elif wall_stop:
        notes.append("the wall-clock safety stop ended the search before its deterministic "
                     "limits: the result may depend on the machine's load")
    expr = [b for b in search.baselines if b.expressible]
    hint = min(expr, key=lambda b: b.iteration_time_s) if expr else None
    fields: dict[str, Any] = {
        "status": status, "plan": plan, "objective_s": value, "iteration_time_s": sim,
        "bound_s": bound, "gap": gap, "solve_time_s": search.budget.elapsed(),
        "method": search.method,
        "bound_method": search.bound_method if search.exact or gap <= 0 else Method.BOUNDS,
        "interrupted": control.interrupted, "wall_stop": wall_stop,
        "work_s": search.budget.work_used_s, "notes": notes, "baselines": search.baselines,
        "hint_policy": hint.policy if hint else None,
        "hint_iteration_time_s": hint.iteration_time_s if hint else None,
        "improvement_s": max(0.0, hint.iteration_time_s - sim) if hint else 0.0}
    return SolveResult(**fields)
