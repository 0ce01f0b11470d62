"""The optimizer's view of a trace and a cluster: units, integer ticks and the period formula.

A *unit* is the smallest thing a bucket holds: a tensor, a piece of a tensor (with
``partition_bytes``) or, when layers are merged, all tensors of one layer. Units are numbered in
gradient-ready order; every bucket the optimizer builds is a contiguous run of units (a
*segment*), and a plan is a list of segments in launch order.

Times are measured from the start of the backward of one iteration. :meth:`Instance.evaluate`
computes the simulator's period exactly for any list of segments, in integer ticks (the model's
arithmetic) or in seconds: the ends of the buckets here (one stage: a chain with releases;
several: :meth:`Instance.stage_schedule`), the next-forward mode's terms in :mod:`.period`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..cluster import Cluster, CommStage
from ..errors import SchedoptError
from ..plan import Plan, interleave, parse_member, piece_name
from ..simulate import chain_ends, serve_in_sequence
from ..trace import DTYPE_BYTES, Tensor, Trace
from .options import SolveOptions
from .period import BucketTimes, Consts, PeriodTerms, period_terms

__all__ = ["Consts", "Evaluation", "Instance", "Segments", "build_instance"]

#: Segments (lo, hi) of units, inclusive, in launch order.
Segments = list[tuple[int, int]]

#: Largest model error, as a fraction of the lower bound, that the tick may cause.
TICK_BUDGET = 5e-4


@dataclass(frozen=True)
class Evaluation:
    """The period of one list of segments, as the model computes it.

    Attributes
    ----------
    period
        Period (ticks or seconds).
    ends
        End of every bucket's communication (launch order), from the start of the backward.
    """

    period: float
    ends: np.ndarray


@dataclass
class Instance:
    """Units, their data in seconds and in integer ticks, and the period formula.

    Attributes
    ----------
    trace, cluster
        The instance.
    mode
        ``wait-for-all`` or ``per-layer``.
    prefetch
        I/O prefetch depth of the plans.
    stages
        Communication stages of one bucket (the cluster's collective).
    alpha, beta
        Cost of one bucket, summed over the stages (seconds, seconds per byte).
    tensors
        Tensor names in gradient-ready order.
    base_tensor, base_offset, base_bytes
        The finest pieces (index into ``tensors``, byte offset in the tensor, bytes), in ready
        order; a unit is a run ``unit_start[u] .. unit_start[u + 1] - 1`` of them.
    layer
        Owning layer of every unit.
    nbytes
        Bytes of every unit.
    tick
        Seconds per integer tick.
    """

    trace: Trace
    cluster: Cluster
    mode: str
    prefetch: int
    stages: tuple[CommStage, ...]
    alpha: float
    beta: float
    tensors: list[str]
    base_tensor: np.ndarray
    base_offset: np.ndarray
    base_bytes: np.ndarray
    unit_start: np.ndarray
    layer: np.ndarray
    nbytes: np.ndarray
    tick: float

    # ----------------------------------------------------------------------------- sizes
    @property
    def n(self) -> int:
        """Number of units."""
        return len(self.nbytes)

    @property
    def per_layer(self) -> bool:
        """True in per-layer next-forward mode."""
        return self.mode == "per-layer"

    @cached_property
    def layer_first_unit(self) -> np.ndarray:
        """Index of the first unit of every unit's layer (ready order)."""
        is_start = np.r_[True, self.layer[1:] != self.layer[:-1]]
        return np.maximum.accumulate(np.where(is_start, np.arange(self.n), 0))

    @cached_property
    def layer_runs(self) -> list[tuple[int, int]]:
        """Unit ranges (first, last) of every layer that owns units, in ready order."""
        starts = np.flatnonzero(np.r_[True, self.layer[1:] != self.layer[:-1]])
        ends = np.r_[starts[1:] - 1, self.n - 1]
        return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]

    @cached_property
    def pcie_coupled(self) -> bool:
        """The batch copy (h2d) and the gradient traffic share the PCIe resource (even a copy
        of zero length then orders the communication after the next batch's read)."""
        return any("pcie" in st.resources for st in self.stages)

    @cached_property
    def gate_runs(self) -> list[tuple[int, tuple[int, int]]]:
        """Layers that own units with their unit range, in forward order (the order of the
        next forward)."""
        return sorted((int(self.layer[lo]), (lo, hi)) for lo, hi in self.layer_runs)

    # ------------------------------------------------------------------------ seconds
    @cached_property
    def F(self) -> float:
        """Sum of forward times."""
        return float(self.trace.forward.sum())

    @cached_property
    def B(self) -> float:
        """Sum of backward times."""
        return float(self.trace.backward.sum())

    @cached_property
    def layer_ready_s(self) -> np.ndarray:
        """End of every layer's backward, from the start of the backward."""
        return np.cumsum(self.trace.backward[::-1])[::-1].copy()

    @cached_property
    def forward_from_s(self) -> np.ndarray:
        """Forward time from every layer to the end (``sum_{m >= l} f_m``)."""
        return np.cumsum(self.trace.forward[::-1])[::-1].copy()

    @cached_property
    def release_s(self) -> np.ndarray:
        """Readiness of every unit (seconds from the start of the backward)."""
        return self.layer_ready_s[self.layer]

    @cached_property
    def prefix_bytes(self) -> np.ndarray:
        """Bytes of units ``0 .. i`` (inclusive)."""
        return np.cumsum(self.nbytes)

    @property
    def total_bytes(self) -> int:
        """All gradient bytes."""
        return int(self.prefix_bytes[-1])

    @cached_property
    def lower_bound_s(self) -> float:
        """A simple valid lower bound on the period (compute, or one pass of all bytes)."""
        tr = self.trace
        comm = self.alpha + self.beta * self.total_bytes if self.stages else 0.0
        return max(self.F + self.B + tr.update_s, self.F + tr.update_s + comm, tr.io_s, tr.h2d_s,
                   1e-9)

    # -------------------------------------------------------------------------- ticks
    def ticks(self, seconds: float | np.ndarray) -> np.ndarray:
        """Round seconds to integer ticks."""
        return np.rint(np.asarray(seconds, dtype=float) / self.tick).astype(np.int64)

    @cached_property
    def r(self) -> np.ndarray:
        """Release of every unit (ticks)."""
        return self.ticks(self.release_s)

    @cached_property
    def base_p(self) -> np.ndarray:
        """Bandwidth part ``beta * bytes`` of every base piece (ticks)."""
        return self.ticks(self.beta * self.base_bytes)

    @cached_property
    def p(self) -> np.ndarray:
        """Bandwidth part of every unit (ticks): the sum over its base pieces, so that
        coarser units (:meth:`coarsen`) add up to the same integers."""
        return np.add.reduceat(self.base_p, self.unit_start[:-1])

    @cached_property
    def a(self) -> int:
        """Start-up cost ``alpha`` of one bucket (ticks), at least one tick when there is
        communication.

        A bucket of zero ticks would be an empty interval, which CP-SAT's no-overlap lets sit
        inside another bucket, while the simulator still runs it in its launch-order slot; one
        tick keeps the two the same (the tick budget counts this rounding).
        """
        a = int(self.ticks(self.alpha))
        return max(a, 1) if self.stages else a

    @cached_property
    def stage_p(self) -> np.ndarray:
        """Bandwidth part of every unit on every stage (ticks, shape ``(stages, n)``), summed
        over base pieces like :attr:`p`."""
        rows = [np.add.reduceat(self.ticks(st.beta_s_per_byte * self.base_bytes),
                                self.unit_start[:-1]) for st in self.stages]
        return np.array(rows, dtype=np.int64).reshape(len(self.stages), self.n)

    @cached_property
    def stage_a(self) -> np.ndarray:
        """Start-up cost of one bucket on every stage (ticks)."""
        return self.ticks(np.array([st.alpha_s for st in self.stages], dtype=float))

    def last_stage_groups(self) -> list[tuple[int, ...]]:
        """Per resource of the last stage, the stages that hold it (they take it one at a time,
        and a bucket's last stage ends after its others): the groups of the per-resource
        relaxations."""
        return [tuple(s for s, st in enumerate(self.stages) if res in st.resources)
                for res in self.stages[-1].resources]

    def stage_schedule(self, segs: Segments, *, seconds: bool = False
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of every bucket on every stage (shape ``(stages, buckets)``), exactly
        as the simulator serves several stages.

        Every stage keeps the launch order; the tasks go through the shared resources in the
        order of :func:`~schedopt.plan.interleave`, each starting once its resources are free
        and the bucket's previous stage (or, for the first, the bucket) is ready. The
        resources start free: each iteration's communication ends before the next backward.
        """
        m, n_s = len(segs), len(self.stages)
        lo = np.fromiter((s[0] for s in segs), dtype=np.int64, count=m)
        hi = np.fromiter((s[1] for s in segs), dtype=np.int64, count=m)
        if seconds:
            prefix = np.r_[0, np.cumsum(self.nbytes)].astype(float)
            dur = [st.alpha_s + st.beta_s_per_byte * (prefix[hi + 1] - prefix[lo])
                   for st in self.stages]
            rel = self.release_s[hi].astype(float)
        else:
            prefix_p = np.c_[np.zeros((n_s, 1), np.int64), np.cumsum(self.stage_p, axis=1)]
            dur = [self.stage_a[s] + prefix_p[s, hi + 1] - prefix_p[s, lo] for s in range(n_s)]
            rel = self.r[hi]
        start, end = serve_in_sequence(interleave([list(range(m))] * n_s),
                                       [st.resources for st in self.stages],
                                       np.array(dur, dtype=float).T, rel.astype(float), {})
        kind = float if seconds else np.int64
        return start.T.astype(kind), end.T.astype(kind)

    @cached_property
    def upd_prefix(self) -> np.ndarray:
        """Update share of units ``0 .. i`` (ticks), a non-decreasing array."""
        total = self.total_bytes
        return self.ticks(self.trace.update_s * self.prefix_bytes / total)

    @cached_property
    def fwd_from(self) -> np.ndarray:
        """``sum_{m >= l} f_m`` per layer (ticks)."""
        return self.ticks(self.forward_from_s)

    @cached_property
    def fwd_before(self) -> np.ndarray:
        """Forward time of the layers before ``l`` (ticks), as ``F - fwd_from[l]`` so that
        the two add up exactly."""
        return int(self.ticks(self.F)) - self.fwd_from

    @cached_property
    def tail(self) -> np.ndarray:
        """Delivery tail of every unit (per-layer mode, ticks): forward from its layer on plus
        the updates of units ``0 .. i``; zero in wait-for-all mode."""
        if not self.per_layer:
            return np.zeros(self.n, dtype=np.int64)
        tail = self.fwd_from[self.layer] + self.upd_prefix
        if self.pcie_coupled and self.prefetch == 0:
            # the next batch's copy waits for the last communication on the shared resource
            c = self.consts
            tail = np.maximum(tail, c.h2d + c.F + c.U)
        return tail

    def _consts(self, ticks: bool) -> Consts[Any]:
        tr = self.trace
        if ticks:
            return Consts(F=int(self.ticks(self.F)), B=int(self.ticks(self.B)),
                          U=int(self.upd_prefix[-1]), io=int(self.ticks(tr.io_s)),
                          h2d=int(self.ticks(tr.h2d_s)))
        return Consts(F=self.F, B=self.B, U=tr.update_s, io=tr.io_s, h2d=tr.h2d_s)

    @cached_property
    def consts(self) -> Consts[int]:
        """Iteration constants in ticks: F, B, U, io, h2d."""
        return self._consts(True)

    @cached_property
    def consts_s(self) -> Consts[float]:
        """Iteration constants in seconds."""
        return self._consts(False)

    @property
    def first_layer_units(self) -> int | None:
        """Index of the first unit of layer 0 when layer 0 owns units (else None)."""
        if int(self.layer[-1]) != 0:
            return None
        return int(self.layer_runs[-1][0])

    # ------------------------------------------------------------------------ evaluation
    def evaluate(self, segs: Segments, *, seconds: bool = False) -> Evaluation:
        """Period of the plan made of ``segs`` (launch order), exactly as the simulator has it
        (the bucket ends here, the mode's terms in :attr:`terms`).

        Parameters
        ----------
        segs
            Segments ``(lo, hi)`` covering every unit once, in launch order.
        seconds
            Compute in seconds (float) instead of integer ticks.
        """
        lo = np.fromiter((s[0] for s in segs), dtype=np.int64, count=len(segs))
        hi = np.fromiter((s[1] for s in segs), dtype=np.int64, count=len(segs))
        if seconds:
            prefix_p = np.r_[0.0, np.cumsum(self.beta * self.nbytes)]
            dur = self.alpha + prefix_p[hi + 1] - prefix_p[lo]
            rel = self.release_s[hi]
        else:
            prefix_p = np.r_[0, np.cumsum(self.p)]
            dur = self.a + prefix_p[hi + 1] - prefix_p[lo]
            rel = self.r[hi]
        if not self.stages:
            dur = dur * 0
        if len(self.stages) > 1:  # the end of every bucket's last stage
            ends = self.stage_schedule(segs, seconds=seconds)[1][-1]
        else:
            ends = chain_ends(-np.inf, dur.astype(float), rel.astype(float))
            if not seconds:
                ends = np.rint(ends).astype(np.int64)
        period = self.terms.value(BucketTimes(lo, hi, dur, ends), seconds=seconds)
        return Evaluation(period, ends)

    @cached_property
    def terms(self) -> PeriodTerms:
        """The period terms of the next-forward mode (:mod:`.period`)."""
        return period_terms(self)

    def coarsen(self, groups: np.ndarray) -> Instance:
        """An instance whose units are runs of this one's: unit ``g`` of the result covers units
        ``groups[g] .. groups[g + 1] - 1`` (``groups`` starts at 0, without the final ``n``).

        A coarse unit belongs to the layer of its last unit (its readiness and its gate); all
        integer data stay sums of the same base ticks, so a plan has the same period in both.
        """
        groups = np.asarray(groups, dtype=np.int64)
        bounds = np.r_[groups, self.n]
        unit_start = self.unit_start[bounds]
        last = self.unit_start[bounds[1:]] - 1
        inst = Instance(
            trace=self.trace, cluster=self.cluster, mode=self.mode, prefetch=self.prefetch,
            stages=self.stages, alpha=self.alpha, beta=self.beta, tensors=self.tensors,
            base_tensor=self.base_tensor, base_offset=self.base_offset,
            base_bytes=self.base_bytes, unit_start=unit_start,
            layer=self.trace.ready_layer[self.base_tensor[last]],
            nbytes=np.add.reduceat(self.base_bytes, unit_start[:-1]),
            tick=self.tick,
        )
        return inst

    # --------------------------------------------------------------------------- plans
    def segments_from_cuts(self, cuts: np.ndarray) -> Segments:
        """Segments in ready order from a boolean array ``cuts`` (length ``n - 1``)."""
        idx = np.flatnonzero(np.asarray(cuts, dtype=bool))
        lo = np.r_[0, idx + 1]
        hi = np.r_[idx, self.n - 1]
        return [(int(a), int(b)) for a, b in zip(lo, hi, strict=True)]

    def to_plan(self, segs: Segments, policy: str = "optimal", knobs: dict | None = None) -> Plan:
        """Build the :class:`~schedopt.plan.Plan` of ``segs`` (launch order), bound to the
        instance; pieces of one tensor in one bucket are joined."""
        seg_of_base = np.empty(len(self.base_bytes), dtype=np.int64)
        for k, (lo, hi) in enumerate(segs):
            seg_of_base[self.unit_start[lo]:self.unit_start[hi + 1]] = k
        # runs of base pieces of one tensor in one bucket
        brk = np.r_[True, (self.base_tensor[1:] != self.base_tensor[:-1])
                    | (seg_of_base[1:] != seg_of_base[:-1])]
        run_start = np.flatnonzero(brk)
        run_tensor = self.base_tensor[run_start]
        run_bytes = np.add.reduceat(self.base_bytes, run_start)
        run_seg = seg_of_base[run_start]
        count = np.bincount(run_tensor, minlength=len(self.tensors))
        piece_idx = np.zeros(len(run_start), dtype=np.int64)
        partition: dict[str, list[int]] = {}
        seen: dict[int, int] = {}
        for j, t in enumerate(run_tensor.tolist()):
            if count[t] > 1:
                piece_idx[j] = seen.get(t, 0)
                seen[t] = piece_idx[j] + 1
                partition.setdefault(self.tensors[t], []).append(int(run_bytes[j]))
        buckets: list[list[str]] = [[] for _ in segs]
        for j in range(len(run_start)):
            t = int(run_tensor[j])
            name = self.tensors[t]
            buckets[int(run_seg[j])].append(
                piece_name(name, int(piece_idx[j])) if count[t] > 1 else name
            )
        plan = Plan.model_validate({
            "policy": policy,
            "knobs": knobs or {},
            "buckets": buckets,
            "partition": partition,
            "next_forward": self.mode,
            "overlap": True,
            "prefetch": self.prefetch,
        })
        return plan.bind(self.trace, self.cluster)

    def segments_of_plan(self, plan: Plan) -> tuple[Segments, str]:
        """Express ``plan`` as segments of this instance's units, in its launch order.

        Returns
        -------
        segs, reason
            The segments, or an empty list and why the plan does not fit the units (a bucket
            that is not a contiguous run of units, a piece boundary inside a unit).
        """
        pos = self._tensor_pos
        first_base = self._first_base
        n_base = len(self.base_tensor)
        bucket_of_base = np.full(n_base, -1, dtype=np.int64)
        hits = np.zeros(n_base, dtype=np.int64)
        for k, bucket in enumerate(plan.buckets):
            for member in bucket:
                name, piece = parse_member(member, plan.partition)
                t = pos.get(name)
                if t is None:
                    return [], f"unknown tensor {name!r}"
                b0, b1 = int(first_base[t]), int(first_base[t + 1])
                if piece is None:
                    bucket_of_base[b0:b1] = k
                    hits[b0:b1] += 1
                    continue
                sizes = plan.partition[name]
                lo_b = int(sum(sizes[:piece]))
                hi_b = lo_b + int(sizes[piece])
                off = self.base_offset[b0:b1]
                end = off + self.base_bytes[b0:b1]
                inside = (off >= lo_b) & (end <= hi_b)
                if np.any((off < hi_b) & (end > lo_b) & ~inside):
                    return [], f"piece {member!r} does not fit the partition grid"
                idx = b0 + np.flatnonzero(inside)
                bucket_of_base[idx] = k
                hits[idx] += 1
        if np.any(hits != 1):
            return [], "a tensor piece is in no bucket or in two"
        starts = self.unit_start[:-1]
        lo_k = np.minimum.reduceat(bucket_of_base, starts)
        hi_k = np.maximum.reduceat(bucket_of_base, starts)
        if np.any(lo_k != hi_k):
            return [], "a unit (layer or piece) is split between buckets"
        n_b = len(plan.buckets)
        units = np.arange(self.n)
        first = np.full(n_b, self.n, dtype=np.int64)
        last = np.full(n_b, -1, dtype=np.int64)
        np.minimum.at(first, lo_k, units)
        np.maximum.at(last, lo_k, units)
        count = np.bincount(lo_k, minlength=n_b)
        bad = np.flatnonzero((count == 0) | (last - first + 1 != count))
        if len(bad):
            return [], f"bucket {int(bad[0])} is not contiguous in gradient-ready order"
        return [(int(x), int(y)) for x, y in zip(first, last, strict=True)], ""

    @cached_property
    def _tensor_pos(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.tensors)}

    @cached_property
    def _first_base(self) -> np.ndarray:
        return np.searchsorted(self.base_tensor, np.arange(len(self.tensors) + 1))

    def is_fifo(self, segs: Segments) -> bool:
        """True when the segments are launched in readiness (ready-order) order."""
        return all(segs[k][0] > segs[k - 1][1] for k in range(1, len(segs)))


def _base_pieces(order: list[Tensor], partition_bytes: int | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The finest pieces of the tensors ``order`` (ready order): every tensor cut into pieces of
    ``partition_bytes`` rounded down to whole elements (at least one), the last taking the
    rest; whole tensors without ``partition_bytes``. Returns the owning tensor (index into
    ``order``), the byte offset in it and the bytes of every piece (arrays, no Python loop over
    pieces)."""
    nbytes = np.array([t.bytes for t in order], dtype=np.int64)
    if partition_bytes is None:
        return np.arange(len(order), dtype=np.int64), np.zeros(len(order), np.int64), nbytes
    item = np.array([DTYPE_BYTES[t.dtype] for t in order], dtype=np.int64)
    unit = np.maximum(item, partition_bytes // item * item)
    count = -(-nbytes // unit)
    tensor = np.repeat(np.arange(len(order), dtype=np.int64), count)
    first = np.r_[0, np.cumsum(count)[:-1]]
    offset = (np.arange(len(tensor), dtype=np.int64) - first[tensor]) * unit[tensor]
    return tensor, offset, np.minimum(unit[tensor], nbytes[tensor] - offset)


def one_chain(stages: tuple[CommStage, ...]) -> tuple[CommStage, ...]:
    """Two stages that share a resource (push and pull through colocated parameter servers, or
    through dedicated ones after a local reduce) as the one task they are.

    The simulator serves the tasks in :meth:`Plan.comm_sequence` order, which for two stages in
    the same launch order is push 0, pull 0, push 1, pull 1, ...: a pull starts when its push
    ends (the shared resource is free then, and only pulls use the pull's other resources), and
    the next push waits for that pull on the shared resource. A bucket is thus one task of the
    summed cost, released when the bucket is ready, on the union of the resources.
    """
    if len(stages) != 2 or not set(stages[0].resources) & set(stages[1].resources):
        return stages
    return (merged_stage(stages),)


def merged_stage(stages: tuple[CommStage, ...]) -> CommStage:
    """One task doing the work of ``stages`` (summed costs, every resource they hold)."""
    return CommStage("+".join(st.name for st in stages),
                     tuple(dict.fromkeys(r for st in stages for r in st.resources)),
                     sum(st.alpha_s for st in stages), sum(st.beta_s_per_byte for st in stages))


def build_instance(trace: Trace, cluster: Cluster, opts: SolveOptions, *,
                   merge: bool | None = None, stage: int | tuple[int, ...] | None = None
                   ) -> Instance:
    """Build the optimizer's :class:`Instance` for ``trace`` on ``cluster`` under ``opts``.

    Parameters
    ----------
    merge
        One unit per layer; None: ``opts.merge_layers``, else merge in wait-for-all mode only
        (where it is exact).
    stage
        Keep only this communication stage, or these stages as one task (relaxations used for
        lower bounds).
    """
    stages = one_chain(cluster.comm_stages())
    if isinstance(stage, int):
        stages = (stages[stage],)
    elif stage is not None:
        stages = (merged_stage(tuple(stages[s] for s in stage)),)
    alpha = sum(s.alpha_s for s in stages)
    beta = sum(s.beta_s_per_byte for s in stages)
    if merge is None:
        merge = opts.merge_layers if opts.merge_layers is not None else (
            opts.next_forward == "wait-for-all")
    order = trace.ready_order
    tensors = [t.name for t in order]
    owner = trace.ready_layer
    base_tensor, base_offset, base_bytes = _base_pieces(
        order, None if merge else opts.partition_bytes)
    base_layer = owner[base_tensor]
    if merge:
        unit_start = np.r_[np.flatnonzero(np.r_[True, base_layer[1:] != base_layer[:-1]]),
                           len(base_bytes)]
    else:
        unit_start = np.arange(len(base_bytes) + 1)
    layer = base_layer[unit_start[:-1]]
    nbytes = np.add.reduceat(base_bytes, unit_start[:-1])
    inst = Instance(
        trace=trace, cluster=cluster, mode=opts.next_forward, prefetch=opts.prefetch,
        stages=stages, alpha=alpha, beta=beta, tensors=tensors, base_tensor=base_tensor,
        base_offset=base_offset, base_bytes=base_bytes, unit_start=unit_start, layer=layer,
        nbytes=nbytes, tick=1.0,
    )
    # rounding errors of half a tick per piece, release and forward sum, one tick per bucket
    # start-up (see ``Instance.a``) and per update share
    n_tasks = (2 + max(1, len(stages))) * len(base_bytes) + 2 * len(trace.layers) + 4
    inst.tick = TICK_BUDGET * 2 * inst.lower_bound_s / n_tasks
    if inst.tick <= 0 or not np.isfinite(inst.tick):
        raise SchedoptError("cannot choose a time unit (all times are zero)", "trace", trace.name)
    return inst
