"""Robust plans: the plan whose worst iteration time over scenarios is smallest (docs/robust.md).

Given scenarios (:mod:`schedopt.simulate.scenarios`: the nominal instance first, then the corners
of a box of cost factors, or a list of clusters), :func:`robust_solve` looks for

    min over plans P of  max over scenarios s of  T_s(P)

among the plans the :class:`~.options.SolveOptions` allow, every ``T_s`` judged by the
simulator. Candidates, each judged on every scenario:

1. the nominal optimum (:func:`~.solve.solve` on the nominal scenario);
2. every baseline the options can express (its default plan on the nominal instance);
3. each scenario's own optimum, the scenarios taken worst first for the best plan so far, each
   :func:`~.solve.solve` under an equal share of the time limit;
4. a local search over the bucket cuts from the best candidate (add, remove or move a cut;
   with reordering, launched by Schrage's rule), judged by the worst simulated time.

The bound: every scenario's own proven lower bound holds for every plan in that scenario, so
their maximum bounds the robust optimum. When the plan returned is a scenario's proven optimum
and that scenario is the plan's worst, the plan is the robust optimum (any plan is at least as
slow in that scenario): status OPTIMAL and the bound is the plan's worst case.

Time limit and Ctrl-C hold as in :func:`~.solve.solve` (:mod:`.control`): the best candidate so
far is returned, FEASIBLE with its gap. Each step has a deterministic limit (the solves' time
limits are fixed shares of the limit, which fix their deterministic work; the local search
counts simulations), so one worker and a seed give the same plan whatever the machine's load;
the wall clock is a safety stop that ``wall_stop`` reports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize.baselines import evaluate_baseline
from schedopt.optimize.budget import WORK_FRACTION
from schedopt.optimize.control import Control, Halt
from schedopt.optimize.heuristics import schrage_order
from schedopt.optimize.instance import Instance, Segments, build_instance
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.result import Status
from schedopt.optimize.solver import solve
from schedopt.policies import POLICIES
from schedopt.simulate.scenarios import (
    DIMENSIONS,
    Scenario,
    cluster_scenarios,
    corner_scenarios,
    unbound,
)
from schedopt.simulate.simulator import simulate

__all__ = ["CandidateRow", "RobustResult", "ScenarioRow", "robust_cli", "robust_lines",
           "robust_scenarios", "robust_solve"]

log = logging.getLogger("schedopt.optimize")

#: Fraction of the time limit shared equally by the per-scenario solves.
SOLVES_FRACTION = 0.5
#: Fraction of the time limit the local search's simulations are charged against.
LOCAL_SEARCH_FRACTION = 0.25
#: Deterministic charge (s) of one simulation per unit (measured: 3 ms for 161 tensors).
SIM_S_PER_UNIT = 2e-5
#: A solve needs at least this long (s) to be started.
MIN_SOLVE_S = 0.02
#: Relative tolerance of "the same time" (the worst scenario of a plan).
TIE = 1e-9


class ScenarioRow(BaseModel):
    """One scenario as the robust solve saw it.

    Attributes
    ----------
    name, factors
        The scenario (:class:`~schedopt.simulate.scenarios.Scenario`).
    iteration_time_s
        The robust plan's simulated iteration time in this scenario.
    optimum_s, bound_s, status
        The scenario's own solve: its best plan's time, its proven bound and its status (None
        when it was not solved: no time left).
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Scenario name.")
    factors: dict[str, float] = Field(default_factory=dict, description="Cost factors.")
    iteration_time_s: float = Field(description="The robust plan's time here (s).")
    optimum_s: float | None = Field(None, description="The scenario's own best plan (s).")
    bound_s: float | None = Field(None, description="The scenario's proven bound (s).")
    status: Status | None = Field(None, description="The scenario's solve status.")


class CandidateRow(BaseModel):
    """One candidate plan judged on every scenario.

    Attributes
    ----------
    source
        ``nominal optimum``, ``baseline POLICY``, ``optimum of SCENARIO`` or ``local search``.
    worst_s, worst_scenario
        Its slowest simulated time and the (first) scenario where it occurs.
    nominal_s
        Its time in the nominal scenario.
    expressible
        Whether the options can express it (baselines only may not; those are shown, never
        returned).
    """

    model_config = ConfigDict(frozen=True)

    source: str = Field(description="What produced the candidate.")
    worst_s: float = Field(description="Worst simulated time (s).")
    worst_scenario: str = Field(description="Where the worst time occurs.")
    nominal_s: float = Field(description="Nominal simulated time (s).")
    expressible: bool = Field(True, description="Whether the options can express it.")


