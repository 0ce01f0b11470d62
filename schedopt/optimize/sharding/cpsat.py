"""A CP-SAT model of sharded plans: the units, both prefetch depths and the streams in one model,
under a memory cap as a cumulative constraint (docs/formulation.md, "CP-SAT model of sharded
plans").

The model is :func:`~.evaluate.step_time` written as constraints, on integer ticks
(:class:`TickedInstance`): ``N`` unit positions (one per tensor-holding layer; unused positions
are empty units at the end, which change nothing), each unit's layers chosen by a table over
its start and end, and per micro-batch and position the forward, backward, all-gather and
reduce-scatter as intervals whose starts are *equal* to the maximum of what they wait for (so
the model's schedule is the simulator's, not merely one it allows):

* the forward depth ``p`` and the backward depth ``q`` are variables; the issue time of a
  gather is an element of the compute starts (``F(u - p)``) or, at depth 0, ends;
* the network serves in a fixed order within each kind (gathers in issue order, reduce-scatters
  in backward order); whether the backward gather of unit ``v`` precedes the reduce-scatter of
  ``u > v`` is a Boolean ``y[v, u]``: with one stream it is ``u - v <= q`` (issue order), with
  two the priority rule (a reduce-scatter is served only when no gather is issued by then, and
  the network never idles while a reduce-scatter waits);
* unsharded parameters (gather start to the end of the unit's compute) and unreduced gradients
  (first backward start to the end of the reduce-scatter) are intervals of a cumulative
  constraint whose capacity is the cap.

Minimising the end of the last reduce-scatter minimises the step (the optimizer step follows;
the iteration time is monotone in the step). An OPTIMAL status is a proof over every unit
partition, every depth pair and both stream layouts, on the ticks.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from schedopt.errors import SchedoptError
from schedopt.optimize.control import Control
from schedopt.optimize.instance import TICK_BUDGET
from schedopt.optimize.sharding.bound import step_bound
from schedopt.optimize.sharding.evaluate import Config, ShardedInstance, gather_time, step_time

__all__ = ["CPSAT_LAYERS", "SHARDED_WALL_PER_DTIME", "CpsatSolution", "ShardedModel",
           "TickedInstance", "choose_tick", "solve_cpsat", "ticked"]

log = logging.getLogger("schedopt.optimize")

#: Largest number of layers for which the sharded solve runs the CP-SAT model (measured on
#: the 70B-shaped trace cut to ``n - 3`` blocks, one worker, no hint: optimal in 1-4
#: deterministic seconds at 11 layers, 3-10 at 15; at 23 no proof in 30, the bound a third
#: of the plan's step, and no plan at all under a cap).
CPSAT_LAYERS = 20

#: Wall-clock seconds charged per unit of CP-SAT's deterministic time on this model (measured
#: with one worker on the 70B-shaped trace cut to 8 and 12 blocks, model building and hint
#: included: 3-8 s per unit at load average 2-3 on 2 cores; the upper end, so that a
#: deterministic limit of ``w`` seconds takes about ``w`` seconds or less).
SHARDED_WALL_PER_DTIME = 8.0

#: Most of the work (share) that presolve's probing may take.
PROBING_SHARE = 0.1

#: Most of the work (share) that completing the hint may take.
HINT_SHARE = 0.2

_STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE",
           cp_model.INFEASIBLE: "INFEASIBLE", cp_model.MODEL_INVALID: "MODEL_INVALID",
           cp_model.UNKNOWN: "UNKNOWN"}


# ------------------------------------------------------------------------------- the ticks
@dataclass
class TickedInstance(ShardedInstance):
    """A :class:`~.evaluate.ShardedInstance` on integer ticks: every layer's compute, the
    optimizer step and the data path rounded to ticks, every collective's time rounded (at
    least one tick when it moves bytes). :func:`~.evaluate.step_time` of it is exact (sums of
    integers in floating point) and is what the model optimises."""

    tick: float = 1.0

    def cost(self, nbytes: float) -> float:
        """Collective time of ``nbytes`` in ticks."""
        c = self._cost.get(nbytes)
        if c is None:
            real = gather_time(self.cluster, nbytes)
            c = 0.0 if nbytes <= 0 else max(1.0, float(np.rint(real / self.tick)))
            self._cost[nbytes] = c
        return c


def choose_tick(inst: ShardedInstance) -> float:
    """Seconds per tick: the rounding of every task of one step (half a tick each) stays
    within :data:`~..instance.TICK_BUDGET` of the step's lower bound."""
    tasks = (3 * inst.accumulate + 1) * max(1, int(inst.has_tensor.sum())) + 2 * inst.n + 2
    tick = TICK_BUDGET * 2 * step_bound(inst) / tasks
    if not (tick > 0 and math.isfinite(tick)):
        raise SchedoptError("cannot choose a time unit (all times are zero)", "trace",
                            ",".join(inst.names[:1]))
    return tick


