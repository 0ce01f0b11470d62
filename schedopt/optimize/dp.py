"""Exact dynamic programmes over contiguous FIFO bucketings.

Units are in gradient-ready order with releases ``r`` (non-decreasing), bandwidth parts ``p`` and
a start-up cost ``a`` per bucket. A FIFO plan is a list of segments in ready order; segment
``i..j`` is released at ``r[j]`` and lasts ``a + p[i] + ... + p[j]``; the link runs the segments
back to back.

* :func:`min_makespan` minimises the end of the last segment (the wait-for-all class). With
  ``f[j]`` the earliest end of a bucketing of units ``0..j``,
  ``f[j] = min_i max(f[i-1], r[j]) + a + P[j+1] - P[i]``. ``f`` is non-decreasing, so the
  candidates split at ``t_j = min{i : f[i-1] > r[j]}``: below it the best is ``i = t_j - 1``; above
  it the minimum of ``f[i-1] - P[i]`` over a window whose ends only move right (a monotone
  queue). The programme is O(n).
* :func:`min_max_tail` decides, for a bound ``lam``, whether some bucketing keeps
  ``end_k + tail[hi_k] <= lam`` for every bucket (the per-layer class, tails non-decreasing) with
  the same recurrence under deadlines, and bisects on ``lam``.

Both run on integer ticks held in float64 (exact below 2**53).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from schedopt.optimize.instance import Instance, Segments
from schedopt.optimize.period import PerLayer

__all__ = [
    "fifo_dp",
    "min_makespan",
    "min_max_tail",
    "solve_fifo",
    "solve_fifo_per_layer",
    "solve_wait_for_all",
]

_INF = float("inf")


def fifo_dp(
    r: np.ndarray,
    p: np.ndarray,
    a: float,
    deadline: np.ndarray | None = None,
    max_start: np.ndarray | None = None,
    last_max_start: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Earliest end ``f[j]`` of a FIFO bucketing of units ``0..j`` and its last start ``arg[j]``.

    Parameters
    ----------
    r, p, a
        Releases (non-decreasing), bandwidth parts, start-up cost.
    deadline
        Optional latest end of a bucket that ends at unit ``j``.
    max_start
        Optional non-decreasing largest first unit of a bucket that ends at ``j`` (default
        ``j``); ``max_start[j] = `` the first unit of ``j``'s layer allows one bucket end per layer.
    last_max_start
        Optional tighter limit for the last bucket (evaluated directly).

    Returns
    -------
    f, arg
        ``f[j]`` (inf when no bucketing meets the deadlines) and the first unit of the last
        bucket of an optimal bucketing of ``0..j``.
    """
    n = len(r)
    rr = np.asarray(r, dtype=float).tolist()
    pp_arr = np.r_[0.0, np.cumsum(np.asarray(p, dtype=float))]
    pp = pp_arr.tolist()
    ms_all = list(range(n)) if max_start is None else np.asarray(max_start).tolist()
    dl = None if deadline is None else np.asarray(deadline, dtype=float).tolist()
    f = [_INF] * n
    arg = [0] * n
    g = [0.0] * n
    dq: deque[int] = deque()
    t = 1
    pushed = 0
    for j in range(n):
        ms = ms_all[j]
        while pushed <= ms:
            i = pushed
            g[i] = (f[i - 1] if i > 0 else -_INF) - pp[i]
            while dq and g[dq[-1]] >= g[i]:
                dq.pop()
            dq.append(i)
            pushed += 1
        rj = rr[j]
        while t <= ms and f[t - 1] <= rj:
            t += 1
        while dq and dq[0] < t:
            dq.popleft()
        if j == n - 1 and last_max_start is not None:
            hi = min(ms, last_max_start)
            if hi < 0:
                best, bi = _INF, 0
            else:
                fprev = np.r_[-_INF, np.asarray(f[:hi], dtype=float)]
                vals = np.maximum(fprev, rj) + a + pp[j + 1] - pp_arr[: hi + 1]
                bi = int(np.argmin(vals))
                best = float(vals[bi])
        else:
            best = rj + a + pp[j + 1] - pp[t - 1]
            bi = t - 1
            if dq:
                cand = g[dq[0]] + a + pp[j + 1]
                if cand < best:
                    best, bi = cand, dq[0]
        if dl is not None and best > dl[j]:
            best = _INF
        f[j] = best
        arg[j] = bi
    return np.asarray(f), np.asarray(arg, dtype=np.int64)


