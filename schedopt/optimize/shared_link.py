"""A link shared by the batch copy and the gradients: its work bounds the period.

With a PCIe link shared by the copy of the batch and the gradient traffic, and the next batch
prefetched (``shared_pcie`` and prefetch 1; parameter servers after a local reduce, whose push
and pull both hold that link: :func:`.units.one_chain`), the link carries every iteration the
next batch's copy ``h2d`` and every bucket, one at a time. Whatever the launch order, the
period is at least the link's work (:meth:`.period.PeriodTerms.work_bound`):

    period >= h2d + a * m + sum_i p_i        (m buckets)

which grows with the number of buckets. Few buckets, on the other hand, start the
communication late and lengthen the delivery terms. The bucketing relaxation of
:mod:`.bounds` (each bucket released when it is ready, the buckets after it with tails at least
its own, preemptive) counts, for a period ``lam``, the fewest buckets ``m(lam)`` of any
bucketing whose terms stay within ``lam`` (:func:`fewest_bucket_count`): a plan of period at
most ``lam`` meets those terms, so it has at least ``m(lam)`` buckets and

    lam >= h2d + a * m(lam) + sum_i p_i.

``m`` does not increase with ``lam``, so this test is monotone, and bisection on ``lam``
gives the bound (:func:`shared_link_bound`): the least ``lam`` that passes it.

**Plans** (:func:`fewer_buckets`). A plan whose period is its link's work gains ``a`` per
bucket it saves, as long as its other terms still fit in the work of the fewer buckets. The
local search over cuts cannot see that: removing one cut lengthens the other terms, and only
moving the other cuts far brings them back under the smaller work, while the period stays flat
meanwhile. So, with one cut dropped, the cuts are moved (anywhere between their neighbours,
first improvement) to shorten the period's *other* terms alone, each bucketing launched by
Schrage's rule and in unimodal order, until they fit in the work of the fewer buckets; then
again with one more cut dropped, until no dropped cut succeeds or the evaluations are spent.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from schedopt.optimize.bounds import fewest_count, lower_tails, no_tails
from schedopt.optimize.heuristics import schrage_order
from schedopt.optimize.instance import Instance, Segments
from schedopt.optimize.model import unimodal_order
from schedopt.optimize.period import PeriodTerms

__all__ = ["MAX_UNITS", "PLAN_S_PER_UNIT", "fewer_buckets", "fewest_bucket_count", "link_work",
           "shared_link_applies", "shared_link_bound"]

#: Instances larger than this are left to the other bounds (each test is ``O(n^2)``).
MAX_UNITS = 1000

#: Deterministic charge (s) of one plan of :func:`fewer_buckets`, per unit: its launch order,
#: period and other terms (measured: 4,936 plans of 161 units in 0.75 s).
PLAN_S_PER_UNIT = 1e-6


def shared_link_applies(inst: Instance) -> bool:
    """Whether the period has a term in the link's work (one stage on a link shared with the
    batch copy, prefetch 1) and ``inst`` is small enough for the bound (:data:`MAX_UNITS`)."""
    return len(inst.stages) == 1 and inst.n <= MAX_UNITS and inst.terms.shared


def link_work(inst: Instance, buckets: int) -> int:
    """The period that the link's work with ``buckets`` buckets implies (ticks)."""
    return inst.terms.work_bound(int(inst.p.sum()) + inst.a * buckets)


def fewest_bucket_count(inst: Instance, lam: int) -> int | None:
    """The fewest buckets of a bucketing whose relaxed terms all stay within ``lam`` (ticks),
    or None when none does.

    The term of a bucket ``i..j`` followed by ``c`` buckets (units ``j+1..n-1``): its release
    ``r_j``, the bandwidth parts from ``i`` on, ``1 + c`` start-up costs and its tail (the
    forward from its gating layer, the updates of the buckets gated by later layers and, for
    the last bucket of its layer, its own update share: :attr:`.period.PeriodTerms.bucket_tails`;
    none in wait-for-all mode). Right to left, the fewest buckets of units ``i..n-1`` keep the
    terms on the left smallest, as each term grows with the count after it; ``O(n^2)``.
    """
    tails = inst.terms.bucket_tails or no_tails(inst.n)
    r = inst.r.astype(np.int64)
    p_suffix = np.r_[np.cumsum(inst.p[::-1])[::-1], 0].astype(np.int64)

    def accepts(i: int, j: np.ndarray, rest: np.ndarray) -> np.ndarray:
        return r[j] + p_suffix[i] + inst.a * (1 + rest) + lower_tails(tails, i, j) <= lam

    return fewest_count(inst.n, accepts)


def _passes(inst: Instance, lam: int) -> bool:
    """Whether some plan of period at most ``lam`` may exist by the test of the module
    docstring."""
    m = fewest_bucket_count(inst, lam)
    return m is not None and link_work(inst, m) <= lam


