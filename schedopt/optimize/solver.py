"""``solve``: the best plan the options allow, with a proven bound (docs/formulation.md).

Method by class (``method="auto"``):

* no communication (one rank): any plan; the period is the compute.
* one stage, wait-for-all: the exact O(n) dynamic programme (:mod:`.dp`); reordering and
  partitioning cannot help in this class.
* one stage, per-layer, readiness order, no update step: the exact bisected programme.
* one stage, per-layer otherwise: a portfolio (:data:`SEARCH`) run under a :class:`~.budget.Budget`:
  the local search (:mod:`.heuristics`), the unimodal programme (:mod:`.unimodal`, exact
  without update step and data path, a bound otherwise), the windowed LNS (:mod:`.lns`) on
  large instances and CP-SAT (:mod:`.model`) warm-started from the best plan so far; the bound
  is the best of the programmes', CP-SAT's and the DP lower bound over bucketings.
* two stages that share a resource (parameter servers, colocated or after a local reduce):
  one task per bucket (:func:`.units.one_chain`), solved as one stage;
* other multi-stage layouts (dedicated servers without a local reduce, pipelined
  hierarchical): on small instances every bucketing and launch order
  (:func:`.flowshop.enumerate_plans`, a proof); otherwise the one-stage programme on the
  summed cost, the local search judged by the exact multi-stage period
  (:meth:`.Instance.stage_schedule`), and CP-SAT with every stage in readiness order (a proof
  without reordering); the bound also takes one-stage relaxations
  (:func:`.bounds.stage_bound`), with reordering in per-layer mode solved by the unimodal
  programme, whose plans are judged exactly too.

Every plan is judged by the simulator; the result is never worse than the best baseline the
options can express. ``SolveResult.method`` names what produced the plan returned and
``SolveResult.bound_method`` what proved the bound (:class:`~.result.Method`).

Ctrl-C and the time limit stop the search wherever it is (:mod:`.control`): the result is the
best plan known at that moment (at least the best expressible baseline evaluated so far, or one
bucket of everything), with status FEASIBLE and its gap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize.anneal import EvalCost, anneal, fresh_start, regime
from schedopt.optimize.baselines import Baseline, evaluate_baseline
from schedopt.optimize.bounds import (
    constant_bound,
    lower_bound,
    stage_bound,
    stage_groups,
    stage_relaxation,
)
from schedopt.optimize.budget import AGREE, Budget, Share
from schedopt.optimize.coarse import coarse_programme
from schedopt.optimize.control import Control, Halt, StepTimeout
from schedopt.optimize.dp import solve_fifo_per_layer, solve_wait_for_all
from schedopt.optimize.flowshop import (
    ENUMERATION_PLANS,
    bottleneck_plans,
    enumerate_plans,
    flow_order,
    plan_count,
    resource_bound,
)
from schedopt.optimize.heuristics import jackson_orders, local_search, schrage_order
from schedopt.optimize.host_dp import (
    CANDIDATE_S,
    MAX_STATES,
    ROUNDING,
    host_programme,
    solve_host_programme,
)
from schedopt.optimize.host_side import host_bound, host_work
from schedopt.optimize.instance import TICK_BUDGET, Instance, Segments, build_instance
from schedopt.optimize.lns import windowed_lns
from schedopt.optimize.model import CommModel, unimodal_order
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.relax import (
    MAX_DESCENT_EVALS,
    Relaxation,
    contention_bound,
    count_candidates,
    first_bucket_candidates,
    host_free_period,
    launch_candidates,
    relaxation,
    simulated_descent,
)
from schedopt.optimize.result import Method, SolveResult, Status
from schedopt.optimize.shared_link import (
    PLAN_S_PER_UNIT,
    fewer_buckets,
    shared_link_applies,
    shared_link_bound,
)
from schedopt.optimize.unimodal import MAX_UNITS as UNIMODAL_UNITS
from schedopt.optimize.unimodal import unimodal_exact
from schedopt.policies import POLICIES
from schedopt.simulate.simulator import simulate

__all__ = ["Progress", "solve"]

log = logging.getLogger("schedopt.optimize")

#: Units above which ``lns=None`` switches to the windowed search.
LNS_UNITS = 300

#: Units above which the unimodal programme first runs on runs of whole layers (its plans
#: start the exact programme, or stand for it above :data:`.unimodal.MAX_UNITS`).
COARSE_UNITS = 300

#: Largest instance for the local search over cuts.
LOCAL_SEARCH_UNITS = 1000

#: Largest instance for the full CP-SAT model (larger ones: LNS and the DP bounds only).
FULL_MODEL_UNITS = 2000

#: Largest instance for the DP lower bound over bucketings (O(n^2) per bisection step).
BOUND_DP_UNITS = 6000

#: A search step needs at least this much time (s) to be worth starting.
MIN_STEP_S = 0.05

#: ``progress(elapsed_s, best_objective_s, best_bound_s)``: called on every better plan or
#: bound, and every :data:`HEARTBEAT_S` while CP-SAT runs, in the thread that called
#: :func:`solve`.
Progress = Callable[[float, float, float], None]

#: Seconds between two progress reports while CP-SAT runs without improving.
HEARTBEAT_S = 0.5


# ------------------------------------------------------------------------------------ shares
#: The baselines may use this share of the whole limit (the rest is the search's).
BASELINES = Share(0.5)
#: The local search over cuts, before the programmes.
LOCAL_SEARCH = Share(0.1, 2.0)
#: The unimodal programme.
UNIMODAL = Share(0.85)
#: The unimodal programme on coarse units (runs of whole layers), above :data:`COARSE_UNITS`.
COARSE = Share(0.4)
#: The windowed LNS when the full model follows it, and when it is the last step.
LNS_THEN_MODEL, LNS_ALONE = Share(0.5), Share(1.0)
#: The search of the unpartitioned class first, when ``partition_bytes`` cuts tensors.
UNPARTITIONED = Share(0.4)
#: The flow-shop bound's programmes (several stages).
FLOW_SHOP_BOUND = Share(0.3)
#: The unimodal programme on the one-stage relaxations of several stages (reordered,
#: per-layer), all of them together.
STAGE_PROGRAMMES = Share(0.25)
#: The multi-stage local search when CP-SAT follows it, and when it is the last step.
STAGES_LOCAL_SEARCH, STAGES_LOCAL_SEARCH_ALONE = Share(0.3, 10.0), Share(0.5)
#: Simulated annealing over several stages with reordering, before CP-SAT's last pass (85%:
#: the runs from fresh starts keep finding other plans, docs/formulation.md section 6).
STAGES_ANNEAL = Share(0.85)
#: A CP-SAT pass that is the last step: all the work left.
LAST_PASS = Share(1.0)
#: The exact unimodal pass before the general model (after the unimodal programme), and the
#: unimodal pass with relaxed update tails before it (without the programme).
UNIMODAL_PASS, RELAXED_UNIMODAL_PASS = Share(0.5), Share(0.4)


#: Deterministic charge (s) of one candidate plan of the local search, per unit (measured:
#: 1,726 candidates of 580 units in 0.234 s).
EVAL_S_PER_UNIT = 2.5e-7

#: Deterministic charge (s) of the DP lower bound over bucketings, per squared unit (measured:
#: 6.0 s on 5,000 units).
BOUND_DP_S = 2.4e-7

#: Deterministic charge (s) of judging one plan of several stages, per unit and stage (the
#: simulator's serving loop; measured: 1.3-1.7e-5 s with every unit a bucket, at load 6,
#: before the serving order was kept per plan size; not measured since, so the charge errs
#: high).
STAGE_EVAL_S = 5e-6
#: Deterministic charge (s) of one annealing evaluation, and per bucket and stage of the plan
#: evaluated (the move and the call, then the serving loop; ``benchmarks/bench_multistage.py
#: --eval-rate`` fits the two: 30-53 us and 0.40-0.62 us on the pipelined and dedicated-server
#: rows, the time 0.55-0.86 of this charge).
ANNEAL_EVAL_S, ANNEAL_BUCKET_STAGE_S = 6e-5, 1e-6
#: Evaluations of one annealing run, per unit (the temperature falls over them; the search
#: space grows with the units, and small instances need few: the enumeration's optimum of six
#: units takes under 4,000).
ANNEAL_RUN_EVALS_PER_UNIT = 500
#: Most annealing runs, each with its own seed. Where a run ends depends on its random moves
#: more than on its length: on the benchmark's dedicated-server rows twice the evaluations in
#: one run changed the plans by -0.02% to +0.59%, while another seed kept the plan or found a
#: better one; so the work goes to more runs of one length, not to longer runs.
ANNEAL_RUNS = 16

#: Deterministic charge (s) of the one-stage programmes of the bottleneck plans, per squared
#: unit and stage (measured: 0.07 s for 580 units and 3 stages).
FLOW_SHOP_PLAN_S = 1e-7

#: Deterministic charge (s) of one programme of the flow-shop bound, per squared unit
#: (measured: 0.15 s for 580 units, 4.3 s for 5,000, at load 6).
FLOW_BOUND_S = 2e-7

#: Deterministic charge (s) of building the CP-SAT model, per unit (measured: 0.04 s for 161).
MODEL_S_PER_UNIT = 2.5e-4

#: Deterministic charge (s) of one state of the unimodal programme (measured on GPT-2 1.5B
#: r0.5: the 18 grid tests of one 60 s solve examined 135 million states with the steps in
#: 56 s at load 1; ``benchmarks/bench_optimize.py --only r0.5`` then reports 42.2 s of work
#: in 40.4 s).
STATE_S = 4e-7
#: Deterministic charge of one simulation of a plan, per unit (the host side's candidates).
SIM_S_PER_UNIT = 1e-5


# ---------------------------------------------------------------------------------- the best
@dataclass
class Best:
    """The best plan known (segments of ``inst``, period in its ticks) and the best bound."""

    inst: Instance
    segs: Segments
    value: int
    method: Method
    bound: int = 0
    bound_method: Method = Method.BOUNDS

    @property
    def solved(self) -> bool:
        """The plan meets the bound."""
        return self.value <= self.bound


@dataclass
class SolveState:
    """State of one solve: options, budget, stop control, baselines and the best plan."""

    trace: Trace
    cluster: Cluster
    opts: SolveOptions
    budget: Budget
    control: Control
    progress: Progress | None = None
    fine: Instance | None = None
    baselines: list[Baseline] = field(default_factory=list)
    best: Best | None = None
    notes: list[str] = field(default_factory=list)
    programme_done: bool = False
    #: The wall-clock safety stop ended a step (the result may depend on the machine's load).
    wall_stop: bool = False
    #: With partitioning: the best plan of the unpartitioned class and its period (s).
    plain: tuple[Plan, float] | None = None
    _reported: float = 0.0

    def out_of_time(self) -> bool:
        """Whether the wall-clock deadline has passed (kept as a wall stop) or Ctrl-C came: the
        safety stop of the steps after the search."""
        late = time.perf_counter() >= self.budget.deadline
        self.wall_stop |= late
        return late or self.control.interrupted

    def charge(self, stats: dict[str, int], per_eval: float) -> None:
        """Spend a search's evaluations (``stats["evals"]`` at ``per_eval`` seconds of work each)
        and keep whether its deadline stopped it (``stats["deadline_stop"]``)."""
        self.charge_work(stats["evals"] * per_eval, bool(stats["deadline_stop"]))

    def charge_work(self, work_s: float, deadline_stop: bool) -> None:
        """Spend ``work_s`` seconds of work and keep whether a deadline stopped the step."""
        self.budget.spend(work_s)
        self.wall_stop |= deadline_stop

    @property
    def hint(self) -> Baseline | None:
        """The best expressible baseline evaluated so far."""
        expr = [b for b in self.baselines if b.row.expressible]
        return min(expr, key=lambda b: b.row.iteration_time_s) if expr else None

    def start(self, inst: Instance, segs: Segments, value: int, method: Method,
              bound: int | None = None, bound_method: Method = Method.BOUNDS) -> Best:
        """Make ``segs`` the best plan (the search's start, on ``inst``); the bound is the
        closed-form one unless given."""
        if bound is None:
            bound = constant_bound(inst)
        with self.control.shield():
            self.best = Best(inst, list(segs), int(value), method, min(int(bound), int(value)),
                             bound_method)
        self._report()
        return self.best

    def offer(self, segs: Segments, value: int, method: Method) -> bool:
        """Keep ``segs`` (period ``value`` ticks) when it is better than the best plan."""
        best = self.best
        assert best is not None
        if value >= best.value:
            return False
        with self.control.shield():
            best.segs, best.value, best.method = list(segs), int(value), method
            best.bound = min(best.bound, best.value)
        self._report()
        return True

    def prove(self, bound: int, method: Method) -> None:
        """Keep ``bound`` (ticks) when it is better than the best bound."""
        best = self.best
        assert best is not None
        bound = min(int(bound), best.value)
        if bound > best.bound:
            best.bound, best.bound_method = bound, method
            self._report()

    def _report(self) -> None:
        best = self.best
        if self.progress is not None and best is not None:
            tick = best.inst.tick
            self._reported = time.perf_counter()
            self.progress(self.budget.elapsed(), best.value * tick, best.bound * tick)

    def heartbeat(self) -> None:
        """Report the best plan again when nothing was reported for :data:`HEARTBEAT_S`."""
        if time.perf_counter() - self._reported >= HEARTBEAT_S:
            self._report()

    def left(self) -> float:
        """Wall-clock seconds left for the search (the safety stop)."""
        return min(self.budget.left(), self.control.left())

    def work_left(self) -> float:
        """Deterministic seconds left for the search (0 once stopped)."""
        return 0.0 if self.control.halted else self.budget.work_left()


# ------------------------------------------------------------------------------------ solve
def solve(trace: Trace, cluster: Cluster, options: SolveOptions | None = None, *,
          progress: Progress | None = None, **kwargs: Any) -> SolveResult:
    """Find the best plan for ``trace`` on ``cluster`` under ``options``.

    Parameters
    ----------
    trace, cluster
        The instance.
    options
        A :class:`SolveOptions`; keyword arguments build one when it is None.
    progress
        Optional ``progress(elapsed_s, best_objective_s, best_bound_s)``, called in this
        thread whenever the best plan or the bound improves, and every half second while
        CP-SAT runs.

    Returns
    -------
    SolveResult
        Status (``OPTIMAL`` only when proven), the plan, the model's objective and the
        simulator's verdict, bound, gap, time, method and the baselines. After Ctrl-C or the
        time limit: the best plan known so far, FEASIBLE with its gap (``interrupted`` says
        which).

    Raises
    ------
    SchedoptError
        Bad options, or a model CP-SAT rejects (with its validation message).
    KeyboardInterrupt
        On a second Ctrl-C.
    """
    opts = options if options is not None else SolveOptions(**kwargs)
    if opts.sharding is not None:  # units and prefetch of sharded plans (.sharding)
        from schedopt.optimize.sharding.solve import solve_sharded

        return solve_sharded(trace, cluster, opts, progress)
    budget = Budget(opts.time_limit_s, opts.work_limit_s)
    with Control(budget.deadline) as control:
        search = SolveState(trace, cluster, opts, budget, control, progress)
        control.heartbeat = search.heartbeat
        try:
            _search(search)
        except Halt:  # a stop that came as the search ended
            control.searching = False
        if control.halted:
            log.info("%s: returning the best plan known so far",
                        "interrupted" if control.interrupted else "time limit reached")
        with control.shield(final=True):
            if search.best is None:
                _fallback(search)
            if control.interrupted:
                search.notes.append("interrupted: the best plan found so far")
            elif control.halted or search.wall_stop:
                search.wall_stop = True
                search.notes.append("the wall-clock safety stop ended the search before its "
                                    "deterministic limits: the result may depend on the "
                                    "machine's load")
            return _result(search)


def _search(search: SolveState) -> None:
    """Prepare and run the method of the instance's class until done or stopped."""
    control = search.control
    try:
        control.searching = True
        _prepare(search)
        _dispatch(search)
    except Halt:
        pass
    finally:
        control.searching = False


def _prepare(search: SolveState) -> None:
    """The fine instance and the baselines (within their share of the limit)."""
    opts = search.opts
    search.fine = build_instance(search.trace, search.cluster, opts, merge=False)
    if not opts.baselines:
        return
    stop = search.budget.of_limit(BASELINES)
    try:
        with search.control.limit(stop):
            for name in POLICIES:
                if time.perf_counter() >= stop:
                    raise StepTimeout
                baseline = evaluate_baseline(name, search.trace, search.cluster, opts,
                                             search.fine)
                if baseline is not None:
                    search.baselines.append(baseline)
    except StepTimeout:
        search.wall_stop = True
        search.notes.append(f"baselines stopped after {len(search.baselines)}: their share of "
                            f"the time limit ({BASELINES.fraction:.0%}) was spent")


def _dispatch(search: SolveState) -> None:
    """Run the method of the instance's class."""
    fine = search.fine
    assert fine is not None
    if not fine.stages:
        segs = [(0, fine.n - 1)]
        val = int(fine.evaluate(segs).period)
        search.start(fine, segs, val, Method.DP, val, Method.DP)
    if _partitions(search):
        _solve_unpartitioned(search)
    if len(fine.stages) > 1:
        _solve_multi_stage(search)
    else:
        _solve_single(search)


def _partitions(search: SolveState) -> bool:
    """Whether ``partition_bytes`` cuts some tensor in a class where pieces can help."""
    fine = search.fine
    assert fine is not None
    opts = search.opts
    if opts.partition_bytes is None or (len(fine.stages) == 1
                                        and opts.next_forward != "per-layer"):
        return False
    return len(fine.base_tensor) > search.trace.num_tensors


def _solve_unpartitioned(search: SolveState) -> None:
    """Solve the unpartitioned class first, within :data:`UNPARTITIONED` of the work left;
    its plan (expressible with pieces) becomes a starting plan of the partitioned search, so
    that partitioning never returns a worse plan."""
    budget = search.budget
    sub_budget = Budget(budget.limit_s)
    sub_budget.t0, sub_budget.deadline = budget.t0, budget.deadline
    sub_budget.work_used_s = budget.work_used_s
    sub_budget.work_limit_s = budget.work_used_s + budget.work(UNPARTITIONED)
    plain = search.opts.model_copy(update={"partition_bytes": None})
    sub = SolveState(search.trace, search.cluster, plain, sub_budget, search.control,
                     baselines=search.baselines)
    sub.fine = build_instance(search.trace, search.cluster, plain, merge=False)
    try:
        _dispatch(sub)
    finally:
        budget.work_used_s = sub_budget.work_used_s
        search.wall_stop |= sub.wall_stop
        best = sub.best
        if best is not None:
            search.plain = (best.inst.to_plan(best.segs), best.value * best.inst.tick)


def _fallback(search: SolveState) -> None:
    """Stopped before any plan: the best expressible baseline so far, else one bucket."""
    inst = search.fine
    if inst is None:  # stopped while cutting tensors: whole tensors are a valid plan too
        plain = search.opts.model_copy(update={"partition_bytes": None})
        inst = build_instance(search.trace, search.cluster, plain, merge=False)
    hint = search.hint
    segs, method = ([(0, inst.n - 1)], Method.DP_HEURISTIC)
    if hint is not None and hint.segs:
        segs, method = hint.segs, Method.HINT
    search.start(inst, segs, int(inst.evaluate(segs).period), method)
    psegs = _plain_segs(search, inst)
    if psegs:  # stopped after the unpartitioned class: its plan if better
        search.offer(psegs, int(inst.evaluate(psegs).period), Method.UNPARTITIONED)
    search.notes.append("stopped before the search: the best expressible baseline so far"
                        if method is Method.HINT else
                        "stopped before the search: one bucket of every tensor")


# ----------------------------------------------------------------------------------- methods
def _solve_single(search: SolveState) -> None:
    """One communication stage: the DP where it is exact, the search portfolio otherwise."""
    trace, cluster, opts, fine = search.trace, search.cluster, search.opts, search.fine
    assert fine is not None
    if opts.next_forward != "per-layer":
        merge = opts.merge_layers if opts.merge_layers is not None else True
        inst = build_instance(trace, cluster, opts, merge=merge) if merge else fine
        val, segs = solve_wait_for_all(inst)
        if opts.method != "cp-sat":
            if not merge:
                search.notes.append("cuts inside layers never help in wait-for-all mode")
            search.start(inst, segs, val, Method.DP, val, Method.DP)
            return
        _portfolio(search, inst, segs, with_hint=False)
        return
    inst = fine
    if opts.merge_layers:
        inst = build_instance(trace, cluster, opts, merge=True)
        search.notes.append("merge_layers: buckets never cut a layer (a restriction in "
                            "per-layer mode)")
    val, segs, exact = solve_fifo_per_layer(inst)
    if opts.method == "dp" or (opts.method == "auto" and not opts.reorder and exact):
        if exact and not opts.reorder:
            search.start(inst, segs, val, Method.DP, val, Method.DP)
            return
        search.start(inst, segs, val, Method.DP)
        search.prove(lower_bound(inst, val), Method.BOUNDS)
        search.notes.append("dp outside its exact class: best FIFO plan with one bucket end "
                            "per layer")
        return
    _portfolio(search, inst, segs)


def _starts(search: SolveState, inst: Instance, dp_segs: Segments, with_hint: bool
            ) -> list[tuple[Segments, Method]]:
    """The starting plans: the DP's, the hint's and, with reordering, the DP buckets by
    Schrage's rule, each also in unimodal order."""
    cands: list[tuple[Segments, Method]] = [(dp_segs, Method.DP)]
    hint = search.hint if with_hint else None
    if hint is not None and hint.segs is not None:
        hsegs, _ = inst.segments_of_plan(hint.plan)
        if hsegs:
            cands.append((hsegs, Method.HINT))
    psegs = _plain_segs(search, inst)
    if psegs:
        cands.append((psegs, Method.UNPARTITIONED))
    if search.opts.reorder:
        cands.append((schrage_order(inst, dp_segs), Method.LIST_SCHEDULING))
        cands += [(unimodal_order(inst, c), m) for c, m in list(cands)]
    return cands


def _plain_segs(search: SolveState, inst: Instance) -> Segments:
    """The unpartitioned class's best plan as segments of ``inst`` (empty without one)."""
    if search.plain is None:
        return []
    segs, _ = inst.segments_of_plan(search.plain[0])
    return segs


def _portfolio(search: SolveState, inst: Instance, dp_segs: Segments, *,
               with_hint: bool = True) -> None:
    """Start from the best of the DP plan, the hint and list scheduling, prove the closed-form
    bounds, then run the steps of :data:`SEARCH` that apply while the plan misses the bound.

    With reordering, some optimal launch order is unimodal when tails grow with readiness
    (docs/formulation.md). The unimodal programme (:mod:`.unimodal`) then gives the optimum, or,
    with an update step (whose exact order can break the argument), a bound from relaxed update
    tails and a plan judged by the exact period; CP-SAT polishes the plan (unimodal order, exact
    update windows) and, when the programme could not finish, supplies plans and bounds: the
    unimodal model with relaxed tails and the general model with exact windows both bound every
    launch order.
    """
    cands = _starts(search, inst, dp_segs, with_hint)
    vals = [int(inst.evaluate(c).period) for c, _ in cands]
    k = int(np.argmin(vals))
    best = search.start(inst, cands[k][0], vals[k], cands[k][1])
    with_dp = inst.n <= BOUND_DP_UNITS
    search.prove(lower_bound(inst, vals[k], with_dp=with_dp), Method.BOUNDS)
    if with_dp:  # O(n^2) per bisection step: charged as deterministic work
        search.budget.spend(BOUND_DP_S * inst.n ** 2)
    for step in SEARCH:
        if best.solved or search.control.halted:
            break
        if step.applies(search, inst):
            step.run(search, inst)
    if search.opts.reorder and inst.per_layer and inst.consts.U > 0 and not best.solved:
        search.notes.append("bound from relaxed update tails (the updates of same-layer "
                            "buckets launched after a bucket left out, and a late bucket's own "
                            "when a later-ready bucket of its layer is late too); plans judged "
                            "exactly")


# -------------------------------------------------------------------------- portfolio steps
@dataclass(frozen=True)
class Step:
    """One method of the portfolio: when it applies, and how it runs (it offers plans and
    proves bounds through the :class:`SolveState`)."""

    method: Method
    applies: Callable[[SolveState, Instance], bool]
    run: Callable[[SolveState, Instance], None]


def _run_local_search(search: SolveState, inst: Instance) -> None:
    """Hill-climb on the cuts, launched by Schrage's rule; then the unimodal order."""
    best = search.best
    assert best is not None
    start_val = best.value

    def keep(segs: Segments, val: int) -> None:
        search.offer(segs, val, Method.LOCAL_SEARCH)

    val, segs = _local_search(search, inst, best.segs, True, LOCAL_SEARCH, keep)
    uni = unimodal_order(inst, segs)
    uval = int(inst.evaluate(uni).period)
    if uval <= val:
        val, segs = uval, uni
    log.info("local search: %d -> %d ticks", start_val, val)
    search.offer(segs, val, Method.LOCAL_SEARCH)


def _local_search(search: SolveState, inst: Instance, segs: Segments, reorder: bool,
                  share: Share, keep: Callable[[Segments, int], None],
                  order: Callable[[Segments], Segments] | None = None,
                  per_unit_s: float = EVAL_S_PER_UNIT) -> tuple[int, Segments]:
    """:func:`.heuristics.local_search` within ``share`` of the work left (candidates
    evaluated, ``per_unit_s`` each per unit); the solve's deadline is the safety stop."""
    per_eval = per_unit_s * max(1, inst.n)
    stats: dict[str, int] = {}
    out = local_search(inst, segs, reorder=reorder, seed=search.opts.seed,
                       deadline=search.budget.deadline,
                       max_evals=int(search.budget.work(share) / per_eval), on_improve=keep,
                       stats=stats, order=order)
    search.charge(stats, per_eval)
    return out


def _run_shared_link(search: SolveState, inst: Instance) -> None:
    """A link shared with the batch copy (:mod:`.shared_link`): the bound of its work, then
    plans of fewer buckets while that work paces the best plan, within :data:`LOCAL_SEARCH`.
    After the unimodal programme, whose relaxation leaves the link's work out (a higher bound
    only makes its fronts grow), and the windowed LNS."""
    best = search.best
    assert best is not None
    stats: dict[str, int] = {}
    per_call = FLOW_BOUND_S * inst.n ** 2
    search.prove(shared_link_bound(inst, best.bound, best.value, stats=stats,
                                   max_calls=int(search.work_left() / per_call)),
                 Method.SHARED_LINK)
    search.budget.spend(per_call * stats["calls"])
    per_eval = PLAN_S_PER_UNIT * inst.n
    val, segs = fewer_buckets(inst, best.segs, reorder=search.opts.reorder,
                              max_evals=int(search.budget.work(LOCAL_SEARCH) / per_eval),
                              deadline=search.budget.deadline, stats=stats)
    search.charge(stats, per_eval)
    search.offer(segs, val, Method.SHARED_LINK)


def _run_unimodal(search: SolveState, inst: Instance) -> None:
    """The unimodal programme between the bound and the best plan."""
    best = search.best
    assert best is not None
    res = unimodal_exact(inst, best.bound - 1, best.value, deadline=search.budget.deadline,
                         max_work=int(search.budget.work(UNIMODAL) / STATE_S))
    if res is None:
        return
    search.budget.spend(res.work * STATE_S)
    search.wall_stop |= res.wall_stop
    search.programme_done = res.segs != [] or res.bound >= best.value
    search.prove(res.bound, Method.UNIMODAL)
    if res.segs:
        val = int(inst.evaluate(res.segs).period)
        log.info("unimodal programme: bound %d, plan %d ticks", res.bound, val)
        search.offer(res.segs, val, Method.UNIMODAL)


def _run_coarse(search: SolveState, inst: Instance) -> None:
    """The unimodal programme on runs of whole layers (:mod:`.coarse`): plans only (its
    bound holds for the restricted class alone)."""
    best = search.best
    assert best is not None
    res = coarse_programme(inst, best.bound - 1, best.value, deadline=search.budget.deadline,
                           max_work=int(search.budget.work(COARSE) / STATE_S))
    search.budget.spend(res.work * STATE_S)
    search.wall_stop |= res.wall_stop
    if res.segs:
        log.info("coarse unimodal programme: plan %d ticks", res.value)
        if search.offer(res.segs, res.value, Method.UNIMODAL):
            search.notes.append("the unimodal programme on runs of whole layers improved the "
                                "plan")


def _run_lns(search: SolveState, inst: Instance) -> None:
    """The windowed LNS from the best plan."""
    best = search.best
    assert best is not None
    share = LNS_THEN_MODEL if inst.n <= FULL_MODEL_UNITS else LNS_ALONE

    def keep(segs: Segments, val: int) -> None:
        search.offer(segs, val, Method.LNS)

    res = windowed_lns(inst, best.segs, best.value, reorder=search.opts.reorder,
                       deadline=search.budget.deadline, lower=best.bound,
                       seed=search.opts.seed, workers=search.opts.workers,
                       control=search.control, work_s=search.budget.work(share),
                       on_improve=keep)
    search.budget.spend(res.work_s)
    search.wall_stop |= res.wall_stop
    log.info("lns: %d windows, %d improvements, %d ticks", res.windows, res.improvements,
             res.value)
    search.offer(res.segs, res.value, Method.LNS)


@dataclass(frozen=True)
class Pass:
    """One CP-SAT run: launch order, exact update windows, share of the time left, and
    whether its bound holds for every plan the options allow."""

    order: str
    exact_updates: bool
    share: Share
    valid: bool


def _passes(search: SolveState, inst: Instance) -> list[Pass]:
    """The CP-SAT passes: one model, or with relaxed update tails (reordering, per-layer, an
    update step) the unimodal model then the general one."""
    reorder = search.opts.reorder
    if not (reorder and inst.per_layer and inst.consts.U > 0):
        return [Pass("unimodal" if reorder else "fifo", True, LAST_PASS, True)]
    if search.programme_done:
        return [Pass("unimodal", True, UNIMODAL_PASS, False), Pass("any", True, LAST_PASS, True)]
    return [Pass("unimodal", False, RELAXED_UNIMODAL_PASS, True),
            Pass("any", True, LAST_PASS, True)]


def _run_cp_sat(search: SolveState, inst: Instance) -> None:
    """The full CP-SAT model, warm-started from the best plan, pass by pass."""
    best = search.best
    assert best is not None
    for p in _passes(search, inst):
        if search.work_left() <= MIN_STEP_S + MODEL_S_PER_UNIT * inst.n or best.solved:
            break  # no work left beyond building the model
        cm = CommModel(inst, order=p.order, horizon=best.value,
                       period_lb=best.bound if p.valid else 0, exact_updates=p.exact_updates)
        cm.add_hint(best.segs)
        sol = _run_model(search, inst, cm, p.share, best.bound)
        if p.valid:
            search.prove(sol.bound, Method.CP_SAT)
        if sol.interrupted:
            break


def _run_model(search: SolveState, inst: Instance, cm: CommModel, share: Share,
               stop_at: int) -> Any:
    """Solve ``cm`` for ``share`` of the time left; offer every better plan on the way."""
    opts = search.opts

    def seen(segs: Segments, val: int) -> None:
        search.offer(segs, val, Method.CP_SAT)

    sol = cm.solve(time_limit_s=max(MIN_STEP_S, search.left()), workers=opts.workers,
                   seed=opts.seed, relative_gap=opts.relative_gap, extra=opts.cp_sat,
                   stop_at=stop_at, control=search.control, on_improve=seen,
                   work_s=max(0.0, search.budget.work(share) - MODEL_S_PER_UNIT * inst.n))
    search.budget.spend(sol.work_s + MODEL_S_PER_UNIT * inst.n)
    if sol.segs is not None:
        search.offer(sol.segs, int(inst.evaluate(sol.segs).period), Method.CP_SAT)
    return sol


def _use_lns(search: SolveState, inst: Instance) -> bool:
    use = search.opts.lns if search.opts.lns is not None else inst.n > LNS_UNITS
    return bool(use)


#: The search portfolio of the one-stage reordered or per-layer class, in the order it runs.
SEARCH: tuple[Step, ...] = (
    Step(Method.LOCAL_SEARCH, lambda s, i: s.opts.reorder and i.n <= LOCAL_SEARCH_UNITS,
         _run_local_search),
    Step(Method.UNIMODAL, lambda s, i: bool(s.opts.reorder and i.per_layer and i.stages
                                            and i.n > COARSE_UNITS), _run_coarse),
    Step(Method.UNIMODAL, lambda s, i: s.opts.reorder and i.per_layer, _run_unimodal),
    Step(Method.LNS, _use_lns, _run_lns),
    Step(Method.SHARED_LINK, lambda s, i: shared_link_applies(i), _run_shared_link),
    Step(Method.CP_SAT, lambda s, i: s.work_left() > MIN_STEP_S and i.n <= FULL_MODEL_UNITS,
         _run_cp_sat),
)


# ------------------------------------------------------------------------------ multi-stage
def _solve_multi_stage(search: SolveState) -> None:
    """Several stages: the one-stage DP on the summed cost; where the period formula is exact
    (no PCIe link shared with the batch copy) the flow-shop view (:mod:`.flowshop`): plans of
    the bottleneck stages' programmes and per-resource bounds that count every stage, then
    the hint and the local search over bucketings judged by the exact multi-stage period, then
    CP-SAT with every stage in readiness order (a proof without reordering, a plan with it);
    the bound also takes one-stage relaxations (:func:`.bounds.stage_bound`)."""
    trace, cluster, opts = search.trace, search.cluster, search.opts
    # cuts inside a layer can help a pipeline of stages: whole layers only when asked
    inst = build_instance(trace, cluster, opts, merge=bool(opts.merge_layers))
    # CP-SAT models every stage in readiness order: a proof without --reorder, plans with it
    model = not inst.pcie_coupled and inst.n <= FULL_MODEL_UNITS
    exact = model and not opts.reorder
    search.notes.append(
        "several communication stages: CP-SAT with every stage in readiness order, the stages "
        "through shared resources in the simulator's order" if exact else
        "several communication stages: plans from the bottleneck stages' programmes, the local "
        "search and CP-SAT in readiness order; the bound from the flow-shop view (every stage "
        "per resource) and one-stage relaxations" if model else
        "several communication stages: heuristic plans (the DP on the summed stage costs, then "
        "a local search); the bound from one-stage relaxations")
    if inst.per_layer:
        _, segs, _ = solve_fifo_per_layer(inst)
    else:
        _, segs = solve_wait_for_all(inst)
    if inst.pcie_coupled:  # the closed form is not exact there: the simulator judges
        sim = simulate(trace, cluster, inst.to_plan(segs)).iteration_time_s
        search.start(inst, segs, round(sim / inst.tick), Method.DP_HEURISTIC)
        search.prove(stage_bound(trace, cluster, opts, inst), Method.STAGE_RELAXATION)
        return
    _stages_starts(search, inst, segs)
    best = search.best
    assert best is not None
    if _stages_enumerate(search, inst):
        return
    _stages_flow_shop_bound(search, inst)
    if not best.solved and inst.n <= FULL_MODEL_UNITS:  # O(n^2) programmes per stage
        search.prove(stage_bound(trace, cluster, opts, inst), Method.STAGE_RELAXATION)
        search.budget.spend(BOUND_DP_S * inst.n ** 2 * len(inst.stages))
    if not best.solved:
        _stages_local_search(search, inst, model)
    if not best.solved and opts.reorder and inst.per_layer:
        _stages_programmes(search, inst)
    if not best.solved and opts.reorder:
        _stages_anneal(search, inst)
    if model and not best.solved and search.work_left() > MIN_STEP_S + MODEL_S_PER_UNIT * inst.n:
        start = sorted(best.segs)  # the same buckets in readiness order
        start_val = int(inst.evaluate(start).period)
        cm = CommModel(inst, order="fifo", horizon=max(best.value, start_val),
                       period_lb=best.bound)
        cm.add_hint(start)
        sol = _run_model(search, inst, cm, LAST_PASS, best.bound)
        if exact:
            search.prove(sol.bound, Method.CP_SAT)


def _stages_starts(search: SolveState, inst: Instance, segs: Segments) -> None:
    """The DP plan on the summed costs, the hint, the unpartitioned class's plan and the
    plans paced by each resource (:func:`.flowshop.bottleneck_plans`, when their charge fits
    in the work left), judged by the exact multi-stage period."""
    search.start(inst, segs, int(inst.evaluate(segs).period), Method.DP_HEURISTIC)
    hint = search.hint
    if hint is not None and hint.segs is not None:
        hsegs, _ = inst.segments_of_plan(hint.plan)
        if hsegs:
            search.offer(hsegs, int(inst.evaluate(hsegs).period), Method.HINT)
    psegs = _plain_segs(search, inst)
    if psegs:
        search.offer(psegs, int(inst.evaluate(psegs).period), Method.UNPARTITIONED)
    charge = FLOW_SHOP_PLAN_S * inst.n ** 2 * len(inst.stages)
    if charge > search.work_left():  # the bottleneck plans would pass the work limit
        return
    plans = bottleneck_plans(search.trace, search.cluster, search.opts, inst)
    for c in plans:
        search.offer(c, int(inst.evaluate(c).period), Method.FLOW_SHOP)
    search.budget.spend(charge)


def _stages_enumerate(search: SolveState, inst: Instance) -> bool:
    """Small instances: every bucketing and launch order (:func:`.flowshop.enumerate_plans`),
    when there are at most :data:`.flowshop.ENUMERATION_PLANS` and their judging takes at most
    half of the work left; the best is the optimum of the class (proven)."""
    count = plan_count(inst.n, search.opts.reorder, limit=ENUMERATION_PLANS)
    if count > ENUMERATION_PLANS:
        return False
    charge = count * STAGE_EVAL_S * inst.n * len(inst.stages)
    if charge > 0.5 * search.work_left():
        return False
    val, segs = enumerate_plans(inst, search.opts.reorder)
    search.budget.spend(charge)
    search.offer(segs, val, Method.ENUMERATION)
    search.prove(val, Method.ENUMERATION)
    return True


def _stages_flow_shop_bound(search: SolveState, inst: Instance) -> None:
    """The per-resource bounds of the flow-shop view, between the bound and the best plan."""
    best = search.best
    assert best is not None
    if best.solved or inst.n > BOUND_DP_UNITS:
        return
    per_call = FLOW_BOUND_S * inst.n ** 2  # one programme per bisection step and view
    calls = int(search.budget.work(FLOW_SHOP_BOUND) / per_call)
    if calls < 1:  # not one programme within the work left
        return
    stats: dict[str, int] = {}
    bound = resource_bound(inst, best.value, best.bound, stats=stats, max_calls=calls)
    search.budget.spend(stats["calls"] * per_call)
    search.prove(bound, Method.FLOW_SHOP)


def _stages_programmes(search: SolveState, inst: Instance) -> None:
    """The unimodal programme (:mod:`.unimodal`) on every one-stage relaxation of several
    stages (:func:`.bounds.stage_groups`), the busiest resource first, within
    :data:`STAGE_PROGRAMMES` of the work left, shared equally by the relaxations not yet run.

    Each relaxation's bound bounds every plan of the stages in every launch order (dropping
    stages only makes buckets end earlier, and a stage alone still waits for the stages
    before it and the start-up costs after it: :func:`.bounds.stage_heads`; the stages that
    share a resource of the last
    stage take it one at a time after the bucket's release): it is proven less both integer
    models' tick budgets. Its plan, on the same units, is judged by the exact multi-stage
    period and offered."""
    best = search.best
    assert best is not None
    trace, cluster, opts = search.trace, search.cluster, search.opts
    ones = [stage_relaxation(trace, cluster, opts, inst, s, merge=bool(opts.merge_layers))
            for s in stage_groups(inst)]
    ones = [one for one in ones if one.n == inst.n and one.n <= UNIMODAL_UNITS]
    ones.sort(key=lambda one: -(one.a + int(one.p.sum())) * one.tick)  # busiest first
    work = search.budget.work(STAGE_PROGRAMMES)
    for k, one in enumerate(ones):
        if best.solved or search.work_left() <= MIN_STEP_S or work <= MIN_STEP_S:
            break
        pre = BOUND_DP_S * one.n ** 2 * 2  # the DP and the bucketing bound
        share = work / (len(ones) - k) - pre
        if share <= MIN_STEP_S:
            break
        dp_val, dp_segs = solve_fifo_per_layer(one)[:2]
        hi = min(int(dp_val), int(one.evaluate(best.segs).period))
        res = unimodal_exact(one, lower_bound(one, hi) - 1, hi, deadline=search.budget.deadline,
                             max_work=int(share / STATE_S))
        search.budget.spend(pre)
        work -= pre
        if res is None:
            continue
        search.budget.spend(res.work * STATE_S)
        work -= res.work * STATE_S
        search.wall_stop |= res.wall_stop
        slack = TICK_BUDGET * (one.lower_bound_s + inst.lower_bound_s)
        search.prove(int(np.floor((res.bound * one.tick - slack) / inst.tick)),
                     Method.STAGE_RELAXATION)
        for segs, method in ((res.segs, Method.UNIMODAL), (dp_segs, Method.FLOW_SHOP)):
            if segs:
                search.offer(segs, int(inst.evaluate(segs).period), method)
        log.info("stage relaxation %s: bound %.6g s", one.stages[0].name,
                 res.bound * one.tick)


def _stages_anneal(search: SolveState, inst: Instance) -> None:
    """Simulated annealing (:mod:`.anneal`) from the best plan, over bucketings and launch
    orders judged by the exact multi-stage period, within :data:`STAGES_ANNEAL` of the work
    left (:data:`ANNEAL_EVAL_S` per evaluation and :data:`ANNEAL_BUCKET_STAGE_S` per bucket and
    stage of the plan evaluated): up to :data:`ANNEAL_RUNS` runs of
    :data:`ANNEAL_RUN_EVALS_PER_UNIT` evaluations per unit each, with seeds ``seed``,
    ``seed + 1``, ..., in the instance's :func:`.anneal.regime` (where start-up costs weigh,
    the first run from the best plan and the others from :func:`.anneal.fresh_start`); each
    run's best plan is offered, and its launch orders by Jackson's rules
    (:func:`.heuristics.jackson_orders`). The runs do not depend on the work: from the same
    plan, a larger budget runs the same ones and more, so the annealing never ends worse."""
    best = search.best
    assert best is not None
    share = search.budget.work(STAGES_ANNEAL)
    per_bucket = ANNEAL_BUCKET_STAGE_S * len(inst.stages)
    start, start_value = list(best.segs), best.value
    how = regime(inst)
    fresh = fresh_start(inst)
    length = ANNEAL_RUN_EVALS_PER_UNIT * inst.n
    spent = 0.0
    for run in range(ANNEAL_RUNS):
        cost = EvalCost(ANNEAL_EVAL_S, per_bucket, share - spent)
        if cost.work(2, 2 * inst.n) > cost.limit_s:  # not one more evaluation of any plan
            break
        begin = fresh if how.restarts and run > 0 else start
        stats: dict[str, int] = {}
        val, segs = anneal(inst, begin, max_evals=length,
                           seed=search.opts.seed + run, deadline=search.budget.deadline,
                           stats=stats, cost=cost, shift=how.shift)
        log.info("annealing run %d from %s: %d evaluations, period %d ticks (the best plan "
                 "before the runs: %d)", run,
                 "the best plan" if begin is start else "one bucket per unit", stats["evals"],
                 val, start_value)
        search.offer(segs, val, Method.ANNEAL)
        polish = jackson_orders(segs)
        for cand in polish:
            search.offer(cand, int(inst.evaluate(cand).period), Method.ANNEAL)
        work = cost.work(stats["evals"] + len(polish),
                         stats["buckets"] + sum(len(c) for c in polish))
        spent += work
        search.charge_work(work, bool(stats["deadline_stop"]))
        if stats["deadline_stop"] or stats["evals"] < length:
            break


def _stages_local_search(search: SolveState, inst: Instance, model: bool) -> None:
    """The local search over bucketings (and, with reordering, launch orders) judged by the
    exact multi-stage period, from the best plan."""
    best = search.best
    assert best is not None
    share = STAGES_LOCAL_SEARCH if model else STAGES_LOCAL_SEARCH_ALONE

    def keep(s: Segments, v: int) -> None:
        search.offer(s, v, Method.LOCAL_SEARCH)

    order = flow_order(search.trace, search.cluster, search.opts, inst)
    # a candidate: two launch orders judged, then the better one again
    evals = 3 if search.opts.reorder else 1
    ls_val, ls_segs = _local_search(search, inst, best.segs, search.opts.reorder, share, keep,
                                    order=order,
                                    per_unit_s=STAGE_EVAL_S * len(inst.stages) * evals)
    search.offer(ls_segs, ls_val, Method.LOCAL_SEARCH)


# ------------------------------------------------------------------------------------ result
def _host_candidates(search: SolveState, inst: Instance, plan: Plan, sim: float,
                     candidates: list[Segments]) -> tuple[Plan, float, Method] | None:
    """Plans with fewer collective calls, judged by simulation (the model leaves the calls'
    host cost or the slowdowns out): ``candidates`` (:func:`.relax.launch_candidates` or
    :func:`.relax.count_candidates`), then a descent from the best FIFO plan. Each
    simulation is charged :data:`SIM_S_PER_UNIT` per unit to the work left; the wall clock is
    the safety stop, as for every step. The best plan faster than ``sim``, or None."""
    trace, cluster, knobs = search.trace, search.cluster, _knobs(search.opts)
    per_sim = SIM_S_PER_UNIT * inst.n
    sims = int(search.budget.work_left() / per_sim)
    best: tuple[Plan, float, Method] | None = None

    def period(segs: Segments) -> float:
        return simulate(trace, cluster, inst.to_plan(segs, knobs=knobs)).iteration_time_s

    for segs in candidates:
        if sims < 1 or search.out_of_time():
            break
        sims -= 1
        search.budget.spend(per_sim)
        cand_s = period(segs)
        if cand_s < sim * (1 - 1e-12):
            plan, sim = inst.to_plan(segs, knobs=knobs), cand_s
            best = (plan, sim, Method.DP_HEURISTIC)
    start = inst.segments_of_plan(plan)[0]
    if start and inst.is_fifo(start) and inst.stages and sims >= 2 and not search.out_of_time():
        stats: dict[str, int] = {}
        segs, desc_s = simulated_descent(start, inst.n, period,
                                         max_evals=min(MAX_DESCENT_EVALS, sims),
                                         stop=search.out_of_time, stats=stats)
        search.budget.spend(per_sim * stats["evals"])
        if desc_s < sim * (1 - 1e-12):
            best = (inst.to_plan(segs, knobs=knobs), desc_s, Method.LOCAL_SEARCH)
    return best


def _host_programme(search: SolveState, plan: Plan, sim: float
                    ) -> tuple[Plan, float, float] | None:
    """The exact programme with the host side (:mod:`.host_dp`) on the class of ``plan``
    (simulated at ``sim``), within the work left: its plan, that plan's simulated period and
    the programme's value, a bound (seconds); or None outside its class or out of time."""
    fine = search.fine
    if fine is None:
        return None
    prog = host_programme(fine, plan)
    if prog is None:
        return None
    per_state = CANDIDATE_S * prog.backward_s.size  # a state is a candidate at every later layer
    stats: dict[str, int] = {}
    sol = solve_host_programme(prog, sim, stop=search.out_of_time, stats=stats,
                               max_states=min(MAX_STATES, int(search.work_left() / per_state)))
    search.budget.spend(CANDIDATE_S * stats.get("candidates", 0))
    if sol is None:
        return None
    dp_plan = fine.to_plan(sol.segs, knobs=_knobs(search.opts))
    return dp_plan, simulate(search.trace, search.cluster, dp_plan).iteration_time_s, sol.value_s


def _host_side_bound(search: SolveState, plan: Plan, sim: float, relax: Relaxation) -> float:
    """The host side's bound (:mod:`.host_side`) on the class of ``plan``, at most ``sim``,
    within the work left (each counting programme charged like a flow-shop programme)."""
    fine = search.fine
    work = host_work(search.trace, search.cluster, plan,
                     first_units=None if fine is None else int((fine.layer == 0).sum()))
    if work is None:
        return 0.0
    inst = fine if relax.factor == 1.0 else None
    per_call = FLOW_BOUND_S * (inst.n ** 2 if inst is not None else 1)
    stats: dict[str, int] = {}
    out = host_bound(work, inst, sim, stats=stats,
                     max_calls=min(64, int(search.work_left() / per_call)))
    search.budget.spend(per_call * stats["calls"])
    return out


def _relaxed_bound(search: SolveState, relax: Relaxation, plan: Plan, model_plan: Plan,
                   sim: float, notes: list[str], exact_s: float = 0.0) -> tuple[float, Method]:
    """The bound (s) where the model relaxes the cluster (:mod:`.relax`) and what proved it:
    the model's bound times the relaxation's factor, the contention's cost, the model's own
    optimum without a host (the period of ``model_plan`` without host costs), the host
    side's bound on the class of ``plan`` (simulated at ``sim``) and the exact programme's
    with the host side (``exact_s``, 0 without one); notes name the bound taken."""
    best, opts, trace, cluster = search.best, search.opts, search.trace, search.cluster
    assert best is not None
    tick = best.inst.tick
    notes.append(relax.note)
    bound_s, method = best.bound * tick * relax.factor, best.bound_method
    cost = contention_bound(trace, cluster, cluster.comm_stages(), mode=opts.next_forward,
                            total_bytes=best.inst.total_bytes, factor=relax.factor,
                            pieces=opts.partition_bytes or "tensors")
    if cost is not None and cost > bound_s:  # the time contention costs every plan
        notes.append(f"bound {cost:.6g} s from the contention's cost (every iteration's "
                     "compute and communication share its time)")
        bound_s = cost
    if relax.only_added_time and best.bound >= best.value:  # the model's own optimum
        free = host_free_period(trace, cluster, model_plan)
        if abs(best.value * tick - free) <= AGREE * free:
            bound_s = max(bound_s, free)
    if relax.host:
        host_s = _host_side_bound(search, plan, sim, relax)
        if host_s > bound_s:
            notes.append(f"bound {host_s:.6g} s from the host side (the launching thread's "
                         "work per step, and its cycle with the device)")
            bound_s, method = host_s, Method.HOST_SIDE
    if exact_s > bound_s:
        notes.append(f"bound {exact_s:.6g} s from the exact programme with the host side and"
                     " the buckets' compute time (one bucket per layer at most, in readiness"
                     " order)")
        bound_s, method = exact_s, Method.DP
    return bound_s, method


def _beyond_the_model(search: SolveState, inst: Instance, relax: Relaxation, plan: Plan,
                      sim: float) -> tuple[tuple[Plan, float, Method] | None, float]:
    """Where the model relaxes the cluster: plans that weigh what it leaves out, judged by the
    simulator (fewer calls, a larger last bucket in per-layer mode with a host side, the exact
    programme with the host side), and that programme's bound (seconds, 0 without one).

    Returns
    -------
    found, exact_s
        The best plan faster than ``plan`` (simulated at ``sim``), its period and method, or
        None; the exact programme's bound.
    """
    opts, cluster = search.opts, search.cluster
    found = None
    slowed = cluster.overlap_slowdown != 1.0 or cluster.comm_slowdown != 1.0
    if relax.per_call or slowed:  # what calls cost: plans with fewer
        candidates = launch_candidates(inst) if relax.per_call else []
        if relax.host and opts.next_forward == "per-layer":  # the first forward's wait
            candidates += first_bucket_candidates(inst, inst.segments_of_plan(plan)[0])
        if slowed and not candidates:  # overlap is not free: fewer, larger calls
            candidates = count_candidates(inst, reorder=opts.reorder)
        found = _host_candidates(search, inst, plan, sim, candidates)
        if found is not None:
            plan, sim = found[0], found[1]
    exact = _host_programme(search, plan, sim) if relax.only_added_time else None
    if exact is None:
        return found, 0.0
    if exact[1] < sim * (1 - 1e-12):
        found, sim = (exact[0], exact[1], Method.DP), exact[1]
    # the value bounds every plan: one within its rounding is optimal
    return found, sim if abs(sim - exact[2]) <= ROUNDING * sim else exact[2]


def _result(search: SolveState) -> SolveResult:
    """Simulate the best plan; fall back to the hint when it simulates better."""
    best, opts = search.best, search.opts
    assert best is not None
    trace, cluster, inst = search.trace, search.cluster, best.inst
    tick = inst.tick
    notes = list(search.notes)
    hint = search.hint
    plan = inst.to_plan(best.segs, knobs=_knobs(opts))
    sim = simulate(trace, cluster, plan).iteration_time_s
    value_s = best.value * tick
    method = best.method
    model_plan = plan
    bound_method = best.bound_method
    relax = relaxation(cluster, trace=trace)
    exact_s = 0.0
    if relax is not None:
        found, exact_s = _beyond_the_model(search, inst, relax, plan, sim)
        if found is not None:
            plan, sim, method = found
            value_s = sim
    if hint is not None and hint.row.iteration_time_s < sim * (1 - 1e-12):
        notes.append(f"the solver's plan simulated worse than {hint.row.policy}; returning "
                     f"{hint.row.policy}'s plan")
        plan = hint.plan.model_copy(update={"policy": "optimal",
                                            "knobs": {**_knobs(opts), "from": hint.row.policy}})
        sim = hint.row.iteration_time_s
        value_s = sim
        if hint.segs is not None:
            hsegs, _ = inst.segments_of_plan(hint.plan)
            if hsegs:
                value_s = int(inst.evaluate(hsegs).period) * tick
        method = Method.HINT
    if relax is None:
        bound_s = min(best.bound * tick, value_s)
        agree = abs(value_s - sim) <= AGREE * sim
        if not agree:
            notes.append(f"model period {value_s:.6g} s and simulation {sim:.6g} s disagree: the"
                         " instance couples iterations beyond the model (shared PCIe with"
                         " prefetch)")
        gap = max(0.0, (value_s - bound_s) / value_s) if value_s > 0 else 0.0
    else:  # judged by the simulator; the model's bound relaxed to stay valid
        bound_s, bound_method = _relaxed_bound(search, relax, plan, model_plan, sim, notes,
                                               exact_s)
        bound_s = min(bound_s, sim)
        value_s, agree = sim, True  # the objective is the simulated period
        gap = max(0.0, (sim - bound_s) / sim) if sim > 0 else 0.0
    status = Status.OPTIMAL if gap <= 0.0 and agree else Status.FEASIBLE
    gain = None
    if search.plain is not None:
        gain = max(0.0, search.plain[1] - value_s)
        notes.append(f"partitioning gains {gain * 1e3:.3f} ms over the best unpartitioned plan "
                     f"({search.plain[1] * 1e3:.3f} ms)")
    hint_time = hint.row.iteration_time_s if hint is not None else None
    return SolveResult(
        status=status, plan=plan, objective_s=value_s, iteration_time_s=sim, bound_s=bound_s,
        gap=gap, solve_time_s=search.budget.elapsed(), method=method,
        bound_method=bound_method, interrupted=search.control.interrupted,
        wall_stop=search.wall_stop and not search.control.interrupted,
        work_s=search.budget.work_used_s,
        partition_gain_s=gain,
        hint_policy=hint.row.policy if hint is not None else None,
        hint_iteration_time_s=hint_time,
        improvement_s=max(0.0, hint_time - sim) if hint_time is not None else 0.0,
        baselines=[b.row for b in search.baselines], tick_s=tick, notes=notes,
    )


def _knobs(opts: SolveOptions) -> dict[str, Any]:
    return {
        "next_forward": opts.next_forward,
        "reorder": opts.reorder,
        "partition_bytes": opts.partition_bytes,
    }