def _backtrack(arg: np.ndarray, n: int) -> Segments:
    segs: Segments = []
    j = n - 1
    while j >= 0:
        i = int(arg[j])
        segs.append((i, j))
        j = i - 1
    segs.reverse()
    return segs


def min_makespan(r: np.ndarray, p: np.ndarray, a: float,
                 max_start: np.ndarray | None = None) -> tuple[float, Segments]:
    """Smallest end of the last bucket over FIFO contiguous bucketings, and the bucketing."""
    f, arg = fifo_dp(r, p, a, max_start=max_start)
    return float(f[-1]), _backtrack(arg, len(r))


def _range_min(g: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``min(g[lo[k]..hi[k]])`` for every k (inf where the range is empty), by a sparse
    table."""
    n = len(g)
    table = [g]
    span = 1
    while 2 * span <= n:
        prev = table[-1]
        table.append(np.minimum(prev[:-span], prev[span:]))
        span *= 2
    out = np.full(len(lo), _INF)
    ok = hi >= lo
    length = np.where(ok, hi - lo + 1, 1)
    k = np.floor(np.log2(length)).astype(np.int64)
    for level in np.unique(k[ok]).tolist():
        sel = ok & (k == level)
        t = table[level]
        out[sel] = np.minimum(t[lo[sel]], t[hi[sel] - (1 << level) + 1])
    return out


def min_makespan_by_count(r: np.ndarray, p: np.ndarray, a: float, max_start: np.ndarray,
                          stop: Callable[[int], bool]) -> list[Segments]:
    """Best FIFO bucketing with at most ``c`` buckets, for ``c = 1, 2, ...`` until ``stop(c)``.

    Each step is one vectorised layer: with ``prev`` the earliest ends using at most ``c - 1``
    buckets (non-decreasing), a bucket ``i..j`` after them ends at
    ``max(prev[i-1], r[j]) + a + P[j+1] - P[i]``; the starts with ``prev[i-1] <= r[j]`` are a
    prefix (take the largest), the others a range (a sparse-table minimum).

    Returns
    -------
    list of Segments
        The plan for every ``c`` tried (``c = len(result)`` at most).
    """
    n = len(r)
    rr = np.asarray(r, dtype=float)
    pp = np.r_[0.0, np.cumsum(np.asarray(p, dtype=float))]
    ms = np.asarray(max_start, dtype=np.int64)
    j = np.arange(n)
    prev = np.full(n, _INF)  # at most c-1 buckets covering 0..j (c = 1: none possible)
    plans: list[Segments] = []
    args: list[np.ndarray] = []  # per c: first unit of the last bucket, or -1: as for c-1
    c = 0
    while c < n and not (c > 0 and stop(c)):
        c += 1
        prev_at = np.r_[-_INF if c == 1 else _INF, prev]  # prev_at[i] = prev[i-1]
        # starts i in 0..ms[j] with prev_at[i] <= r[j]: a prefix 0..t-1 (prev_at non-decreasing)
        t = np.searchsorted(prev_at, rr, side="right")
        t = np.minimum(t, ms + 1)
        best = np.where(t > 0, rr + a + pp[j + 1] - pp[np.maximum(t - 1, 0)], _INF)
        arg = np.where(t > 0, t - 1, 0)
        g = prev_at - pp[: n + 1]
        other = _range_min(g, t, ms) + a + pp[j + 1]
        # arg of the range minimum: recover where it is attained (rare ties are harmless)
        take = other < best
        if take.any():
            for jj in np.flatnonzero(take).tolist():
                lo_i, hi_i = int(t[jj]), int(ms[jj])
                arg[jj] = lo_i + int(np.argmin(g[lo_i:hi_i + 1]))
        cur = np.where(take, other, best)
        keep = prev <= cur
        cur = np.where(keep, prev, cur)
        arg = np.where(keep, -1, arg)
        args.append(arg)
        prev = cur
        # backtrack the plan with at most c buckets
        segs: Segments = []
        jj, cc = n - 1, c
        ok = np.isfinite(prev[-1])
        while ok and jj >= 0:
            while args[cc - 1][jj] == -1:
                cc -= 1
            i = int(args[cc - 1][jj])
            segs.append((i, jj))
            jj, cc = i - 1, cc - 1
        plans.append(segs[::-1] if ok else [])
    return plans


def solve_wait_for_all(inst: Instance) -> tuple[int, Segments]:
    """Exact optimum of the wait-for-all class (one stage): the period in ticks and the plan.

    In this class the period is a non-decreasing function of the end of the last communication,
    and FIFO contiguous bucketings with cuts only between layers are optimal among all orders,
    bucketings and partitions (docs/formulation.md); the programme runs on ``inst``'s units.
    With shared PCIe and prefetch the period also grows with the link's total work (the next
    batch's copy runs on the link first), so the programme is run per number of buckets.
    """
    _, segs = min_makespan(inst.r, inst.p, inst.a, inst.layer_first_unit)
    best = int(inst.evaluate(segs).period)
    terms = inst.terms
    if not terms.shared:
        return best, segs
    work = int(inst.p.sum())
    best_segs = segs

    def stop(count: int) -> bool:  # more buckets: more start-up work on the shared link
        return terms.work_bound(work + inst.a * (count + 1)) >= best

    for plan in min_makespan_by_count(inst.r, inst.p, inst.a, inst.layer_first_unit, stop):
        if plan:
            val = int(inst.evaluate(plan).period)
            if val < best:
                best, best_segs = val, plan
    return best, best_segs


def min_max_tail(inst: Instance, lam: int) -> Segments | None:
    """A FIFO bucketing with one bucket end per layer whose period is at most ``lam`` ticks
    (per-layer mode), or None when there is none: the programme under the mode's deadlines
    (:meth:`.period.PerLayer.deadlines`)."""
    terms = inst.terms
    assert isinstance(terms, PerLayer)
    due = terms.deadlines(lam)
    if due is None:
        return None
    f, arg = fifo_dp(inst.r, inst.p, inst.a, due.end, inst.layer_first_unit, due.last_first)
    if not np.isfinite(f[-1]):
        return None
    return _backtrack(arg, inst.n)


def solve_fifo_per_layer(inst: Instance) -> tuple[int, Segments, bool]:
    """Best per-layer FIFO plan with one bucket end per layer (one stage), by bisection.

    Returns
    -------
    period, segs, exact
        Period in ticks, the plan, and whether it is optimal among all FIFO plans: true when
        the update step is zero (then joining buckets that end in one layer never hurts, see
        docs/formulation.md) and the link does not carry the next batch's copy (shared PCIe
        with prefetch); otherwise the result is a good plan, not a proven one.
    """
    _, segs = min_makespan(inst.r, inst.p, inst.a, inst.layer_first_unit)
    best_segs = segs
    best = int(inst.evaluate(best_segs).period)
    c = inst.consts
    lo = c.k0 - 1  # every period is at least K0
    while best - lo > 1:
        mid = (lo + best) // 2
        segs_mid = min_max_tail(inst, mid)
        if segs_mid is None:
            lo = mid
            continue
        val = int(inst.evaluate(segs_mid).period)
        if val > mid:  # pragma: no cover - the tails are exact for one bucket end per layer
            lo = mid
            continue
        best, best_segs = val, segs_mid
    exact = c.U == 0 and not inst.terms.shared
    return best, best_segs, exact


def solve_fifo(inst: Instance, *, reorder: bool) -> tuple[int, Segments, bool]:
    """The exact programme of ``inst``'s next-forward mode (one stage): the period in ticks,
    the plan, and whether the period is the optimum of the class (every launch order with
    ``reorder``): always for wait-for-all (:func:`solve_wait_for_all`), for per-layer when
    :func:`solve_fifo_per_layer` is exact and the order is readiness order."""
    if isinstance(inst.terms, PerLayer):
        val, segs, exact = solve_fifo_per_layer(inst)
        return val, segs, exact and not reorder
    val, segs = solve_wait_for_all(inst)
    return val, segs, True
