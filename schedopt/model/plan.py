"""Plans (what a policy or the optimizer decides) and schedules (what the simulator computes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_serializer,
    model_validator,
)

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.limits import Bool, Int, check_depth, check_pieces, strict_int
from schedopt.model.trace import PIECE_SEPARATOR, SCHEMA_VERSION, Dtype, Trace

__all__ = ["Breakdown", "Member", "Members", "Plan", "Schedule", "Sharding", "interleave",
           "parse_member", "piece_name", "split_member"]

NextForward = Literal["wait-for-all", "per-layer"]
ShardingMode = Literal["full", "grad-op"]
ShardPadding = Literal["none", "dim0"]

#: Most all-gathers a sharded plan may run ahead of their unit.
MAX_PREFETCH = 64
#: Most micro-batches one step may accumulate.
MAX_ACCUMULATE = 4096


def interleave(orders: list[list[int]]) -> list[tuple[int, int]]:
    """The ``(stage, bucket)`` tasks of stage orders ``orders`` in the order shared resources
    serve them (the rule of :meth:`Plan.comm_sequence`)."""
    key: dict[tuple[int, int], float] = {}
    for s, order in enumerate(orders):
        prev = -np.inf
        for j, k in enumerate(order):
            kk = float(j) if s == 0 else max(prev + 1, key[(s - 1, k)] + 0.5)
            key[(s, k)] = prev = kk
    return sorted(key, key=lambda sk: (key[sk], sk[0]))


class Member(NamedTuple):
    """A bucket member: a whole tensor (``piece`` None) or piece ``piece`` of a tensor."""

    tensor: str
    piece: int | None


def piece_name(tensor: str, index: int) -> str:
    """Name of piece ``index`` of a partitioned tensor (``name#index``)."""
    return f"{tensor}{PIECE_SEPARATOR}{index}"


def parse_member(member: str, partition: Mapping[str, Any] | None = None) -> Member:
    """The one parser of bucket members: ``name#i`` is piece ``i`` of tensor ``name``, anything
    else a whole tensor. With ``partition``, only tensors it lists have pieces."""
    head, sep, tail = member.rpartition(PIECE_SEPARATOR)
    if sep and tail.isdigit() and (partition is None or head in partition):
        return Member(head, int(tail))
    return Member(member, None)


def split_member(member: str) -> tuple[str, int | None]:
    """Split a bucket member into ``(tensor, piece index or None)`` (:func:`parse_member`)."""
    tensor, piece = parse_member(member)
    return tensor, piece


class Sharding(BaseModel):
    """Sharded data parallel: parameters and gradients sharded over the ranks (FSDP, ZeRO-3).

    Attributes
    ----------
    mode
        ``full``: a unit's parameters are all-gathered before its forward, freed after it
        (reshard after forward) and all-gathered again before its backward (FSDP
        ``FULL_SHARD``, ZeRO-3). ``grad-op``: gathered once before the forward and kept until
        the unit's backward (FSDP ``SHARD_GRAD_OP``, ZeRO-2 with gathered parameters). Either way
        a unit's gradients are reduce-scattered after its backward.
    units
        Layer names per unit, contiguous in forward order, every layer not in :attr:`root` in
        exactly one unit, every unit holding at least one tensor (gradient or frozen).
    forward_prefetch, backward_prefetch
        How many all-gathers may run ahead of the unit being computed, in the forward and in
        the backward (FSDP2 ``set_modules_to_forward_prefetch`` / backward prefetch; 0: none).
    streams
        1: all-gathers and reduce-scatters share one stream (issue in one order); 2: a stream
        each (FSDP2). The network is one resource either way.
    padding
        ``none``: a unit's collectives move its tensors' bytes. ``dim0``: every tensor's first
        dimension is padded to a multiple of the world size first (FSDP2's ``Shard(0)``); the
        first dimension is the tensor's ``rows``, or its elements when ``rows`` is unset (a 1-D
        tensor). Left out of the serialised form at ``none``.
    root
        Layer names of the root group, or None (the default: no root group, every layer in a
        unit). FSDP2's ``fully_shard`` on the root module gathers the root's own parameters
        (embeddings, final norm, head; possibly not contiguous) as one group: all-gathered once
        per gathering micro-batch at the start of the forward, before any unit's
        (``_fsdp_state.py``, ``FSDPState._root_pre_forward`` then ``_pre_forward``), kept
        gathered through the backward (``FSDPState._lazy_init``: the root is not resharded
        after the forward) and reduce-scattered last, after the backward and every unit's
        reduce-scatter (``FSDPState._root_post_backward_final_callback``; torch 2.13,
        ``torch/distributed/fsdp/_fully_shard/``). Its layers are in no unit; every unit's
        layers are then consecutive in forward order. Left out of the serialised form when
        None, so older plan files keep their meaning.

    Frozen parameters (:attr:`~schedopt.model.trace.Layer.frozen`) are all-gathered with the
    group of their layer and never reduce-scattered; a group of frozen parameters only has no
    reduce-scatter and no bucket.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: ShardingMode = Field(description="full (reshard after forward) or grad-op.")
    units: list[list[str]] = Field(min_length=1, description="Layer names per unit, in forward"
                                                             " order.")
    forward_prefetch: Int = Field(1, ge=0, le=MAX_PREFETCH,
                                  description="All-gathers run ahead in the forward.")
    backward_prefetch: Int = Field(1, ge=0, le=MAX_PREFETCH,
                                   description="All-gathers run ahead in the backward.")
    streams: Annotated[Literal[1, 2], BeforeValidator(strict_int)] = Field(
        2, description="Streams for all-gathers and reduce-scatters (1 shared, 2 separate).")
    padding: ShardPadding = Field(
        default="none", description="none, or dim0: first dimensions padded to a multiple of"
                                    " the world size (FSDP2).")
    root: list[str] | None = Field(
        default=None, min_length=1, description="Layer names of the root group (FSDP2's root:"
        " gathered once, kept through the backward, reduce-scattered last), or none.")

    @model_serializer(mode="wrap")
    def _drop_no_padding(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("padding") == "none":
            data.pop("padding")  # added later: left out when unset (plan files unchanged)
        if isinstance(data, dict) and data.get("root", 0) is None:
            data.pop("root")  # likewise
        return data

    @property
    def groups(self) -> list[list[str]]:
        """Layer names per parameter group: the units, then the root group when there is one."""
        return [*self.units, *([self.root] if self.root is not None else [])]

    def unit_tensors(self, trace: Trace) -> list[list[str]]:
        """Each group's gradient tensor names (:attr:`groups`: units, then the root), in forward
        order (a tensor shared by several layers belongs to the group of the earliest), for
        groups already checked (:meth:`check_against`)."""
        return _owned(trace, self.groups, trace.tensor_layer_by_name, "tensors")

    def unit_frozen(self, trace: Trace) -> list[list[str]]:
        """Each group's frozen parameter names (as :meth:`unit_tensors`)."""
        return _owned(trace, self.groups, trace.frozen_layer_by_name, "frozen")

    def bucket_tensors(self, trace: Trace) -> list[list[str]]:
        """The plan's buckets: the groups' gradient tensors in reduce-scatter order (units in
        backward order, then the root group), groups without a gradient tensor left out."""
        tensors = self.unit_tensors(trace)
        order = [*reversed(tensors[:len(self.units)]), *tensors[len(self.units):]]
        return [names for names in order if names]

    def check_against(self, trace: Trace) -> list[list[str]]:
        """Check the groups against ``trace`` and return each group's tensor names
        (:meth:`unit_tensors`).

        Raises
        ------
        SchedoptError
            When a unit or the root names an unknown layer, a layer is in two groups or in
            none, units are out of forward order or not consecutive, or a group holds no
            parameter (gradient tensor or frozen).
        """
        index = {la.name: i for i, la in enumerate(trace.layers)}
        for where, names in self._named_groups():
            if not names:
                raise SchedoptError("unit is empty", where, names)
            for name in names:
                if name not in index:
                    raise SchedoptError("unknown layer", where, name)
        self._check_cover(trace, index)
        tensors = self.unit_tensors(trace)
        frozen = self.unit_frozen(trace)
        for (where, names), own, fro in zip(self._named_groups(), tensors, frozen, strict=True):
            if not own and not fro:
                what = "root group" if where.endswith("root") else "unit"
                raise SchedoptError(f"{what} holds no tensor, gradient or frozen (merge it with"
                                    " a neighbour)", where, names)
        return tensors

    def _named_groups(self) -> list[tuple[str, list[str]]]:
        """``(field, layer names)`` of every group, as errors name them."""
        out = [(f"plan.sharding.units[{k}]", unit) for k, unit in enumerate(self.units)]
        return out + ([("plan.sharding.root", self.root)] if self.root is not None else [])

    def _check_cover(self, trace: Trace, index: dict[str, int]) -> None:
        """Every layer in exactly one group; units consecutive, in forward order."""
        root = self.root or []
        if len(set(root)) != len(root):
            raise SchedoptError("layer appears twice", "plan.sharding.root",
                                next(n for n in root if root.count(n) > 1))
        flat = [name for unit in self.units for name in unit]
        both = sorted(set(root) & set(flat), key=index.__getitem__)
        if both:
            raise SchedoptError("layer is both in a unit and in the root group",
                                "plan.sharding.root", both[0])
        rest = [i for i in range(len(trace.layers)) if trace.layers[i].name not in set(root)]
        if [index[name] for name in flat] != rest:
            missing = [trace.layers[i].name for i in rest if trace.layers[i].name not in set(flat)]
            value = missing[0] if missing else flat
            why = ("layer is in no unit" if missing else
                   "every layer must appear once, units contiguous in forward order")
            raise SchedoptError(why, "plan.sharding.units", value)
        for k, unit in enumerate(self.units):
            if index[unit[-1]] - index[unit[0]] != len(unit) - 1:
                raise SchedoptError("a unit's layers must be consecutive in forward order (a "
                                    "root layer lies inside it)", f"plan.sharding.units[{k}]",
                                    unit)


def _owned(trace: Trace, groups: list[list[str]], owner: dict[str, int],
           attr: str) -> list[list[str]]:
    """Per group, the names in ``attr`` (``tensors`` or ``frozen``) of its layers that the
    layer owns (``owner``: the earliest layer listing the name)."""
    index = {la.name: i for i, la in enumerate(trace.layers)}
    return [[t.name for name in group for t in getattr(trace.layers[index[name]], attr)
             if owner[t.name] == index[name]] for group in groups]


class Plan(BaseModel):
    """How gradients are communicated: buckets, their order, and the iteration's couplings.

    Attributes
    ----------
    policy
        Name of the policy (or ``optimal``) that produced the plan.
    buckets
        Groups of members all-reduced together, in launch order. A member is a tensor name, or
        ``name#i`` for piece ``i`` of a tensor listed in ``partition``.
    partition
        Tensor name -> piece sizes in bytes (summing to the tensor's bytes).
    stage_orders
        Optional per-stage launch order (bucket indices) for multi-stage collectives; a missing
        entry means launch order.
    next_forward
        ``wait-for-all``: the next forward starts after every bucket and the update.
        ``per-layer``: layer l waits for the buckets holding its tensors and their updates.
    overlap
        False: communication starts only after the whole backward (CNTK-style).
    prefetch
        I/O prefetch depth (0 or 1).
    collective
        Collective imposed by the policy (e.g. ``ps``); None: the cluster's.
    sharding
        None: data parallel with all-reduced gradients. Otherwise the sharded plan's units and
        prefetch (:class:`Sharding`); ``buckets`` then hold each unit's tensors, units in
        backward order (the reduce-scatter launch order).
    accumulate
        Micro-batches per step: forward and backward ``accumulate`` times, communication after
        the last only (DDP ``no_sync``).
    comm_dtype
        Dtype gradients are reduced in (bytes scale by its item size over the tensor's); None:
        the tensors' own.
    trace_hash, cluster_hash
        Fingerprints of the trace and cluster the plan was made for.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Int = Field(SCHEMA_VERSION, description="Format version (1).")
    policy: str = Field(min_length=1, description="Policy that produced the plan.")
    knobs: Annotated[dict[str, Any], AfterValidator(check_depth)] = (
        Field(default_factory=dict, description="Policy knobs used."))
    buckets: list[list[str]] = Field(description="Bucket members in launch order.")
    partition: dict[str, list[Int]] = Field(default_factory=dict, description="Piece sizes.")
    stage_orders: dict[int, list[Int]] = Field(default_factory=dict, description="Stage orders.")
    next_forward: NextForward = Field("wait-for-all", description="Next-forward mode.")
    overlap: Bool = Field(True, description="Overlap communication with backward.")
    prefetch: Annotated[Literal[0, 1], BeforeValidator(strict_int)] = Field(
        0, description="I/O prefetch depth.")
    collective: Literal["ring", "tree", "hierarchical", "ps"] | None = Field(
        None, description="Collective imposed by the policy."
    )
    sharding: Sharding | None = Field(None, description="Sharded data parallel (None: all-reduce).")
    accumulate: Int = Field(1, ge=1, le=MAX_ACCUMULATE, description="Micro-batches per step.")
    comm_dtype: Dtype | None = Field(None, description="Dtype gradients are reduced in.")
    trace_hash: str | None = Field(None, description="Fingerprint of the trace.")
    cluster_hash: str | None = Field(None, description="Fingerprint of the cluster.")

    @model_validator(mode="after")
    def _check(self) -> Plan:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {self.schema_version} (this version"
                             f" reads {SCHEMA_VERSION})")
        check_pieces("members", sum(len(b) for b in self.buckets), "plan.buckets",
                     f"{len(self.buckets)} buckets")
        for k, b in enumerate(self.buckets):
            if not b:
                raise SchedoptError("bucket is empty", f"plan.buckets[{k}]", b)
        for s, order in self.stage_orders.items():
            if sorted(order) != list(range(len(self.buckets))):
                raise SchedoptError(
                    "must be a permutation of the bucket indices", f"plan.stage_orders[{s}]", order
                )
        if self.sharding is not None and (self.partition or self.stage_orders):
            field = "plan.partition" if self.partition else "plan.stage_orders"
            raise SchedoptError("a sharded plan has no pieces or stage orders", field,
                                self.partition or self.stage_orders)
        return self

    # ------------------------------------------------------------------ checks
    def check_against(self, trace: Trace, cluster: Cluster | None = None) -> Members:
        """Check that the plan covers ``trace`` exactly and return its member arrays.

        Every tensor must appear exactly once, or all its pieces exactly once; the hashes, when
        present, must match the trace and cluster.

        Raises
        ------
        SchedoptError
            Naming the offending field and value.
        """
        if self.trace_hash is not None and self.trace_hash not in (trace.fingerprint(),
                                                                   trace.retimed_from):
            raise SchedoptError(
                f"plan was made for another trace (this trace is {trace.fingerprint()})",
                "plan.trace_hash",
                self.trace_hash,
            )
        if (
            cluster is not None
            and self.cluster_hash is not None
            and self.cluster_hash != cluster.fingerprint()
        ):
            raise SchedoptError(
                f"plan was made for another cluster (this cluster is {cluster.fingerprint()})",
                "plan.cluster_hash",
                self.cluster_hash,
            )
        if self.sharding is not None:
            self.sharding.check_against(trace)
            want = self.sharding.bucket_tensors(trace)
            if [sorted(b) for b in self.buckets] != [sorted(u) for u in want]:
                raise SchedoptError("a sharded plan's buckets must be its units' tensors, units"
                                    " in backward order, then the root group's",
                                    "plan.buckets", self.buckets)
        return self.members(trace)

    def check_stage_orders(self, cluster: Cluster) -> None:
        """Refuse stage orders for stages ``cluster`` does not have (for plans read from files;
        a policy may order a stage that only some clusters have)."""
        stages = len(cluster.comm_stages(self.collective))
        for s in self.stage_orders:
            if stages and not 0 <= s < stages:  # one rank: no stage, nothing to order
                raise SchedoptError(f"no such communication stage (this cluster has {stages})",
                                    f"plan.stage_orders[{s}]", self.stage_orders[s])

    def members(self, trace: Trace) -> Members:
        """Per member, in launch order: bucket, owning layer and bytes; checks coverage."""
        owner = trace.tensor_layer_by_name
        size = {t.name: t.bytes for t in trace.tensor_list}
        sizes: list[int] | None
        for name, sizes in self.partition.items():
            if name not in size:
                raise SchedoptError("unknown tensor", "plan.partition", name)
            if any(x <= 0 for x in sizes) or sum(sizes) != size[name]:
                raise SchedoptError(
                    f"piece sizes must be positive and sum to {size[name]}",
                    f"plan.partition[{name!r}]",
                    sizes,
                )
        counts = [len(b) for b in self.buckets]
        n = sum(counts)
        layer = np.empty(n, dtype=np.int64)
        nbytes = np.empty(n, dtype=np.int64)
        seen: set[str] = set()
        i = 0
        for k, bucket in enumerate(self.buckets):
            if not self.partition:  # whole tensors: a member is a tensor's name
                try:
                    layer[i:i + len(bucket)] = [owner[m] for m in bucket]
                    nbytes[i:i + len(bucket)] = [size[m] for m in bucket]
                except KeyError:
                    bad = next(m for m in bucket if m not in size)
                    message = ("member does not match the partition"
                               if parse_member(bad)[0] in size else "unknown tensor")
                    raise SchedoptError(message, f"plan.buckets[{k}]", bad) from None
                i += len(bucket)
                seen.update(bucket)
                continue
            for member in bucket:
                tensor, piece = parse_member(member)
                sizes = self.partition.get(tensor)
                if tensor not in size:
                    raise SchedoptError("unknown tensor", f"plan.buckets[{k}]", member)
                if (piece is None) != (sizes is None) or (
                    piece is not None and sizes is not None and piece >= len(sizes)
                ):
                    raise SchedoptError(
                        "member does not match the partition", f"plan.buckets[{k}]", member
                    )
                layer[i] = owner[tensor]
                nbytes[i] = size[tensor] if piece is None or sizes is None else sizes[piece]
                i += 1
            seen.update(bucket)
        if len(seen) != n:
            dup = next(m for m in seen if sum(m in b for b in self.buckets) > 1 or
                       sum(b.count(m) for b in self.buckets) > 1)
            raise SchedoptError("member appears twice", "plan.buckets", dup)
        expected = sum(len(self.partition.get(name, [0])) for name in size)
        if n != expected:
            for name in size:
                pieces = self.partition.get(name)
                want = [name] if pieces is None else [piece_name(name, j)
                                                      for j in range(len(pieces))]
                lost = [w for w in want if w not in seen]
                if lost:
                    raise SchedoptError("tensor is in no bucket", "plan.buckets", lost[0])
        bucket_of = np.repeat(np.arange(len(self.buckets)), counts)
        return Members(bucket_of, layer, nbytes, len(self.buckets))

    def bucket_bytes(self, trace: Trace) -> np.ndarray:
        """Bytes of every bucket (float array, launch order)."""
        return self.members(trace).bucket_bytes()

    def stage_order(self, stage: int) -> list[int]:
        """Launch order (bucket indices) of one communication stage."""
        return self.stage_orders.get(stage, list(range(len(self.buckets))))

    def comm_sequence(self, num_stages: int) -> list[tuple[int, int]]:
        """All ``(stage, bucket)`` tasks of one iteration in the order resources serve them.

        Stages on resources of their own keep their stage order; where stages share a
        resource, tasks are interleaved by the key ``key(0, j) = j`` and
        ``key(s, j) = max(key(s, j-1) + 1, key(s-1, same bucket) + 1/2)`` (``j`` the position in
        stage ``s``'s order), ties broken by stage: one bucket of lookahead, and every stage
        after its predecessor (docs/model.md, "Plan").
        """
        return interleave([self.stage_order(s) for s in range(num_stages)])

    def bind(self, trace: Trace, cluster: Any) -> Plan:
        """Return a copy carrying the fingerprints of ``trace`` and ``cluster``."""
        return self.model_copy(
            update={"trace_hash": trace.fingerprint(), "cluster_hash": cluster.fingerprint()}
        )

    @cached_property
    def num_buckets(self) -> int:
        """Number of buckets."""
        return len(self.buckets)


@dataclass(frozen=True)
class Members:
    """A plan's members resolved against a trace, flattened in launch order.

    Attributes
    ----------
    bucket, layer, nbytes
        Per member: its bucket index, its tensor's owning layer, its bytes.
    num_buckets
        Number of buckets.
    """

    bucket: np.ndarray
    layer: np.ndarray
    nbytes: np.ndarray
    num_buckets: int

    def bucket_bytes(self) -> np.ndarray:
        """Bytes of every bucket (float array, launch order)."""
        return np.bincount(self.bucket, weights=self.nbytes, minlength=self.num_buckets)

    def ready_layer(self) -> np.ndarray:
        """Smallest owning layer of every bucket (int array)."""
        starts = np.flatnonzero(np.r_[True, self.bucket[1:] != self.bucket[:-1]])
        return np.minimum.reduceat(self.layer, starts)


@dataclass(frozen=True)
class Breakdown:
    """Where one steady-state iteration's time goes on the compute stream.

    The five parts sum exactly to the iteration time.
    """

    forward_s: float
    backward_s: float
    update_s: float
    exposed_comm_s: float
    io_stall_s: float
    host_stall_s: float = 0.0  # the compute stream waiting for launches (docs/model.md)

    @property
    def total_s(self) -> float:
        """Sum of the parts (the iteration time)."""
        return self.forward_s + self.backward_s + self.update_s + self.exposed_comm_s + (
            self.io_stall_s + self.host_stall_s
        )

    def as_dict(self) -> dict[str, float]:
        """Plain dictionary of the parts."""
        return {
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "update_s": self.update_s,
            "exposed_comm_s": self.exposed_comm_s,
            "io_stall_s": self.io_stall_s,
            **({"host_stall_s": self.host_stall_s} if self.host_stall_s else {}),
        }


@dataclass
class Schedule:
    """The simulator's verdict on a plan.

    Attributes
    ----------
    iteration_time_s
        Long-run period (steady-state iteration time).
    first_iteration_s
        End of the first (cold) iteration's compute, from time 0.
    breakdown
        Steady-state breakdown; sums to ``iteration_time_s``.
    iterations
        Number of iterations simulated.
    peak_memory_bytes
        Sharded plans: the largest sum, per rank, of unsharded parameters and not yet
        reduce-scattered gradients alive at once (docs/model.md); None for all-reduce plans.
    shard_bytes
        Sharded plans: the constant parameter shard per rank (parameter bytes / ranks),
        reported apart from the peak; None for all-reduce plans.
    tasks
        Per task key (``("fwd", t, l)``, ``("bwd", t, l)``, ``("comm", t, k, s)``,
        ``("update", t, k)``, ``("io", t)``, ``("h2d", t)``) its ``(start, end)`` in seconds.
    resources
        Per task key the resources it holds.
    """

    iteration_time_s: float
    first_iteration_s: float
    breakdown: Breakdown
    iterations: int
    world_size: int
    batch_size: int
    comm_busy_s: float = 0.0
    peak_memory_bytes: float | None = None
    shard_bytes: float | None = None
    tasks: dict[tuple, tuple[float, float]] = field(default_factory=dict, repr=False)
    resources: dict[tuple, tuple[str, ...]] = field(default_factory=dict, repr=False)

    @property
    def throughput_samples_s(self) -> float:
        """Samples per second over all GPUs."""
        return self.world_size * self.batch_size / self.iteration_time_s