def ticked(inst: ShardedInstance, tick: float) -> TickedInstance:
    """``inst`` on ticks of ``tick`` seconds."""
    kw = {f.name: getattr(inst, f.name) for f in fields(inst) if f.name != "_cost"}

    def rnd(x: Any) -> Any:
        return np.rint(np.asarray(x, dtype=float) / tick)

    kw.update(f=rnd(inst.f), b=rnd(inst.b), update_s=float(rnd(inst.update_s)),
              io_s=float(rnd(inst.io_s)), h2d_s=float(rnd(inst.h2d_s)))
    return TickedInstance(**kw, tick=tick)


# ------------------------------------------------------------------------------- the model
@dataclass
class CpsatSolution:
    """What one CP-SAT run found.

    Attributes
    ----------
    status
        CP-SAT's status name (OPTIMAL: proven over the whole class, on the ticks).
    config
        The best configuration (None without one).
    value, bound
        Its step and a proven lower bound of every step (ticks, the optimizer step included;
        ``bound`` 0 when nothing was proven).
    work_s
        Deterministic time used, times :data:`SHARDED_WALL_PER_DTIME`.
    wall_s
        Wall-clock seconds.
    """

    status: str
    config: Config | None
    value: int | None
    bound: int
    work_s: float
    wall_s: float


@dataclass
class _Pass:
    """Variables of one micro-batch: compute starts and ends, gathers, reduce-scatters."""

    fs: list[Any]
    fe: list[Any]
    ags: list[Any]
    bs: list[Any]
    be: list[Any]
    agbs: list[Any]
    rss: list[Any]
    rse: list[Any]


