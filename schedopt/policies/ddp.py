"""PyTorch DistributedDataParallel after its one-time bucket rebuild.

After the first iteration the reducer re-runs ``_compute_bucket_assignment_by_size`` over the
parameters in the order their gradients became ready, with limits ``[first cap, cap]`` (or the
per-bucket caps of ``bucket_cap_mb_list``); the buckets it returns are launched strictly in index
order and the optimizer step follows the last one. Checked against torch 2.13 in
tests/test_ddp_torch.py (the function itself, and a real gloo run).
"""

from __future__ import annotations

from collections.abc import Sequence

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import mib_to_bytes, new_plan, pack_in_order, positive

__all__ = ["DEFAULT_BUCKET_CAP_MB", "DEFAULT_FIRST_BUCKET_MB", "ddp", "ddp_buckets", "ddp_limits"]

#: ``bucket_cap_mb`` when left unset (MiB).
DEFAULT_BUCKET_CAP_MB = 25.0
#: ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` in MiB, used only when the cap is unset.
DEFAULT_FIRST_BUCKET_MB = 1.0


def ddp_limits(
    bucket_cap_mb: float | None = None,
    first_bucket_mb: float | None = None,
    bucket_cap_mb_list: Sequence[float] | None = None,
) -> list[int]:
    """The byte limits DDP's rebuild passes to the bucket assignment.

    Parameters
    ----------
    bucket_cap_mb
        Cap in MiB; None means DDP's default (25 MiB) with a 1 MiB first bucket.
    first_bucket_mb
        First-bucket limit in MiB (DDP's ``_DEFAULT_FIRST_BUCKET_BYTES``); None: 1 MiB when the
        cap is unset, else the cap.
    bucket_cap_mb_list
        Per-bucket caps in MiB, used as given (the last one repeats); overrides the other two.

    Returns
    -------
    list of int
        Limits in bytes: ``[first, cap]`` or the per-bucket list.
    """
    if bucket_cap_mb_list is not None:
        if isinstance(bucket_cap_mb_list, str | bytes) or not len(bucket_cap_mb_list):
            raise SchedoptError("must be a non-empty list of sizes in MiB",
                                "ddp.bucket_cap_mb_list", bucket_cap_mb_list)
        for i, cap in enumerate(bucket_cap_mb_list):
            positive(cap, f"ddp.bucket_cap_mb_list[{i}]")
        return [mib_to_bytes(c) for c in bucket_cap_mb_list]
    cap = DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else positive(
        bucket_cap_mb, "ddp.bucket_cap_mb")
    if first_bucket_mb is None:
        first = DEFAULT_FIRST_BUCKET_MB if bucket_cap_mb is None else cap
    else:
        first = positive(first_bucket_mb, "ddp.first_bucket_mb")
    return [mib_to_bytes(first), mib_to_bytes(cap)]


def ddp_buckets(trace: Trace, limits: Sequence[int]) -> list[list[str]]:
    """DDP's rebuilt buckets, in launch (index) order.

    Tensors are walked in gradient-ready order, one accumulator per dtype whose limits advance
    independently; a bucket closes once its size reaches its limit. Closed buckets keep their
    closing order; the buckets still open at the end follow, in the reverse order of their
    dtype's first appearance (what torch 2.13 returns: its accumulators live in an
    ``unordered_map`` whose iteration order, for these keys, is the reverse of insertion; see
    tests/test_ddp_torch.py).
    """
    closed, still_open = pack_in_order(trace.ready_order, limits, close="reach")
    return [b.members for b in closed] + [b.members for b in reversed(still_open)]


def ddp(
    trace: Trace,
    cluster: Cluster,
    *,
    bucket_cap_mb: float | None = None,
    first_bucket_mb: float | None = None,
    bucket_cap_mb_list: list[float] | None = None,
) -> Plan:
    """PyTorch DDP (steady state, after the bucket rebuild).

    Parameters
    ----------
    trace, cluster
        The instance.
    bucket_cap_mb
        Bucket cap in MiB (DDP's ``bucket_cap_mb``); default 25 with a 1 MiB first bucket.
    first_bucket_mb
        Override of the first bucket's limit in MiB (torch's ``_DEFAULT_FIRST_BUCKET_BYTES``).
    bucket_cap_mb_list
        Per-bucket caps in MiB (DDP's ``bucket_cap_mb_list``, torch >= 2.13).

    Returns
    -------
    Plan
        Buckets in index order, launched FIFO as they become ready, overlapped with the backward;
        the optimizer step waits for all of them.
    """
    limits = ddp_limits(bucket_cap_mb, first_bucket_mb, bucket_cap_mb_list)
    knobs = {"bucket_cap_mb": bucket_cap_mb, "first_bucket_mb": first_bucket_mb,
             "bucket_cap_mb_list": bucket_cap_mb_list, "limits_bytes": limits}
    return new_plan("ddp", trace, cluster, ddp_buckets(trace, limits), knobs)
