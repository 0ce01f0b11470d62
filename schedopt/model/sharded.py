"""Sharded data parallel (FSDP, ZeRO-3): the units' data, the network queue and the memory peak.

The simulator (:mod:`schedopt.simulate.simulator`) runs a sharded plan with these pieces; the
semantics are those of docs/model.md ("Sharded data parallel"):

- :func:`shard_units` turns a plan's units (and its root group) into per-group arrays:
  all-gathered bytes ``P_u`` (frozen parameters included), communicated gradient bytes ``G_u``
  (gradient tensors only, scaled by the plan's ``comm_dtype``), forward and backward compute,
  the runs of the compute stream, and the all-gather and reduce-scatter times of
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
    """A sharded plan's parameter groups as arrays: units ``u = 0..U-1`` in forward order, then
    the root group (index ``U``) when the plan has one (:attr:`~schedopt.model.plan.Sharding.root`).

    Attributes
    ----------
    layers
        Layer indices of every group.
    param_bytes
        ``P_u``: the bytes the group's all-gather moves, frozen parameters included (the
        tensors' own dtype; first dimensions padded with the plan's ``padding``).
    grad_bytes
        ``G_u``: the bytes its reduce-scatter moves: its gradient tensors only (``comm_dtype``;
        padded likewise); 0 for a group of frozen parameters only, which has no
        reduce-scatter.
    grad_mem
        The group's unreduced gradients (bytes, the tensors' own dtype, padded): ``P_u`` less
        its frozen parameters.
    forward_s, backward_s
        The group's compute (sum over its layers), one micro-batch.
    ag_s, rs_s
        Duration of the group's all-gather (of ``P_u``) and reduce-scatter (of ``G_u``).
    segments
        The compute stream's runs in forward order: ``(group, layer indices)``, a run of
        consecutive layers of one group (a unit is one run; the root group one run per
        stretch of its layers).
    segment_s
        Forward and backward seconds of every run (``(runs, 2)``).
    has_root
        Whether the last group is the root group.
    """

    layers: list[list[int]]
    param_bytes: np.ndarray
    grad_bytes: np.ndarray
    grad_mem: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    ag_s: np.ndarray
    rs_s: np.ndarray
    segments: list[tuple[int, list[int]]]
    segment_s: np.ndarray
    has_root: bool = False

    @property
    def num_units(self) -> int:
        """Number of units (the root group not counted)."""
        return len(self.layers) - self.has_root

    @property
    def root(self) -> int | None:
        """Index of the root group, or None."""
        return self.num_units if self.has_root else None

    def reduces(self, g: int) -> bool:
        """Whether group ``g`` has a reduce-scatter (a gradient tensor)."""
        return bool(self.grad_bytes[g] > 0)


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
        ``overlap_slowdown``, ``comm_slowdown`` or ``comm_concurrency`` other than 1.
    """
    for name in ("overlap_slowdown", "comm_slowdown", "comm_concurrency"):
        if getattr(cluster, name) != 1:
            raise SchedoptError("contention and concurrent collectives are not modelled for "
                                "sharded plans (use 1)", f"cluster.{name}", getattr(cluster, name))


def shard_units(trace: Trace, cluster: Cluster, plan: Plan) -> ShardedUnits:
    """Resolve ``plan``'s parameter groups (units, then the root group) against ``trace`` and
    cost them on ``cluster``.

    Raises
    ------
    SchedoptError
        When the plan is not sharded, its groups do not fit the trace, or the cluster's
        collective cannot shard (``ps``).
    """
    if plan.sharding is None:
        raise SchedoptError("the plan is not sharded", "plan.sharding", None)
    check_sharded_plan(plan, cluster)
    plan.check_against(trace, cluster)  # the groups too
    sh = plan.sharding
    index = {la.name: i for i, la in enumerate(trace.layers)}
    layers = [[index[n] for n in group] for group in sh.groups]
    size = _padded_bytes(trace, cluster.world_size if sh.padding == "dim0" else 1)
    dtype = {t.name: t.dtype for t in [*trace.tensor_list, *trace.frozen_list]}
    target = None if plan.comm_dtype is None else DTYPE_BYTES[plan.comm_dtype]

    def total(groups: list[list[str]], comm: bool = False) -> np.ndarray:
        scale = (lambda n: 1.0) if not comm or target is None else (
            lambda n: target / DTYPE_BYTES[dtype[n]])
        return np.array([sum(size[n] * scale(n) for n in g) for g in groups], dtype=float)

    grads = sh.unit_tensors(trace)
    g_mem = total(grads)
    p_b = g_mem + total(sh.unit_frozen(trace))
    g_b = total(grads, comm=True)
    segments = _segments(layers, len(trace.layers))
    owner = np.array([g for g, _ in segments], dtype=np.int64)
    first = [lays[0] for _, lays in segments]
    seg_s = np.stack([np.add.reduceat(trace.forward, first),
                      np.add.reduceat(trace.backward, first)], axis=1)
    f_u, b_u = (np.bincount(owner, seg_s[:, k], minlength=len(layers)) for k in (0, 1))
    ag = cluster.shard_collective_time(p_b, plan.collective)
    rs = cluster.shard_collective_time(g_b, plan.collective)
    return ShardedUnits(layers, p_b, g_b, g_mem, f_u, b_u, ag, rs, segments, seg_s,
                        sh.root is not None)


def _padded_bytes(trace: Trace, world: int) -> dict[str, int]:
    """Bytes of every gradient tensor and frozen parameter, first dimensions padded to a
    multiple of ``world`` (1: unpadded)."""
    return {t.name: (t.bytes if world == 1 else
                     dim0_padded_numel(t.numel, t.rows, world) * DTYPE_BYTES[t.dtype])
            for t in [*trace.tensor_list, *trace.frozen_list]}


def _segments(layers: list[list[int]], n: int) -> list[tuple[int, list[int]]]:
    """The runs ``(group, consecutive layer indices)`` of ``n`` layers in forward order."""
    group = np.empty(n, dtype=np.int64)
    for g, lays in enumerate(layers):
        group[lays] = g
    out: list[tuple[int, list[int]]] = []
    for i in range(n):
        if out and out[-1][0] == group[i]:
            out[-1][1].append(i)
        else:
            out.append((int(group[i]), [i]))
    return out


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