class ShardedModel:
    """The CP-SAT model of ``inst`` (ticks) under ``cap`` bytes (see the module).

    Parameters
    ----------
    inst
        The ticked instance.
    cap
        Memory cap (bytes) or None.
    upper
        A step (ticks) the solution must not exceed (the horizon of every time); None: a
        horizon that no plan exceeds.
    knobs
        ``(p, q, streams)`` to fix (one class), or None to search them.
    """

    def __init__(self, inst: TickedInstance, cap: int | None, upper: int | None = None,
                 knobs: tuple[int, int, int] | None = None) -> None:
        self.inst = inst
        self.m = cp_model.CpModel()
        self.n = inst.n
        self.N = max(1, int(inst.has_tensor.sum()))
        self.k = inst.accumulate
        self.full = inst.mode == "full"
        self.upd = int(inst.update_s)
        self.H = self._horizon() if upper is None else max(0, upper - self.upd)
        self._units()
        self._knobs(knobs)
        self.net: list[tuple[Any, Any, Any]] = []  # the network's tasks (start, size, end)
        self.passes = self._timeline()
        self._network_no_overlap()
        self._memory(cap)
        self.end = self.passes[-1].rse[0]
        self.m.minimize(self.end)

    # ------------------------------------------------------------------ helpers
    def _var(self, name: str) -> Any:
        return self.m.new_int_var(0, self.H, name)

    def _max(self, name: str, terms: Sequence[Any]) -> Any:
        """A variable equal to the largest of ``terms``."""
        if len(terms) == 1:
            v = self._var(name)
            self.m.add(v == terms[0])
            return v
        v = self._var(name)
        self.m.add_max_equality(v, list(terms))
        return v

    def _horizon(self) -> int:
        """A step no plan exceeds (ticks, without the optimizer step)."""
        inst = self.inst
        top = max((inst.cost(float(x)) for x in (inst.sums[-1, 2], inst.sums[-1, 3])),
                  default=0.0)
        comm = (2 * self.k + 1) * self.N * top
        return int(self.k * (inst.sums[-1, 0] + inst.sums[-1, 1]) + comm) + 1

    def _candidates(self) -> list[tuple[int, ...]]:
        """Allowed ``(start, end, F, B, P, ag, rs)`` of one position (``P`` in units of the
        bytes' gcd); ``(n, n, 0...)`` is the empty unit."""
        inst, n = self.inst, self.n
        cs = inst.sums
        suffix = np.r_[np.cumsum(inst.has_tensor[::-1])[::-1] > 0, False]
        rows: list[tuple[int, ...]] = [(n, n, 0, 0, 0, 0, 0)]
        for i in range(n):
            for j in range(i + 1, n + 1):
                if not inst.has_tensor[i:j].any() or (j < n and not suffix[j]):
                    continue
                pb, gb = cs[j, 2] - cs[i, 2], cs[j, 3] - cs[i, 3]
                rows.append((i, j, int(cs[j, 0] - cs[i, 0]), int(cs[j, 1] - cs[i, 1]),
                             round(pb) // self.gcd, int(inst.cost(float(pb))),
                             int(inst.cost(float(gb)))))
        return rows

    # ---------------------------------------------------------------- the units
    def _units(self) -> None:
        """Unit starts ``S[u]`` and, by a table per position, each unit's compute, bytes and
        collective times; empty units only at the end."""
        m, n, N = self.m, self.n, self.N
        p = self.inst.p[self.inst.p > 0]
        self.gcd = int(np.gcd.reduce(p.astype(np.int64))) if p.size else 1
        rows = self._candidates()
        top = max(max(r[2:]) for r in rows)
        self.S = [m.new_constant(0)] + [m.new_int_var(1, n, f"S[{u}]") for u in range(1, N)]
        self.S.append(m.new_constant(n))
        self.F: list[Any] = []
        self.B: list[Any] = []
        self.P: list[Any] = []
        self.AG: list[Any] = []
        self.RS: list[Any] = []
        self.used: list[Any] = []
        for u in range(N):
            vals = [m.new_int_var(0, top, f"{x}[{u}]") for x in ("F", "B", "P", "ag", "rs")]
            m.add_allowed_assignments([self.S[u], self.S[u + 1], *vals], rows)
            for lst, v in zip((self.F, self.B, self.P, self.AG, self.RS), vals, strict=True):
                lst.append(v)
            used = m.new_bool_var(f"used[{u}]")
            m.add(self.S[u] <= n - 1).only_enforce_if(used)
            m.add(self.S[u] == n).only_enforce_if(~used)
            self.used.append(used)

    def _knobs(self, knobs: tuple[int, int, int] | None) -> None:
        """Depths ``p``, ``q`` (at most the number of units: deeper acts the same) and the
        two-stream literal."""
        m, N = self.m, self.N
        units = m.new_int_var(1, N, "units")
        m.add(units == sum(self.used))
        self.p = m.new_int_var(0, N, "p")
        self.q = m.new_int_var(0, N, "q")
        self.st2 = m.new_bool_var("two_streams")
        m.add(self.p <= units)
        m.add(self.q <= units)
        if not self.full:  # no backward gather: the streams and q change nothing
            m.add(self.q == 1)
            m.add(self.st2 == 1)
        if knobs is not None:
            p, q, streams = knobs  # a depth beyond the units acts as the units
            m.add_min_equality(self.p, [p, units])
            if self.full:
                m.add_min_equality(self.q, [q, units])
                m.add(self.st2 == int(streams == 2))

    # -------------------------------------------------------------- the timeline
    def _timeline(self) -> list[_Pass]:
        """Every micro-batch's forward and backward, one after the other."""
        passes: list[_Pass] = []
        t0: Any = 0
        for mb in range(self.k):
            gather = self.full or mb == 0
            fs, fe, ags = self._forward(mb, t0, gather)
            last = mb == self.k - 1
            ps = _Pass(fs, fe, ags, [], [], [], [], [])
            self._backward(mb, fe[-1], last, ps)
            passes.append(ps)
            t0 = ps.be[0]
        return passes

    def _forward(self, mb: int, t0: Any, gather: bool) -> tuple[list, list, list]:
        """One forward: ``F(u)`` starts when ``F(u - 1)`` ended and its gather did; the gather
        of ``u`` is issued at the start of ``F(u - p)`` (the end of ``F(u - 1)`` at ``p = 0``;
        at ``t0`` when that unit does not exist), served in order."""
        N = self.N
        fs = [self._var(f"fs[{mb},{u}]") for u in range(N)]
        fe = [self._var(f"fe[{mb},{u}]") for u in range(N)]
        for u in range(N):
            self.m.add(fe[u] == fs[u] + self.F[u])
        if not gather:
            self.m.add(fs[0] == t0)
            for u in range(1, N):
                self.m.add(fs[u] == fe[u - 1])
            return fs, fe, []
        ags: list[Any] = []
        age: list[Any] = []
        for u in range(N):
            opts = [t0 if u == 0 else fe[u - 1]] + [fs[u - d] if u - d >= 0 else t0
                                                    for d in range(1, N + 1)]
            iss = self._var(f"agf_issue[{mb},{u}]")
            self.m.add_element(self.p, opts, iss)
            s = self._max(f"agf_start[{mb},{u}]", [iss] if u == 0 else [iss, age[u - 1]])
            e = self._var(f"agf_end[{mb},{u}]")
            self.m.add(e == s + self.AG[u])
            ags.append(s)
            self.net.append((s, self.AG[u], e))
            age.append(e)
            self.m.add_max_equality(fs[u], [t0 if u == 0 else fe[u - 1], e])
        return fs, fe, ags

    def _backward(self, mb: int, t0: Any, last: bool, ps: _Pass) -> None:
        """One backward (``u = N - 1 .. 0``): ``B(u)`` waits for ``B(u + 1)`` and its gather
        (full sharding), whose issue is the start of ``B(u + q)`` (the end of ``B(u + 1)`` at
        ``q = 0``); on the last micro-batch each ``RS(u)`` is issued when ``B(u)`` ends."""
        m, N = self.m, self.N
        bs = [self._var(f"bs[{mb},{u}]") for u in range(N)]
        be = [self._var(f"be[{mb},{u}]") for u in range(N)]
        for u in range(N):
            m.add(be[u] == bs[u] + self.B[u])
        ps.bs, ps.be = bs, be
        if self.full:
            iss = []
            for v in range(N):
                opts = [t0 if v == N - 1 else be[v + 1]] + [bs[v + d] if v + d < N else t0
                                                            for d in range(1, N + 1)]
                x = self._var(f"agb_issue[{mb},{v}]")
                m.add_element(self.q, opts, x)
                iss.append(x)
            ps.agbs = [self._var(f"agb_start[{mb},{v}]") for v in range(N)]
            agbe = [self._var(f"agb_end[{mb},{v}]") for v in range(N)]
            for v in range(N):
                m.add(agbe[v] == ps.agbs[v] + self.AG[v])
                self.net.append((ps.agbs[v], self.AG[v], agbe[v]))
                m.add_max_equality(bs[v], [t0 if v == N - 1 else be[v + 1], agbe[v]])
        else:
            for v in range(N):
                m.add(bs[v] == (t0 if v == N - 1 else be[v + 1]))
        if last:
            ps.rss = [self._var(f"rs_start[{u}]") for u in range(N)]
            ps.rse = [self._var(f"rs_end[{u}]") for u in range(N)]
            for u in range(N):
                m.add(ps.rse[u] == ps.rss[u] + self.RS[u])
                self.net.append((ps.rss[u], self.RS[u], ps.rse[u]))
        if self.full and last:
            self._merge(iss, agbe, ps)
            return
        if self.full:
            for v in range(N):
                m.add_max_equality(ps.agbs[v], [iss[v]] if v == N - 1 else [iss[v], agbe[v + 1]])
        if last:
            for u in range(N):
                m.add_max_equality(ps.rss[u], [be[u]] if u == N - 1 else [be[u], ps.rse[u + 1]])

    def _merge(self, iss: list[Any], agbe: list[Any], ps: _Pass) -> None:
        """The last backward's network: gathers in order ``N - 1 .. 0``, reduce-scatters in
        order ``N - 1 .. 0``, ``y[v, u]`` (``v < u``) when gather ``v`` goes before
        reduce-scatter ``u``; every start the largest of its issue and the ends before it."""
        m, N = self.m, self.N
        y = {(v, u): m.new_bool_var(f"y[{v},{u}]") for u in range(N) for v in range(u)}
        before_rs: list[list[Any]] = [[] for _ in range(N)]
        before_agb: list[list[Any]] = [[] for _ in range(N)]
        for (v, u), lit in y.items():
            if v + 1 < u:
                m.add_implication(lit, y[v + 1, u])
            if v < u - 1:
                m.add_implication(lit, y[v, u - 1])
            z = self._var(f"rs_before_agb[{v},{u}]")  # RS(u)'s end when it precedes AGb(v)
            m.add(z == ps.rse[u]).only_enforce_if(~lit)
            m.add(z == 0).only_enforce_if(lit)
            before_agb[v].append(z)
            w = self._var(f"agb_before_rs[{v},{u}]")
            m.add(w == agbe[v]).only_enforce_if(lit)
            m.add(w == 0).only_enforce_if(~lit)
            before_rs[u].append(w)
            # one stream: issue order
            m.add(self.q >= u - v).only_enforce_if([lit, ~self.st2])
            m.add(self.q <= u - v - 1).only_enforce_if([~lit, ~self.st2])
            # two streams: a reduce-scatter only when no gather is issued by its start
            m.add(iss[v] >= ps.rss[u] + 1).only_enforce_if([~lit, self.st2])
        for v in range(N):
            free = self._max(f"agb_free[{v}]",
                             ([agbe[v + 1]] if v < N - 1 else [0]) + before_agb[v])
            m.add_max_equality(ps.agbs[v], [iss[v], free])
            waits = m.new_bool_var(f"agb_waits[{v}]")  # issued after the network freed
            m.add(iss[v] <= free).only_enforce_if(~waits)
            for u in range(v + 1, N):  # two streams: no idling while RS(u) waits
                m.add(iss[v] <= ps.bs[u] + self.B[u]).only_enforce_if(
                    [y[v, u], waits, self.st2])
        for u in range(N):
            m.add_max_equality(ps.rss[u], [ps.be[u], *([ps.rse[u + 1]] if u < N - 1 else []),
                                           *before_rs[u]])
        self.y = y

    def _network_no_overlap(self) -> None:
        """The network serves one collective at a time (implied by the starts; stated for
        CP-SAT's bound: the step is at least the network's work)."""
        self.m.add_no_overlap([self.m.new_interval_var(s, d, e, f"net[{i}]")
                               for i, (s, d, e) in enumerate(self.net)])

    # ------------------------------------------------------------------ the memory
    def _memory(self, cap: int | None) -> None:
        """Unsharded parameters and unreduced gradients under ``cap`` (a cumulative over
        half-open intervals: a release at ``t`` frees before an allocation at ``t``)."""
        if cap is None:
            return
        alive: list[tuple[Any, Any, Any]] = []  # (start, end, bytes / gcd)
        first, last = self.passes[0], self.passes[-1]
        for u in range(self.N):
            if self.full:
                for ps in self.passes:
                    alive += [(ps.ags[u], ps.fe[u], self.P[u]), (ps.agbs[u], ps.be[u], self.P[u])]
            else:
                alive.append((first.ags[u], last.be[u], self.P[u]))
            alive.append((first.bs[u], last.rse[u], self.P[u]))
        intervals = []
        for i, (s, e, _) in enumerate(alive):
            size = self._var(f"alive_size[{i}]")
            intervals.append(self.m.new_interval_var(s, size, e, f"alive[{i}]"))
        self.m.add_cumulative(intervals, [d for _, _, d in alive], cap // self.gcd)

    # --------------------------------------------------------------- hints, plans
    def _decisions(self, c: Config) -> list[tuple[Any, int]]:
        """The decision variables of configuration ``c`` and their values."""
        starts = [*c.starts, *[self.n] * (self.N - len(c.starts))]
        units = len(c.starts)
        return [*((self.S[u], starts[u]) for u in range(1, self.N)),
                (self.p, min(c.forward_prefetch, units)),
                (self.q, min(c.backward_prefetch, units) if self.full else 1),
                (self.st2, int(c.streams == 2 or not self.full))]

    def hint(self, c: Config, work_s: float = 0.0) -> float:
        """Hint configuration ``c``: its decisions, and with ``work_s`` > 0 every variable,
        from a solve of a copy of the model with the decisions fixed (the deterministic time
        that took, charged at :data:`SHARDED_WALL_PER_DTIME`, is returned)."""
        m = self.m
        m.clear_hints()
        decisions = self._decisions(c)
        if work_s > 0:
            fixed = m.clone()
            for v, x in decisions:
                fixed.add(fixed.get_int_var_from_proto_index(v.index) == x)
            fixed.clear_hints()
            solver = cp_model.CpSolver()
            solver.parameters.num_workers = 1
            solver.parameters.catch_sigint_signal = False  # Ctrl-C is the caller's
            solver.parameters.max_deterministic_time = work_s / SHARDED_WALL_PER_DTIME
            if solver.solve(fixed) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                values = solver.response_proto.solution
                for i, x in enumerate(values):
                    m.add_hint(m.get_int_var_from_proto_index(i), x)
                return solver.deterministic_time * SHARDED_WALL_PER_DTIME
        for v, x in decisions:
            m.add_hint(v, x)
        return 0.0

    def config(self, solver: cp_model.CpSolver) -> Config:
        """The configuration of the solver's solution."""
        starts = tuple(int(solver.value(s)) for s in self.S[:-1] if solver.value(s) < self.n)
        return Config(starts, int(solver.value(self.p)), int(solver.value(self.q)),
                      2 if solver.boolean_value(self.st2) else 1)

    def solve(self, *, work_s: float, time_limit_s: float, seed: int = 0,
              control: Control | None = None) -> CpsatSolution:
        """Run CP-SAT with one worker: ``work_s`` deterministic (charged at
        :data:`SHARDED_WALL_PER_DTIME`), ``time_limit_s`` only a wall-clock safety stop;
        ``control`` stops it on Ctrl-C or the solve's deadline with its best solution."""
        solver = cp_model.CpSolver()
        prm = solver.parameters
        prm.max_time_in_seconds = max(0.01, time_limit_s)
        prm.max_deterministic_time = max(1e-4, work_s / SHARDED_WALL_PER_DTIME)
        # probing in presolve can take all of a short limit before the search starts
        prm.presolve_probing_deterministic_time_limit = PROBING_SHARE * prm.max_deterministic_time
        prm.num_workers = 1
        prm.random_seed = seed
        if log.isEnabledFor(logging.DEBUG):
            prm.log_search_progress = True
            prm.log_to_stdout = False
            solver.log_callback = lambda line: log.debug("cp-sat: %s", line)
        code = control.run_solver(solver, self.m) if control is not None else solver.solve(self.m)
        name = _STATUS.get(code, "UNKNOWN")
        if name == "MODEL_INVALID":
            raise SchedoptError(f"CP-SAT rejected the model: {self.m.validate()}",
                                "optimize.sharding", self.inst.mode)
        work = solver.deterministic_time * SHARDED_WALL_PER_DTIME
        if name not in ("OPTIMAL", "FEASIBLE"):
            bound = 0 if name != "INFEASIBLE" else self.H + self.upd + 1
            return CpsatSolution(name, None, None, bound, work, solver.wall_time)
        bound = math.floor(solver.best_objective_bound + 1e-9) + self.upd
        return CpsatSolution(name, self.config(solver), round(solver.objective_value) + self.upd,
                             bound, work, solver.wall_time)


def solve_cpsat(inst: ShardedInstance, cap: int | None, *, work_s: float,
                time_limit_s: float, hint: Config | None = None, seed: int = 0,
                knobs: tuple[int, int, int] | None = None, tick: float | None = None,
                control: Control | None = None) -> tuple[CpsatSolution, TickedInstance]:
    """Build and solve the model of ``inst`` under ``cap`` (ticks of :func:`choose_tick`
    unless ``tick``), hinted with ``hint`` and bounded above by the hint's step when it fits
    the cap on the ticks; the solution and the ticked instance."""
    ti = ticked(inst, choose_tick(inst) if tick is None else tick)
    upper = None
    if hint is not None:
        st = step_time(ti, hint)
        if cap is None or st.peak_bytes <= cap:
            upper = int(st.step_s)
    model = ShardedModel(ti, cap, upper, knobs)
    spent = 0.0
    if hint is not None:
        spent = model.hint(hint, HINT_SHARE * work_s)
    sol = model.solve(work_s=max(1e-3, work_s - spent), time_limit_s=time_limit_s, seed=seed,
                      control=control)
    sol.work_s += spent
    return sol, ti
