"""Sharded data parallel (FSDP, ZeRO-3): the units' data, the network queue and the memory peak.

The simulator (:mod:`schedopt.simulate.simulator`) runs a sharded plan with these pieces; the
semantics are those of docs/model.md ("Sharded data parallel"):

- :func:`shard_units` turns a plan's units into per-unit arrays: parameter bytes ``P_u``,
  communicated gradient bytes ``G_u`` (scaled by the plan's ``comm_dtype``), forward and
  backward compute, and the all-gather and reduce-scatter times of
  :meth:`~schedopt.model.cluster.Cluster.shard_collective_time`.
- :class:`Network` is the one network resource: tasks are issued at known times and served one
  at a time, non-preemptively, in issue order (one stream) or all-gathers first (two streams).
- :func:`peak_bytes` sweeps the intervals during which unsharded parameters and unreduced
  gradients are alive.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, parse_member
from schedopt.model.trace import DTYPE_BYTES, Trace

__all__ = ["Network", "ShardedUnits", "check_no_contention", "comm_member_bytes",
           "dim0_padded_numel", "peak_bytes", "shard_units"]


def comm_member_bytes(trace: Trace, plan: Plan, nbytes: np.ndarray) -> np.ndarray:
    """Bytes each bucket member moves: ``nbytes`` (launch order, as :meth:`Plan.members`)
    scaled by ``itemsize(comm_dtype) / itemsize(tensor dtype)``; ``nbytes`` unchanged when the
    plan has no ``comm_dtype``."""
    if plan.comm_dtype is None:
        return nbytes.astype(float)
    dtype = {t.name: t.dtype for t in trace.tensor_list}
    target = DTYPE_BYTES[plan.comm_dtype]
    scale = [target / DTYPE_BYTES[dtype[parse_member(m, plan.partition).tensor]]
             for bucket in plan.buckets for m in bucket]
    return nbytes.astype(float) * np.asarray(scale, dtype=float)


def dim0_padded_numel(numel: int, rows: int | None, world_size: int) -> int:
    """Elements of a tensor whose first dimension is padded to a multiple of ``world_size``.

    FSDP2 (torch 2.13, ``_fsdp_param.py``: ``padded_sharded_param_size`` is the size of the
    first of ``torch.chunk(param, world_size, dim=0)``; ``_fsdp_common.py``:
    ``_get_dim0_padded_size``) gives every rank ``ceil(rows / world_size)`` rows, so the
    all-gather output and the reduce-scatter input hold ``ceil(rows / world_size) *
    world_size`` rows of ``numel / rows`` elements. ``rows`` None is read as a 1-D tensor.
    """
    rows = numel if rows is None else rows
    return -(-rows // world_size) * world_size * (numel // rows)


@dataclass(frozen=True)
class ShardedUnits:
    """A sharded plan's units as arrays (forward order, ``u = 0..U-1``).

    Attributes
    ----------
    layers
        Layer indices of every unit.
    param_bytes
        ``P_u``: the unit's parameter bytes (the tensors' own dtype; first dimensions padded
        with the plan's ``padding``).
    grad_bytes
        ``G_u``: the bytes its reduce-scatter moves (``comm_dtype``; padded likewise).
    forward_s, backward_s
        The unit's compute (sum over its layers), one micro-batch.
    ag_s, rs_s
        Duration of the unit's all-gather (of ``P_u``) and reduce-scatter (of ``G_u``).
    """

    layers: list[list[int]]
    param_bytes: np.ndarray
    grad_bytes: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    ag_s: np.ndarray
    rs_s: np.ndarray

    @property
    def num_units(self) -> int:
        """Number of units."""
        return len(self.layers)


def check_sharded_plan(plan: Plan, cluster: Cluster) -> None:
    """Refuse what a sharded plan cannot be: per-layer next forward, no overlap, ``ps``, and
    contention (:func:`check_no_contention`)."""
    if plan.next_forward != "wait-for-all":
        raise SchedoptError("a sharded plan waits for all its reduce-scatters and the step"
                            " (use wait-for-all)", "plan.next_forward", plan.next_forward)
    if not plan.overlap:
        raise SchedoptError("a sharded plan overlaps its reduce-scatters with the backward",
                            "plan.overlap", plan.overlap)
    check_no_contention(cluster)


def check_no_contention(cluster: Cluster) -> None:
    """Refuse a cluster whose compute and communication slow each other: contention is not
    modelled for sharded plans.

    Raises
    ------
    SchedoptError
        ``overlap_slowdown`` or ``comm_slowdown`` other than 1.
    """
    for name in ("overlap_slowdown", "comm_slowdown"):
        if getattr(cluster, name) != 1.0:
            raise SchedoptError("contention is not modelled for sharded plans (use 1)",
                                f"cluster.{name}", getattr(cluster, name))


def shard_units(trace: Trace, cluster: Cluster, plan: Plan) -> ShardedUnits:
    """Resolve ``plan``'s units against ``trace`` and cost them on ``cluster``.

    Raises
    ------
    SchedoptError
        When the plan is not sharded, its units do not fit the trace, or the cluster's
        collective cannot shard (``ps``).
    """
    if plan.sharding is None:
        raise SchedoptError("the plan is not sharded", "plan.sharding", None)
    check_sharded_plan(plan, cluster)
    plan.check_against(trace, cluster)  # the units too
    names = plan.sharding.unit_tensors(trace)
    index = {la.name: i for i, la in enumerate(trace.layers)}
    layers = [[index[n] for n in unit] for unit in plan.sharding.units]
    world = cluster.world_size
    if plan.sharding.padding == "dim0" and world > 1:
        size = {t.name: (dim0_padded_numel(t.numel, t.rows, world) * DTYPE_BYTES[t.dtype], t.dtype)
                for t in trace.tensor_list}
    else:
        size = {t.name: (t.bytes, t.dtype) for t in trace.tensor_list}
    target = None if plan.comm_dtype is None else DTYPE_BYTES[plan.comm_dtype]
    p_b = np.array([sum(size[n][0] for n in unit) for unit in names], dtype=float)
    g_b = p_b if target is None else np.array(
        [sum(size[n][0] * target / DTYPE_BYTES[size[n][1]] for n in unit) for unit in names],
        dtype=float)
    first = np.cumsum([0] + [len(u) for u in layers[:-1]])  # units are contiguous
    f_u = np.add.reduceat(trace.forward, first)
    b_u = np.add.reduceat(trace.backward, first)
    ag = cluster.shard_collective_time(p_b, plan.collective)
    rs = cluster.shard_collective_time(g_b, plan.collective)
    return ShardedUnits(layers, p_b, g_b, f_u, b_u, ag, rs)


@dataclass
class Network:
    """The one network resource of a sharded plan: non-preemptive, one task at a time.

    Tasks are issued (become ready) at known times; when the network is free it serves, among
    the issued tasks, the one issued first (``streams`` 1: ties by issue order) or the first
    all-gather before any reduce-scatter (``streams`` 2). Serving is lazy: :meth:`end_of` serves
    tasks until the one asked for has ended, which is exact when every task issued before the
    caller's current time has been issued (the caller waits for that task, so nothing is issued
    meanwhile). All-gathers and reduce-scatters wait in a heap each, ordered by issue time and
    order, so serving a task costs ``O(log n)``.

    Attributes
    ----------
    streams
        1 or 2.
    free
        Time the network becomes free.
    done
        Per task key its ``(start, end)``.
    """

    streams: int
    free: float = 0.0
    done: dict[tuple, tuple[float, float]] = field(default_factory=dict)
    _heaps: tuple[list, list] = field(default_factory=lambda: ([], []))  # (ag, rs)
    _seq: int = 0

    def issue(self, key: tuple, at: float, duration: float, reduce_scatter: bool) -> None:
        """Issue task ``key`` at time ``at``."""
        heapq.heappush(self._heaps[reduce_scatter], (at, self._seq, key, duration))
        self._seq += 1

    def _serve_one(self) -> None:
        ag, rs = self._heaps
        earliest = ag if ag and (not rs or ag[0][:2] < rs[0][:2]) else rs
        start = max(self.free, earliest[0][0])  # the earliest issued task is ready by then
        # two streams: an all-gather issued by then goes before any reduce-scatter
        pick = ag if self.streams == 2 and ag and ag[0][0] <= start else earliest
        _, _, key, dur = heapq.heappop(pick)
        self.free = start + dur
        self.done[key] = (start, self.free)

    def end_of(self, key: tuple) -> float:
        """Serve tasks until ``key`` has ended; return its end."""
        while key not in self.done:
            if not (self._heaps[0] or self._heaps[1]):
                raise KeyError(key)
            self._serve_one()
        return self.done[key][1]

    def drain(self) -> None:
        """Serve every issued task."""
        while self._heaps[0] or self._heaps[1]:
            self._serve_one()


def peak_bytes(intervals: Sequence[tuple[float, float, float]]) -> float:
    """Largest sum of ``bytes`` over ``(start, end, bytes)`` intervals alive at one time.

    An interval is alive on ``[start, end)``: at equal times, releases count before
    allocations.
    """
    if not intervals:
        return 0.0
    arr = np.asarray(intervals, dtype=float)
    times = np.r_[arr[:, 0], arr[:, 1]]
    delta = np.r_[arr[:, 2], -arr[:, 2]]
    order = np.lexsort((delta, times))  # by time, releases (negative) first
    return float(max(0.0, np.cumsum(delta[order]).max()))
