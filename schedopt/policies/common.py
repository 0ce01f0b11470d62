"""Building blocks shared by the policies (grouping rules, plan construction)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import DTYPE_BYTES, Tensor, Trace

__all__ = [
    "MIB",
    "Pack",
    "itemsize",
    "layer_buckets",
    "layer_ready_times",
    "mib_to_bytes",
    "new_plan",
    "pack_in_order",
    "positive",
    "single_bucket",
    "tensor_ready_times",
]

#: Bytes in one MiB (the "MB" of PyTorch DDP and Horovod knobs).
MIB = 2**20

CloseRule = Literal["reach", "exceed", "overflow"]


def layer_buckets(trace: Trace) -> list[list[str]]:
    """One bucket per layer that owns tensors, in gradient-ready order (layer-wise WFBP)."""
    out: list[list[str]] = []
    last = None
    for tensor, layer in zip(trace.ready_order, trace.ready_layer.tolist(), strict=True):
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


def mib_to_bytes(mb: float) -> int:
    """Convert a size in MiB to bytes the way PyTorch DDP does: ``int(mb * 2**20)``."""
    return int(mb * MIB)


def positive(value: Any, field_name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a number, raising :class:`SchedoptError` unless it is positive.

    Parameters
    ----------
    value
        The knob value.
    field_name
        Dotted name reported in the error (``ddp.bucket_cap_mb``).
    allow_zero
        Accept 0 as well.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise SchedoptError("must be a number", field_name, value)
    if value < 0 or (value == 0 and not allow_zero):
        raise SchedoptError("must be positive" if not allow_zero else "must be >= 0",
                            field_name, value)
    return value


def layer_ready_times(trace: Trace) -> np.ndarray:
    """End of every layer's backward when the iteration starts at 0 with nothing waiting.

    The backward starts at the sum of the forward times and runs from the last layer to the
    first; layer ``l``'s tensors are ready when its backward ends. This is the "base model" over
    which timing-dependent policies (Horovod cycles, ByteScheduler credits) replay their rule.
    """
    start = float(trace.forward.sum())
    tail = np.cumsum(trace.backward[::-1])[::-1]  # sum of backward over layers l..L-1
    return start + tail


def tensor_ready_times(trace: Trace) -> np.ndarray:
    """Ready time of every tensor, in gradient-ready order (see :func:`layer_ready_times`)."""
    return layer_ready_times(trace)[trace.ready_layer]


@dataclass
class Pack:
    """One bucket produced by :func:`pack_in_order`.

    Attributes
    ----------
    members
        Tensor names in the order they were added.
    key
        The accumulator key (e.g. the dtype).
    closed
        True when the bucket was closed by its size limit; False when it was flushed at the end.
    size
        Accumulated size (in the unit of the ``size`` function).
    """

    members: list[str] = field(default_factory=list)
    key: Hashable = None
    closed: bool = False
    size: int = 0


def pack_in_order(
    tensors: Iterable[Tensor],
    limits: Sequence[int],
    *,
    close: CloseRule,
    size: Callable[[Tensor], int] = lambda t: t.bytes,
    key: Callable[[Tensor], Hashable] = lambda t: t.dtype,
) -> tuple[list[Pack], list[Pack]]:
    """Greedy packing by size in a given order, one accumulator per key.

    Each key (dtype by default) has its own open bucket and its own position in ``limits``: the
    first bucket of a key uses ``limits[0]``, the next ``limits[1]`` and so on, the last limit
    repeating. Three closing rules cover the frameworks:

    - ``reach`` (PyTorch DDP, Megatron-LM): add the tensor, then close once the size is
      ``>= limit`` (a bucket overshoots by at most one tensor);
    - ``exceed`` (DeepSpeed's fallback all-reduce): add, then close once the size is ``> limit``;
    - ``overflow`` (DeepSpeed ZeRO's IPG bucket): before adding, close a non-empty bucket that the
      tensor would take past the limit.

    Parameters
    ----------
    tensors
        Tensors in the order the framework walks them.
    limits
        Size limits (same unit as ``size``), at least one.
    close
        The closing rule.
    size, key
        Size of a tensor and its accumulator key.

    Returns
    -------
    closed, open
        Buckets closed by their limit, in closing order; then the buckets still open at the end,
        in the order their key first appeared. Empty buckets are dropped.
    """
    if not limits:
        raise SchedoptError("at least one size limit is needed", "limits", list(limits))
    acc: dict[Hashable, Pack] = {}
    pos: dict[Hashable, int] = {}
    closed: list[Pack] = []

    def _close(k: Hashable) -> None:
        bucket = acc[k]
        bucket.closed = True
        closed.append(bucket)
        acc[k] = Pack(key=k)
        pos[k] = min(pos[k] + 1, len(limits) - 1)

    for t in tensors:
        k = key(t)
        if k not in acc:
            acc[k] = Pack(key=k)
            pos[k] = 0
        n = size(t)
        if close == "overflow" and acc[k].members and acc[k].size + n > limits[pos[k]]:
            _close(k)
        bucket = acc[k]
        bucket.members.append(t.name)
        bucket.size += n
        limit = limits[pos[k]]
        full = bucket.size >= limit if close == "reach" else bucket.size > limit
        if close != "overflow" and full:
            _close(k)
    still_open = [b for b in acc.values() if b.members]
    return closed, still_open


def itemsize(tensor: Tensor) -> int:
    """Bytes per element of a tensor's dtype."""
    return DTYPE_BYTES[tensor.dtype]
