"""PyTorch DistributedDataParallel in its steady state (after its one-time bucket rebuild).

After the first iteration the reducer re-runs ``_compute_bucket_assignment_by_size`` over the
parameters in the order their gradients became ready, with limits ``[first cap, cap]`` (or the
per-bucket caps of ``bucket_cap_mb_list``); the buckets it returns are launched strictly in index
order and the optimizer step follows the last one. With ``find_unused_parameters=True`` (and
``static_graph=False``) the reducer never rebuilds (``Reducer::should_rebuild_buckets``,
reducer.hpp), and the construction-time buckets, made in parameter order, serve every
iteration. Checked against torch 2.13 in tests/test_ddp_torch.py (the functions themselves, and
real gloo runs).
"""

from __future__ import annotations

from collections.abc import Sequence

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import mib_to_bytes, new_plan, pack_in_order, positive

__all__ = ["DEFAULT_BUCKET_CAP_MB", "DEFAULT_FIRST_BUCKET_MB", "ddp", "ddp_buckets",
           "ddp_construction_buckets", "ddp_construction_limits", "ddp_limits"]

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


def ddp_construction_limits(limits: Sequence[int], per_bucket: bool = False) -> list[int]:
    """The byte limits of DDP's construction-time bucket assignment.

    ``_BucketCapacityConfig.compute_bucket_size_limits`` (torch 2.13, with
    ``find_unused_parameters=True`` and ``static_graph=False``) passes per-bucket caps as given,
    else ``[first, cap]`` when the first limit is below the cap and ``[cap]`` otherwise.

    Parameters
    ----------
    limits
        What :func:`ddp_limits` returned.
    per_bucket
        True when ``limits`` are the per-bucket caps of ``bucket_cap_mb_list``.
    """
    if per_bucket or limits[0] < limits[-1]:
        return list(limits)
    return [limits[-1]]


def ddp_construction_buckets(trace: Trace, limits: Sequence[int]) -> list[list[str]]:
    """DDP's construction-time buckets, in launch (index) order.

    What a DDP built with ``find_unused_parameters=True`` (and ``static_graph=False``) uses at
    every iteration, since its reducer never rebuilds them. ``_compute_bucket_assignment_by_size``
    walks the parameters in ``model.parameters()`` order (the trace's forward order), one
    accumulator per dtype, a bucket closing once its size reaches its limit; without
    ``tensor_indices`` it sorts the buckets by their smallest parameter index, and DDP hands the
    reducer the reverse of that list (``_ddp_init_helper``), so the bucket holding the last
    parameters comes first. Members keep parameter order.

    Parameters
    ----------
    trace
        The instance; its tensors in forward order are the parameter list.
    limits
        Byte limits (:func:`ddp_construction_limits`).
    """
    index = {t.name: i for i, t in enumerate(trace.tensor_list)}
    closed, still_open = pack_in_order(trace.tensor_list, limits, close="reach")
    buckets = sorted((b.members for b in [*closed, *still_open]), key=lambda m: index[m[0]])
    return buckets[::-1]


def ddp(
    trace: Trace,
    cluster: Cluster,
    *,
    bucket_cap_mb: float | None = None,
    first_bucket_mb: float | None = None,
    bucket_cap_mb_list: list[float] | None = None,
    find_unused_parameters: bool = False,
    static_graph: bool = False,
    gradient_as_bucket_view: bool = False,
) -> Plan:
    """PyTorch DDP in its steady state: after the bucket rebuild, or without one.

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
    find_unused_parameters
        DDP's ``find_unused_parameters``: when true (and ``static_graph`` false) the reducer
        never rebuilds its buckets, and the construction-time buckets
        (:func:`ddp_construction_buckets`, parameter order) serve every iteration.
    static_graph
        DDP's ``static_graph``: the buckets are rebuilt in gradient-ready order whatever
        ``find_unused_parameters`` says.
    gradient_as_bucket_view
        DDP's ``gradient_as_bucket_view``: the gradients are views into the buckets. It
        changes neither the buckets nor their order (only the copy into the bucket, which
        ``profile --grad-view`` times); recorded in the plan and emitted.

    Returns
    -------
    Plan
        Buckets in index order, launched FIFO as they become ready, overlapped with the backward;
        the optimizer step waits for all of them.
    """
    limits = ddp_limits(bucket_cap_mb, first_bucket_mb, bucket_cap_mb_list)
    knobs: dict[str, object] = {"bucket_cap_mb": bucket_cap_mb,
                                "first_bucket_mb": first_bucket_mb,
                                "bucket_cap_mb_list": bucket_cap_mb_list}
    knobs.update({k: True for k, v in (("find_unused_parameters", find_unused_parameters),
                                       ("static_graph", static_graph),
                                       ("gradient_as_bucket_view", gradient_as_bucket_view))
                  if v})
    if find_unused_parameters and not static_graph:
        limits = ddp_construction_limits(limits, bucket_cap_mb_list is not None)
        buckets = ddp_construction_buckets(trace, limits)
    else:
        buckets = ddp_buckets(trace, limits)
    knobs["limits_bytes"] = limits
    return new_plan("ddp", trace, cluster, buckets, knobs)
