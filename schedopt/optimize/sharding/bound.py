"""A lower bound on the step of every sharded plan of an instance (docs/formulation.md).

Every collective of ``n`` bytes costs at least ``A + B n`` (the lower envelope of the cluster's
all-gather cost, :func:`envelope`), so the collectives of units covering bytes ``N`` cost at
least ``A + B N`` together (one unit at least, ``A >= 0``). With ``k`` micro-batches, layers
``0..L-1``, prefix sums ``P_{<=j}`` and ``G_{<=j}`` and suffix sums of the compute:

* forward: the units covering layers ``0..j`` are all gathered, one after another, before the
  layer-``j`` forward of the first micro-batch starts; the rest of that forward follows;
* backward: the units covering layers ``0..j`` are reduce-scattered after the last
  micro-batch's layer-``j`` backward ends, which is at least the backward from the last layer
  down to ``j`` after the last forward ends;
* network: all collectives of the step (``2k`` gathers of everything in full mode, one in
  grad-op, and the reduce-scatters; in full mode the last backward's gathers and all
  reduce-scatters after the last forward) run one at a time;

each followed by the optimizer step on the shard. The bound is the largest of these.
"""

from __future__ import annotations

import numpy as np

from ...cluster import Cluster
from .evaluate import ShardedInstance

__all__ = ["envelope", "peak_floor", "step_bound"]


def envelope(cluster: Cluster, layers: int) -> tuple[float, float]:
    """``(A, B)`` with ``AG(n) >= A + B n`` for every ``n > 0``, ``A`` already the least sum
    of intercepts over at most ``layers`` units (0 without communication)."""
    stages = cluster.comm_stages()
    if not stages:
        return 0.0, 0.0
    a = b = 0.0
    for s in stages:
        if s.segments:
            a += s.offset_s + min(x[1] for x in s.segments)
            b += min(x[2] for x in s.segments)
        else:
            a += s.alpha_s
            b += s.beta_s_per_byte
    over = cluster.collective_overhead_s
    A, B = over + (a - over) / 2.0, max(0.0, b / 2.0)
    return (A if A >= 0 else layers * A), B


def step_bound(inst: ShardedInstance) -> float:
    """Lower bound (s) on the step of every sharded plan of ``inst`` (see the module)."""
    A, B = envelope(inst.cluster, inst.n)

    def coll(nbytes: np.ndarray | float) -> np.ndarray:
        return np.maximum(0.0, A + B * np.asarray(nbytes, dtype=float))

    k, f, b = inst.accumulate, inst.f, inst.b
    F, Bk = float(f.sum()), float(b.sum())
    p_pre, g_pre = np.cumsum(inst.p), np.cumsum(inst.g)
    f_suf = np.cumsum(f[::-1])[::-1]  # forward from layer j to the end
    b_suf = np.cumsum(b[::-1])[::-1]  # backward from the last layer down to j
    # the first forward's layer j waits for the gathers of the units covering layers 0..j
    head = float(np.max(coll(p_pre) + f_suf))
    fwd_end = head + (k - 1) * (F + Bk)
    tail = float(np.max(b_suf + coll(g_pre)))
    net_after = float(coll(g_pre[-1]))
    if inst.mode == "full":
        net_after += float(coll(p_pre[-1]))
        net_all = 2 * k * float(coll(p_pre[-1])) + float(coll(g_pre[-1]))
    else:
        net_all = float(coll(p_pre[-1])) + float(coll(g_pre[-1]))
    best = max(fwd_end + max(tail, net_after), net_all, k * (F + Bk))
    return best + inst.update_s


def peak_floor(inst: ShardedInstance) -> int:
    """Lower bound (bytes) on every sharded plan's peak.

    The unit holding layer ``l`` keeps its parameters gathered and, from its first backward
    on, its gradients too: while that backward runs (``b_l > 0``) at least ``2 p_l`` bytes are
    unsharded, and during its forward (``f_l > 0``) at least ``p_l``. In grad-op mode every
    unit stays gathered from its first forward to its last backward, so when the last forward
    ends and the last layer's backward takes time, all parameters are gathered at once.
    """
    both = np.where(inst.b > 0, 2 * inst.p, np.where(inst.f > 0, inst.p, 0))
    floor = int(both.max(initial=0))
    if inst.mode == "grad-op" and inst.b[-1] > 0:
        floor = max(floor, int(inst.p.sum()))
    return floor
