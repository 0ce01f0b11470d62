"""MG-WFBP: merged-gradient wait-free backpropagation (Shi, Chu, Li, INFOCOM 2019).

The merge rule of the paper, over the cluster's alpha-beta cost ``T(M) = a + b M`` of one bucket
and the trace's per-layer backward times and gradient bytes. Layers are numbered 1..L in forward
order and the backward runs L..1:

- ``tau_b(L) = 0``, ``tau_b(l) = tau_b(l+1) + t_b(l+1)``;
- ``tau_c(L) = tau_b(L) + t_b(L)``, ``tau_c(l) = max(tau_c(l+1) + t_c(l+1), tau_b(l) + t_b(l))``;
- scanning ``l = L..2`` with ``e = tau_b(l-1) + t_b(l-1)``, layer ``l`` is merged into ``l-1``
  iff ``e < tau_c(l) + t_c(l)`` and (``tau_c(l) > e`` or ``e - tau_c(l) < a``); on a merge the
  sizes add, ``t_c(l) = 0`` and ``t_c``, ``tau_c`` are recomputed.

The rule runs over tensors, not layers, as the authors' code does (HKBU-HPML/MG-WFBP,
``distributed_optimizer.py``, ``_generate_groups_mgwfbp``): see :func:`mgwfbp_groups`. Layers
without gradient tensors add their backward time to the next tensor in backward order.
"""

from __future__ import annotations

import numpy as np

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import new_plan, positive, tensor_ready_times

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
    """MG-WFBP buckets of ``trace`` in gradient-ready order.

    The rule runs per tensor, as the authors' ``_generate_groups_mgwfbp`` does: the units are
    the tensors in the reverse of gradient-ready order, and a unit's ``t_b`` is the time from
    the previous tensor's readiness to its own (the whole backward of its layer, and of the
    tensor-less layers before it in backward order, for the first tensor of a layer; 0 for the
    other tensors of the layer). With ``alpha > 0`` the tensors of one layer always merge (the
    same groups as the rule over layers); with ``alpha = 0`` a layer's tensors stay apart unless
    the link is still busy when the next one is ready.
    """
    units = trace.ready_order[::-1]
    ends = tensor_ready_times(trace)[::-1]  # end of each unit's backward, forward order
    start = float(trace.forward.sum())
    t_b = np.append(ends[:-1] - ends[1:], ends[-1] - start) if len(units) else np.zeros(0)
    sizes = np.array([t.bytes for t in units], dtype=float)
    head = mgwfbp_merge(t_b, sizes, alpha, beta)
    buckets: dict[int, list[str]] = {}
    for k in range(len(units) - 1, -1, -1):  # gradient-ready order
        buckets.setdefault(head[k], []).append(units[k].name)
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
