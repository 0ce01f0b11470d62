"""MG-WFBP: merged-gradient wait-free backpropagation (Shi, Chu, Li, INFOCOM 2019).

The merge rule of the paper, over the cluster's alpha-beta cost ``T(M) = a + b M`` of one bucket
and the trace's per-layer backward times and gradient bytes. Layers are numbered 1..L in forward
order and the backward runs L..1:

- ``tau_b(L) = 0``, ``tau_b(l) = tau_b(l+1) + t_b(l+1)``;
- ``tau_c(L) = tau_b(L) + t_b(L)``, ``tau_c(l) = max(tau_c(l+1) + t_c(l+1), tau_b(l) + t_b(l))``;
- scanning ``l = L..2`` with ``e = tau_b(l-1) + t_b(l-1)``, layer ``l`` is merged into ``l-1``
  iff ``e < tau_c(l) + t_c(l)`` and (``tau_c(l) > e`` or ``e - tau_c(l) < a``); on a merge the
  sizes add, ``t_c(l) = 0`` and ``t_c``, ``tau_c`` are recomputed.

Layers without gradient tensors are folded into the next layer that has some in backward order
(their backward time delays its readiness), so the rule runs over the layers that own tensors.
"""

from __future__ import annotations

import numpy as np

from ..cluster import Cluster
from ..plan import Plan
from ..trace import Trace
from .common import new_plan, positive

__all__ = ["mgwfbp", "mgwfbp_groups", "mgwfbp_merge"]


def mgwfbp_merge(t_b: np.ndarray, sizes: np.ndarray, alpha: float, beta: float) -> list[int]:
    """Apply the MG-WFBP merge rule; return the group head of every layer.

    Parameters
    ----------
    t_b
        Backward time of every layer, forward order (index 0 is layer 1).
    sizes
        Gradient bytes of every layer, forward order.
    alpha, beta
        Cost ``T(M) = alpha + beta * M`` of one all-reduce.

    Returns
    -------
    list of int
        For every layer (forward order) the index of the layer its gradients are sent with (the
        smallest index of its group).

    Notes
    -----
    The scan only reads ``tau_c(l)`` at step ``l``, and a merge at step ``l`` changes ``t_c`` of
    layers ``l`` and ``l-1`` only, so ``tau_c`` is computed once per step from ``tau_c(l+1)``
    with the current ``t_c(l+1)``: the same values as a full recomputation after every merge.
    """
    n = len(t_b)
    t_b = np.asarray(t_b, dtype=float)
    size = np.asarray(sizes, dtype=float).copy()
    tau_b = np.zeros(n)
    for i in range(n - 2, -1, -1):
        tau_b[i] = tau_b[i + 1] + t_b[i + 1]

    def t_c(i: int) -> float:
        return alpha + beta * size[i] if size[i] > 0 else 0.0

    merged = [False] * n
    tau_c = tau_b[n - 1] + t_b[n - 1]  # tau_c(L)
    for i in range(n - 1, 0, -1):  # l = L..2 is index n-1..1, l-1 is i-1
        if i < n - 1:
            tau_c = max(tau_c + t_c(i + 1), tau_b[i] + t_b[i])
        e = tau_b[i - 1] + t_b[i - 1]
        if e < tau_c + t_c(i) and (tau_c > e or e - tau_c < alpha):
            size[i - 1] += size[i]
            size[i] = 0.0
            merged[i] = True
    head, cur = [], 0
    for i in range(n):
        if not merged[i]:
            cur = i
        head.append(cur)
    return head


def mgwfbp_groups(trace: Trace, alpha: float, beta: float) -> list[list[str]]:
    """MG-WFBP buckets of ``trace`` in gradient-ready order (merged layers share a bucket)."""
    owner = trace.tensor_layer_by_name
    learn = sorted({owner[t.name] for t in trace.ready_order})
    # backward time of each learnable layer including the tensor-less layers after it
    bounds = [*learn[1:], len(trace.layers)]
    t_b = np.array([trace.backward[lo:hi].sum() for lo, hi in zip(learn, bounds, strict=True)])
    index = {lay: k for k, lay in enumerate(learn)}
    sizes = np.zeros(len(learn))
    for t in trace.ready_order:
        sizes[index[owner[t.name]]] += t.bytes
    head = mgwfbp_merge(t_b, sizes, alpha, beta)
    buckets: dict[int, list[str]] = {}
    for t in trace.ready_order:
        buckets.setdefault(head[index[owner[t.name]]], []).append(t.name)
    return list(buckets.values())


def mgwfbp(
    trace: Trace,
    cluster: Cluster,
    *,
    alpha_s: float | None = None,
    beta_s_per_byte: float | None = None,
) -> Plan:
    """MG-WFBP buckets, launched FIFO as they become ready; the step waits for all.

    Parameters
    ----------
    trace, cluster
        The instance.
    alpha_s, beta_s_per_byte
        The ``a`` (seconds) and ``b`` (seconds per byte) the merge rule uses; default: the
        cluster's total alpha and beta of one bucket (``cluster.alpha_beta()``).
    """
    a, b = cluster.alpha_beta()
    if alpha_s is not None:
        a = positive(alpha_s, "mgwfbp.alpha_s", allow_zero=True)
    if beta_s_per_byte is not None:
        b = positive(beta_s_per_byte, "mgwfbp.beta_s_per_byte", allow_zero=True)
    knobs = {"alpha_s": a, "beta_s_per_byte": b}
    return new_plan("mgwfbp", trace, cluster, mgwfbp_groups(trace, a, b), knobs)
