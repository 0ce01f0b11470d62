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

each followed by the optimizer step on the shard; and, with each collective's own latency
terms, the least sum of a partition's collectives (:func:`network_bound`, the network's
contention between gathers and reduce-scatters). The bound is the largest of these.
"""

from __future__ import annotations

import numpy as np

from ...cluster import Cluster
from .evaluate import ShardedInstance

__all__ = ["DP_LAYERS", "NETWORK_LAYERS", "envelope", "gather_matrix", "idle_bound",
           "network_bound", "peak_floor", "step_bound"]


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


def step_bound(inst: ShardedInstance, cap: int | None = None) -> float:
    """Lower bound (s) on the step of every sharded plan of ``inst`` within ``cap`` (see the
    module): the closed forms, :func:`network_bound` plus the optimizer step when ``inst`` has
    at most :data:`NETWORK_LAYERS` layers, and the compute plus :func:`idle_bound` when it has
    at most :data:`DP_LAYERS`."""
    closed = _closed_bound(inst)
    if inst.n <= NETWORK_LAYERS:
        closed = max(closed, network_bound(inst, cap) + inst.update_s)
    if inst.n > DP_LAYERS:
        return closed
    k = inst.accumulate
    compute = k * float(inst.f.sum() + inst.b.sum()) + inst.update_s
    return max(closed, compute + idle_bound(inst, cap))


def _closed_bound(inst: ShardedInstance) -> float:
    """The closed-form bounds of the module."""
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


def network_bound(inst: ShardedInstance, cap: int | None = None) -> float:
    """Least busy time of the network over every partition into units within ``cap`` (s).

    The network serves one collective at a time, from the first all-gather (at the step's
    start at the earliest) to the last reduce-scatter (before the optimizer step), so a
    partition's step is at least the sum of its collectives: per unit, its all-gathers (``2k``
    in full mode, one in grad-op) and its reduce-scatter, each with its own latency terms
    (:func:`gather_matrix`). The least sum is a shortest path over unit boundaries, O(n^2).
    Under a cap, a unit whose backward takes time holds its parameters and its gradients at
    once, so units with ``2 P_u > cap`` and a positive backward are left out.
    """
    n = inst.n
    gathers = 2 * inst.accumulate if inst.mode == "full" else 1
    cost = gathers * gather_matrix(inst, 2) + gather_matrix(inst, 3)
    cum_t = np.r_[0, np.cumsum(inst.has_tensor)]
    if cap is not None:
        cs = inst.sums
        held = 2 * (cs[None, :, 2] - cs[:, None, 2])
        busy = cs[None, :, 1] - cs[:, None, 1] > 0
        cost = np.where(busy & (held > cap), np.inf, cost)
    W = np.full(n + 1, np.inf)  # W[c]: the least sum over the units covering layers 0..c-1
    W[0] = 0.0
    for c in range(1, n + 1):
        a = np.arange(c)
        ok = cum_t[c] > cum_t[a]  # every unit holds a tensor
        if ok.any():
            W[c] = float(np.min(W[a[ok]] + cost[a[ok], c]))
    return float(W[n]) if np.isfinite(W[n]) else 0.0


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


#: Largest number of layers for the programme over unit boundaries (O(n^3)).
DP_LAYERS = 1000

#: Largest number of layers for :func:`network_bound` (O(n^2) time and memory).
NETWORK_LAYERS = 4000


def gather_matrix(inst: ShardedInstance, col: int) -> np.ndarray:
    """``M[a, b]``: the all-gather time of the bytes of layers ``a..b-1`` (column ``col`` of
    :attr:`ShardedInstance.sums`: 2 parameters, 3 gradients), as
    :meth:`~schedopt.cluster.Cluster.shard_collective_time`; 0 for no bytes."""
    cs = inst.sums[:, col]
    nbytes = np.maximum(0.0, cs[None, :] - cs[:, None])
    stages = inst.cluster.comm_stages()
    if not stages:
        return np.zeros_like(nbytes)
    over = inst.cluster.collective_overhead_s
    total = sum(s.times(nbytes) for s in stages)
    return np.where(nbytes > 0, over + (total - over) / 2.0, 0.0)


def idle_bound(inst: ShardedInstance, cap: int | None) -> float:
    """Least idle time of the compute stream over every partition into units (a programme
    over unit boundaries, docs/formulation.md): the first unit's all-gather before each
    micro-batch that gathers, its reduce-scatter after the last backward, in full mode the
    last unit's all-gather between each forward and backward, and the all-gathers the cap
    forbids to overlap the previous unit's compute."""
    n, k, full = inst.n, inst.accumulate, inst.mode == "full"
    ag, rs = gather_matrix(inst, 2), gather_matrix(inst, 3)
    cum_t = np.r_[0, np.cumsum(inst.has_tensor)]
    C = float(cap) if cap is not None else np.inf
    V = np.full((n + 1, n + 1), np.inf)  # V[b, c]: the least idle time with last unit [b, c)
    first = np.arange(1, n + 1)
    V[0, first] = np.where(cum_t[first] > 0, (k if full else 1) * ag[0, first] + rs[0, first],
                           np.inf)
    for b in range(1, n):
        a = np.arange(b)
        ok_a = (cum_t[b] - cum_t[a] > 0) & np.isfinite(V[a, b])
        c = np.arange(b + 1, n + 1)
        c = c[cum_t[c] > cum_t[b]]
        if not ok_a.any() or not c.size:
            continue
        a = a[ok_a]
        cost = V[a, b][:, None] + _pair(inst, a, b, c, ag, C, k, full)
        V[b, c] = cost.min(axis=0)
    turn = k * ag[:, n] if full else np.zeros(n + 1)
    return float(np.min(V[:, n] + turn))


def _pair(inst: ShardedInstance, a: np.ndarray, b: int, c: np.ndarray, ag: np.ndarray,
          C: float, k: int, full: bool) -> np.ndarray:
    """Idle time the cap forces between units ``A = [a, b)`` (rows) and ``B = [b, c)``
    (columns): ``AGf(B)`` after ``F(A)``, and in full mode ``AGb(A)`` after ``B(B)``."""
    cs = inst.sums
    total = float(cs[inst.n, 2])
    p_a = (cs[b, 2] - cs[a, 2])[:, None]
    f_a = (cs[b, 0] - cs[a, 0])[:, None]
    ag_a = ag[a, b][:, None]
    p_b = (cs[c, 2] - cs[b, 2])[None, :]
    b_b = (cs[c, 1] - cs[b, 1])[None, :]
    ag_b = ag[b, c][None, :]
    out = np.zeros((a.size, c.size))
    if full:  # forward of micro-batch m: P_A held, and from m = 1 on every gradient
        for m in range(k):
            held = p_a + (total if m >= 1 else 0.0)
            out += np.where((f_a > 0) & (held + p_b > C), ag_b, 0.0)
        for m in range(k):  # backward: P_B, the gradients surely alive, then P_A
            grads = (p_b if k == 1 else total - cs[b, 2] if m == 0
                     else cs[c, 2][None, :] if m == k - 1 else total)
            out += np.where((b_b > 0) & (p_b + grads + p_a > C), ag_a, 0.0)
    else:  # grad-op gathers in the first micro-batch only, and keeps units 0..A gathered
        out += np.where((f_a > 0) & (cs[b, 2] + p_b > C), ag_b, 0.0)
    return out
