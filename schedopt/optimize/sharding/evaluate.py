"""The sharded plan's step, in closed form: :class:`ShardedInstance` and :func:`step_time`.

The semantics are those of docs/model.md (sharded data parallel): per micro-batch, unit ``u``'s
all-gather ``AGf(u)`` is issued ``p`` units ahead (at the start of ``F(u - p)``; at the end of
``F(u - 1)`` when ``p = 0``), ``F(u)`` waits for it; in the backward ``AGb(u)`` likewise ``q``
units ahead (full mode only); on the step's last micro-batch ``RS(u)`` is ready when ``B(u)``
ends. One network resource serves the collectives without preemption: in issue order with one
stream, all-gathers before reduce-scatters with two. The step ends with the optimizer step on
the shard (``update_s / r``) after the last reduce-scatter; the next step's forward waits for it.

The evaluator replays one step event by event (the compute stream is a chain, so every issue
time is known before the network must decide), in O(k U log U) for ``k`` micro-batches and
``U`` units, and reports the step and the peak of unsharded parameters and gradients.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, Sharding
from schedopt.model.sharded import check_no_contention
from schedopt.model.trace import DTYPE_BYTES, Trace

__all__ = ["Config", "ShardedInstance", "Step", "build_sharded", "config_of_plan", "gather_time",
           "step_time"]


def gather_time(cluster: Cluster, nbytes: float) -> float:
    """All-gather (= reduce-scatter) time of ``nbytes`` bytes
    (:meth:`~schedopt.model.cluster.Cluster.shard_collective_time`; 0 for nothing).

    Raises
    ------
    SchedoptError
        On the ``ps`` collective, which cannot shard.
    """
    if nbytes <= 0:
        return 0.0
    return cluster.shard_collective_time(nbytes)


@dataclass(frozen=True)
class Config:
    """One point of the search: unit starts (layer indices, the first 0) and the knobs."""

    starts: tuple[int, ...]
    forward_prefetch: int
    backward_prefetch: int
    streams: int


@dataclass(frozen=True)
class Step:
    """A configuration's step (s), iteration time (s, with the data path) and peak (bytes)."""

    step_s: float
    period_s: float
    peak_bytes: int


