"""Building blocks shared by the policies (grouping rules, plan construction)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..cluster import Cluster
from ..plan import Plan
from ..trace import Trace

__all__ = ["layer_buckets", "new_plan", "single_bucket"]


def layer_buckets(trace: Trace) -> list[list[str]]:
    """One bucket per layer that owns tensors, in gradient-ready order (layer-wise WFBP)."""
    out: list[list[str]] = []
    last = None
    for tensor, layer in zip(trace.ready_order, trace.ready_layer, strict=True):
        if layer != last:
            out.append([])
            last = layer
        out[-1].append(tensor.name)
    return out


def single_bucket(trace: Trace) -> list[list[str]]:
    """All tensors in one bucket, in gradient-ready order."""
    return [[t.name for t in trace.ready_order]]


def new_plan(
    policy: str,
    trace: Trace,
    cluster: Cluster,
    buckets: Iterable[Sequence[str]],
    knobs: dict[str, Any] | None = None,
    **fields: Any,
) -> Plan:
    """Make a :class:`Plan` bound to ``trace`` and ``cluster``.

    Parameters
    ----------
    policy
        Policy name recorded in the plan.
    buckets
        Bucket members in launch order.
    knobs
        The knobs the policy used (recorded for reproducibility).
    **fields
        Other :class:`Plan` fields (``next_forward``, ``overlap``, ``partition``, ...).
    """
    plan = Plan(policy=policy, knobs=knobs or {}, buckets=[list(b) for b in buckets], **fields)
    return plan.bind(trace, cluster)
