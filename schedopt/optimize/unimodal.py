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
live states are sources: a state is dropped once no bucket from it can end at ``k`` or later.
Fronts that outgrow :data:`MAX_STATES` fall back to coarser relaxations (update levels, then a
grid on ``e`` and ``nu``), whose infeasibility is still a proof.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .instance import Instance, Segments

__all__ = ["UnimodalResult", "pair_makespan", "unhidden_share", "unimodal_exact",
           "unimodal_feasible"]

_BIG = np.int64(1) << 60

#: Promises of a cut inside a layer about the buckets after it (see
#: :func:`unimodal_feasible`): the next one ends in a later layer; it ends in the same layer;
#: it does, and every bucket still to end in this layer is early; it does, and one of the
#: buckets still to end in this layer is late.
_LEAVE, _STAY, _STAY_EARLY, _STAY_LATE = 1, 2, 3, 4

#: Instances larger than this are left to the other bounds (the fronts grow with n).
MAX_UNITS = 1500

#: Live states beyond which a test gives up (loose bounds make the fronts explode).
MAX_STATES = 400_000


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
    """

    bound: int
    segs: Segments
    exact: bool


_NONE = np.array([-_BIG - 1])


def _pareto(e: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """Indices of the states not dominated (smaller ``e``, larger ``nu``)."""
    if len(e) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-nu, e))
    nu_s = nu[order]
    best_before = np.concatenate((_NONE, np.maximum.accumulate(nu_s)[:-1]))
    return order[nu_s > best_before]


def _pareto3(e: np.ndarray, nu: np.ndarray, ug: np.ndarray) -> np.ndarray:
    """Indices of the states not dominated (smaller ``e``, larger ``nu``, smaller ``ug``).

    One sort by ``(ug, e, -nu)``; the groups of equal ``ug`` in increasing order, each filtered
    on its own and against the staircase (``e`` up, ``nu`` up) of the groups before it.
    """
    if len(e) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-nu, e, ug))
    e_s, nu_s, ug_s = e[order], nu[order], ug[order]
    edges = np.concatenate(([0], np.flatnonzero(ug_s[1:] != ug_s[:-1]) + 1, [len(e)]))
    keep = np.zeros(len(e), dtype=bool)
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
        srt = np.lexsort((-both_nu, both_e))
        both_e, both_nu = both_e[srt], both_nu[srt]
        step = both_nu > np.concatenate((_NONE, np.maximum.accumulate(both_nu)[:-1]))
        front_e, front_nu = both_e[step], both_nu[step]
    return order[keep]


class _Buffer:
    """Growing int64 columns of the states, appended position by position."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.cols = {k: np.zeros(1024, dtype=np.int64) for k in names}
        self.size = 0

    def append(self, **cols: np.ndarray) -> None:
        m = len(next(iter(cols.values())))
        while self.size + m > len(self.cols["e"]):
            for k, v in self.cols.items():
                self.cols[k] = np.r_[v, np.zeros(len(v), dtype=np.int64)]
        for k, v in cols.items():
            self.cols[k][self.size:self.size + m] = v
        self.size += m

    def view(self, start: int) -> dict[str, np.ndarray]:
        return {k: v[start:self.size] for k, v in self.cols.items()}


