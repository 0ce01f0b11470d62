"""An exact programme for reordered per-layer plans: the unimodal launch order, Pareto states.

With tails that depend only on a bucket and grow with its readiness, some optimal launch order is
unimodal (docs/formulation.md): *early* buckets in readiness order up to the last-ready one
(the peak), then the *late* ones in reverse readiness order, back to back. Walking the units in
ready order and closing one bucket at a time, the past is summarised by two numbers:

* ``e``: the end of the early chain so far (smaller is better);
* ``nu``: the latest end of the whole communication that the late buckets placed so far allow,
  minus the late work still to come. A late bucket ``k`` ends at ``Zend - Lpre_k`` (``Zend`` the
  end of everything, ``Lpre_k`` the late work of the buckets before it), so it needs
  ``Zend <= lam - q_k + Lpre_k``; relative to the late work placed so far this is
  ``nu' = min(nu, lam - q_k) - d_k`` (larger is better).

An early bucket ``i..k`` moves ``e`` to ``max(e, r_k) + d`` and needs ``e + q_k <= lam``; the
peak (the bucket holding the last unit) closes the early chain and needs its end ``<= nu``. The
states at every cut position form a Pareto front in ``(e, nu)``; the fronts are built position by
position with vectorised transitions from every earlier front, and ``lam`` is bisected.

Tails are the forward times from each bucket's gating layer plus the updates of the buckets
gated by later layers (one value per gating layer, set by the bucket that opens it and carried
as a third coordinate while a layer is split) plus the bucket's own update share where the
exchange argument allows it: for every early bucket outside the peak's layer (its tail stays
below the peak's), for the last bucket of its layer, and for the last late bucket of its layer
in ready order (late tails must grow with readiness). A cut inside a layer therefore branches
into promises kept as a state column: the bucket is its layer's last (the next one ends in a
later layer), or the next one ends in the same layer, and for a late bucket either every
bucket still to end in the layer is early (own share counted) or one of them is late (not
counted). Two late buckets of a layer, the second its last unit alone, are a two-machine
flow shop (link, then update): the first's tail holds the pair's best makespan
(:func:`pair_makespan`) beyond their communication; with more units of the layer left, the
part of its share their communication cannot hide (:func:`unhidden_share`). Exact without
an update step; with one, the shares of the same-layer buckets launched after a bucket (and
part of the own share of a late bucket when a later-ready bucket of its layer is late too)
are left out, so the result is a bound. The data-path and shared-PCIe terms are left
out too (the constant bounds keep their plan-independent part).

Pruning, all exact: an early chain ending before the next release is stored as ending then;
the remaining work must fit between ``e`` and ``nu`` and after every later release; and the
peak (the bucket of the last unit) must still meet its own tail after ``max(e, r_last)``. Only
live states are sources: a state is dropped once no bucket from it can end at ``k`` or later
(its death step is found once, :func:`_death`; with :data:`TIGHT_PRUNE` also from the slack
between ``e`` and ``nu``, and with :data:`PEAK_REACH` once an early bucket ends too late for
the peak). A state whose slack is enough for the peak alone (one start-up, where an early
bucket before it needs two) waits apart for the last step (:data:`PEAK_APART`). At the
steps whose cut lies between layers a bucket's tail does not depend on where it starts, so
a state at a later cut dominates the early (late) buckets of one at an earlier cut ``j``
when it is no worse after shifting ``e`` (``nu``) by the work between the cuts
(:data:`CROSS_DOMINANCE`, :meth:`_Pools._dominate`).
Tests of what must still follow a cut, all exact: the peak's tail holds every update when it
starts at or before the last layer (:data:`PEAK_UPDATES`, :func:`_peak_upd`), not only those
before the cut; every bucket after a cut ends by ``lam`` less the forward from its first unit
and the update part of a bucket starting after the cut, so the work from each later unit on,
started at ``e``, must meet that (:data:`EDF_PRUNE`: a preemptive single-machine relaxation),
a late bucket from the state counts that update part too (:data:`LATE_UPDATES`), and ``nu``
is capped at the latest end it allows (:data:`NU_CAP`: larger values allow nothing more, and
capped states coincide). Read backward, the programme gives every cut the least ``nu`` a state
needs to finish (:mod:`.backward`, on a grid of ``e``: lower bounds); a state below it is
dead (:data:`BACKWARD`), and needs computed at one ``lam`` serve every test below it.
Fronts that outgrow :data:`MAX_STATES` fall back to coarser relaxations (update levels, then a
grid on ``e`` and ``nu``, made :data:`GRID_REFINE` times finer once it can tell no more), whose
infeasibility is still a proof.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from enum import Enum, IntEnum

import numpy as np

from schedopt.optimize.backward import Needs, cells_bound, pair_makespan, unhidden_share
from schedopt.optimize.instance import Instance, Segments
from schedopt.optimize.unimodal_tables import UnimodalTables

__all__ = ["Outcome", "Promise", "UnimodalResult", "UnknownError", "feasibility",
           "pair_makespan", "unhidden_share", "unimodal_exact", "unimodal_feasible"]

_BIG = np.int64(1) << 60

#: Instances larger than this are left to the other bounds (the fronts grow with n).
MAX_UNITS = 1500

#: Live states beyond which a test gives up (loose bounds make the fronts explode).
MAX_STATES = 400_000

#: The grid phase of :func:`unimodal_exact` stops once the bracket is this many grid steps
#: wide (the exact tests take over; near the optimum they cost a few grid tests).
GRID_PHASE_STEPS = 8

#: The grid phase's first test of a wide bracket lies this fraction of the bracket (1 / value)
#: below the top rather than at its middle (0: plain bisection): the bracket's bottom is
#: usually a weak bound and its top a good plan.
GRID_FIRST_SKEW = 4

#: Once the fallback grid tests' bracket is a few grid steps wide, later tests use a grid this
#: many times finer (the coarse grid's threshold lies below the exact one).
GRID_REFINE = 4

#: After the grid phase, grid tests this many times finer look for a better plan just below the
#: best period (near the optimum they often find it, so that one exact test then proves it).
FINE_GRID_DIVISOR = 8

#: Prune with the slack between ``e`` and ``nu`` too (module docs).
TIGHT_PRUNE = True

#: Drop the sides of states dominated by states at later cut positions (module docs).
CROSS_DOMINANCE = True

#: Keep the states that can only still be the peak's source (their slack between ``e`` and
#: ``nu`` holds the rest of the work with one start-up, not two) apart, for the last step.
PEAK_APART = True

#: Kill the early side of a state once an early bucket from it ends too late for the peak
#: (when the last layer is the last unit alone; :func:`_death`).
PEAK_REACH = True

#: Count every update that the peak's tail must hold in the peak's own tests, not only those
#: before the cut (:func:`_peak_upd`).
PEAK_UPDATES = True

#: Kill a state whose early chain ends too late for the work after it to meet the least
#: tail from each later unit on (the deadlines of a preemptive single-machine relaxation).
EDF_PRUNE = True

#: Count the update part in the late side's death step.
LATE_UPDATES = True

#: Cap ``nu`` at the latest end that the tail of any bucket after the cut allows.
NU_CAP = True

#: Prune with the least late slack that the backward programme (:mod:`.backward`) gives each
#: state, computed on a grid of ``BACKWARD_STEP * lam`` ticks.
BACKWARD = True

#: The backward programme's grid, relative to ``lam`` (GPT-2 1.5B r0.5: 250 ticks).
BACKWARD_STEP = 1.6e-4

#: Grid values of the backward programme that cost as much as one state of the forward one.
CELLS_PER_STATE = 10

#: The needs computed at ``lam'`` serve every later test at ``lam <= lam'`` (they are lower
#: bounds at every smaller ``lam``, less sharp the further below) until the best plan's period
#: falls below ``lam'`` by more than this fraction of ``lam`` (on GPT-2 1.5B r0.5, an exact
#: test near the optimum costs 3.6, 4.6 and 7.0 million states with needs computed 0, 309
#: and 1,022 ticks above it, and new needs 6.4 million).
NEEDS_REUSE = 1e-3

#: The work of one step of a feasibility test, in states (its fixed cost: measured, one step
#: of a few states costs about as much as 1,500 states).
STEP_STATES = 1500


@dataclass
class UnimodalResult:
    """The programme's answer.

    Attributes
    ----------
    bound
        The smallest feasible ``lam`` (ticks): a lower bound on the period of every plan, and
        the optimum when ``exact``.
    segs
        A plan (segments in unimodal launch order) meeting the tails at ``bound``.
    exact
        True when the tails are the exact ones (no update step, no data path or shared PCIe
        term that depends on the plan).
    work
        States examined (the deterministic measure of the work done).
    wall_stop
        The wall-clock safety stop ended the search (the result may depend on the load).
    """

    bound: int
    segs: Segments
    exact: bool
    work: int = 0
    wall_stop: bool = False


_NONE = np.array([-_BIG - 1])


def _pareto(e: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """Indices of the states not dominated (smaller ``e``, larger ``nu``)."""
    if len(e) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-nu, e))
    nu_s = nu[order]
    best_before = np.concatenate((_NONE, np.maximum.accumulate(nu_s)[:-1]))
    return order[nu_s > best_before]


#: Largest number of groups times states that :func:`_pareto3` filters in one matrix pass
#: (beyond it, group by group: measured faster from about 30,000 on).
PARETO3_MATRIX = 30_000


def _pareto3(e: np.ndarray, nu: np.ndarray, ug: np.ndarray) -> np.ndarray:
    """Indices of the states not dominated (smaller ``e``, larger ``nu``, smaller ``ug``).

    One sort by ``(ug, e, -nu)``: a state is dominated when an earlier one in that order has
    no larger ``e`` and no smaller ``nu`` (the first of identical states is kept). First
    inside each group of equal ``ug`` (a running maximum of ``nu``'s rank offset by the
    group), then across groups: with ``G`` groups, a ``G`` by ``m`` matrix of running maxima
    of ``nu`` over the ``m`` states left (in order of ``e``) answers every query at once
    (:func:`_pareto3_loop` when it is large).
    """
    n = len(e)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-nu, e, ug))
    e_s, nu_s, ug_s = e[order], nu[order], ug[order]
    gid = np.concatenate(([0], np.cumsum(ug_s[1:] != ug_s[:-1])))
    groups = int(gid[-1]) + 1
    if groups * n > 4 * PARETO3_MATRIX:  # large fronts: group by group at once
        return order[_pareto3_loop(e_s, nu_s, ug_s)]
    keep = _group_staircase(gid, nu_s)
    if groups == 1:
        return order[keep]
    idx = np.flatnonzero(keep)
    m = len(idx)
    if groups * m > PARETO3_MATRIX:
        keep[idx] = _pareto3_loop(e_s[idx], nu_s[idx], ug_s[idx])
        return order[keep]
    e2, nu2, g2 = e_s[idx], nu_s[idx], gid[idx]
    by_e = np.argsort(e2, kind="stable")
    run = np.full((groups, m), _NONE[0], dtype=np.int64)
    run[g2[by_e], np.arange(m)] = nu2[by_e]
    np.maximum.accumulate(run, axis=1, out=run)
    np.maximum.accumulate(run, axis=0, out=run)
    upto = np.searchsorted(e2[by_e], e2, side="right") - 1
    keep[idx] = (g2 == 0) | (nu2 > run[np.maximum(g2 - 1, 0), upto])
    return order[keep]


def _group_staircase(gid: np.ndarray, nu_s: np.ndarray) -> np.ndarray:
    """Whether each state's ``nu`` passes every earlier one of its group (``gid``, groups
    contiguous): one running maximum of ``nu`` offset by the group (its rank, when the
    offsets would not fit in 63 bits)."""
    low = int(nu_s.min())
    finite = nu_s != _BIG
    top = int(nu_s[finite].max()) if finite.any() else low
    span = top - low + 2  # the unbounded nu (no late bucket yet) share one level
    if span * (int(gid[-1]) + 1) < 1 << 62:
        key = gid * span + np.where(finite, nu_s - low, span - 1)
    else:
        key = gid * len(nu_s) + np.unique(nu_s, return_inverse=True)[1].reshape(-1)
    return key > np.concatenate(([-1], np.maximum.accumulate(key)[:-1]))


def _pareto3_loop(e_s: np.ndarray, nu_s: np.ndarray, ug_s: np.ndarray) -> np.ndarray:
    """:func:`_pareto3`'s mask on states sorted by ``(ug, e, -nu)``, group by group of equal
    ``ug`` (increasing), each filtered on its own and against the staircase (``e`` up,
    ``nu`` up) of the groups before it."""
    n = len(e_s)
    edges = np.concatenate(([0], np.flatnonzero(ug_s[1:] != ug_s[:-1]) + 1, [n]))
    keep = np.zeros(n, dtype=bool)
    front_e = np.zeros(0, dtype=np.int64)  # staircase of the groups so far
    front_nu = np.zeros(0, dtype=np.int64)
    for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        ge, gn = e_s[lo:hi], nu_s[lo:hi]
        ok = gn > np.concatenate((_NONE, np.maximum.accumulate(gn)[:-1]))
        if len(front_e):
            at = np.searchsorted(front_e, ge, side="right") - 1
            ok &= (at < 0) | (gn > front_nu[np.maximum(at, 0)])
        if not ok.any():
            continue
        keep[lo:hi] = ok
        both_e = np.concatenate((front_e, ge[ok]))
        both_nu = np.concatenate((front_nu, gn[ok]))
        # two runs sorted by e (a merge); among equal e the staircase's query takes the last
        srt = np.argsort(both_e, kind="stable")
        both_e, both_nu = both_e[srt], both_nu[srt]
        step = both_nu > np.concatenate((_NONE, np.maximum.accumulate(both_nu)[:-1]))
        front_e, front_nu = both_e[step], both_nu[step]
    return keep


class Promise(IntEnum):
    """What a cut inside a layer promised of the buckets after it (a state column)."""

    #: A cut between layers: nothing.
    NONE = 0
    #: The next bucket ends in a later layer.
    LEAVE = 1
    #: The next bucket ends in the same layer.
    STAY = 2
    #: It does, and every bucket still to end in this layer is early.
    STAY_EARLY = 3
    #: It does, and one of the buckets still to end in this layer is late.
    STAY_LATE = 4


#: The promises as plain ints (faster in array comparisons).
_P_NONE, _P_LEAVE, _STAY, _STAY_EARLY, _STAY_LATE = (int(p) for p in Promise)


class Outcome(Enum):
    """The answer of one feasibility test at ``lam``."""

    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    #: The fronts outgrew the state limit (too much slack at this ``lam``): unknown.
    TOO_MANY_STATES = "too many states"
    #: The deadline passed: unknown.
    TIMEOUT = "timeout"


def _peak_upd(upd_in: np.ndarray, upd_own: np.ndarray, first_last: int) -> np.ndarray:
    """The least update part of the peak's tail (beyond its last unit's own share) over the
    plans from a cut before unit ``j``, for every ``j`` in ``0..n``.

    The peak holds the last unit. Starting at ``x`` at or before the last layer's first unit
    ``first_last``, its tail holds ``upd_in[x]`` and the own shares of ``x..n-1``: with exact
    update parts, every update. Starting inside the last layer, it holds the update part of
    the bucket that opened the layer, which starts at ``j`` or later (at least ``upd_in[j]``).
    Non-decreasing in ``j``; at least ``upd_in[j]``.
    """
    n = len(upd_own) - 1
    own_last = upd_own[n] - upd_own[n - 1]
    out = upd_in.copy()
    head = np.minimum.accumulate((upd_in - upd_own)[first_last::-1])[::-1] + upd_own[n] - own_last
    if first_last < n - 1:  # the peak may start inside the last layer
        head = np.minimum(head, upd_in[:first_last + 1])
    out[:first_last + 1] = head
    return out


def _tables(inst: Instance, levels: int) -> UnimodalTables:
    """The lam-independent data of the tests (``levels``: update parts rounded down)."""
    n = inst.n
    r = inst.r.astype(np.int64)
    q = inst.fwd_from[inst.layer].astype(np.int64)
    a = np.int64(inst.a)
    p = inst.p
    # the whole communication ends no earlier than any later unit's release plus the work
    # from it on: fit[k] = max over j > k of r[j] + a + p[j] + ... + p[n - 1]
    suffix_p = np.cumsum(p[::-1])[::-1].astype(np.int64)
    # update part of a tail: the updates of buckets gated by later layers (one value per
    # gating layer, fixed by the bucket that opens it: the units before its first unit)
    upd_in = np.r_[0, inst.upd_prefix].astype(np.int64)
    if levels and upd_in[-1] > 0:
        unit = max(1, int(upd_in[-1]) // levels)
        upd_in = upd_in // unit * unit
    # the last bucket of a gating layer (in readiness order) also counts its own update share
    # (exact, not rounded): tails still grow with readiness
    upd_own = np.r_[0, inst.upd_prefix].astype(np.int64)
    inside = np.r_[inst.layer[1:] == inst.layer[:-1], False]
    upd_unit = np.diff(upd_own)
    rest_max = np.zeros(n, dtype=np.int64)
    rest_min_upd = np.zeros(n, dtype=np.int64)
    for k in range(n - 2, -1, -1):
        if inside[k]:
            rest_max[k] = a + np.int64(p[k + 1]) + (rest_max[k + 1] if inside[k + 1] else 0)
            rest_min_upd[k] = (min(upd_unit[k + 1], rest_min_upd[k + 1]) if inside[k + 1]
                               else upd_unit[k + 1])
    pp = np.r_[0, np.cumsum(p)].astype(np.int64)
    q_env = np.minimum.accumulate(q[::-1])[::-1]

    ends = np.flatnonzero(~inside)
    peak_upd = (_peak_upd(upd_in, upd_own, int(inst.layer_first_unit[n - 1])) if PEAK_UPDATES
                else upd_in)
    fit = np.r_[np.maximum.accumulate((r + suffix_p)[::-1])[::-1][1:], 0] + a
    return UnimodalTables(
        n=n, r=r, q=q, pp=pp, p=p, a=a,
        rest=np.r_[np.cumsum(p[::-1])[::-1][1:], 0].astype(np.int64) + a,
        r_last=r[n - 1], peak_min=r[n - 1] + a + np.int64(p[-1]),
        fit=fit,
        upd_in=upd_in, upd_own=upd_own, layer=inst.layer.astype(np.int64),
        first=inst.layer_first_unit,
        # the peak (the bucket of the last unit, the last of its gating layer) ends no earlier
        # than max(e, r_last) + a + p[n - 1]; its tail holds the forward from its layer, its
        # own share and the update part of the bucket that opens that layer
        peak_need=a + np.int64(p[-1]) + q[n - 1] + upd_own[n] - upd_own[n - 1],
        inside=inside, one_left=inside & np.r_[~inside[1:], False],
        rest_max=rest_max, rest_min_upd=rest_min_upd,
        q_env=q_env,
        late_fit=np.r_[np.minimum.accumulate((fit + pp[1:])[:-1][::-1])[::-1], _BIG],
        peak_upd=peak_upd,
        edf=np.r_[-upd_in[:n] - a - np.maximum.accumulate((pp[n] - pp[:n] + q)[::-1])[::-1],
                  _BIG],
        pe_key=pp[1:] + np.r_[peak_upd[1:n], peak_upd[n - 1]],
        pr_key=r + pp[1:] + np.r_[peak_upd[1:n], peak_upd[n - 1]],
        e_key=pp[1:] + q_env, r_key=r + pp[1:] + q_env,
        layer_last=ends[np.searchsorted(ends, np.arange(n))],
    )


#: The columns of a state: end of the early chain, the late slack, the update part of the
#: open layer, the cut position, the parent state, the side (1 early) and the promise.
_COLUMNS = ("e", "nu", "ug", "pos", "parent", "early", "next")

#: Bits of the ``dom`` column: the state's early (late) buckets are dominated (module docs).
_DOM_EARLY, _DOM_LATE = 1, 2


class _Store:
    """Every state built so far, as growing int64 columns appended position by position."""

    def __init__(self) -> None:
        self.cols = {k: np.zeros(1024, dtype=np.int64) for k in _COLUMNS}
        self.size = 0

    def append(self, **cols: np.ndarray) -> None:
        m = len(next(iter(cols.values())))
        while self.size + m > len(self.cols["e"]):
            for k, v in self.cols.items():
                self.cols[k] = np.r_[v, np.zeros(len(v), dtype=np.int64)]
        for k, v in cols.items():
            self.cols[k][self.size:self.size + m] = v
        self.size += m

    def live(self, idx: np.ndarray) -> _Live:
        """The columns of the states ``idx`` (none dominated, no death step yet)."""
        c = self.cols
        zero = np.zeros(len(idx), np.int64)
        return _Live(idx, c["e"][idx], c["nu"][idx], c["ug"][idx], c["pos"][idx],
                     c["next"][idx], zero, zero)


@dataclass(frozen=True)
class _Live:
    """The states that may still start a bucket (``idx`` into the store) and their columns."""

    idx: np.ndarray
    e: np.ndarray
    nu: np.ndarray
    ug: np.ndarray
    pos: np.ndarray
    promise: np.ndarray
    dom: np.ndarray  # bits _DOM_EARLY, _DOM_LATE: sides left to dominating states
    death: np.ndarray  # the step from which the state is dead (:func:`_death`)

    def keep(self, mask: np.ndarray) -> _Live:
        return _Live(*[getattr(self, f)[mask] for f in _LIVE_FIELDS])

    def alive(self, k: int) -> _Live:
        """The states still alive at step ``k``."""
        ok = self.death > k
        return self if ok.all() else self.keep(ok)


_LIVE_FIELDS = ("idx", "e", "nu", "ug", "pos", "promise", "dom", "death")


def _cat(*parts: _Live) -> _Live:
    """Sets of live states as one."""
    parts = tuple(p for p in parts if len(p.idx))
    if len(parts) <= 1:
        return parts[0] if parts else _EMPTY
    return _Live(*[np.concatenate([getattr(p, f) for p in parts]) for f in _LIVE_FIELDS])


def _split(live: _Live, mask: np.ndarray) -> tuple[_Live, _Live]:
    """The states where ``mask`` holds, and the others."""
    if not mask.any():
        return _EMPTY, live
    if mask.all():
        return live, _EMPTY
    return live.keep(mask), live.keep(~mask)


_EMPTY = _Live(*[np.zeros(0, dtype=np.int64) for _ in _LIVE_FIELDS])


def _first_live(t: UnimodalTables, lam: int, k: int, first_live: int) -> int:
    """Advance the first cut position that can still start a bucket ending at ``k``: a bucket
    ``j+1..k`` is too long once it can be neither early nor late (both tests grow in k)."""
    while first_live < k:
        d_min = t.a + t.pp[k + 1] - t.pp[first_live]
        if t.r[k] + d_min + t.q[k] <= lam or lam - t.q[k] - d_min >= t.peak_min:
            break
        first_live += 1
    return first_live


def _death(t: UnimodalTables, lam: int, k: int, fl: np.ndarray, live: _Live
           ) -> tuple[np.ndarray, np.ndarray]:
    """The first step at which each state, taken in at step ``k``, can start no bucket ending
    then or later (every test below only grows with the step): a bucket too long (``fl``,
    the first live cut position per step); a promise about a layer already passed; an early
    chain too late for an early bucket (its end and tail only grow with k) and for a late one
    (the late work from the state on plus its tail must fit after e); or a peak too late.
    With :data:`TIGHT_PRUNE`, the early side also dies once the whole rest after
    ``max(e, r_k)`` cannot end by ``nu``, and the late side once a late bucket and the rest
    cannot fit between ``e`` and ``nu``, or after the later releases (``late_fit``). An early
    bucket before the peak needs the rest with two start-ups before ``nu``, the peak with
    one: with :data:`PEAK_APART` the states only the peak can still use are flagged
    (``at_peak``, the second array) and left for the last step. With :data:`PEAK_REACH`, the
    early side dies once an early bucket ends too late for the peak's work and tail."""
    e, nu = live.e, live.nu
    if len(e) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    # the states taken in at one step all cut after the unit of the step before
    pos = int(live.pos[0])
    stay = live.promise >= _STAY  # promises of a cut inside a layer, about that layer
    pp1 = t.pp[pos + 1]
    rest_from = t.pp[t.n] - pp1 + 2 * t.a
    x = lam - t.a + pp1
    early = np.minimum(np.searchsorted(t.e_key, x - e, side="right"),
                       np.searchsorted(t.r_key, x, side="right"))
    # a late bucket from the state holds at least the update part of a bucket starting after
    # the cut (inside a layer, the one the state inherited)
    ug_min = np.minimum(np.where(stay, live.ug, _BIG), t.upd_in[pos + 1]) if LATE_UPDATES else 0
    late = np.searchsorted(t.q_env, lam - e - rest_from - ug_min, side="right")
    peak = early
    if TIGHT_PRUNE:
        # the peak (the last bucket) needs the rest with one start-up before nu, an early
        # bucket before it the rest with two
        peak = np.where(e + rest_from - t.a > nu, k, np.minimum(
            early, np.searchsorted(t.r, nu - rest_from + t.a, side="right")))
        early = np.where(e + rest_from > nu, k, np.minimum(
            peak, np.searchsorted(t.r, nu - rest_from, side="right"))) if PEAK_APART else peak
        late = np.where(nu - e < rest_from, k, np.minimum(
            late, np.searchsorted(t.late_fit, nu + pp1 - t.a, side="right")))
    if PEAK_REACH and t.first[t.n - 1] == t.n - 1:
        # an early bucket ending at k < n - 1 needs max(its end, r_last) + the peak's work
        # and tail (with the update part of a bucket opening at k + 1) to meet lam
        y = lam - t.peak_need - t.a + pp1
        reach = min(np.searchsorted(t.pr_key, y, side="right"),
                    np.searchsorted(t.peak_upd[1:], lam - t.peak_need - t.r_last, side="right"))
        early = np.minimum(early, np.minimum(np.searchsorted(t.pe_key, y - e, side="right"),
                                             reach))
    too_long = np.searchsorted(fl, pos + 1, side="right")
    peak_late = np.maximum(e, t.r_last) + t.peak_need + t.peak_upd[pos + 1] > lam
    end = np.where(stay, t.layer_last[max(pos, 0)] + 1, t.n)
    if EDF_PRUNE:
        peak_late |= e > lam + t.edf[pos + 1]
    peak_late &= ~stay  # (a bucket inside a layer keeps the update part it found)
    death = np.where(peak_late, k,
                     np.minimum(np.minimum(np.maximum(early, late), too_long), end))
    # alive at the last step only as the peak's source
    at_peak = (death < t.n) & ~peak_late & (np.minimum(peak, too_long) >= t.n) & (end >= t.n)
    return death, at_peak