def shared_link_bound(inst: Instance, lo: int, hi: int, *,
                      stats: dict[str, int] | None = None, max_calls: int | None = None) -> int:
    """Lower bound (ticks) on the period of every plan of ``inst``, from the shared link's
    work and the fewest buckets a period allows (module docstring).

    ``lo`` is a known bound and ``hi`` the period of a known plan; the result lies between
    them. ``hi - 1`` is tested first (failing it proves the plan at ``hi``), then ``lo``;
    ``stats["calls"]`` receives the number of counting programmes run (each ``O(n^2)``, the
    caller's deterministic charge); with ``max_calls``, the search stops after that many and
    returns the bound proven so far. Without a shared link, ``min(lo, hi)``.
    """
    out = stats if stats is not None else {}
    out["calls"] = 0
    if not shared_link_applies(inst) or lo >= hi or (max_calls is not None and max_calls < 1):
        return min(lo, hi)
    limit = max_calls if max_calls is not None else hi - lo + 2  # bisection needs fewer
    lo = max(lo, min(hi, link_work(inst, 1)))
    if lo >= hi:
        return hi
    # every lam below lo fails; the least lam that passes lies in [lo, hi]
    calls, top = 1, hi - 1
    if not _passes(inst, top):
        out["calls"] = calls
        return hi
    if lo < top and calls < limit:
        calls += 1
        if _passes(inst, lo):
            top = lo
    while top > lo:
        if calls >= limit:  # every period below lo fails: lo is proven
            out["calls"] = calls
            return lo
        mid = (lo + top) // 2
        calls += 1
        if _passes(inst, mid):
            top = mid
        else:
            lo = mid + 1
    out["calls"] = calls
    return top


def _other_terms(inst: Instance) -> PeriodTerms:
    """The period terms of ``inst`` without the link's work (the rest of the period)."""

    def no_work(self: PeriodTerms, c: Any, work: Any) -> Any:
        return 0

    kind = type(inst.terms)
    return type(f"{kind.__name__}WithoutLinkWork", (kind,), {"_work_term": no_work})(inst)


class _Climb:
    """The evaluations of :func:`fewer_buckets`: every bucketing judged by its other terms,
    the best plan by its period."""

    def __init__(self, inst: Instance, reorder: bool, max_evals: int, deadline: float | None,
                 value: int, segs: Segments) -> None:
        self.inst, self.reorder, self.rest = inst, reorder, _other_terms(inst)
        self.left, self.deadline, self.evals, self.deadline_stop = max_evals, deadline, 0, False
        self.best_val, self.best_segs = value, segs

    def spent(self) -> bool:
        """Whether the evaluations (or the safety stop's time) are spent."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.deadline_stop = True
        return self.evals >= self.left or self.deadline_stop

    def judge(self, cuts: np.ndarray) -> tuple[int, Segments]:
        """The other terms of the bucketing ``cuts`` in its better launch order, and that
        order; the best plan so far is kept."""
        inst = self.inst
        segs = inst.segments_from_cuts(cuts)
        orders = [segs]
        if self.reorder:
            first = schrage_order(inst, segs)
            orders = [first, unimodal_order(inst, first)]
        best: tuple[int, Segments] | None = None
        for order in orders:
            self.evals += 1
            ev = inst.evaluate(order)
            if int(ev.period) < self.best_val:
                self.best_val, self.best_segs = int(ev.period), order
            other = int(self.rest.value(ev.plan, seconds=False))
            if best is None or other < best[0]:
                best = (other, order)
        assert best is not None
        return best

    def climb(self, cuts: np.ndarray, target: int) -> tuple[int, np.ndarray]:
        """Move the cuts of ``cuts`` (first improvement, cut by cut, position by position)
        until the other terms fit in ``target``; the last value and cuts."""
        cur = self.judge(cuts)[0]
        while cur > target and not self.spent():
            improved = False
            pos = np.flatnonzero(cuts).tolist()
            for k, c in enumerate(pos):
                lo = pos[k - 1] + 1 if k > 0 else 0
                hi = pos[k + 1] - 1 if k + 1 < len(pos) else len(cuts) - 1
                for q in range(lo, hi + 1):
                    if q == c:
                        continue
                    if self.spent():
                        return cur, cuts
                    cand = cuts.copy()
                    cand[c], cand[q] = False, True
                    val = self.judge(cand)[0]
                    if val < cur:
                        cur, cuts, improved = val, cand, True
                        break
                if improved:
                    break
            if not improved:
                break
        return cur, cuts


def fewer_buckets(inst: Instance, segs: Segments, *, reorder: bool, max_evals: int,
                  deadline: float | None = None, stats: dict[str, int] | None = None
                  ) -> tuple[int, Segments]:
    """The best plan found by dropping buckets from ``segs`` while the link's work paces it
    (module docstring): its period (ticks) and segments, never worse than ``segs``.

    ``max_evals`` limits the plans evaluated (a deterministic limit; ``deadline``, a
    ``time.perf_counter()`` value, is only a safety stop); ``stats`` receives ``evals`` and
    ``deadline_stop``. Launch orders: Schrage's rule and the unimodal order with ``reorder``,
    readiness order otherwise.
    """
    out = stats if stats is not None else {}
    value = int(inst.evaluate(segs).period)
    run = _Climb(inst, reorder, max_evals, deadline, value, segs)
    cuts = np.zeros(max(0, inst.n - 1), dtype=bool)
    for _, hi in segs:
        if hi < inst.n - 1:
            cuts[hi] = True
    while shared_link_applies(inst) and cuts.any() and not run.spent():
        m = int(cuts.sum()) + 1
        if run.best_val > link_work(inst, m):  # the work does not pace the plan
            break
        target = link_work(inst, m - 1)
        for c in np.flatnonzero(cuts).tolist():
            start = cuts.copy()
            start[c] = False
            val, moved = run.climb(start, target)
            if val <= target or run.spent():
                break
        if val > target:  # no cut can go (or the evaluations are spent)
            break
        cuts = moved
    out["evals"], out["deadline_stop"] = run.evals, int(run.deadline_stop)
    return run.best_val, run.best_segs
