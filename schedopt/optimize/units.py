"""The optimizer's units: what a bucket holds, in gradient-ready order, in seconds and bytes.

A *unit* is the smallest thing a bucket holds: a tensor, a piece of a tensor (with
``partition_bytes``) or, when layers are merged, all tensors of one layer. Units are numbered in
gradient-ready order; every bucket the optimizer builds is a contiguous run of units (a
*segment*), and a plan is a list of segments in launch order (:meth:`Units.to_plan`,
:meth:`Units.segments_of_plan`).

:class:`Units` holds no integer time: the tick is chosen from its seconds data
(:attr:`Units.lower_bound_s`), and :class:`~.instance.Instance` is made from the units and the
tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from schedopt.model.cluster import Cluster, CommStage
from schedopt.model.plan import Plan, parse_member, piece_name
from schedopt.model.trace import DTYPE_BYTES, Tensor, Trace
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.times import Consts

__all__ = ["Segments", "Units", "build_units", "merged_stage", "one_chain"]

#: Segments (lo, hi) of units, inclusive, in launch order.
Segments = list[tuple[int, int]]


@dataclass(frozen=True, eq=False)
class Units:
    """The units of one instance and their data in seconds and bytes.

    Attributes
    ----------
    trace, cluster
        The instance.
    mode
        ``wait-for-all`` or ``per-layer`` (the plans' next-forward mode).
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
    unit_start
        First base piece of every unit, and the number of base pieces at the end.
    layer
        Owning layer of every unit.
    nbytes
        Bytes of every unit.
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

    @property
    def first_layer_units(self) -> int | None:
        """Index of the first unit of layer 0 when layer 0 owns units (else None)."""
        if int(self.layer[-1]) != 0:
            return None
        return int(self.layer_runs[-1][0])

    def last_stage_groups(self) -> list[tuple[int, ...]]:
        """Per resource of the last stage, the stages that hold it (they take it one at a time,
        and a bucket's last stage ends after its others): the groups of the per-resource
        relaxations."""
        return [tuple(s for s, st in enumerate(self.stages) if res in st.resources)
                for res in self.stages[-1].resources]

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
    def upd_prefix_s(self) -> np.ndarray:
        """Update share of units ``0 .. i`` (seconds), proportional to their bytes."""
        return self.trace.update_s * self.prefix_bytes / self.total_bytes

    @cached_property
    def consts_s(self) -> Consts[float]:
        """Iteration constants in seconds."""
        tr = self.trace
        return Consts(F=self.F, B=self.B, U=tr.update_s, io=tr.io_s, h2d=tr.h2d_s)

    @cached_property
    def lower_bound_s(self) -> float:
        """A simple valid lower bound on the period (compute, or one pass of all bytes)."""
        tr = self.trace
        comm = self.alpha + self.beta * self.total_bytes if self.stages else 0.0
        return max(self.F + self.B + tr.update_s, self.F + tr.update_s + comm, tr.io_s, tr.h2d_s,
                   1e-9)

    def coarsen(self, groups: np.ndarray) -> Units:
        """Units that are runs of these: unit ``g`` of the result covers units
        ``groups[g] .. groups[g + 1] - 1`` (``groups`` starts at 0, without the final ``n``).

        A coarse unit belongs to the layer of its last unit (its readiness and its gate); the
        base pieces stay the same, so integer data summed over them add up to the same ticks.
        """
        groups = np.asarray(groups, dtype=np.int64)
        bounds = np.r_[groups, self.n]
        unit_start = self.unit_start[bounds]
        last = self.unit_start[bounds[1:]] - 1
        return Units(
            trace=self.trace, cluster=self.cluster, mode=self.mode, prefetch=self.prefetch,
            stages=self.stages, alpha=self.alpha, beta=self.beta, tensors=self.tensors,
            base_tensor=self.base_tensor, base_offset=self.base_offset,
            base_bytes=self.base_bytes, unit_start=unit_start,
            layer=self.trace.ready_layer[self.base_tensor[last]],
            nbytes=np.add.reduceat(self.base_bytes, unit_start[:-1]),
        )

    # --------------------------------------------------------------------------- plans
    def segments_from_cuts(self, cuts: np.ndarray) -> Segments:
        """Segments in ready order from a boolean array ``cuts`` (length ``n - 1``)."""
        idx = np.flatnonzero(np.asarray(cuts, dtype=bool))
        lo = np.r_[0, idx + 1]
        hi = np.r_[idx, self.n - 1]
        return [(int(a), int(b)) for a, b in zip(lo, hi, strict=True)]

    def to_plan(self, segs: Segments, policy: str = "optimal", knobs: dict | None = None) -> Plan:
        """Build the :class:`~schedopt.model.plan.Plan` of ``segs`` (launch order), bound to the
        trace and cluster; pieces of one tensor in one bucket are joined."""
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


def build_units(trace: Trace, cluster: Cluster, opts: SolveOptions, *,
                merge: bool | None = None, stage: int | tuple[int, ...] | None = None) -> Units:
    """The :class:`Units` of ``trace`` on ``cluster`` under ``opts``.

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
    if merge is None:
        merge = opts.merge_layers if opts.merge_layers is not None else (
            opts.next_forward == "wait-for-all")
    order = trace.ready_order
    base_tensor, base_offset, base_bytes = _base_pieces(
        order, None if merge else opts.partition_bytes)
    base_layer = trace.ready_layer[base_tensor]
    if merge:
        unit_start = np.r_[np.flatnonzero(np.r_[True, base_layer[1:] != base_layer[:-1]]),
                           len(base_bytes)]
    else:
        unit_start = np.arange(len(base_bytes) + 1)
    return Units(
        trace=trace, cluster=cluster, mode=opts.next_forward, prefetch=opts.prefetch,
        stages=stages, alpha=sum(s.alpha_s for s in stages),
        beta=sum(s.beta_s_per_byte for s in stages), tensors=[t.name for t in order],
        base_tensor=base_tensor, base_offset=base_offset, base_bytes=base_bytes,
        unit_start=unit_start, layer=base_layer[unit_start[:-1]],
        nbytes=np.add.reduceat(base_bytes, unit_start[:-1]),
    )
