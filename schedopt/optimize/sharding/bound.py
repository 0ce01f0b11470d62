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

from schedopt.model.cluster import Cluster
from schedopt.optimize.sharding.evaluate import ShardedInstance

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
    :meth:`~schedopt.model.cluster.Cluster.shard_collective_time`; 0 for no bytes."""
    cs = inst.sums[:, col]
    nbytes = np.maximum(0.0, cs[None, :] - cs[:, None])
    stages = inst.cluster.comm_stages()
    if not stages:
        return np.zeros_like(nbytes)
    over = inst.cluster.collective_overhead_s
    total = sum(s.times(nbytes) for s in stages)
    return np.where(nbytes > 0, over + (total - over) / 2.0, 0.0)


def idle_bound(inst: ShardedInstance, cap: int | None) -> float:
    """Least idle time of the compute stream over every partition into units and every
    depth and stream layout (a programme over unit boundaries, docs/formulation.md): the
    first unit's all-gather before each micro-batch that gathers, its reduce-scatter after
    the last backward, in full mode the last unit's all-gather between each forward and
    backward, and per pair of adjacent units the gathers that the depths expose or the cap
    forbids to overlap the previous unit's compute. The depths and the stream layout are
    one for all units, so the programme runs once per case of :func:`_cases` (forward depth
    0 or not; backward depth 0 with one or two streams, or not) and keeps the least."""
    n, k, full = inst.n, inst.accumulate, inst.mode == "full"
    ag, rs = gather_matrix(inst, 2), gather_matrix(inst, 3)
    cum_t = np.r_[0, np.cumsum(inst.has_tensor)]
    C = float(cap) if cap is not None else np.inf
    knap = _Knapsack(inst, rs, _rs_rate(inst, rs)) if full and np.isfinite(C) else None
    cases = _cases(full) if np.isfinite(C) else [_cases(full)[-1]]  # no cap: no term in f1/q1
    V = np.full((len(cases), n + 1, n + 1), np.inf)  # V[., b, c]: last unit [b, c)
    first = np.arange(1, n + 1)
    fits = (cum_t[first] > 0) & ~((inst.sums[first, 1] > 0) & (2 * inst.sums[first, 2] > C))
    V[:, 0, first] = np.where(fits, (k if full else 1) * ag[0, first] + rs[0, first], np.inf)
    for b in range(1, n):
        a = np.arange(b)
        ok_a = (cum_t[b] - cum_t[a] > 0) & np.isfinite(V[:, a, b]).any(axis=0)
        c = np.arange(b + 1, n + 1)
        c = c[cum_t[c] > cum_t[b]]
        if not ok_a.any() or not c.size:
            continue
        a = a[ok_a]
        terms = _pair_terms(inst, a, b, c, ag, rs, C, k, full, knap)
        for i, (fwd, bwd) in enumerate(cases):
            cost = V[i, a, b][:, None] + terms[fwd] + terms[bwd]
            V[i, b, c] = cost.min(axis=0)
    turn = k * ag[:, n] if full else np.zeros(n + 1)
    return float(np.min(V[:, :, n] + turn[None, :]))


def _cases(full: bool) -> list[tuple[str, str]]:
    """The programme's cases: (forward term, backward term) keys of :func:`_pair_terms`; the
    last has no term without a cap, and the others only add to it."""
    if not full:
        return [("f0", "none"), ("f1", "none")]
    return [(f, b) for f in ("f0", "f1") for b in ("q0s1", "q0s2", "q1")]


def _rs_rate(inst: ShardedInstance, rs: np.ndarray) -> np.ndarray:
    """``kappa[c]``: the most reduce-scatter seconds per gradient byte held in memory
    (parameter bytes) of any unit within layers ``c..n-1`` (0 past the end)."""
    cs = inst.sums[:, 2]
    held = cs[None, :] - cs[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(held > 0, rs / np.where(held > 0, held, 1.0), 0.0)
    rows = rate.max(axis=1)
    return np.r_[np.maximum.accumulate(rows[::-1])[::-1], 0.0][:inst.n + 1]


class _Knapsack:
    """Most reduce-scatter seconds of units within layers ``c..n-1`` whose gradients hold at
    most ``M`` bytes: the fractional knapsack over single layers, an upper bound when the
    cost is subadditive (splitting a unit never shortens its reduce-scatters; checked on
    every unit, else ``kappa M``)."""

    def __init__(self, inst: ShardedInstance, rs: np.ndarray, kappa: np.ndarray) -> None:
        n = inst.n
        single = np.array([rs[i, i + 1] for i in range(n)])
        pre = np.r_[0.0, np.cumsum(single)]
        self.kappa = kappa
        split = pre[None, :] - pre[:, None]
        upper = np.triu(np.ones_like(rs, dtype=bool), 1)
        self.ok = bool(np.all(rs[upper] <= split[upper] * (1 + 1e-12) + 1e-15))
        self.rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        p = inst.p.astype(float)
        for c in range(n + 1):
            idx = np.arange(c, n)
            idx = idx[(p[idx] > 0) & (single[idx] > 0)]
            free = float(single[c:][p[c:] <= 0].sum()) if c < n else 0.0
            order = idx[np.argsort(-single[idx] / p[idx], kind="stable")]
            self.rows.append((np.r_[0.0, np.cumsum(p[order])],
                              free + np.r_[0.0, np.cumsum(single[order])], single[order] /
                              np.maximum(p[order], 1.0)))

    def most(self, c: np.ndarray, M: np.ndarray) -> np.ndarray:
        """Upper bound on the seconds, per column ``c`` with room ``M`` (bytes)."""
        out = self.kappa[c] * M
        if not self.ok:
            return out
        for j, (cj, mj) in enumerate(zip(c.tolist(), M.tolist(), strict=True)):
            wp, ws, rate = self.rows[cj]
            i = int(np.searchsorted(wp, mj, side="right")) - 1
            val = ws[i] + (rate[i] * (mj - wp[i]) if i < rate.size else 0.0)
            out[j] = min(out[j], val)
        return out


def _pair_terms(inst: ShardedInstance, a: np.ndarray, b: int, c: np.ndarray, ag: np.ndarray,
                rs: np.ndarray, C: float, k: int, full: bool,
                knap: _Knapsack | None) -> dict[str, np.ndarray]:
    """Idle time between units ``A = [a, b)`` (rows) and ``B = [b, c)`` (columns) in each
    case (inf: no plan of the case holds this pair within the cap).

    * ``f0`` (forward depth 0): ``AGf(B)`` is issued when ``F(A)`` ends, exposed;
    * ``f1`` (depth >= 1): ``AGf(B)`` is ready by ``F(A)``'s start and the network has nothing
      else to serve in a forward, so a pair whose parameters (plus from the second micro-batch
      every gradient) exceed the cap cannot be;
    * ``q0s1`` (backward depth 0, one stream): ``AGb(A)`` waits for ``B(B)`` and, in the last
      micro-batch, for ``RS(B)`` issued before it;
    * ``q0s2`` (depth 0, two streams): ``AGb(A)`` waits for ``B(B)``; in the last micro-batch
      ``RS(B)`` follows it, so ``B(A)`` starts with ``P_A``, its gradients and ``B``'s;
    * ``q1`` (depth >= 1): ``AGb(A)`` is ready by ``B(B)``'s start; where ``P_B``, the
      gradients surely alive and ``P_A`` exceed the cap, it must wait for ``B(B)``'s end, so
      the network must stay busy through ``B(B)``: with no reduce-scatter in a micro-batch
      before the last it cannot, and in the last only reduce-scatters of later units whose
      gradients fit beside ``2 P_B`` can (:class:`_Knapsack`); else exposed.

    Every case: a unit whose backward takes time holds its parameters and gradients at once,
    so ``2 P_B`` over the cap rules the pair out.
    """
    cs = inst.sums
    total = float(cs[inst.n, 2])
    p_a = (cs[b, 2] - cs[a, 2])[:, None]
    f_a = (cs[b, 0] - cs[a, 0])[:, None]
    b_a = (cs[b, 1] - cs[a, 1])[:, None]
    ag_a = ag[a, b][:, None]
    p_b = (cs[c, 2] - cs[b, 2])[None, :]
    b_b = (cs[c, 1] - cs[b, 1])[None, :]
    ag_b = ag[b, c][None, :]
    rs_b = rs[b, c][None, :]
    shape = (a.size, c.size)
    zero = np.zeros(shape)
    unfit = np.where((b_b > 0) & (2 * p_b > C), np.inf, zero)
    if not full:  # grad-op gathers in the first micro-batch only, and keeps units 0..A
        over = (f_a > 0) & (cs[b, 2] + p_b > C)
        return {"f0": unfit + ag_b, "f1": np.where(over, np.inf, unfit), "none": zero}
    f1 = zero.copy()
    for m in range(k):  # forward of micro-batch m: P_A held, and from m = 1 every gradient
        held = p_a + (total if m >= 1 else 0.0)
        f1 = np.where((f_a > 0) & (held + p_b > C), np.inf, f1)
    q1 = zero.copy()
    room = (np.full(shape, np.inf) if knap is None
            else np.broadcast_to(knap.most(c, np.maximum(0.0, C - 2 * p_b[0])), shape))
    for m in range(k):  # backward: P_B, the gradients surely alive, then P_A
        grads = (p_b if k == 1 else total - cs[b, 2] if m == 0
                 else cs[c, 2][None, :] if m == k - 1 else total)
        over = (b_b > 0) & (p_b + grads + p_a > C)
        stuck = over if m < k - 1 else over & (room < b_b)
        q1 = np.where(stuck, np.inf, np.where(over, q1 + ag_a, q1))
    late = (b_a > 0) & (rs_b > 0) & (2 * p_a + p_b > C)
    return {"f0": unfit + k * ag_b, "f1": f1 + unfit, "q0s1": zero + k * ag_a + rs_b,
            "q0s2": np.where(late, np.inf, zero + k * ag_a), "q1": q1}