def _first_lives(t: UnimodalTables, lam: int) -> np.ndarray:
    """:func:`_first_live` at every step (non-decreasing)."""
    out = np.zeros(t.n, dtype=np.int64)
    first_live = 0
    for k in range(t.n):
        first_live = _first_live(t, lam, k, first_live)
        out[k] = first_live
    return out


@dataclass(frozen=True)
class _Bucket:
    """A bucket from every live state to ``k``: its duration, the update part, tails with and
    without its own share, the early chain's new end, and which sides the promises allow."""

    d: np.ndarray
    ug: np.ndarray
    q_base: np.ndarray
    q_own: np.ndarray
    e_new: np.ndarray
    allowed: np.ndarray
    may_late: np.ndarray
    may_close_early: np.ndarray


def _bucket(t: UnimodalTables, k: int, live: _Live) -> _Bucket:
    """The bucket ``pos+1..k`` of every live state. A promise of early buckets forbids late
    ones; an open debt of a late one forbids closing the layer with an early one."""
    promise, pos = live.promise, live.pos
    same = t.layer[np.maximum(pos, 0)] == t.layer[k]
    allowed = (promise == _P_NONE) | ((promise == _P_LEAVE) & ~same) | (
        (promise >= _STAY) & same)
    d = t.a + t.pp[k + 1] - t.pp[pos + 1]
    ug = np.where(pos + 1 <= t.first[k], t.upd_in[pos + 1], live.ug)
    q_base = t.q[k] + ug
    return _Bucket(d=d, ug=ug, q_base=q_base,
                   q_own=q_base + (t.upd_own[k + 1] - t.upd_own[pos + 1]),
                   e_new=np.maximum(live.e, t.r[k]) + d, allowed=allowed,
                   may_late=allowed & (promise != _STAY_EARLY)
                   & (live.dom & _DOM_LATE == 0),
                   may_close_early=allowed & (promise != _STAY_LATE)
                   & (live.dom & _DOM_EARLY == 0))


