"""The first and the last stage of a multi-stage collective as a two-machine flow shop, over
bucketings: the *path view* of the flow-shop bounds (:mod:`.flowshop`).

Every stage serves the buckets in launch order, one at a time, and a bucket passes its stages
one after the other. Call ``s`` the first stage and ``t`` the last (push and pull of
dedicated parameter servers: two machines with release dates and delivery tails), ``d_s(k)``
and ``d_t(k)`` the durations of bucket ``k`` on them (start-up cost plus bandwidth part) and
``chain(k)`` the sum of its durations on every stage. For a set ``J`` of buckets and a
*pivot* ``x`` in it, the last bucket of ``J`` in launch order ends stage ``t`` no earlier than

    (first release in J) + sum_{k in J, launched up to x} d_s(k) + chain(x)
                         + sum_{k in J, launched after x} d_t(k)

(stage ``s`` of the buckets of ``J`` up to ``x``, one after the other, then every stage of
``x``, then stage ``t`` of the later ones), which is at least ``min_release + sum_J
min(d_s, d_t) + chain(x) - min(d_s(x), d_t(x))``; then its delivery tail follows.

Take for ``J`` the buckets released from unit ``i`` on (the first of which is ``[i..j]``, of
release ``r_j`` and lower tail ``T`` (:func:`.bounds.lower_tails`), no lower than the true tail
of any of them):

* a pivot among them, the bucket of largest ``chain - min(d_s, d_t)`` (at least that of
  ``[i..j]`` and that of every unit from ``i`` on): ``r_j + sum_J min + extra + T``;
* a pivot ``x`` released before (a bucket that holds unit ``v < i``, of release at least
  ``r_v`` and tail at least the forward from ``v``'s layer, ``q_v``): either it is launched
  after every bucket of ``J`` (the path from ``J``'s first bucket ends at ``x``, then ``x``'s
  tail) or some bucket of ``J`` follows it (the path from ``x``'s release ends at a bucket of
  ``J``, then at least ``T``): ``sum_J min + chain(v) + min(r_v + T, r_j + q_v)``.

With two equal stages the first is the classical ``sum + longest`` of a two-machine flow shop;
the second pays a large bucket twice even when it is released before the suffix: it must
either hold up the suffix's buckets or wait for them, whatever the launch order. As for the
resource views, the fewest buckets that keep every term (and every bucket's own chain, released
at ``r_j``) under ``lam`` decide whether some bucketing has period at most ``lam``
(:func:`path_fits`): a plan of period at most ``lam`` meets every term with its own buckets.
In wait-for-all mode the same programme without tails bounds the end of the communication.
"""

from __future__ import annotations

import numpy as np

from schedopt.optimize.bounds import fewest_count, lower_tails, no_tails
from schedopt.optimize.instance import Instance

__all__ = ["PathView", "path_fits"]


class PathView:
    """The first and the last stage of ``inst`` as the two machines of a path (module
    docstring), in ticks.

    Attributes
    ----------
    p, a
        Per unit the smaller bandwidth part of the two stages, and the smaller start-up cost
        (what every bucket of a path costs at least; the names of :class:`.flowshop.
        ResourceView`, whose preemptive bound starts the bisection).
    p_before, a_before, p_after, a_after
        Zero: the path holds every stage.
    """

    def __init__(self, inst: Instance) -> None:
        sp, sa = inst.stage_p.astype(np.int64), inst.stage_a.astype(np.int64)
        s, t = 0, len(inst.stages) - 1
        self.on = tuple(range(len(inst.stages)))
        self.p = np.minimum(sp[s], sp[t])
        self.a = int(min(sa[s], sa[t]))
        self.p_before = self.p_after = np.zeros(inst.n, np.int64)
        self.a_before = self.a_after = 0
        self._pre_s, self._pre_t = np.r_[0, np.cumsum(sp[s])], np.r_[0, np.cumsum(sp[t])]
        self._pre_chain = np.r_[0, np.cumsum(sp.sum(axis=0))]
        self._a_s, self._a_t, self._a_chain = int(sa[s]), int(sa[t]), int(sa.sum())

    def fits(self, inst: Instance, lam: int) -> bool:
        """Whether some bucketing meets every term of the view at ``lam`` (:func:`path_fits`)."""
        return path_fits(inst, self, lam)

    def extra(self, lo: int | np.ndarray, hi: int | np.ndarray) -> np.ndarray:
        """``chain - min(d_s, d_t)`` of the buckets ``lo..hi`` (ticks)."""
        lo, hi = np.asarray(lo), np.asarray(hi) + 1
        d_s = self._a_s + self._pre_s[hi] - self._pre_s[lo]
        d_t = self._a_t + self._pre_t[hi] - self._pre_t[lo]
        return self.chain(lo, hi - 1) - np.minimum(d_s, d_t)

    def chain(self, lo: int | np.ndarray, hi: int | np.ndarray) -> np.ndarray:
        """Every stage of the buckets ``lo..hi``, one after the other (ticks)."""
        return self._a_chain + self._pre_chain[np.asarray(hi) + 1] - self._pre_chain[lo]


def _fronts(inst: Instance, view: PathView, q: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per unit ``i``, the pivots released before it that may give the largest term: the
    Pareto front of ``(chain(v) + r_v, chain(v) + q_v)`` over the units ``v < i`` (the term
    ``min(u + T, w + r_j)`` grows with both)."""
    units = np.arange(inst.n)
    chain = view.chain(units, units)
    u_all, w_all = chain + inst.r.astype(np.int64), chain + q
    fronts = [(np.zeros(0, np.int64), np.zeros(0, np.int64))]
    u, w = fronts[0]
    for v in range(inst.n - 1):
        if not np.any((u >= u_all[v]) & (w >= w_all[v])):
            keep = (u > u_all[v]) | (w > w_all[v])
            u, w = np.r_[u[keep], u_all[v]], np.r_[w[keep], w_all[v]]
        fronts.append((u, w))
    return fronts


def path_fits(inst: Instance, view: PathView, lam: int) -> bool:
    """Whether some bucketing meets every term of the path view and every bucket's chain at
    ``lam`` (module docstring): the fewest buckets from each unit on, right to left, as
    :func:`.bounds.fewest_buckets`. In per-layer mode ``lam`` bounds the period, in
    wait-for-all mode (no tails) the end of the communication."""
    n = inst.n
    tails = inst.terms.bucket_tails
    if tails is None:
        tails = no_tails(n)
    r = inst.r.astype(np.int64)
    q = tails.fwd.astype(np.int64)
    p_suffix = np.r_[np.cumsum(view.p[::-1])[::-1], 0]
    units = np.arange(n)
    extra_suffix = np.maximum.accumulate(view.extra(units, units)[::-1])[::-1]
    fronts = _fronts(inst, view, q)

    def accepts(i: int, j: np.ndarray, rest: np.ndarray) -> np.ndarray:
        tail = lower_tails(tails, i, j)
        base = p_suffix[i] + view.a * (1 + rest)
        term = r[j] + np.maximum(view.extra(i, j), extra_suffix[i]) + tail
        u, w = fronts[i]
        if len(u):  # a pivot released before unit i
            before = np.minimum(u[None, :] + tail[:, None], w[None, :] + r[j][:, None])
            term = np.maximum(term, before.max(axis=1))
        return (base + term <= lam) & (r[j] + view.chain(i, j) + tail <= lam)

    return fewest_count(n, accepts) is not None
