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

Tails are the forward times from each bucket's gating layer (``fwd_from``): exact without an
update step, a relaxation with one (the updates only add), as are the data-path and shared-PCIe
terms, which the programme leaves out (the constant bounds keep their plan-independent part).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .instance import Instance, Segments

__all__ = ["UnimodalResult", "unimodal_exact", "unimodal_feasible"]

_BIG = np.int64(1) << 60

#: Instances larger than this are left to the other bounds (the fronts grow with n).
MAX_UNITS = 1500


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


def _pareto(e: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """Indices of the states not dominated (smaller ``e``, larger ``nu``)."""
    if len(e) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((-nu, e))
    nu_s = nu[order]
    best_before = np.r_[-_BIG - 1, np.maximum.accumulate(nu_s)[:-1]]
    return order[nu_s > best_before]


def unimodal_feasible(inst: Instance, lam: int, *, want_plan: bool = False
                      ) -> tuple[bool, Segments]:
    """Whether some unimodal plan keeps every tail term at most ``lam`` (and one such plan)."""
    n = inst.n
    r = inst.r.astype(np.int64)
    q = inst.fwd_from[inst.layer].astype(np.int64)
    pp = np.r_[0, np.cumsum(inst.p)].astype(np.int64)
    a = np.int64(inst.a)
    # the work still to come after unit k, at least: its bandwidth parts and one start-up
    rest = np.r_[np.cumsum(inst.p[::-1])[::-1][1:], 0].astype(np.int64) + a
    r_last = r[n - 1]
    peak_min = r_last + a + np.int64(inst.p[-1])  # the peak ends no earlier
    # states per cut position (-1 = before unit 0): e, nu, global id; parents and sides
    pos_e: list[np.ndarray] = [np.array([-_BIG])]
    pos_nu: list[np.ndarray] = [np.array([_BIG])]
    pos_id: list[np.ndarray] = [np.array([0])]
    parent: list[np.ndarray] = [np.array([-1])]
    early: list[np.ndarray] = [np.array([True])]
    owner: list[np.ndarray] = [np.array([-1])]
    next_id = 1
    first_live = 0  # positions before it can no longer start a bucket (index into pos_*)
    for k in range(n):
        # a bucket j+1..k is too long once it cannot be early nor late: both tests grow in k
        while first_live < k:
            j = first_live - 1
            d_min = a + pp[k + 1] - pp[j + 1]
            if r[k] + d_min + q[k] <= lam or lam - q[k] - d_min >= peak_min:
                break
            first_live += 1
        live = range(first_live, k + 1)
        flat_e = np.concatenate([pos_e[i] for i in live])
        flat_nu = np.concatenate([pos_nu[i] for i in live])
        flat_id = np.concatenate([pos_id[i] for i in live])
        flat_pos = np.concatenate([np.full(len(pos_e[i]), i - 1) for i in live])
        d = a + pp[k + 1] - pp[flat_pos + 1]
        # early bucket (pos+1 .. k)
        e_new = np.maximum(flat_e, r[k]) + d
        ok_e = e_new + q[k] <= lam
        if k == n - 1:  # the peak closes the early chain; the late work must fit after it
            ok = ok_e & (e_new <= flat_nu)
            if not ok.any():
                return False, []
            if not want_plan:
                return True, []
            src = int(flat_id[np.flatnonzero(ok)[0]])
            return True, _backtrack(src, k, np.concatenate(owner), np.concatenate(parent),
                                    np.concatenate(early))
        # every remaining unit is early (before the peak) or late (after it): the whole
        # communication ends no earlier than e + the remaining work, and it must end by nu
        ok_e &= np.maximum(e_new + rest[k], peak_min) <= flat_nu
        # late bucket (pos+1 .. k): the whole communication must end by nu
        nu_new = np.minimum(flat_nu, lam - q[k]) - d
        ok_l = nu_new >= np.maximum(flat_e + rest[k], peak_min)
        ce = np.concatenate([e_new[ok_e], flat_e[ok_l]])
        cn = np.concatenate([flat_nu[ok_e], nu_new[ok_l]])
        cs = np.concatenate([flat_id[ok_e], flat_id[ok_l]])
        cl = np.r_[np.ones(int(ok_e.sum()), dtype=bool), np.zeros(int(ok_l.sum()), dtype=bool)]
        keep = _pareto(ce, cn)
        pos_e.append(ce[keep])
        pos_nu.append(cn[keep])
        pos_id.append(np.arange(next_id, next_id + len(keep)))
        parent.append(cs[keep])
        early.append(cl[keep])
        owner.append(np.full(len(keep), k))
        next_id += len(keep)
    return False, []  # pragma: no cover - the loop returns at k = n - 1


def _backtrack(src: int, k: int, owner: np.ndarray, parent: np.ndarray,
               early: np.ndarray) -> Segments:
    """Segments of the plan that ends with the peak ``owner[src] + 1 .. k`` (unimodal order);
    ``owner[s]`` is the unit after which state ``s`` cuts, ``parent[s]`` its predecessor."""
    buckets: list[tuple[int, int, bool]] = [(int(owner[src]) + 1, k, True)]
    s = src
    while s > 0:
        prev = int(parent[s])
        buckets.append((int(owner[prev]) + 1, int(owner[s]), bool(early[s])))
        s = prev
    first = [(lo, hi) for lo, hi, e in buckets if e]
    late = [(lo, hi) for lo, hi, e in buckets if not e]
    return sorted(first) + sorted(late, reverse=True)


def unimodal_exact(inst: Instance, lo: int, hi: int) -> UnimodalResult | None:
    """Bisect ``lam`` in ``(lo, hi]`` (``hi`` a known period); None on very large instances."""
    if inst.n > MAX_UNITS or not inst.per_layer or not inst.stages:
        return None
    c = inst.consts
    exact = c["U"] == 0 and c["io"] + c["h2d"] == 0 and not inst.pcie_coupled
    ok, segs = unimodal_feasible(inst, hi, want_plan=True)
    if not ok:  # hi is the period of a plan, so only non-tail terms can make it infeasible
        return UnimodalResult(lo + 1, [], False)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, plan = unimodal_feasible(inst, mid, want_plan=True)
        if ok:
            hi, segs = mid, plan
        else:
            lo = mid
    return UnimodalResult(hi, segs, exact)