#: One side of a transition: the tail of the new bucket and the mask of the states allowed.
_Side = tuple[np.ndarray, np.ndarray] | None


def _transitions(t: UnimodalTables, k: int, live: _Live, b: _Bucket, pairs: bool
                 ) -> list[tuple[Promise, _Side, _Side]]:
    """Per promise of the cut after ``k``: the early side and the late side (None: not this
    side).

    An early bucket counts its own share unless it shares the peak's layer; a late one counts
    it only as the last late bucket of its layer: the layer's last bucket, or one after which
    the layer's buckets are all early (STAY_EARLY); otherwise a later bucket of the layer must
    be late (STAY_LATE). A late bucket A followed by later late buckets of its layer: whatever
    their order, the layer's forward waits for all their updates, which run one at a time
    after their buckets (a two-machine flow shop). With one unit left (bucket B), A's tail
    holds the best pair makespan beyond the pair's communication; with more, A's own share
    less what the later buckets' communication can hide."""
    if not t.inside[k]:
        return [(Promise.NONE, (b.q_own, b.may_close_early), (b.q_own, b.may_late))]
    q_early_stay = b.q_own if t.layer[k] != t.layer[t.n - 1] else b.q_base
    q_late_stay = b.q_base
    if pairs:
        s_a = t.upd_own[k + 1] - t.upd_own[live.pos + 1]
        if t.one_left[k]:
            d_b = t.a + np.int64(t.p[k + 1])
            s_b = t.upd_own[k + 2] - t.upd_own[k + 1]
            q_late_stay = b.q_base + pair_makespan(b.d, s_a, d_b, s_b) - b.d - d_b
        else:
            q_late_stay = b.q_base + unhidden_share(s_a, t.rest_max[k], t.rest_min_upd[k])
    return [(Promise.LEAVE, (b.q_own, b.may_close_early), (b.q_own, b.may_late)),
            (Promise.STAY, (q_early_stay, b.allowed), None),
            (Promise.STAY_EARLY, None, (b.q_own, b.may_late)),
            (Promise.STAY_LATE, None, (q_late_stay, b.may_late))]