class RobustResult(BaseModel):
    """What :func:`robust_solve` found.

    Attributes
    ----------
    status
        ``OPTIMAL`` when proven (the plan is a scenario's proven optimum and that scenario is
        its worst), else ``FEASIBLE``.
    worst_s, worst_scenario
        The plan's worst simulated iteration time over the scenarios, and where.
    nominal_s
        The plan's simulated time in the nominal scenario (the first).
    bound_s, bound_scenario
        Lower bound on the robust optimum: the largest scenario bound (or ``worst_s`` when
        proven), and the scenario that gave it.
    gap
        ``(worst_s - bound_s) / worst_s``.
    source
        What produced the plan (:class:`CandidateRow` ``source``).
    solve_time_s, interrupted, wall_stop
        Wall-clock time, stopped by Ctrl-C, stopped by the wall-clock safety stop.
    simulations
        Simulations made by the local search (its deterministic limit counts them).
    scenarios, candidates
        Every scenario, every candidate judged.
    notes
        Remarks.
    plan
        The robust plan (policy ``robust``), bound to the nominal trace and cluster.
    """

    model_config = ConfigDict(frozen=True)

    status: Status = Field(description="OPTIMAL (proven) or FEASIBLE.")
    worst_s: float = Field(description="Worst simulated time over the scenarios (s).")
    worst_scenario: str = Field(description="Scenario of the worst time.")
    nominal_s: float = Field(description="Simulated time in the nominal scenario (s).")
    bound_s: float = Field(description="Lower bound on the robust optimum (s).")
    bound_scenario: str = Field("", description="Scenario whose bound it is.")
    gap: float = Field(description="(worst - bound) / worst.")
    source: str = Field(description="What produced the plan.")
    solve_time_s: float = Field(description="Wall-clock time (s).")
    interrupted: bool = Field(False, description="Stopped by Ctrl-C.")
    wall_stop: bool = Field(False, description="The wall-clock safety stop fired (not Ctrl-C).")
    simulations: int = Field(0, description="Simulations of the local search.")
    scenarios: list[ScenarioRow] = Field(default_factory=list, description="Every scenario.")
    candidates: list[CandidateRow] = Field(default_factory=list, description="Candidates.")
    notes: list[str] = Field(default_factory=list, description="Remarks.")
    plan: Plan = Field(description="The robust plan (policy 'robust').")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dictionary (``model_dump`` in JSON mode)."""
        return self.model_dump(mode="json")


# ------------------------------------------------------------------------------ the search
@dataclass
class _Cand:
    """A candidate: its plan (unbound), its times per scenario (in scenario order)."""

    source: str
    plan: Plan
    times: list[float]
    expressible: bool = True
    #: The scenario whose solve produced it (None: another source).
    scenario: int | None = None

    @property
    def worst(self) -> float:
        return max(self.times)


@dataclass
class _Robust:
    """State of one robust solve."""

    scenarios: Sequence[Scenario]
    opts: SolveOptions
    control: Control
    t0: float
    inst: Instance
    cands: list[_Cand] = field(default_factory=list)
    best: _Cand | None = None
    solved: dict[int, Any] = field(default_factory=dict)  # scenario index -> SolveResult
    sims: int = 0
    wall_stop: bool = False
    notes: list[str] = field(default_factory=list)

    def times(self, plan: Plan, cap: float = np.inf) -> list[float] | None:
        """``plan``'s time in every scenario, the worst-looking first; None as soon as one
        exceeds ``cap`` (the local search's early abort)."""
        free = unbound(plan)
        out = [0.0] * len(self.scenarios)
        for i in self._order():
            self.control.check()
            out[i] = simulate(*self.scenarios[i].instance(), free).iteration_time_s
            self.sims += 1
            if out[i] >= cap:
                return None
        return out

    def _order(self) -> list[int]:
        """Scenario indices, the best candidate's slowest first (scenario order to start)."""
        best = self.best
        if best is None:
            return list(range(len(self.scenarios)))
        return sorted(range(len(self.scenarios)), key=lambda i: -best.times[i])

    def offer(self, source: str, plan: Plan, expressible: bool = True,
              scenario: int | None = None, times: list[float] | None = None) -> _Cand:
        """Judge ``plan`` on every scenario (unless ``times`` are known) and keep it (the
        best when it is better)."""
        if times is None:
            times = self.times(plan)
            assert times is not None
        cand = _Cand(source, unbound(plan), times, expressible, scenario)
        with self.control.shield():
            self.cands.append(cand)
            if expressible and (self.best is None or cand.worst < self.best.worst):
                self.best = cand
        return cand

    def bound(self) -> tuple[float, int]:
        """The largest scenario bound and its scenario (0 and -1 before any solve)."""
        if not self.solved:
            return 0.0, -1
        i = max(self.solved, key=lambda j: self.solved[j].bound_s)
        return float(self.solved[i].bound_s), i


def robust_solve(scenarios: Sequence[Scenario], options: SolveOptions | None = None,
                 **kwargs: Any) -> RobustResult:
    """The plan with the smallest worst-case iteration time over ``scenarios``.

    Parameters
    ----------
    scenarios
        The scenarios (:func:`~schedopt.simulate.scenarios.corner_scenarios`,
        :func:`~schedopt.simulate.scenarios.cluster_scenarios`); the first is the nominal one, and
        the plan is bound to its trace and cluster. All share one trace structure (tensors).
    options
        The plan class and the limits (:class:`SolveOptions`); keyword arguments build one
        when it is None. ``time_limit_s`` covers the whole robust search.

    Returns
    -------
    RobustResult
        The plan, its worst and nominal times, the bound, the gap and the status.

    Raises
    ------
    SchedoptError
        No scenarios, or scenarios whose traces differ in their tensors.
    KeyboardInterrupt
        On a second Ctrl-C.
    """
    scenarios = list(scenarios)
    opts = options if options is not None else SolveOptions(**kwargs)
    _check_scenarios(scenarios)
    t0 = time.perf_counter()
    trace0, cluster0 = scenarios[0].instance()
    inst = build_instance(trace0, cluster0, opts, merge=bool(opts.merge_layers))
    with Control(t0 + opts.time_limit_s) as control:
        state = _Robust(scenarios, opts, control, t0, inst)
        control.searching = True
        try:
            _steps(state)
        except Halt:
            pass
        finally:
            control.searching = False
        with control.shield(final=True):
            return _result(state)


def _check_scenarios(scenarios: list[Scenario]) -> None:
    if not scenarios:
        raise SchedoptError("needs at least one scenario", "scenarios", [])
    names = [t.name for t in scenarios[0].instance()[0].tensor_list]
    for s in scenarios[1:]:
        if [t.name for t in s.instance()[0].tensor_list] != names:
            raise SchedoptError("every scenario needs the nominal trace's tensors",
                                "scenarios", s.name)


def _steps(state: _Robust) -> None:
    """Nominal optimum, baselines, scenario optima worst first, then the local search."""
    share = SOLVES_FRACTION * _nominal_limit(state.opts) / len(state.scenarios)
    _solve_scenario(state, 0, share, "nominal optimum")
    _baselines(state)
    best = state.best
    assert best is not None
    order = sorted(range(1, len(state.scenarios)), key=lambda i: -best.times[i])
    for i in order:
        if _proven(state):
            break
        _solve_scenario(state, i, share, f"optimum of {state.scenarios[i].name}")
    if not _proven(state):
        _local_search(state)


def _solve_scenario(state: _Robust, i: int, share: float, source: str) -> None:
    """:func:`solve` on scenario ``i`` for ``share`` seconds (less when the wall clock says
    so: then ``wall_stop``); its plan becomes a candidate and its bound counts."""
    left = state.control.left()
    if share < MIN_SOLVE_S or left < MIN_SOLVE_S:
        state.wall_stop |= share >= MIN_SOLVE_S
        return
    if left < share:
        state.wall_stop = True
    update: dict[str, Any] = {"time_limit_s": min(share, left), "baselines": i == 0}
    if state.opts.work_limit_s is not None:  # deterministic: the share of the work limit
        update["time_limit_s"] = left
        update["work_limit_s"] = WORK_FRACTION * share
    opts = state.opts.model_copy(update=update)
    with state.control.limit(state.control.deadline):  # re-arms the timer solve() clears
        res = solve(*state.scenarios[i].instance(), opts)
    state.wall_stop |= res.wall_stop
    log.info("robust: scenario %s solved: %s, %.6g s (bound %.6g s)", state.scenarios[i].name,
             res.status, res.iteration_time_s, res.bound_s)
    with state.control.shield():  # a stop during the solve keeps its plan
        state.solved[i] = res
        state.offer(source, res.plan, scenario=i)
    if res.interrupted:
        state.control.interrupted = True
        raise Halt


def _baselines(state: _Robust) -> None:
    """Every baseline's default plan on the nominal instance, judged on every scenario."""
    trace0, cluster0 = state.scenarios[0].instance()
    for name in POLICIES:
        state.control.check()
        base = evaluate_baseline(name, trace0, cluster0, state.opts, state.inst)
        if base is not None:
            state.offer(f"baseline {name}", base.plan, base.row.expressible)


def _proof(state: _Robust) -> int | None:
    """A scenario whose proven optimum is slowest there and no slower than the best plan
    (then it is the robust optimum: it becomes the best plan), or None."""
    best = state.best
    if best is None:
        return None
    for c in state.cands:
        i = c.scenario
        if (i is None or state.solved[i].status != Status.OPTIMAL
                or c.times[i] < c.worst * (1 - TIE) or c.worst > best.worst * (1 + TIE)):
            continue
        if c is not best:
            with state.control.shield():
                state.best = c
        return i
    return None


def _proven(state: _Robust) -> bool:
    """The best plan is proven to be the robust optimum (:func:`_proof`)."""
    return _proof(state) is not None


# ------------------------------------------------------------------------- local search
#: Rounds of the local search (each a pass over the cut positions).
MAX_ROUNDS = 20
#: Deterministic charge (s) of one model evaluation per unit (measured: 0.26 ms for 161).
MODEL_S_PER_UNIT = 2e-6
#: A candidate whose model worst case exceeds the best plan's by more than this fraction is
#: not simulated (the model and the simulator agree within 0.1% where the model is exact).
SCREEN = 1e-3


@dataclass
class _Climb:
    """The local search's state: the scenario instances (for the model's quick screen, None
    where the model is not exact), the work charged and its limit (deterministic seconds)."""

    state: _Robust
    insts: list[Instance] | None
    limit_s: float
    work_s: float = 0.0
    best_model: float = np.inf

    @property
    def done(self) -> bool:
        return self.work_s >= self.limit_s

    def model_worst(self, segs: Segments, cap: float = np.inf) -> float:
        """The model's worst period (s) over the scenarios; inf once one exceeds ``cap``."""
        if self.insts is None:
            return 0.0
        worst = 0.0
        for inst in self.insts:
            self.work_s += MODEL_S_PER_UNIT * inst.n
            worst = max(worst, float(inst.evaluate(segs).period) * inst.tick)
            if worst > cap:
                return np.inf
        return worst


def _climb(state: _Robust) -> _Climb:
    """The scenario instances (same units as the nominal one) when the model is exact."""
    insts: list[Instance] | None = []
    merge = bool(state.opts.merge_layers)
    for s in state.scenarios:
        inst = build_instance(*s.instance(), state.opts, merge=merge)
        if inst.pcie_coupled or inst.n != state.inst.n:
            insts = None
            break
        assert insts is not None
        insts.append(inst)
    return _Climb(state, insts, LOCAL_SEARCH_FRACTION * _nominal_limit(state.opts))


def _nominal_limit(opts: SolveOptions) -> float:
    """The limit (s) the deterministic shares are taken of: the time limit, or the work limit
    as the time limit it is :data:`.budget.WORK_FRACTION` of."""
    if opts.work_limit_s is None:
        return opts.time_limit_s
    return opts.work_limit_s / WORK_FRACTION


def _local_search(state: _Robust) -> None:
    """Hill-climb on the cuts of the best plan (flip a cut, move one by up to 3 units), each
    candidate launched in readiness order (by Schrage's rule with reordering), screened by the
    model's worst period over the scenarios and judged by its worst simulated time; the
    charged work of evaluations and simulations is the deterministic limit."""
    best, inst = state.best, state.inst
    assert best is not None
    segs, reason = inst.segments_of_plan(best.plan)
    n = inst.n
    if not segs or n < 2:
        if reason:
            state.notes.append(f"no local search: {reason}")
        return
    climb = _climb(state)
    climb.best_model = climb.model_worst(segs)
    rng = np.random.default_rng(state.opts.seed)
    cuts = np.zeros(n - 1, dtype=bool)
    for _, hi in segs:
        if hi < n - 1:
            cuts[hi] = True
    for _ in range(MAX_ROUNDS):
        improved = False
        for i in rng.permutation(n - 1).tolist():
            for cand in _moves(cuts, i):
                if climb.done:
                    return
                if _try_cuts(climb, cand):
                    cuts, improved = cand, True
                    break
        if not improved:
            return


def _moves(cuts: np.ndarray, i: int) -> list[np.ndarray]:
    """The neighbours of ``cuts`` at position ``i``: flip it; move it by up to 3 units."""
    flip = cuts.copy()
    flip[i] = not flip[i]
    out = [flip]
    if cuts[i]:
        for d in (-3, -2, -1, 1, 2, 3):
            j = i + d
            if 0 <= j < len(cuts) and not cuts[j]:
                moved = cuts.copy()
                moved[i], moved[j] = False, True
                out.append(moved)
    return out


def _try_cuts(climb: _Climb, cuts: np.ndarray) -> bool:
    """Screen the plan of ``cuts`` by the model, then judge it by the simulator; keep it when
    its worst time beats the best plan's."""
    state = climb.state
    inst, best = state.inst, state.best
    assert best is not None
    segs: Segments = inst.segments_from_cuts(cuts)
    if state.opts.reorder:
        segs = schrage_order(inst, segs)
    model = climb.model_worst(segs, cap=climb.best_model * (1 + SCREEN))
    if not np.isfinite(model):
        return False
    plan = inst.to_plan(segs)
    sims = state.sims
    times = state.times(plan, cap=best.worst * (1 - TIE))
    climb.work_s += (state.sims - sims) * SIM_S_PER_UNIT * len(inst.base_bytes)
    if times is None:
        return False
    state.offer("local search", plan, times=times)
    climb.best_model = model
    return True


# ------------------------------------------------------------------------------ the result
def _fallback(state: _Robust) -> None:
    """One bucket of everything (nothing was judged before the stop)."""
    inst = state.inst
    state.offer("one bucket", inst.to_plan([(0, inst.n - 1)]))


def _result(state: _Robust) -> RobustResult:
    """The best candidate, its bound, gap and status, and the rows."""
    if state.best is None:
        _fallback(state)
    proof = _proof(state)  # may switch to an equally fast, proven plan
    best = state.best
    assert best is not None
    names = [s.name for s in state.scenarios]
    bound, bi = state.bound()
    if proof is not None:
        bound, bi = best.times[proof], proof
    worst = best.worst
    bound = min(bound, worst)
    gap = max(0.0, (worst - bound) / worst) if worst > 0 else 0.0
    status = Status.OPTIMAL if proof is not None or gap <= 0.0 else Status.FEASIBLE
    control = state.control
    wall = state.wall_stop or (control.halted and not control.interrupted)
    notes = list(state.notes)
    if control.interrupted:
        notes.append("interrupted: the best plan found so far")
    elif wall:
        notes.append("the wall-clock safety stop ended a step before its deterministic limit: "
                     "the result may depend on the machine's load")
    trace0, cluster0 = state.scenarios[0].instance()
    knobs = {"next_forward": state.opts.next_forward, "reorder": state.opts.reorder,
             "partition_bytes": state.opts.partition_bytes, "from": best.source,
             "scenarios": len(names)}
    plan = best.plan.model_copy(update={"policy": "robust", "knobs": knobs}).bind(trace0,
                                                                                  cluster0)
    return RobustResult(
        status=status, worst_s=worst, worst_scenario=names[int(np.argmax(best.times))],
        nominal_s=best.times[0], bound_s=bound, bound_scenario=names[bi] if bi >= 0 else "",
        gap=gap, source=best.source, solve_time_s=time.perf_counter() - state.t0,
        interrupted=control.interrupted, wall_stop=wall and not control.interrupted,
        simulations=state.sims,
        scenarios=[_scenario_row(state, i, best) for i in range(len(names))],
        candidates=[CandidateRow(source=c.source, worst_s=c.worst,
                                 worst_scenario=names[int(np.argmax(c.times))],
                                 nominal_s=c.times[0], expressible=c.expressible)
                    for c in state.cands],
        notes=notes, plan=plan)


def _scenario_row(state: _Robust, i: int, best: _Cand) -> ScenarioRow:
    s, res = state.scenarios[i], state.solved.get(i)
    return ScenarioRow(name=s.name, factors=s.factors, iteration_time_s=best.times[i],
                       optimum_s=None if res is None else res.iteration_time_s,
                       bound_s=None if res is None else res.bound_s,
                       status=None if res is None else res.status)


# ------------------------------------------------------------------------------ reporting
def robust_scenarios(trace: Trace, cluster: Cluster, pct: float | None,
                     clusters: Sequence[Cluster] = (), vary: Sequence[str] = DIMENSIONS,
                     per_link: bool = False) -> list[Scenario]:
    """The scenarios of ``optimize --robust``: the nominal instance and, with ``pct``, the
    corners of its box; then each of ``clusters`` (unscaled)."""
    out = (corner_scenarios(trace, cluster, pct, vary, per_link) if pct is not None
           else [Scenario("nominal", {}, trace, cluster)])
    if clusters:
        out += cluster_scenarios(trace, [cluster, *clusters])[1:]
    return out


def robust_cli(trace: Trace, cluster: Cluster, opts: SolveOptions, robust: Any,
               clusters: Sequence[str], nodes: int | None, vary: str = "alpha,beta,compute",
               per_link: bool = False) -> RobustResult:
    """``optimize --robust PCT`` and ``--robust-clusters A,B``: the options checked (errors
    name them), the scenarios built, then :func:`robust_solve`."""
    from schedopt.files import load_cluster
    from schedopt.simulate.scenarios import MAX_CORNER_DIMENSIONS, check_pct, dimensions, parse_vary

    pct = check_pct(robust, "--robust") if robust is not None else None
    dims = parse_vary(vary)
    if pct and len(dimensions(cluster, dims, per_link)) > MAX_CORNER_DIMENSIONS:
        raise SchedoptError(f"at most {MAX_CORNER_DIMENSIONS} dimensions with their corners",
                            "--per-link", per_link)
    names = [n.strip() for item in clusters for n in item.split(",") if n.strip()]
    if clusters and not names:
        raise SchedoptError("must name at least one cluster", "--robust-clusters",
                            list(clusters))
    others = []
    for name in names:
        try:
            others.append(load_cluster(name, nodes))
        except SchedoptError as exc:
            raise SchedoptError(f"cannot load {name!r}: {exc}", "--robust-clusters",
                                names) from None
    if any(c.world_size != cluster.world_size for c in others):
        raise SchedoptError(f"every cluster needs {cluster.world_size} ranks, as {cluster.name}",
                            "--robust-clusters", names)
    return robust_solve(robust_scenarios(trace, cluster, pct, others, dims, per_link), opts)


def robust_lines(res: RobustResult) -> list[str]:
    """The text report of ``optimize --robust``: candidates, scenarios, then the status."""
    ms = 1e3
    w = 40
    lines = [f"{'candidate':<{w}} {'worst ms':>10} {'nominal ms':>11}  worst scenario"]
    for c in sorted(res.candidates, key=lambda c: (c.worst_s, c.source)):
        mark = "" if c.expressible else " (outside)"
        lines.append(f"{(c.source + mark)[:w]:<{w}} {c.worst_s * ms:>10.3f} "
                     f"{c.nominal_s * ms:>11.3f}  {c.worst_scenario}")
    lines.append("")
    lines.append(f"{'scenario':<{w}} {'robust ms':>10} {'own best ms':>11} {'own bound ms':>12}")
    for s in res.scenarios:
        own = "-" if s.optimum_s is None else f"{s.optimum_s * ms:.3f}"
        bnd = "-" if s.bound_s is None else f"{s.bound_s * ms:.3f}"
        lines.append(f"{s.name[:w]:<{w}} {s.iteration_time_s * ms:>10.3f} {own:>11} {bnd:>12}")
    lines.append("")
    lines.append(f"status {res.status}  worst {res.worst_s * ms:.3f} ms ({res.worst_scenario})  "
                 f"nominal {res.nominal_s * ms:.3f} ms  bound {res.bound_s * ms:.3f} ms  gap "
                 f"{100 * res.gap:.3f}%  time {res.solve_time_s:.2f} s  from {res.source}  "
                 f"buckets {res.plan.num_buckets}")
    lines += [f"note: {n}" for n in res.notes]
    return lines
