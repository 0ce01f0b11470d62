"""One stage of a multi-stage collective as a non-preemptive machine, over bucketings: the
*stage views* of the flow-shop bounds (:mod:`.flowshop`).

The resource views of :mod:`.flowshop` let a resource start a suffix of units as soon as the
smallest of their heads allows and end it with the smallest tail, as if a bucket could be cut
anywhere: the network of the pipelined hierarchical all-reduce then starts the bytes of a large
bucket before its reduce-scatter ends and finishes with the all-gather of a single small
tensor, and few buckets (few start-up costs) suffice. A stage serves whole buckets, one at a
time, in launch order. Call ``s`` the stage, and for a bucket ``k`` (units ``u..v``, release
``R_k = r_v``) its *head* ``h_k = R_k + sum_{s' < s} d_s'(k)`` (it reaches stage ``s`` no
earlier) and its *tail* ``g_k = sum_{s' > s} d_s'(k) + Q_k`` (its later stages, then its lower
delivery tail, :func:`.bounds.lower_tails` of its own units; none in wait-for-all mode).

For the buckets ``J`` released from unit ``i`` on (the buckets of units ``i..n-1`` when ``i``
starts a bucket), let ``x`` be the first of them in launch order and ``y`` the last. Stage
``s`` of ``x`` starts no earlier than ``h_x``; every bucket of ``J`` is launched at or after
``x``, so stage ``s`` serves all of them after that, one at a time; the bucket ``y`` then
passes its later stages and its tail. So every plan has

    period >= min_{x != y in J} (h_x + g_y) + a_s * |J| + P_s(i..n-1)

(``x != y`` when ``J`` holds two buckets or more; one bucket meets its own *chain*). The
minimum over pairs depends on the bucketing of the suffix only through the count and, per
count, the smallest head ``H``, the smallest tail ``G`` and the smallest sum ``D`` over pairs:
adding a bucket ``b`` in front gives ``H' = min(H, h_b)``, ``G' = min(G, g_b)`` and ``D' =
min(D, h_b + G, H + g_b)``. The programme (:func:`stage_fits`) runs right to left and keeps,
per unit and count, the componentwise least ``(H, G, D)`` of the bucketings of the suffix that
meet every term at ``lam`` (a relaxation: a plan of period at most ``lam`` meets every term with
its own bucketing, and the least values only make the terms on the left easier); counts from
:data:`COUNT_LEVELS` on share one level, charged that many start-up costs. Every bucketing it
accepts also meets, with its own count, every resource view's preemptive term and every
bucket's chain (:func:`.bounds.fewest_buckets`): one bucketing must meet them all.

With ``s`` the network of the pipelined hierarchical all-reduce, the head is the bucket's
reduce-scatter and the tail its all-gather: to start the network early and end it late, a
plan needs a small bucket at both ends of the suffix, and each bucket costs the network's
start-up (30 us on InfiniBand), so the count the view asks for grows. In wait-for-all mode
the same programme without delivery tails bounds the end of the communication.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schedopt.optimize.bounds import Machine, lower_tails, no_tails
from schedopt.optimize.bounds import _head_tail as head_tail
from schedopt.optimize.instance import Instance

__all__ = ["COUNT_LEVELS", "STAGE_VIEW_CALLS", "StageView", "stage_fits"]

#: Bucket counts the programme tells apart (counts from this one on share a level): its work
#: per step is ``O(n * COUNT_LEVELS)``.
COUNT_LEVELS = 32

#: Programmes of :func:`.bounds.fewest_buckets` that one :func:`stage_fits` is charged as
#: (measured: 0.016 s against 0.005-0.009 s on 120 units at 32 levels).
STAGE_VIEW_CALLS = 3

_BIG = np.iinfo(np.int64).max // 8  # "none": a sum of two stays representable


class StageView:
    """Stage ``s`` of ``inst`` as a non-preemptive machine (module docstring), in ticks.

    Parameters
    ----------
    inst
        The instance (several stages).
    s
        The stage.
    own
        The one-stage resource view of ``s`` (:class:`.flowshop.ResourceView` with ``on =
        (s,)``): its ``p``, ``a`` and heads and tails start the bisection.
    machines
        The resource views whose preemptive terms every accepted bucketing meets too.

    Attributes
    ----------
    p, a, p_before, a_before, p_after, a_after
        Those of ``own``.
    calls
        What one programme is charged, in programmes of :func:`.bounds.fewest_buckets`.
    """

    calls = STAGE_VIEW_CALLS

    def __init__(self, inst: Instance, s: int, own: Machine, machines: Sequence[Machine]
                 ) -> None:
        self.s = s
        self.on = (s,)
        self.p, self.a = own.p, own.a
        self.p_before, self.a_before = own.p_before, own.a_before
        self.p_after, self.a_after = own.p_after, own.a_after
        self.machines = list(machines)
        sp = inst.stage_p.astype(np.int64)
        self._pre = np.c_[np.zeros((len(sp), 1), np.int64), np.cumsum(sp, axis=1)]
        self._a = inst.stage_a.astype(np.int64)

    def fits(self, inst: Instance, lam: int) -> bool:
        """Whether some bucketing meets every term of the view at ``lam`` (:func:`stage_fits`)."""
        return stage_fits(inst, self, lam)

    def durations(self, i: int, j: np.ndarray) -> np.ndarray:
        """Every stage's duration of the buckets ``i..j`` (shape ``(stages, len(j))``)."""
        return self._a[:, None] + self._pre[:, j + 1] - self._pre[:, [i]]


