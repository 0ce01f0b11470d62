"""ByteScheduler: priority scheduling with tensor partitioning and credits (SOSP 2019).

A tensor of more elements than the partition unit is cut, as ByteScheduler's
``_partition_tensor`` does (bytedance/byteps, ``bytescheduler/``), into ``ceil(numel / unit)``
nearly equal pieces along its first dimension (no more pieces than rows): every piece gets
``rows // pieces`` rows and the last ``rows % pieces`` pieces one row more. The trace's
``rows`` (the tensor's leading dimension) gives the rows; a tensor without it is split the same
way by elements (as if it were one-dimensional), which is exact for 1-D tensors and otherwise
differs from the real cut by less than one row per piece.

A piece's priority is its layer's place in the next forward (layer 0 first), then its
tensor's place in the layer, then its index. ByteScheduler's core loop pops the highest-priority
ready piece and dispatches it while the credit is positive (the credit drops by the piece's
parameter count and comes back when the piece finishes), so a piece may take the credit below 0.

The replay runs that rule over the base model's ready times (backward starting at the sum of
forward times) on one exclusive link: when the link is free, the ready pieces are dispatched in
priority order while the credit allows, and the pieces dispatched together share one all-reduce
(one bucket, one start-up cost) that holds the link until it ends; pieces that become ready
meanwhile wait for the next dispatch. Real ByteScheduler keeps several pieces in flight that
share the link and refills the credit piece by piece; the exclusive link cannot express that, so
a credit window becomes one bucket (docs/policies.md, "Deviations").
"""

from __future__ import annotations

import heapq

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, piece_name
from schedopt.model.trace import Trace
from schedopt.policies.common import itemsize, new_plan, positive, tensor_ready_times

__all__ = ["bytescheduler", "bytescheduler_plan_parts", "split_sizes"]


def split_sizes(numel: int, unit: int, rows: int | None = None) -> list[int]:
    """Elements of the pieces ByteScheduler cuts a tensor into.

    Parameters
    ----------
    numel
        Elements of the tensor.
    unit
        Partition unit in elements.
    rows
        Leading dimension (None: split by elements, as a 1-D tensor).

    Returns
    -------
    list of int
        ``min(ceil(numel / unit), rows)`` pieces of ``rows // n`` rows, the last ``rows % n``
        with one row more; ``[numel]`` when the tensor fits in one unit.
    """
    number = -(-numel // unit)
    if number <= 1:
        return [numel]
    rows = numel if rows is None else rows
    number = min(number, rows)
    per, extra = divmod(rows, number)
    cols = numel // rows
    return [(per + (i >= number - extra)) * cols for i in range(number)]


def bytescheduler_plan_parts(
    trace: Trace,
    cluster: Cluster,
    *,
    partition_params: int | None,
    partition_bytes: int | None,
    credit_params: float,
) -> tuple[list[list[str]], dict[str, list[int]]]:
    """Buckets (dispatch order) and partition of the ByteScheduler replay.

    Parameters
    ----------
    trace, cluster
        The instance; the cluster gives the duration of each dispatched all-reduce.
    partition_params
        Partition unit in parameters (converted to bytes with each tensor's item size).
    partition_bytes
        Partition unit in bytes (rounded down to whole elements, at least one); used when
        given.
    credit_params
        Credit in parameters.

    Returns
    -------
    buckets, partition
        Buckets of members in dispatch order, and the piece sizes of every partitioned tensor.
    """
    owner = trace.tensor_layer_by_name
    forward_pos = {t.name: k for k, t in enumerate(trace.tensor_list)}
    ready_at = dict(zip((t.name for t in trace.ready_order), tensor_ready_times(trace),
                        strict=True))
    # pieces: (ready time, priority key, member name, bytes, parameters)
    pieces: list[tuple[float, tuple[int, int, int], str, int, int]] = []
    partition: dict[str, list[int]] = {}
    for t in trace.tensor_list:
        size = itemsize(t)
        if partition_bytes is not None:
            unit = max(1, partition_bytes // size)
        else:
            assert partition_params is not None
            unit = partition_params
        sizes = [n * size for n in split_sizes(t.numel, unit, t.rows)]
        if len(sizes) > 1:
            partition[t.name] = sizes
        for i, nbytes in enumerate(sizes):
            member = piece_name(t.name, i) if len(sizes) > 1 else t.name
            key = (owner[t.name], forward_pos[t.name], i)
            pieces.append((ready_at[t.name], key, member, nbytes, nbytes // size))
    pieces.sort(key=lambda p: (p[0], p[1]))
    time_of = cluster.allreduce_time
    buckets: list[list[str]] = []
    heap: list[tuple[tuple[int, int, int], str, int, int]] = []
    nxt, now = 0, 0.0
    while nxt < len(pieces) or heap:
        if not heap:
            now = max(now, pieces[nxt][0])
        while nxt < len(pieces) and pieces[nxt][0] <= now:
            _, key, member, nbytes, params = pieces[nxt]
            heapq.heappush(heap, (key, member, nbytes, params))
            nxt += 1
        credit = credit_params
        bucket: list[str] = []
        total = 0
        while heap and credit > 0:
            _, member, nbytes, params = heapq.heappop(heap)
            bucket.append(member)
            total += nbytes
            credit -= params
        buckets.append(bucket)
        now += time_of(total)
    return buckets, partition


def bytescheduler(
    trace: Trace,
    cluster: Cluster,
    *,
    partition_params: int = 1_000_000,
    partition_bytes: int | None = None,
    credit_params: float = 4_000_000,
) -> Plan:
    """ByteScheduler's priority, partitioning and credit rule as a static plan.

    Parameters
    ----------
    trace, cluster
        The instance.
    partition_params
        Partition unit in parameters (BYTESCHEDULER_PARTITION, default 1,000,000).
    partition_bytes
        Partition unit in bytes instead (e.g. BytePS's BYTEPS_PARTITION_BYTES, 4,096,000).
    credit_params
        Credit in parameters (BYTESCHEDULER_CREDIT, default 4,000,000; ByteScheduler counts
        unacknowledged parameters, not bytes).

    Returns
    -------
    Plan
        Pieces bucketed per credit window in dispatch order (not readiness order); layer ``l``
        of the next forward waits only for the buckets holding its pieces.
    """
    if partition_bytes is not None:
        positive(partition_bytes, "bytescheduler.partition_bytes")
        partition_bytes = int(partition_bytes)
    else:
        if isinstance(partition_params, bool) or not isinstance(partition_params, int):
            raise SchedoptError("must be a whole number of parameters",
                                "bytescheduler.partition_params", partition_params)
        positive(partition_params, "bytescheduler.partition_params")
    positive(credit_params, "bytescheduler.credit_params")
    buckets, partition = bytescheduler_plan_parts(
        trace, cluster, partition_params=partition_params, partition_bytes=partition_bytes,
        credit_params=credit_params,
    )
    knobs = {"partition_params": partition_params, "partition_bytes": partition_bytes,
             "credit_params": credit_params}
    return new_plan("bytescheduler", trace, cluster, buckets, knobs, partition=partition,
                    next_forward="per-layer")
