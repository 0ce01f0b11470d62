"""Megatron-LM (Megatron-Core) DistributedDataParallel gradient buckets.

Parameters are grouped into one gradient buffer per dtype (in the order each dtype first appears
in the parameter list); inside a buffer they are walked in reverse parameter order ("to roughly
follow backprop order", static, not the measured ready order) and a bucket closes once it holds
at least ``bucket_size`` parameters. Without ``overlap_grad_reduce`` Megatron sets the bucket
size to infinity, so each buffer is one bucket, all-reduced after the backward, buffer by buffer.
With it, each bucket's all-reduce starts as soon as its last gradient is ready.
"""

from __future__ import annotations

from collections.abc import Hashable

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import new_plan, pack_in_order, positive

__all__ = ["megatron", "megatron_buckets"]


def megatron_buckets(trace: Trace, bucket_size: int | None, *, overlap: bool) -> list[list[str]]:
    """Megatron's buckets in launch order.

    Parameters
    ----------
    trace
        The instance.
    bucket_size
        Parameters per bucket (None: one bucket per dtype buffer).
    overlap
        True: launch order is readiness order (a bucket starts when its last gradient is ready;
        ties keep buffer order). False: buffer by buffer.
    """
    walk = list(reversed(trace.tensor_list))
    limit = [bucket_size] if bucket_size is not None else [trace.total_bytes + 1]
    closed, still_open = pack_in_order(walk, limit, close="reach", size=lambda t: t.numel)
    buffer_of: dict[Hashable, int] = {
        d: k for k, d in enumerate(dict.fromkeys(t.dtype for t in trace.tensor_list))
    }
    packs = sorted(closed + still_open, key=lambda p: buffer_of[p.key])  # stable
    buckets = [p.members for p in packs]
    if overlap:
        ready = trace.ready_index
        buckets.sort(key=lambda b: max(ready[m] for m in b))  # stable: ties keep buffer order
    return buckets


def megatron(
    trace: Trace,
    cluster: Cluster,
    *,
    overlap_grad_reduce: bool = False,
    bucket_size: int | None = None,
) -> Plan:
    """Megatron-Core DDP.

    Parameters
    ----------
    trace, cluster
        The instance.
    overlap_grad_reduce
        Overlap bucketed all-reduces with the backward (default False: one all-reduce per dtype
        buffer after the backward).
    bucket_size
        Bucket size in parameters; default ``max(40_000_000, 1_000_000 * dp_size)`` with
        ``dp_size`` the cluster's world size. Ignored (infinite) without overlap, as in Megatron.

    Returns
    -------
    Plan
        Buckets in launch order; the optimizer step waits for all.
    """
    if not isinstance(overlap_grad_reduce, bool):
        raise SchedoptError("must be true or false", "megatron.overlap_grad_reduce",
                            overlap_grad_reduce)
    if bucket_size is None:
        size = max(40_000_000, 1_000_000 * cluster.world_size)
    else:
        if isinstance(bucket_size, bool) or not isinstance(bucket_size, int):
            raise SchedoptError("must be a whole number of parameters", "megatron.bucket_size",
                                bucket_size)
        size = int(positive(bucket_size, "megatron.bucket_size"))
    used = size if overlap_grad_reduce else None
    buckets = megatron_buckets(trace, used, overlap=overlap_grad_reduce)
    knobs = {"overlap_grad_reduce": overlap_grad_reduce, "bucket_size": bucket_size,
             "bucket_size_used": used}
    return new_plan("megatron", trace, cluster, buckets, knobs, overlap=overlap_grad_reduce)