def _terms(inst: Instance, view: StageView, lam: int, i: int, levels: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the buckets ``i..j`` (every ``j``): their heads and tails on the view's stage, and
    whether each may start a suffix of each count level (its chain, and every resource view's
    preemptive term with that count)."""
    n, s = inst.n, view.s
    tails = inst.terms.bucket_tails or no_tails(n)
    j = np.arange(i, n)
    q = lower_tails(tails, i, j)
    d = view.durations(i, j)
    r = inst.r.astype(np.int64)
    ok = (r[j] + d.sum(axis=0) + q <= lam)[:, None] & np.ones(len(levels), bool)
    r_next = np.r_[r, _BIG]
    for m in view.machines:
        rest = int(m.p[i:].sum())
        ok &= (head_tail(inst, m, r_next, i, j) + q + rest)[:, None] + m.a * levels <= lam
    return r[j] + d[:s].sum(axis=0), d[s + 1:].sum(axis=0) + q, ok


def stage_fits(inst: Instance, view: StageView, lam: int) -> bool:
    """Whether some bucketing meets every term of ``view`` at ``lam`` (module docstring): per
    unit ``i`` and count level ``c`` (``c`` buckets from ``i`` on, the last level standing for
    that many or more), the least ``(H, G, D)`` of the accepted bucketings of units
    ``i..n-1``, right to left; ``O(n^2 * COUNT_LEVELS)``. In per-layer mode ``lam`` bounds the
    period, in wait-for-all mode (no tails) the end of the communication."""
    n = inst.n
    top = min(COUNT_LEVELS, n)
    count = np.arange(top + 1)
    level = np.minimum(count + 1, top)  # the level of one bucket more
    p_suffix = np.r_[np.cumsum(view.p[::-1])[::-1], 0]
    hgd = np.full((3, n + 1, top + 1), _BIG, np.int64)  # H, G, D per unit and level
    alive = np.zeros((n + 1, top + 1), bool)
    alive[n, 0] = True
    for i in range(n - 1, -1, -1):
        h, g, ok = _terms(inst, view, lam, i, level)
        nxt = hgd[:, i + 1:]
        new = np.stack([np.minimum(nxt[0], h[:, None]), np.minimum(nxt[1], g[:, None]),
                        np.minimum(nxt[2], np.minimum(h[:, None] + nxt[1], nxt[0] + g[:, None]))])
        ok &= alive[i + 1:] & ((count == 0) | (new[2] + view.a * level + p_suffix[i] <= lam))
        best = np.where(ok, new, _BIG).min(axis=1)  # per level of the rest
        any_ok = np.asarray(ok.any(axis=0), dtype=bool)
        hgd[:, i, 1:] = best[:, :-1]  # one bucket more: the next level, the last one merged
        hgd[:, i, top] = np.minimum(best[:, top - 1], best[:, top])
        alive[i, 1:] = any_ok[:-1]
        alive[i, top] |= any_ok[top]
    return bool(alive[0].any())
