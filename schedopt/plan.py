"""Plans (what a policy or the optimizer decides) and schedules (what the simulator computes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import SchedoptError
from .trace import SCHEMA_VERSION, Trace

__all__ = ["Breakdown", "Plan", "Schedule", "piece_name", "split_member"]

NextForward = Literal["wait-for-all", "per-layer"]


def piece_name(tensor: str, index: int) -> str:
    """Name of piece ``index`` of a partitioned tensor (``name#index``)."""
    return f"{tensor}#{index}"


def split_member(member: str) -> tuple[str, int | None]:
    """Split a bucket member into ``(tensor, piece index or None)``."""
    head, sep, tail = member.rpartition("#")
    if sep and tail.isdigit():
        return head, int(tail)
    return member, None


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
    trace_hash, cluster_hash
        Fingerprints of the trace and cluster the plan was made for.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(SCHEMA_VERSION, description="Format version (1).")
    policy: str = Field(description="Policy that produced the plan.")
    knobs: dict[str, Any] = Field(default_factory=dict, description="Policy knobs used.")
    buckets: list[list[str]] = Field(description="Bucket members in launch order.")
    partition: dict[str, list[int]] = Field(default_factory=dict, description="Piece sizes.")
    stage_orders: dict[int, list[int]] = Field(default_factory=dict, description="Stage orders.")
    next_forward: NextForward = Field("wait-for-all", description="Next-forward mode.")
    overlap: bool = Field(True, description="Overlap communication with backward.")
    prefetch: Literal[0, 1] = Field(0, description="I/O prefetch depth.")
    collective: Literal["ring", "tree", "hierarchical", "ps"] | None = Field(
        None, description="Collective imposed by the policy."
    )
    trace_hash: str | None = Field(None, description="Fingerprint of the trace.")
    cluster_hash: str | None = Field(None, description="Fingerprint of the cluster.")

    @model_validator(mode="after")
    def _check(self) -> Plan:
        for k, b in enumerate(self.buckets):
            if not b:
                raise SchedoptError("bucket is empty", f"plan.buckets[{k}]", b)
        for s, order in self.stage_orders.items():
            if sorted(order) != list(range(len(self.buckets))):
                raise SchedoptError(
                    "must be a permutation of the bucket indices", f"plan.stage_orders[{s}]", order
                )
        return self

    # ------------------------------------------------------------------ checks
    def check_against(self, trace: Trace, cluster: Any | None = None) -> None:
        """Raise :class:`SchedoptError` unless the plan covers ``trace`` exactly.

        Every tensor must appear exactly once, or all its pieces exactly once; the hashes, when
        present, must match the trace and cluster.
        """
        if self.trace_hash is not None and self.trace_hash != trace.fingerprint():
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
        by_name = {t.name: t for t in trace.tensor_list}
        for name, sizes in self.partition.items():
            t = by_name.get(name)
            if t is None:
                raise SchedoptError("unknown tensor", "plan.partition", name)
            if any(s <= 0 for s in sizes) or sum(sizes) != t.bytes:
                raise SchedoptError(
                    f"piece sizes must be positive and sum to {t.bytes}",
                    f"plan.partition[{name!r}]",
                    sizes,
                )
        seen: set[str] = set()
        for k, bucket in enumerate(self.buckets):
            for member in bucket:
                tensor, piece = split_member(member)
                if tensor not in by_name:
                    raise SchedoptError("unknown tensor", f"plan.buckets[{k}]", member)
                sizes = self.partition.get(tensor)
                if (piece is None) != (sizes is None) or (
                    piece is not None and sizes is not None and piece >= len(sizes)
                ):
                    raise SchedoptError(
                        "member does not match the partition", f"plan.buckets[{k}]", member
                    )
                if member in seen:
                    raise SchedoptError("member appears twice", f"plan.buckets[{k}]", member)
                seen.add(member)
        expected = sum(len(self.partition.get(t.name, [0])) for t in trace.tensor_list)
        if len(seen) != expected:
            missing = next(
                t.name
                for t in trace.tensor_list
                if t.name not in seen and not any(
                    piece_name(t.name, i) in seen for i in range(len(self.partition.get(t.name, [])))
                ) or (t.name in self.partition and any(
                    piece_name(t.name, i) not in seen for i in range(len(self.partition[t.name]))
                ))
            )
            raise SchedoptError("tensor is in no bucket", "plan.buckets", missing)

    def bucket_bytes(self, trace: Trace) -> np.ndarray:
        """Bytes of every bucket (float array, launch order)."""
        by_name = {t.name: t.bytes for t in trace.tensor_list}
        out = np.empty(len(self.buckets))
        for k, bucket in enumerate(self.buckets):
            total = 0
            for member in bucket:
                tensor, piece = split_member(member)
                total += by_name[tensor] if piece is None else self.partition[tensor][piece]
            out[k] = total
        return out

    def bucket_layers(self, trace: Trace) -> list[np.ndarray]:
        """Owning layer indices of every bucket's members (launch order)."""
        owner = trace.tensor_layer_by_name
        return [
            np.fromiter((owner[split_member(m)[0]] for m in b), dtype=np.int64, count=len(b))
            for b in self.buckets
        ]

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
class Breakdown:
    """Where one steady-state iteration's time goes on the compute stream.

    The five parts sum exactly to the iteration time.
    """

    forward_s: float
    backward_s: float
    update_s: float
    exposed_comm_s: float
    io_stall_s: float

    @property
    def total_s(self) -> float:
        """Sum of the parts (the iteration time)."""
        return self.forward_s + self.backward_s + self.update_s + self.exposed_comm_s + (
            self.io_stall_s
        )

    def as_dict(self) -> dict[str, float]:
        """Plain dictionary of the parts."""
        return {
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "update_s": self.update_s,
            "exposed_comm_s": self.exposed_comm_s,
            "io_stall_s": self.io_stall_s,
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
    tasks: dict[tuple, tuple[float, float]] = field(default_factory=dict, repr=False)
    resources: dict[tuple, tuple[str, ...]] = field(default_factory=dict, repr=False)

    @property
    def throughput_samples_s(self) -> float:
        """Samples per second over all GPUs."""
        return self.world_size * self.batch_size / self.iteration_time_s