@dataclass
class ShardedInstance:
    """Per-layer arrays of one sharded instance and the costs of its collectives.

    Attributes
    ----------
    names
        Layer names, forward order.
    f, b
        Forward and backward seconds per layer.
    p, g
        Parameter bytes and communicated gradient bytes per layer.
    has_tensor
        Whether the layer lists a tensor (every unit needs one).
    mode, accumulate
        ``full`` or ``grad-op``; micro-batches per step.
    update_s
        The optimizer step on the shard (``update_s / r``).
    io_s, h2d_s, prefetch
        The data path (as for all-reduce plans).
    """

    names: list[str]
    f: np.ndarray
    b: np.ndarray
    p: np.ndarray
    g: np.ndarray
    has_tensor: np.ndarray
    mode: str
    accumulate: int
    update_s: float
    io_s: float
    h2d_s: float
    prefetch: int
    cluster: Cluster
    tensors: list[list[str]] = field(default_factory=list)
    comm_dtype: str | None = None
    _cost: dict[float, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of layers."""
        return len(self.names)

    def cost(self, nbytes: float) -> float:
        """All-gather / reduce-scatter time of ``nbytes`` (memoised)."""
        c = self._cost.get(nbytes)
        if c is None:
            c = self._cost[nbytes] = gather_time(self.cluster, nbytes)
        return c

    @cached_property
    def sums(self) -> np.ndarray:
        """Prefix sums (``n + 1`` rows) of forward, backward, parameter and gradient bytes."""
        cols = np.stack([self.f, self.b, self.p.astype(float), self.g], axis=1)
        return np.vstack([np.zeros((1, 4)), np.cumsum(cols, axis=0)])

    def valid(self, starts: tuple[int, ...]) -> bool:
        """Every unit holds a tensor."""
        ends = (*starts[1:], self.n)
        return all(self.has_tensor[s:e].any() for s, e in zip(starts, ends, strict=True))

    def period(self, step_s: float) -> float:
        """Iteration time of a step of ``step_s`` seconds with the data path: prefetch 0
        reads and copies the batch after the step; prefetch 1 during the previous step."""
        data = self.io_s + self.h2d_s
        if not self.prefetch:
            return step_s + data
        return max(step_s, 0.5 * (step_s + data), self.io_s, self.h2d_s)

    def to_plan(self, c: Config, knobs: dict[str, object] | None = None) -> Plan:
        """The sharded plan of configuration ``c``."""
        ends = (*c.starts[1:], self.n)
        units = [self.names[s:e] for s, e in zip(c.starts, ends, strict=True)]
        buckets = [[t for la in range(e - 1, s - 1, -1) for t in reversed(self.tensors[la])]
                   for s, e in zip(c.starts, ends, strict=True)][::-1]
        sharding = Sharding(mode=self.mode, units=units,  # type: ignore[arg-type]
                            forward_prefetch=c.forward_prefetch,
                            backward_prefetch=c.backward_prefetch,
                            streams=c.streams)  # type: ignore[arg-type]
        fields: dict[str, Any] = {"knobs": dict(knobs or {}), "buckets": buckets,
                                  "sharding": sharding, "accumulate": self.accumulate,
                                  "prefetch": self.prefetch, "comm_dtype": self.comm_dtype}
        return Plan(policy="optimal", **fields)


def build_sharded(trace: Trace, cluster: Cluster, mode: str, accumulate: int = 1,
                  comm_dtype: str | None = None, prefetch: int = 1) -> ShardedInstance:
    """The :class:`ShardedInstance` of ``trace`` on ``cluster``.

    Frozen parameters (:attr:`~schedopt.model.trace.Layer.frozen`) count in the gathered
    bytes ``p``, not in ``g``; the memory terms read ``p`` as the gradients' bytes too, so
    :func:`solve_sharded <schedopt.optimize.sharding.solve.solve_sharded>` refuses a memory cap
    for a trace with frozen parameters.

    Raises
    ------
    SchedoptError
        On the ``ps`` collective, or an overlap slowdown (not modelled for sharded plans).
    """
    gather_time(cluster, 1.0)  # refuses ps
    check_no_contention(cluster)
    owner = trace.tensor_layer_by_name
    n = len(trace.layers)
    p = np.zeros(n, dtype=np.int64)
    g = np.zeros(n)
    for t in trace.tensor_list:
        la = owner[t.name]
        p[la] += t.bytes
        scale = 1.0 if comm_dtype is None else DTYPE_BYTES[comm_dtype] / DTYPE_BYTES[t.dtype]
        g[la] += t.bytes * scale
    for t in trace.frozen_list:  # gathered, never reduced
        p[trace.frozen_layer_by_name[t.name]] += t.bytes
    r = cluster.world_size
    # a tensor shared by several layers (tied weights) belongs to the earliest one's unit
    owned = [[t.name for t in la.tensors if owner[t.name] == i]
             for i, la in enumerate(trace.layers)]
    return ShardedInstance(
        names=[la.name for la in trace.layers], f=trace.forward.astype(float),
        b=trace.backward.astype(float), p=p, g=g,
        has_tensor=np.array([bool(x) for x in owned]), mode=mode,
        accumulate=accumulate, update_s=trace.update_s / r, io_s=trace.io_s,
        h2d_s=trace.h2d_s, prefetch=prefetch, cluster=cluster,
        tensors=owned, comm_dtype=comm_dtype)


# ------------------------------------------------------------------------------- the network
class _Network:
    """One resource, non-preemptive; tasks served lazily when a compute op needs one.

    Issue times grow with issue order (the compute stream is a chain), so the ready task first
    in issue order is the head of a heap by ``(issue, seq)``: one heap with one stream, one per
    kind with two (all-gathers first)."""

    def __init__(self, streams: int) -> None:
        self.streams = streams
        self.free = 0.0
        self.seq = 0
        self.heaps: tuple[list[tuple[float, int, int, float]], ...] = ([], [])  # AG, RS
        self.start: dict[int, float] = {}
        self.end: dict[int, float] = {}

    def issue(self, task: int, at: float, dur: float, gather: bool) -> None:
        """Task ``task`` becomes ready at ``at`` (issue order breaks ties)."""
        heap = self.heaps[0 if gather or self.streams == 1 else 1]
        heapq.heappush(heap, (at, self.seq, task, dur))
        self.seq += 1

    def _pick(self) -> tuple[float, int, int, float]:
        """The next task to serve, removed from its queue."""
        ag, rs = self.heaps
        if not rs:
            return heapq.heappop(ag)
        if not ag:
            return heapq.heappop(rs)
        now = max(self.free, min(ag[0][0], rs[0][0]))
        return heapq.heappop(ag if ag[0][0] <= now else rs)

    def finish(self, task: int | None) -> float:
        """Serve until ``task`` ends (None: until the queues are empty); its end."""
        ag, rs = self.heaps
        while (ag or rs) and (task is None or task not in self.end):
            at, _, tid, dur = self._pick()
            s = max(self.free, at)
            self.free = s + dur
            self.start[tid], self.end[tid] = s, self.free
        return self.free if task is None else self.end[task]


# ------------------------------------------------------------------------------ the step
@dataclass
class _Units:
    """Per-unit sums of one configuration."""

    F: list[float]
    B: list[float]
    P: list[int]
    ag: list[float]
    rs: list[float]


def _units(inst: ShardedInstance, starts: tuple[int, ...]) -> _Units:
    idx = np.asarray(starts, dtype=np.int64)
    cs = inst.sums

    def per_unit(k: int) -> np.ndarray:
        col = cs[:, k]
        return col[np.r_[idx[1:], inst.n]] - col[idx]

    F, B, P, G = (per_unit(k) for k in range(4))
    return _Units(F=F.tolist(), B=B.tolist(), P=[int(x) for x in P],
                  ag=[inst.cost(float(x)) for x in P], rs=[inst.cost(float(x)) for x in G])


def step_time(inst: ShardedInstance, c: Config) -> Step:
    """Step, iteration time and memory peak of configuration ``c`` (see the module)."""
    un = _units(inst, c.starts)
    U = len(un.F)
    net = _Network(c.streams)
    mem: list[tuple[float, int]] = []  # (time, +bytes / -bytes)
    full = inst.mode == "full"
    t = 0.0
    keep: list[float] = [0.0] * U  # grad-op: start of AGf(u), parameters kept
    for m in range(inst.accumulate):
        gather = full or m == 0
        t = _forward(inst, un, c.forward_prefetch, net, t, m, gather, mem, keep)
        t = _backward(inst, un, c.backward_prefetch, net, t, m, mem, keep)
    end = max(net.finish(None), t)
    for u in range(U):  # gradients live until their reduce-scatter ends
        mem.append((net.end[_RS * U + u], -un.P[u]))
    step = end + inst.update_s
    mem.sort(key=lambda x: (x[0], x[1]))  # frees before allocations at equal times
    peak = int(max(np.cumsum([x[1] for x in mem]), default=0))
    return Step(step_s=step, period_s=inst.period(step), peak_bytes=peak)


_AGF, _AGB, _RS = 0, 1, 2


def _forward(inst: ShardedInstance, un: _Units, p: int, net: _Network, t0: float, m: int,
             gather: bool, mem: list[tuple[float, int]], keep: list[float]) -> float:
    """One micro-batch's forward from ``t0``; the end of its last unit."""
    U = len(un.F)
    if gather:
        for u in range(min(U, max(p, 1))):
            net.issue(_AGF * U + u, t0, un.ag[u], True)
    prev = t0
    for u in range(U):
        s = prev
        if gather:
            s = max(prev, net.finish(_AGF * U + u))
            ag_start = net.start[_AGF * U + u]
            if inst.mode == "full":
                mem.append((ag_start, un.P[u]))
            else:
                keep[u] = ag_start
            del net.end[_AGF * U + u]
            if p >= 1 and u + p < U:
                net.issue(_AGF * U + u + p, s, un.ag[u + p], True)
        prev = s + un.F[u]
        if gather and inst.mode == "full":
            mem.append((prev, -un.P[u]))
        if gather and p == 0 and u + 1 < U:
            net.issue(_AGF * U + u + 1, prev, un.ag[u + 1], True)
    return prev


def _backward(inst: ShardedInstance, un: _Units, q: int, net: _Network, t0: float, m: int,
              mem: list[tuple[float, int]], keep: list[float]) -> float:
    """One micro-batch's backward from ``t0`` (the forward's end); the end of ``B(0)``."""
    U = len(un.F)
    full = inst.mode == "full"
    last = m == inst.accumulate - 1
    if full:
        for u in range(U - 1, max(U - 1 - max(q, 1), -1), -1):
            net.issue(_AGB * U + u, t0, un.ag[u], True)
    prev = t0
    for u in range(U - 1, -1, -1):
        s = prev
        if full:
            s = max(prev, net.finish(_AGB * U + u))
            mem.append((net.start[_AGB * U + u], un.P[u]))
            del net.end[_AGB * U + u]
            if q >= 1 and u - q >= 0:
                net.issue(_AGB * U + u - q, s, un.ag[u - q], True)
        if m == 0:
            mem.append((s, un.P[u]))  # the unit's unsharded gradients
        prev = s + un.B[u]
        if full:
            mem.append((prev, -un.P[u]))
        elif last:
            mem.append((keep[u], un.P[u]))
            mem.append((prev, -un.P[u]))
        if last:
            net.issue(_RS * U + u, prev, un.rs[u], False)
        if full and q == 0 and u - 1 >= 0:
            net.issue(_AGB * U + u - 1, prev, un.ag[u - 1], True)
    return prev


def config_of_plan(inst: ShardedInstance, plan: Plan) -> Config | None:
    """The configuration of a sharded ``plan`` in ``inst`` (None when ``inst`` cannot express
    it: another mode, accumulation, communication dtype or data prefetch, a root group, or no
    sharding). A root group (FSDP2's: gathered once, reduced last) is no configuration of the
    search, whose units cover every layer: such a baseline is simulated and reported, never a
    start or an incumbent."""
    sh = plan.sharding
    if (sh is None or sh.mode != inst.mode or plan.accumulate != inst.accumulate
            or plan.comm_dtype != inst.comm_dtype or plan.prefetch != inst.prefetch
            or sh.root is not None):
        return None
    starts, i = [], 0
    for unit in sh.units:
        starts.append(i)
        i += len(unit)
    if [n for unit in sh.units for n in unit] != inst.names:
        return None
    q = sh.backward_prefetch if inst.mode == "full" else 1
    return Config(tuple(starts), sh.forward_prefetch, q, sh.streams)