def _extend(store: _Store, t: UnimodalTables, lam: int, k: int, live: _Live, b: _Bucket,
            transitions: list[tuple[Promise, _Side, _Side]], grid: int) -> None:
    """Append the Pareto front of the states after a cut at ``k``, per promise.

    An early bucket: every remaining unit is early (before the peak) or late (after it), so
    the whole communication ends no earlier than e + the remaining work, and it must end by
    nu; without a late bucket so far, it ends with a later bucket, whose tail is at least that
    of unit k + 1 with the updates so far. A late bucket: everything ends by nu."""
    ugp = t.peak_upd[k + 1] if k + 1 <= t.first[t.n - 1] else b.ug
    peak_ok = np.maximum(live.e, t.r_last) + t.peak_need + ugp <= lam
    # what the early (late) sides need whatever the promise
    early_ok = np.maximum(b.e_new, t.r_last) + t.peak_need + ugp <= lam
    early_fit = np.maximum(b.e_new + t.rest[k], t.fit[k])
    late_fit = np.maximum(live.e + t.rest[k], t.fit[k])
    no_late = live.nu >= _BIG
    for tag, early_side, late_side in transitions:
        stay = tag not in (Promise.LEAVE, Promise.NONE)
        ie = il = np.zeros(0, dtype=np.int64)
        nu_l = np.zeros(0, dtype=np.int64)
        if early_side is not None:
            q_e, mask = early_side
            ug_next = b.ug if stay else t.upd_in[k + 1]
            nu_eff = np.where(no_late, lam - t.q[k + 1] - ug_next, live.nu)
            ie = np.flatnonzero(mask & early_ok & (b.e_new + q_e <= lam) & (early_fit <= nu_eff))
        if late_side is not None:
            q_l, mask = late_side
            nu_new = np.minimum(live.nu, lam - q_l) - b.d
            il = np.flatnonzero(mask & peak_ok & (nu_new >= late_fit))
            nu_l = nu_new[il]
        n_e, n_l = len(ie), len(il)
        if n_e + n_l == 0:
            continue
        # the remaining units are released at r[k + 1] or later: an early chain that ends
        # before that is as good as one that ends then (more states coincide)
        src = np.concatenate((ie, il))
        ce = np.maximum(np.concatenate((b.e_new[ie], live.e[il])), t.r[k + 1])
        cn = np.concatenate((live.nu[ie], nu_l))
        cs = live.idx[src]
        cl = (np.arange(n_e + n_l) < n_e).astype(np.int64)
        cu = b.ug[src] if stay else np.zeros(n_e + n_l, dtype=np.int64)
        if tag == Promise.STAY:  # an early bucket inside a layer keeps the promise it found
            found = live.promise[ie]
            ct = np.where(found == _STAY_EARLY, _STAY_EARLY, np.where(
                found == _STAY_LATE, _STAY_LATE, _STAY))
            tags = np.unique(ct).tolist()
        else:
            ct, tags = None, [int(tag)]
        if NU_CAP:
            # what follows ends with a bucket whose tail holds at least the forward from unit
            # k + 1 and the update part of a bucket starting there (or the inherited one, inside
            # a layer): a later nu allows nothing more, and capped states coincide
            g = np.minimum(cu, t.upd_in[k + 1]) if stay else t.upd_in[k + 1]
            cn = np.where(cn >= _BIG, cn, np.minimum(cn, lam - t.q[k + 1] - g))
        if grid:
            ce = ce // grid * grid
            cn = np.where(cn >= _BIG, cn, -(-cn // grid) * grid)
        for tg in tags:
            sel = np.flatnonzero(ct == tg) if ct is not None and len(tags) > 1 else np.arange(
                n_e + n_l)
            keep = sel[_pareto3(ce[sel], cn[sel], cu[sel]) if stay else _pareto(
                ce[sel], cn[sel])]
            store.append(e=ce[keep], nu=cn[keep], ug=cu[keep], pos=np.full(len(keep), k),
                         parent=cs[keep], early=cl[keep], next=np.full(len(keep), tg))



class _Pools:
    """The live states of one test, by kind, and which of them each step examines.

    States whose cut lies inside a layer with a promise to stay in it (``stay``) are few and
    examined at every step. The others (``free``) are all examined at the steps whose bucket
    may leave a state inside a layer (the tails of those states depend on where their bucket
    starts); at the other steps (a cut between layers, or the last unit: *role steps*) only
    those with a side that no state at a later cut position dominates are (``role``, see
    :meth:`_dominate`). Every state gets its death step when taken in (:func:`_death`); a
    pool drops its dead states when a step examines it."""

    def __init__(self, t: UnimodalTables, store: _Store, lam: int, roles: bool) -> None:
        self.t, self.store, self.lam, self.roles = t, store, lam, roles
        self.fl = _first_lives(t, lam)
        self.needs: Needs | None = None  # the backward programme's needs (:data:`BACKWARD`)
        self.free = self.stay = self.role = store.live(np.zeros(0, dtype=np.int64))
        self.seen, self.size = 0, 0
        self.pending: list[_Live] = []  # taken in since the free pool was last examined
        self.waiting: dict[int, list[_Live]] = {}  # dominators by the step they start at
        self.peak: list[_Live] = []  # states alive at the last step only, as the peak's source
        last = t.layer[t.n - 1]
        self.role_step = ~t.inside & ((t.layer != last) | (np.arange(t.n) == t.n - 1))

    def step(self, k: int) -> _Live:
        """The states to examine at step ``k``, after taking in the new ones."""
        t, store = self.t, self.store
        new = store.live(np.arange(self.seen, store.size))
        self.seen = store.size
        death, at_peak = _death(t, self.lam, k, self.fl, new)
        if self.needs is not None and len(new.idx) and int(new.pos[0]) >= 0:
            # a state (its next bucket free to leave the layer) below its need is dead
            short = (new.promise < _STAY) & (new.nu < self.needs.need(int(new.pos[0]), new.e))
            death = np.where(short, k, death)
            at_peak &= ~short
        new = dataclasses.replace(new, death=death)
        if at_peak.any():  # examined at the last step only (no dominance marks)
            self.peak.append(new.keep(at_peak))
        # the states dead before the last step still dominate (their peak is examined)
        new = new.keep((death > k) | at_peak)
        new_stay, new_free = _split(new, new.promise >= _STAY)
        self.stay = _cat(self.stay, new_stay).alive(k)
        self.pending.append(new_free.alive(k))
        if self.roles:
            # a state between layers dominates from the next step, one with a promise to leave
            # its layer once the steps have left that layer
            if len(new_free.idx):
                cut = int(new_free.pos[0])
                leave, between = _split(new_free, new_free.promise == _P_LEAVE)
                self.waiting.setdefault(int(t.layer_last[cut]) + 1, []).append(leave)
                self.waiting.setdefault(k, []).append(between)
            for d in self.waiting.pop(k, []):
                self.role = self._dominate(self.role, d)
            self.role = _cat(self.role, new_free.alive(k))
        if self.roles and self.role_step[k]:
            self.role = self.role.alive(k)
            live = self.role
        else:
            self.free = _cat(self.free, *self.pending)
            self.pending = []
            self.free = self.free.alive(k)
            live = dataclasses.replace(self.free, dom=np.zeros(len(self.free.idx), np.int64))
        self.size = len(live.idx) + len(self.stay.idx)
        if k == t.n - 1 and self.peak:
            peak = _cat(*self.peak)
            return _cat(live, self.stay, dataclasses.replace(
                peak, dom=np.zeros(len(peak.idx), np.int64)))
        return _cat(live, self.stay)

    def _dominate(self, role: _Live, new: _Live) -> _Live:
        """Mark the sides of the role states that the states ``new`` (one cut, between
        layers or with a promise to leave a layer already passed) dominate, and drop the
        states with both sides dominated.

        A state ``d`` at cut ``j'`` dominates the early side of a state
        ``s`` at an earlier cut ``j`` when ``e_d - P(j') <= e_s - P(j)`` and
        ``nu_d >= nu_s`` (``P`` the bandwidth work up to the cut): at every later role step
        its early bucket ends no later with no smaller slack; the late side when
        ``e_d <= e_s`` and ``nu_d + P(j') >= nu_s + P(j)``. At role steps the tails of
        both buckets are equal (they hold the whole update prefix), so the dominated
        bucket's state is no better than the other's."""
        if len(new.idx) == 0 or len(role.idx) == 0:
            return role
        srt = np.argsort(new.e, kind="stable")
        e_d, nu_d = new.e[srt], np.maximum.accumulate(new.nu[srt])
        pp = self.t.pp
        cut = int(new.pos[0])
        shift = pp[cut + 1]
        earlier = role.pos < cut  # only states at earlier cuts are dominated
        at = pp[role.pos + 1]
        i = np.searchsorted(e_d, role.e - at + shift, side="right") - 1
        dom = np.where(earlier & (i >= 0) & (nu_d[np.maximum(i, 0)] >= role.nu), _DOM_EARLY,
                       0)
        i = np.searchsorted(e_d, role.e, side="right") - 1
        dom |= np.where(earlier & (i >= 0) & (nu_d[np.maximum(i, 0)] + shift >= role.nu + at),
                        _DOM_LATE, 0)
        dom |= role.dom
        role = dataclasses.replace(role, dom=dom)
        both = dom == _DOM_EARLY | _DOM_LATE
        return role.keep(~both) if both.any() else role


def _backward_step(lam: int) -> int:
    """The backward programme's grid at ``lam`` (ticks, :data:`BACKWARD_STEP`)."""
    return max(1, int(BACKWARD_STEP * lam))


def backward_needs(inst: Instance, lam: int, *, levels: int = 0, pairs: bool = True,
                   deadline: float | None = None, work: list[int] | None = None,
                   max_work: int | None = None) -> Needs | None:
    """The backward programme's needs at ``lam`` (:mod:`.backward`, a grid of
    :data:`BACKWARD_STEP` ``* lam`` ticks), its grid values charged to ``work[0]`` (one state
    per :data:`CELLS_PER_STATE`); None when the deadline or ``max_work`` stopped it. They
    serve every test at ``lam`` or below with the same ``levels`` and ``pairs``."""
    t = _tables(inst, levels)
    max_cells = (None if max_work is None or work is None
                 else max(0, max_work - work[0]) * CELLS_PER_STATE)
    needs = Needs(t, lam, _backward_step(lam), _first_lives(t, lam), deadline,
                  pairs, max_cells)
    if work is not None:
        work[0] += needs.cells // CELLS_PER_STATE
    if not needs.complete or (max_work is not None and work is not None
                              and work[0] > max_work):
        return None
    return needs


def feasibility(inst: Instance, lam: int, *, want_plan: bool = False,
                deadline: float | None = None, levels: int = 0, grid: int = 0,
                pairs: bool = True, max_states: int | None = None,
                work: list[int] | None = None, max_work: int | None = None,
                needs: Needs | None = None, backward: bool | None = None
                ) -> tuple[Outcome, Segments]:
    """Whether some unimodal plan keeps every tail term at most ``lam`` (and one such plan,
    with ``want_plan``), or why it is unknown (the deadline, or more than ``max_states``
    live states, default :data:`MAX_STATES`). ``levels > 0`` rounds the update parts down
    to that many levels; ``grid > 0`` rounds every state's ``e`` down and ``nu`` up to
    multiples of ``grid`` ticks (fewer states, still relaxations: an infeasible ``lam`` stays
    a proof, a plan found must be judged exactly). ``pairs=False`` leaves out the flow-shop
    term of late pairs (a weaker bound, for the ablation). ``work[0]``, when given, counts the
    states examined; past ``max_work`` the outcome is TIMEOUT (a deterministic limit).
    States below the backward programme's need are dropped: ``needs`` computed at ``lam`` or
    above with the same ``levels`` and ``pairs`` (:func:`backward_needs`), or, without them,
    needs computed here when ``backward`` (default :data:`BACKWARD`)."""
    limit = MAX_STATES if max_states is None else max_states
    t = _tables(inst, levels)
    store = _Store()
    store.append(e=np.array([-_BIG]), nu=np.array([_BIG]), ug=np.array([0]),
                 pos=np.array([-1]), parent=np.array([-1]), early=np.array([1]),
                 next=np.array([0]))
    pools = _Pools(t, store, lam, roles=CROSS_DOMINANCE and bool(np.array_equal(t.upd_in,
                                                                                t.upd_own)))
    if needs is None and (BACKWARD if backward is None else backward):
        needs = backward_needs(inst, lam, levels=levels, pairs=pairs, deadline=deadline,
                               work=work, max_work=max_work)
        if needs is None:
            return Outcome.TIMEOUT, []
    if needs is not None:
        if needs.lam < lam:
            raise ValueError(f"needs computed at lam={needs.lam} cannot serve lam={lam}")
        if not needs.start_feasible:
            return Outcome.INFEASIBLE, []
        pools.needs = needs
    for k in range(t.n):
        if deadline is not None and k % 16 == 0 and time.perf_counter() > deadline:
            return Outcome.TIMEOUT, []
        live = pools.step(k)
        if pools.size > limit:
            return Outcome.TOO_MANY_STATES, []
        if work is not None:
            work[0] += len(live.idx) + STEP_STATES
            if max_work is not None and work[0] > max_work:
                return Outcome.TIMEOUT, []
        b = _bucket(t, k, live)
        if k < t.n - 1:
            _extend(store, t, lam, k, live, b, _transitions(t, k, live, b, pairs), grid)
            continue
        # the peak closes the early chain; the late work must fit after it
        ok = b.may_close_early & (b.e_new + b.q_own <= lam) & (b.e_new <= live.nu)
        if not ok.any():
            return Outcome.INFEASIBLE, []
        if not want_plan:
            return Outcome.FEASIBLE, []
        src = int(live.idx[np.flatnonzero(ok)[0]])
        cols = store.cols
        return Outcome.FEASIBLE, _backtrack(src, k, cols["pos"], cols["parent"],
                                            cols["early"] > 0)
    return Outcome.INFEASIBLE, []  # pragma: no cover - the loop returns at k = n - 1


def unimodal_feasible(inst: Instance, lam: int, *, want_plan: bool = False,
                      deadline: float | None = None, levels: int = 0,
                      grid: int = 0, pairs: bool = True,
                      max_states: int | None = None) -> tuple[bool, Segments]:
    """:func:`feasibility` as ``(feasible, plan)``; raises :class:`UnknownError` when the test
    cannot tell (the deadline, or too many states)."""
    outcome, segs = feasibility(inst, lam, want_plan=want_plan, deadline=deadline,
                                levels=levels, grid=grid, pairs=pairs, max_states=max_states)
    if outcome in (Outcome.TIMEOUT, Outcome.TOO_MANY_STATES):
        raise UnknownError(outcome.value)
    return outcome is Outcome.FEASIBLE, segs


class UnknownError(Exception):
    """A feasibility test could not tell (its :class:`Outcome` is the message)."""


def _backtrack(src: int, k: int, pos: np.ndarray, parent: np.ndarray,
               early: np.ndarray) -> Segments:
    """Segments of the plan that ends with the peak ``pos[src] + 1 .. k`` (unimodal order);
    ``pos[s]`` is the unit after which state ``s`` cuts, ``parent[s]`` its predecessor."""
    buckets: list[tuple[int, int, bool]] = [(int(pos[src]) + 1, k, True)]
    s = src
    while s > 0:
        prev = int(parent[s])
        buckets.append((int(pos[prev]) + 1, int(pos[s]), bool(early[s])))
        s = prev
    first = [(lo, hi) for lo, hi, e in buckets if e]
    late = [(lo, hi) for lo, hi, e in buckets if not e]
    return sorted(first) + sorted(late, reverse=True)


class _Tests:
    """The feasibility tests of :func:`unimodal_exact` at one ``lam`` after another: the exact
    test, then coarser relaxations once a finer one has overflowed, and the best plan found."""

    def __init__(self, inst: Instance, *, deadline: float | None, levels: int,
                 grid_rel: float, pairs: bool, max_work: int | None = None) -> None:
        self.inst, self.deadline, self.levels = inst, deadline, levels
        self.work, self.max_work = [0], max_work
        self.grid_rel, self.pairs = grid_rel, pairs
        c = inst.consts
        self.exact = c.U == 0 and c.data == 0 and not inst.pcie_coupled
        self.segs: Segments = []
        self.found: int | None = None
        self.overflowed = [False, False]  # the exact / update-level tests have overflowed
        self.can_level = (not self.exact and levels > 0
                          and len(np.unique(inst.upd_prefix)) > levels)
        # with a grid to fall back on, a finer test gives up early
        self.fine_states = max(1, MAX_STATES // 3) if grid_rel > 0 else MAX_STATES
        self.timed_out = False
        self.needs: Needs | None = None  # the backward programme's, kept for later tests
        self.needs_pay = False  # an exact test without them outgrew what they cost
        self.finer = 1  # the fallback grid is grid_rel * lam / finer
        self.inconclusive: int | None = None  # where the grid phase's grid could not tell

    def test(self, lam: int, upper: int) -> bool | None:
        """True (a plan meets lam), False (none does) or None (unknown)."""
        tries = [i for i in (0, 1) if not self.overflowed[i] and (i == 0 or self.can_level)]
        for i in tries:
            if i == 0:
                outcome, plan = self._exact_test(lam, upper)
            else:  # update parts rounded to levels
                outcome, plan = feasibility(self.inst, lam, want_plan=True,
                                            deadline=self.deadline, work=self.work,
                                            max_work=self.max_work, pairs=self.pairs,
                                            max_states=self.fine_states, backward=False,
                                            levels=self.levels)
            if outcome is Outcome.TIMEOUT:
                self.timed_out = True
                return None
            if outcome is Outcome.TOO_MANY_STATES:
                self.overflowed[i] = True
                continue
            if outcome is Outcome.FEASIBLE:
                self.segs, self.found = plan, lam
            return outcome is Outcome.FEASIBLE
        return self._grid_test(lam, upper, self.finer) if self.grid_rel > 0 else None

    def _exact_test(self, lam: int, upper: int) -> tuple[Outcome, Segments]:
        """The exact test at ``lam`` (below ``upper``, the best plan's period), with the
        backward programme's needs (:data:`BACKWARD`) once they pay: the kept ones when
        they serve (:meth:`_kept_needs`); otherwise, until a test without
        them has outgrown the work they would cost (or its state limit), none; then new
        ones, computed at ``upper - 1`` (every later test lies below it)."""
        def run(needs: Needs | None, max_work: int | None) -> tuple[Outcome, Segments]:
            return feasibility(self.inst, lam, want_plan=True, deadline=self.deadline,
                               work=self.work, max_work=max_work, pairs=self.pairs,
                               max_states=self.fine_states, needs=needs, backward=False)

        needs = self._kept_needs(lam, upper)
        if needs is None and BACKWARD and not self.needs_pay:
            t = _tables(self.inst, 0)
            cap = self.work[0] + cells_bound(t, lam, _backward_step(lam),
                                             _first_lives(t, lam)) // CELLS_PER_STATE
            limit = cap if self.max_work is None else min(cap, self.max_work)
            outcome, plan = run(None, limit)
            if ((outcome is Outcome.TIMEOUT and limit == cap and not self._past_deadline())
                    or outcome is Outcome.TOO_MANY_STATES):
                self.needs_pay = True  # this test and the later ones use the needs
            else:
                return outcome, plan
        if needs is None and BACKWARD:
            needs = self.needs = backward_needs(self.inst, max(lam, upper - 1), pairs=self.pairs,
                                                deadline=self.deadline, work=self.work,
                                                max_work=self.max_work)
            if needs is None:
                return Outcome.TIMEOUT, []
        return run(needs, self.max_work)

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def _kept_needs(self, lam: int, upper: int) -> Needs | None:
        """The kept needs when they serve a test at ``lam`` below ``upper`` (the best plan's
        period): computed at ``lam`` or above, and at most :data:`NEEDS_REUSE` above
        ``upper``."""
        n = self.needs
        return (n if n is not None and lam <= n.lam < upper + int(NEEDS_REUSE * lam)
                else None)

    def grid_size(self, lam: int) -> int:
        """The grid (ticks) of the fallback tests at ``lam`` now."""
        return max(1, int(self.grid_rel * lam) // self.finer)

    def refine(self, lo: int, ceiling: int) -> bool:
        """Once the fallback's bracket ``(lo, ceiling]`` is a few grid steps wide (the grid is
        too coarse to tell), make the grid :data:`GRID_REFINE` times finer; False when it is
        already one tick or the exact test has not overflowed."""
        if not self.overflowed[0] or not self.told_all(lo, ceiling):
            return False
        self.finer *= GRID_REFINE
        return True

    def told_all(self, lo: int, at: int) -> bool:
        """Whether the grid now in use can tell no more between ``lo`` and ``at``: the
        bracket is :data:`GRID_PHASE_STEPS` grid steps wide or less, and a finer grid exists."""
        size = self.grid_size(at)
        return (self.grid_rel > 0 and GRID_REFINE > 1 and size > 1
                and at - lo <= GRID_PHASE_STEPS * size)

    def _grid_test(self, lam: int, upper: int, finer: int = 1) -> bool | None:
        """The test on a grid of ``grid_rel * lam / finer`` ticks: False proves, a plan found
        tightens the bracket by its exact period, and otherwise nothing is known."""
        grid = max(1, int(self.grid_rel * lam) // finer)
        outcome, plan = feasibility(self.inst, lam, want_plan=True, deadline=self.deadline,
                                    grid=grid, pairs=self.pairs, work=self.work,
                                    max_work=self.max_work, needs=self._kept_needs(lam, upper),
                                    backward=False)
        if outcome is Outcome.TIMEOUT:
            self.timed_out = True
            return None
        if outcome is Outcome.TOO_MANY_STATES:
            return None
        if outcome is Outcome.INFEASIBLE:
            return False
        value = int(self.inst.evaluate(plan).period)
        if value < upper:  # a plan after all: it tightens the bracket
            self.segs, self.found = plan, value
        return None


def _grid_phase(tests: _Tests, lo: int, top: int, tol: int) -> tuple[int, int]:
    """Narrow the bracket ``(lo, top]`` with grid tests (about a tenth of the exact tests'
    states near the optimum), bisecting: an infeasible grid test proves ``lam``, a plan found
    lowers ``top`` to its exact period; the phase ends once a grid test finds no better plan
    (the grid is then too coarse to tell), or the bracket is a few grid steps wide. A bracket
    that narrow from the start gets one grid test at its bottom (a plan that meets the bound
    there ends the search; the exact tests near a tight bound overflow more often). The first
    test of a wide bracket is :data:`GRID_FIRST_SKEW`'s fraction below the top."""
    if tests.grid_rel <= 0 or top - lo <= tol:
        return lo, top
    wide = max(tol, GRID_PHASE_STEPS * max(1, int(tests.grid_rel * top)))
    first = top - lo <= wide
    skew = not first and GRID_FIRST_SKEW > 0  # the first test of a wide bracket: near the top
    while first or top - lo > wide:
        lam = (lo + 1 if first else top - (top - lo) // GRID_FIRST_SKEW if skew
               else (lo + top) // 2)
        first = skew = False
        before = tests.found
        ok = tests._grid_test(lam, top)
        if tests.timed_out:
            break
        if ok is False:
            lo = lam
        elif tests.found is not None and tests.found != before and tests.found < top:
            top = tests.found
        else:
            tests.inconclusive = lam
            break
    return lo, top


def _fine_grid_phase(tests: _Tests, lo: int, top: int, tol: int) -> tuple[int, int]:
    """One grid test :data:`FINE_GRID_DIVISOR` times finer than the grid phase's, just below
    ``top``: near the optimum it often finds the optimal plan (ResNet-50 f30: the grid phase
    stops 61 ticks above it), so that a single exact test then proves it; an infeasible
    outcome proves ``top`` at once. Returns the new bracket."""
    if tests.grid_rel <= 0 or FINE_GRID_DIVISOR <= 1 or top - lo <= tol:
        return lo, top
    before = tests.found
    ok = tests._grid_test(top - 1, top, finer=FINE_GRID_DIVISOR)
    if ok is False and not tests.timed_out:
        return top - 1, top
    if tests.found is not None and tests.found != before and tests.found < top:
        top = tests.found
    return lo, top


def unimodal_exact(inst: Instance, lo: int, hi: int, *, deadline: float | None = None,
                   rel_tol: float = 0.0, levels: int = 512,
                   grid_rel: float = 2.5e-4, pairs: bool = True,
                   max_work: int | None = None) -> UnimodalResult | None:
    """The smallest ``lam`` some unimodal plan meets, between ``lo`` (a value known infeasible,
    or a bound minus one) and ``hi`` (the period of a known plan).

    ``lam`` is searched upward from ``lo`` by growing steps, then bisected until the bracket is
    within ``rel_tol * hi`` (at least one tick); a plan whose exact period is well below the
    ``lam`` it was found for is often the optimum, so just below its period is tried first
    (twice at most). The fronts stay small near the optimum and grow with slack, hence the
    upward search. A test whose live states outgrow a third of ``MAX_STATES`` (all of it when
    ``grid_rel=0``: no grid) is retried with coarser relaxations: the update parts rounded down
    to ``levels`` levels, then the states rounded to a grid of ``grid_rel * lam`` ticks, which
    may use all of ``MAX_STATES``; once a relaxation has overflowed, later tests go straight to
    the next one, and the search bisects (grid tests cost about the same at every ``lam`` near
    the bound, and the one nearest it proves the most). An infeasible relaxation is still a
    proof (``bound > lam``); a feasible one says nothing, and the search goes on below that
    ``lam`` (larger ones are tested on the grid only). Once the grid tests' bracket is
    :data:`GRID_PHASE_STEPS` grid steps wide (at once when the grid phase ended there), the
    grid is made :data:`GRID_REFINE` times finer and the bracket reopens up to the best plan:
    a coarse grid's infeasible ``lam`` stops below the exact threshold. Every plan found
    tightens the bracket by its exact period (the relaxed tails never exceed the exact ones).

    ``pairs`` is passed to :func:`unimodal_feasible`. Returns None on very large instances;
    stops at ``deadline`` (``time.perf_counter()``) with the best bound proven so far (every
    infeasible ``lam`` proves ``bound > lam``); ``max_work`` is a deterministic limit on the
    states examined over all tests (the deadline is then a safety stop).
    """
    if inst.n > MAX_UNITS or not inst.per_layer or not inst.stages:
        return None
    tests = _Tests(inst, deadline=deadline, levels=levels, grid_rel=grid_rel, pairs=pairs,
                   max_work=max_work)
    tol = max(1, int(rel_tol * hi))
    top, ceiling = hi, hi  # a feasible lam; the lowest lam whose test was inconclusive
    lo0 = lo
    lo, top = _grid_phase(tests, lo, top, tol)
    if (lo, top) != (lo0, hi):
        lo, top = _fine_grid_phase(tests, lo, top, tol)
    at = tests.inconclusive
    if at is not None and tests.told_all(lo, at):
        tests.finer = GRID_REFINE  # the grid phase's grid has told all it can
    step = max(1, (hi - lo) // 2000)
    # after a plan well below lam, or once the grid phase has narrowed the bracket (to a few
    # grid steps: little slack), try just below the best period first
    narrowed = (lo, top) != (lo0, hi)
    descend, sharp = 2, narrowed
    while min(top, ceiling) - lo > tol and not tests.timed_out:
        upper = min(top, ceiling)
        if descend > 0 and upper == top and sharp:
            lam = upper - 1
            descend -= 1
        elif tests.found is None and not tests.overflowed[0]:
            lam = min(lo + step, upper - 1)
        else:
            lam = (lo + upper) // 2
        ok = tests.test(lam, upper)
        if tests.timed_out:
            break
        if tests.found is not None and tests.segs:
            top = min(top, int(inst.evaluate(tests.segs).period))
        if ok is None:
            ceiling = lam
            step = max(1, (lam - lo) // 4)
            if tests.refine(lo, ceiling):  # a finer grid may tell what this one cannot
                ceiling = top
        elif ok:
            value = int(inst.evaluate(tests.segs).period)
            # a plan well below the lam asked for hints at the optimum (tried each time: BACKWARD)
            sharp = value <= lam - (lam - lo) // 4 or (narrowed and value < lam)
            descend = max(descend, int(sharp and BACKWARD))
            top = min(top, lam, value)
        else:
            lo = lam
            step = step * 3 // 2 + 1
    # every lam up to lo is proven infeasible (a timeout leaves the bracket open: the bound is
    # what was proven, never hi); with nothing feasible below hi, lo + 1 == hi
    done = top - lo <= 1 if tests.found is not None else lo + 1 >= hi
    wall = tests.timed_out and (max_work is None or tests.work[0] <= max_work)
    return UnimodalResult(lo + 1, tests.segs, tests.exact and done, tests.work[0], wall)