def unimodal_feasible(inst: Instance, lam: int, *, want_plan: bool = False,
                      deadline: float | None = None, levels: int = 0,
                      grid: int = 0, pairs: bool = True,
                      max_states: int | None = None) -> tuple[bool, Segments]:
    """Whether some unimodal plan keeps every tail term at most ``lam`` (and one such plan);
    raises an internal timeout past ``deadline``. ``levels > 0`` rounds the update parts down
    to that many levels; ``grid > 0`` rounds every state's ``e`` down and ``nu`` up to
    multiples of ``grid`` ticks (fewer states, still relaxations: an infeasible ``lam`` stays
    a proof, a plan found must be judged exactly). ``pairs=False`` leaves out the flow-shop
    term of late pairs (a weaker bound, for the ablation). The test gives up (an internal
    exception) once more than ``max_states`` (default :data:`MAX_STATES`) states are live."""
    limit = MAX_STATES if max_states is None else max_states
    n = inst.n
    r = inst.r.astype(np.int64)
    q = inst.fwd_from[inst.layer].astype(np.int64)
    pp = np.r_[0, np.cumsum(inst.p)].astype(np.int64)
    a = np.int64(inst.a)
    # the work still to come after unit k, at least: its bandwidth parts and one start-up
    rest = np.r_[np.cumsum(inst.p[::-1])[::-1][1:], 0].astype(np.int64) + a
    r_last = r[n - 1]
    peak_min = r_last + a + np.int64(inst.p[-1])  # the peak ends no earlier
    # the whole communication ends no earlier than any later unit's release plus the work from
    # it on: fit[k] = max over j > k of r[j] + a + p[j] + ... + p[n - 1]
    suffix_p = np.cumsum(inst.p[::-1])[::-1].astype(np.int64)
    fit = np.r_[np.maximum.accumulate((r + suffix_p)[::-1])[::-1][1:], 0] + a
    # update part of a tail: the updates of buckets gated by later layers (one value per
    # gating layer, fixed by the bucket that opens it: the units before its first unit)
    upd_in = np.r_[0, inst.upd_prefix].astype(np.int64)
    if levels and upd_in[-1] > 0:
        unit = max(1, int(upd_in[-1]) // levels)
        upd_in = upd_in // unit * unit
    # the last bucket of a gating layer (in readiness order) also counts its own update share
    # (exact, not rounded): tails still grow with readiness
    upd_own = np.r_[0, inst.upd_prefix].astype(np.int64)
    layer = inst.layer.astype(np.int64)
    first = inst.layer_first_unit
    # the peak (the bucket of the last unit, the last of its gating layer) ends no earlier than
    # max(e, r_last) + a + p[n - 1] and its tail holds the forward from its layer, its own
    # share and the update part of the bucket that opens that layer (not opened yet: at least
    # that of the next unit)
    peak_need = a + np.int64(inst.p[-1]) + q[n - 1] + upd_own[n] - upd_own[n - 1]
    inside = np.r_[inst.layer[1:] == inst.layer[:-1], False]  # a cut after k splits a layer
    # ... and leaves one unit of it: a bucket after the cut that ends in the layer is that unit
    one_left = inside & np.r_[~inside[1:], False]
    # ... and more of it: the later late buckets of the layer (at least one) hold at most
    # its remaining work, each at least one unit's update (see the general pair term below)
    upd_unit = np.diff(upd_own)
    rest_max = np.zeros(n, dtype=np.int64)  # most work of buckets in the units after k
    rest_min_upd = np.zeros(n, dtype=np.int64)  # least update of one unit after k
    for k in range(n - 2, -1, -1):
        if inside[k]:
            rest_max[k] = a + np.int64(inst.p[k + 1]) + (rest_max[k + 1] if inside[k + 1] else 0)
            rest_min_upd[k] = (min(upd_unit[k + 1], rest_min_upd[k + 1]) if inside[k + 1]
                               else upd_unit[k + 1])
    # every state: e, nu, update part, cut position, parent state, side (1 early), and what a
    # cut inside a layer promised of the buckets after it (0 nothing, or one of _LEAVE,
    # _STAY, _STAY_EARLY, _STAY_LATE)
    buf = _Buffer(("e", "nu", "ug", "pos", "parent", "early", "next"))
    buf.append(e=np.array([-_BIG]), nu=np.array([_BIG]), ug=np.array([0]),
               pos=np.array([-1]), parent=np.array([-1]), early=np.array([1]),
               next=np.array([0]))
    first_live = 0  # positions before it can no longer start a bucket
    # the states that may still start a bucket (indices into buf), and a lower envelope of the
    # forward tails from k on (q grows along the ready order; the envelope keeps the tests
    # below valid for every later k without relying on it)
    live = np.zeros(0, dtype=np.int64)
    seen = 0
    q_env = np.minimum.accumulate(q[::-1])[::-1]
    for k in range(n):
        if deadline is not None and k % 16 == 0 and time.perf_counter() > deadline:
            raise _Timeout
        # a bucket j+1..k is too long once it cannot be early nor late: both tests grow in k
        while first_live < k:
            j = first_live - 1
            d_min = a + pp[k + 1] - pp[j + 1]
            if r[k] + d_min + q[k] <= lam or lam - q[k] - d_min >= peak_min:
                break
            first_live += 1
        live = np.r_[live, np.arange(seen, buf.size)]
        seen = buf.size
        st = {c: buf.cols[c][live] for c in ("e", "nu", "ug", "pos", "next")}
        pos_l, e_l, prom_l = st["pos"], st["e"], st["next"]
        # drop the states that can start no bucket ending at k or later: a bucket too long
        # (first_live); a promise about a layer already passed; an early chain too late for
        # an early bucket (its end and tail only grow with k) and for a late one (the late
        # work from the state on plus its tail must fit after e); or a peak too late
        stay_l = prom_l >= _STAY  # the promises of a cut inside a layer, about that layer
        rest_from = pp[n] - pp[pos_l + 1] + 2 * a
        kill = (pos_l + 1 < first_live) | (
            stay_l & (layer[np.maximum(pos_l, 0)] != layer[k])) | (
            (np.maximum(e_l, r[k]) + a + pp[k + 1] - pp[pos_l + 1] + q_env[k] > lam)
            & (e_l + rest_from + q_env[k] > lam)) | (
            ~stay_l & (np.maximum(e_l, r_last) + peak_need + upd_in[pos_l + 1] > lam))
        if kill.any():
            live = live[~kill]
            st = {c: v[~kill] for c, v in st.items()}
        if len(live) > limit:
            raise _TooManyStates
        flat_e, flat_nu, flat_pos, promise = st["e"], st["nu"], st["pos"], st["next"]
        same = layer[np.maximum(flat_pos, 0)] == layer[k]
        stay_src = promise >= _STAY
        allowed = (promise == 0) | ((promise == _LEAVE) & ~same) | (stay_src & same)
        # a promise of early buckets forbids late ones; an open debt of a late one forbids
        # closing the layer with an early one
        may_late = allowed & (promise != _STAY_EARLY)
        may_close_early = allowed & (promise != _STAY_LATE)
        d = a + pp[k + 1] - pp[flat_pos + 1]
        ug = np.where(flat_pos + 1 <= first[k], upd_in[flat_pos + 1], st["ug"])
        q_base = q[k] + ug
        q_own = q_base + (upd_own[k + 1] - upd_own[flat_pos + 1])
        e_new = np.maximum(flat_e, r[k]) + d
        if k == n - 1:  # the peak closes the early chain; the late work must fit after it
            ok = may_close_early & (e_new + q_own <= lam) & (e_new <= flat_nu)
            if not ok.any():
                return False, []
            if not want_plan:
                return True, []
            src = int(live[np.flatnonzero(ok)[0]])
            cols = buf.view(0)
            return True, _backtrack(src, k, cols["pos"], cols["parent"], cols["early"] > 0)
        # (new promise, tail and mask if early, tail and mask if late; None: not this side).
        # An early bucket counts its own share unless it shares the peak's layer; a late one
        # counts it only as the last late bucket of its layer: the layer's last bucket, or
        # one after which the layer's buckets are all early (_STAY_EARLY); otherwise a later
        # bucket of the layer must be late (_STAY_LATE)
        q_early_stay = q_own if layer[k] != layer[n - 1] else q_base
        # a late bucket A (ending at k) followed by later late buckets of its layer: whatever
        # their order, the layer's forward waits for all their updates, which run one at a
        # time after their buckets (a two-machine flow shop). With one unit left (bucket B),
        # A's tail holds the best pair makespan beyond the pair's communication; with more,
        # A's own share less what the later buckets' communication can hide, at most their
        # work less one unit's update
        q_late_stay = q_base
        if pairs and inside[k]:
            s_a = upd_own[k + 1] - upd_own[flat_pos + 1]
            if one_left[k]:
                d_b = a + np.int64(inst.p[k + 1])
                s_b = upd_own[k + 2] - upd_own[k + 1]
                q_late_stay = q_base + pair_makespan(d, s_a, d_b, s_b) - d - d_b
            else:
                q_late_stay = q_base + unhidden_share(s_a, rest_max[k], rest_min_upd[k])
        if inside[k]:
            groups = [(_LEAVE, (q_own, may_close_early), (q_own, may_late)),
                      (_STAY, (q_early_stay, allowed), None),
                      (_STAY_EARLY, None, (q_own, may_late)),
                      (_STAY_LATE, None, (q_late_stay, may_late))]
        else:
            groups = [(0, (q_own, may_close_early), (q_own, may_late))]
        ugp = upd_in[k + 1] if k + 1 <= first[n - 1] else ug
        peak_ok_l = np.maximum(flat_e, r_last) + peak_need + ugp <= lam
        for tag, early_side, late_side in groups:
            stay = tag != _LEAVE and tag != 0
            # early bucket (pos+1 .. k); every remaining unit is early (before the peak) or
            # late (after it): the whole communication ends no earlier than e + the remaining
            # work, and it must end by nu; without a late bucket so far, it ends with a later
            # bucket, whose tail is at least that of unit k + 1 with the updates so far
            ie = il = np.zeros(0, dtype=np.int64)
            if early_side is not None:
                q_e, mask = early_side
                ug_next = ug if stay else upd_in[k + 1]
                nu_eff = np.where(flat_nu >= _BIG, lam - q[k + 1] - ug_next, flat_nu)
                ok_e = mask & (e_new + q_e <= lam) & (
                    np.maximum(e_new + rest[k], fit[k]) <= nu_eff)
                ok_e &= np.maximum(e_new, r_last) + peak_need + ugp <= lam
                ie = np.flatnonzero(ok_e)
            if late_side is not None:  # late bucket (pos+1 .. k): everything ends by nu
                q_l, mask = late_side
                nu_new = np.minimum(flat_nu, lam - q_l) - d
                il = np.flatnonzero(mask & peak_ok_l & (
                    nu_new >= np.maximum(flat_e + rest[k], fit[k])))
                nu_l = nu_new[il]
            else:
                nu_l = np.zeros(0, dtype=np.int64)
            # the remaining units are released at r[k + 1] or later: an early chain that ends
            # before that is as good as one that ends then (more states coincide)
            ce = np.maximum(np.r_[e_new[ie], flat_e[il]], r[k + 1])
            cn = np.r_[flat_nu[ie], nu_l]
            cs = live[np.r_[ie, il]]
            cl = np.r_[np.ones(len(ie), dtype=np.int64), np.zeros(len(il), dtype=np.int64)]
            cu = np.r_[ug[ie], ug[il]] if stay else np.zeros(len(cs), dtype=np.int64)
            ct = np.full(len(cs), tag)
            if tag == _STAY:  # an early bucket inside a layer keeps the promise it found
                ct[:len(ie)] = np.where(promise[ie] == _STAY_EARLY, _STAY_EARLY, np.where(
                    promise[ie] == _STAY_LATE, _STAY_LATE, _STAY))
            if grid:
                ce = ce // grid * grid
                cn = np.where(cn >= _BIG, cn, -(-cn // grid) * grid)
            for t in np.unique(ct):
                sel = np.flatnonzero(ct == t)
                keep = sel[_pareto3(ce[sel], cn[sel], cu[sel]) if stay else _pareto(
                    ce[sel], cn[sel])]
                buf.append(e=ce[keep], nu=cn[keep], ug=cu[keep], pos=np.full(len(keep), k),
                           parent=cs[keep], early=cl[keep], next=np.full(len(keep), t))
    return False, []  # pragma: no cover - the loop returns at k = n - 1


def pair_makespan(d_a: np.ndarray, s_a: np.ndarray, d_b: np.ndarray | np.int64,
                  s_b: np.ndarray | np.int64) -> np.ndarray:
    """Shortest makespan of two jobs on a two-machine flow shop (communication, then update)
    in either order: ``min(d_b + s_a + max(d_a, s_b), d_a + s_b + max(d_b, s_a))``."""
    return np.minimum(d_b + s_a + np.maximum(d_a, s_b), d_a + s_b + np.maximum(d_b, s_a))


def unhidden_share(s_a: np.ndarray, work_after: np.int64 | int,
                   least_update: np.int64 | int) -> np.ndarray:
    """What a late bucket's update ``s_a`` adds to its layer's flow shop beyond the
    communication of the bucket and of the later late buckets of its layer (at least one, at
    most ``work_after`` of communication in all, each with an update of at least
    ``least_update``): ``max(0, s_a - max(0, work_after - least_update))``.

    Whatever the order, either the bucket is the last of the flow shop (its update follows all
    the communication) or another one follows it (after its update comes at least that one's).
    """
    return np.maximum(0, s_a - max(0, int(work_after) - int(least_update)))


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


class _Timeout(Exception):
    """The deadline passed."""


class _TooManyStates(Exception):
    """The fronts outgrew ``MAX_STATES`` (too much slack at this ``lam``)."""


def unimodal_exact(inst: Instance, lo: int, hi: int, *, deadline: float | None = None,
                   rel_tol: float = 0.0, levels: int = 512,
                   grid_rel: float = 2.5e-4, pairs: bool = True) -> UnimodalResult | None:
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
    ``lam`` (larger ones are tested on the grid only). Every plan found tightens the bracket by
    its exact period (the relaxed tails never exceed the exact ones).

    ``pairs`` is passed to :func:`unimodal_feasible`. Returns None on very large instances;
    stops at ``deadline`` (``time.perf_counter()``) with the best bound proven so far (every
    infeasible ``lam`` proves ``bound > lam``).
    """
    if inst.n > MAX_UNITS or not inst.per_layer or not inst.stages:
        return None
    c = inst.consts
    exact = c.U == 0 and c.io + c.h2d == 0 and not inst.pcie_coupled
    segs: Segments = []
    found = None
    overflowed = [False, False]  # the exact / update-level tests have overflowed
    can_level = not exact and levels > 0 and len(np.unique(inst.upd_prefix)) > levels
    # with a grid to fall back on, a finer test gives up early
    fine_states = max(1, MAX_STATES // 3) if grid_rel > 0 else MAX_STATES

    def test(lam: int, upper: int) -> bool | None:
        """True (a plan meets lam), False (none does) or None (unknown)."""
        nonlocal segs, found
        tries = [(i, kw) for i, kw in enumerate(({}, {"levels": levels}))
                 if not overflowed[i] and (i == 0 or can_level)]
        for i, kw in tries:
            try:
                ok, plan = unimodal_feasible(inst, lam, want_plan=True, deadline=deadline,
                                             pairs=pairs, max_states=fine_states, **kw)
            except _TooManyStates:
                overflowed[i] = True
                continue
            if ok:
                segs, found = plan, lam
            return ok
        if grid_rel <= 0:
            return None
        grid = max(1, int(grid_rel * lam))
        try:
            ok, plan = unimodal_feasible(inst, lam, want_plan=True, deadline=deadline,
                                         grid=grid, pairs=pairs)
        except _TooManyStates:
            return None
        if not ok:
            return False
        value = int(inst.evaluate(plan).period)
        if value < upper:  # a plan after all: it tightens the bracket
            segs, found = plan, value
        return None

    tol = max(1, int(rel_tol * hi))
    top, ceiling = hi, hi  # a feasible lam; the lowest lam whose test was inconclusive
    step = max(1, (hi - lo) // 2000)
    descend, sharp = 2, False  # after a plan well below lam, try just below its period first
    try:
        while min(top, ceiling) - lo > tol:
            upper = min(top, ceiling)
            if found is None and not overflowed[0]:
                lam = min(lo + step, upper - 1)
            elif descend > 0 and upper == top and sharp:
                lam = upper - 1
                descend -= 1
            else:
                lam = (lo + upper) // 2
            ok = test(lam, upper)
            if found is not None and segs:
                top = min(top, int(inst.evaluate(segs).period))
            if ok is None:
                ceiling = lam
                step = max(1, (lam - lo) // 4)
            elif ok:
                value = int(inst.evaluate(segs).period)
                # a plan well below the lam asked for is a hint that it is the optimum
                sharp = value <= lam - (lam - lo) // 4
                top = min(top, lam, value)
            else:
                lo = lam
                step = step * 3 // 2 + 1
    except _Timeout:
        pass
    # every lam up to lo is proven infeasible (a timeout leaves the bracket open: the bound is
    # what was proven, never hi); with nothing feasible below hi, lo + 1 == hi
    done = top - lo <= 1 if found is not None else lo + 1 >= hi
    return UnimodalResult(lo + 1, segs, exact and done)
