"""Clusters, links and the communication cost model.

Every collective is expressed as one or more :class:`CommStage` objects, each a task of
``alpha + beta * n`` seconds for a bucket of ``n`` bytes that holds a set of resources exclusively.
See docs/model.md ("Communication cost") for the formulas.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schedopt.errors import SchedoptError
from schedopt.model.limits import (
    MAX_BYTES,
    MAX_COUNT,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_SECONDS,
    Bandwidth,
    Bool,
    Int,
    Number,
    Seconds,
)
from schedopt.model.trace import SCHEMA_VERSION, fingerprint

__all__ = [
    "AllReduceFit",
    "Cluster",
    "ClusterFamily",
    "CommStage",
    "CostSegment",
    "Link",
    "PSConfig",
]

Collective = Literal["ring", "tree", "hierarchical", "ps"]
#: Largest per-call host cost (s): anything above is a unit mistake, not a measurement.
MAX_CALL_S = 1.0
#: Most collective calls a cluster may run at once (``comm_concurrency``).
MAX_CONCURRENCY = 64
PositiveFinite = Field(gt=0.0, allow_inf_nan=False)


class Link(BaseModel):
    """A link type: achieved bandwidth per GPU (or per NIC) and per-step latency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("link", description="Link name (pcie3, nvlink2, 10gbe, ib-edr, ...).")
    bandwidth_Bps: Bandwidth = Field(description="Bytes per second (1 to 1e15).")
    latency_s: Seconds = Field(0.0, description="Latency per step.")


class CostSegment(BaseModel):
    """One piece of a piecewise-linear all-reduce cost: ``alpha + beta * n`` from ``min_bytes``
    up to the next segment's ``min_bytes``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_bytes: Int = Field(ge=0, le=MAX_BYTES,
                           description="Smallest message size (bytes) of the segment.")
    alpha_s: Number = Field(ge=-MAX_SECONDS, le=MAX_SECONDS,
                            description="Intercept (s) of the segment's line.")
    beta_s_per_byte: Number = Field(ge=0.0, le=1.0, description="Seconds per byte.")


class AllReduceFit(BaseModel):
    """A fitted all-reduce cost for one rank count: ``alpha + beta * n``, or, when ``segments``
    is given, the piecewise-linear cost they define (``alpha_s`` and ``beta_s_per_byte`` are
    then the single line over every size, kept for consumers of one line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha_s: Seconds = Field(description="Start-up time (s).")
    beta_s_per_byte: Number = Field(ge=0.0, le=1.0, description="Seconds per byte.")
    r2: Number | None = Field(None, le=1.0, description="Coefficient of determination of the fit.")
    min_bytes: Int | None = Field(None, ge=0, le=MAX_BYTES,
                                  description="Smallest message size used in the fit.")
    max_bytes: Int | None = Field(None, ge=0, le=MAX_BYTES,
                                  description="Largest message size used in the fit.")
    segments: tuple[CostSegment, ...] | None = Field(
        default=None, description="Piecewise-linear cost (protocol switches): segments by "
        "increasing min_bytes, the first at 0; replaces alpha + beta n in the simulator.")

    @model_validator(mode="after")
    def _check_segments(self) -> AllReduceFit:
        segs = self.segments
        if segs is None:
            return self
        if not segs:
            raise ValueError("segments: must hold at least one segment (or be omitted)")
        if segs[0].min_bytes != 0:
            raise ValueError(f"segments[0].min_bytes: must be 0, got {segs[0].min_bytes}")
        for i, seg in enumerate(segs):
            if i and seg.min_bytes <= segs[i - 1].min_bytes:
                raise ValueError(f"segments[{i}].min_bytes: must increase, got {seg.min_bytes}"
                                 f" after {segs[i - 1].min_bytes}")
            if seg.alpha_s + seg.beta_s_per_byte * seg.min_bytes < 0:
                raise ValueError(f"segments[{i}]: negative cost at its min_bytes"
                                 f" ({seg.alpha_s} + {seg.beta_s_per_byte} * {seg.min_bytes})")
        return self

    def stage_segments(self) -> tuple[tuple[float, float, float], ...]:
        """The segments as ``(min_bytes, alpha_s, beta_s_per_byte)`` tuples (empty: linear)."""
        if not self.segments:
            return ()
        return tuple((float(s.min_bytes), s.alpha_s, s.beta_s_per_byte) for s in self.segments)


class PSConfig(BaseModel):
    """Parameter-server layout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    servers: Int = Field(1, gt=0, le=MAX_COUNT, description="Number of servers.")
    colocated: Bool = Field(True, description="Servers run on the worker nodes.")


@dataclass(frozen=True)
class CommStage:
    """One communication task of a bucket: ``alpha + beta * n`` seconds on ``resources``.

    Attributes
    ----------
    name
        Phase name (``allreduce``, ``push``, ``pull``, ``reduce-scatter``, ...).
    resources
        Resources the task holds exclusively for its whole duration.
    alpha_s, beta_s_per_byte
        Cost coefficients (with ``segments``: the single line that approximates them).
    segments
        Piecewise-linear cost ``(min_bytes, alpha, beta)`` by increasing ``min_bytes``, the first
        at 0; empty: the linear cost. ``offset_s`` is added to either.
    offset_s
        Per-collective overhead added to every segment (already inside ``alpha_s``).
    """

    name: str
    resources: tuple[str, ...]
    alpha_s: float
    beta_s_per_byte: float
    segments: tuple[tuple[float, float, float], ...] = ()
    offset_s: float = 0.0

    def time(self, nbytes: float) -> float:
        """Duration for a bucket of ``nbytes`` bytes (0 for an empty bucket)."""
        if nbytes <= 0:
            return 0.0
        if not self.segments:
            return self.alpha_s + self.beta_s_per_byte * nbytes
        return float(self.times(np.array([nbytes], dtype=float))[0])

    def times(self, nbytes: np.ndarray) -> np.ndarray:
        """Durations for buckets of ``nbytes`` bytes (an array; empty buckets included as
        ``alpha``, as the simulator has always costed them)."""
        if not self.segments:
            return self.alpha_s + self.beta_s_per_byte * nbytes
        seg = np.asarray(self.segments, dtype=float)
        k = np.searchsorted(seg[:, 0], nbytes, side="right") - 1
        k = np.clip(k, 0, len(seg) - 1)
        return self.offset_s + seg[k, 1] + seg[k, 2] * nbytes


class Cluster(BaseModel):
    """A data-parallel cluster: ``nodes × gpus_per_node`` ranks and their links.

    Attributes
    ----------
    intra_link, inter_link
        Links inside a node and between nodes (``inter_link`` is required when ``nodes > 1``).
    collective
        ``ring`` | ``tree`` | ``hierarchical`` | ``ps``.
    allreduce
        Optional fitted cost that replaces the whole collective by one task ``alpha + beta n``
        (or its piecewise-linear ``segments``).
    overlap_slowdown
        ``s >= 1``: the part of a compute task that runs while communication runs proceeds at
        speed ``1/s`` (fluid; docs/model.md).
    comm_slowdown
        ``s_c >= 1``: communication runs at speed ``1/s_c`` while compute runs (ranks and the
        backend's threads sharing CPU cores; 1 on GPUs; docs/model.md).
    collective_overhead_s
        Fixed time added to every bucket's communication (one per collective call).
    launch_overhead_s, hook_overhead_s
        Host side: time of the launching thread per collective call and per gradient tensor
        (docs/model.md, "Host side"; at most 1 s each).
    bucket_compute_s
        Device time per bucket on the compute stream once its last gradient is in, before its
        communication starts (DDP scales each bucket by ``1/world`` in one kernel; docs/model.md,
        "Host side"; at most 1 s).
    comm_concurrency
        Collective calls in flight at once (default 1: one after another, as on one NCCL
        stream). torch's gloo process group runs 2 (two worker threads taking queued calls in
        order); one-stage collectives only (docs/model.md, "Concurrent collectives").
    shared_pcie
        When true, the batch copy (h2d) and intra-node gradient traffic share one resource.
    pipelined_hierarchical
        Split the hierarchical all-reduce into three tasks (extension; default one task).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Int = Field(SCHEMA_VERSION, description="Format version (1).")
    name: str = Field(min_length=1, description="Cluster name.")
    source: str = Field("", description="Where the figures come from.")
    nodes: Int = Field(gt=0, le=MAX_NODES, description="Number of nodes.")
    gpus_per_node: Int = Field(gt=0, le=MAX_GPUS_PER_NODE, description="GPUs (ranks) per node.")
    gpu: str = Field("", description="GPU model (informational).")
    intra_link: Link = Field(description="Link between GPUs of one node.")
    inter_link: Link | None = Field(None, description="Link between nodes (per NIC).")
    nics_per_node: Int = Field(1, gt=0, le=MAX_COUNT,
                               description="NICs per node used by the collective.")
    collective: Collective = Field("ring", description="Collective algorithm.")
    ps: PSConfig | None = Field(None, description="Parameter-server layout (collective ps).")
    shared_pcie: Bool = Field(False, description="h2d and intra-node traffic share PCIe.")
    pipelined_hierarchical: Bool = Field(False, description="Three-task hierarchical all-reduce.")
    allreduce: AllReduceFit | None = Field(None, description="Fitted alpha-beta (replaces model).")
    overlap_slowdown: Number = Field(
        1.0, ge=1.0, le=1e3,
        description="Compute runs at speed 1/s while communication runs (fluid; 1: no slowdown).")
    comm_slowdown: Number = Field(
        1.0, ge=1.0, le=1e3,
        description="Communication runs at speed 1/s_c while compute runs (fluid; 1: none).")
    collective_overhead_s: Seconds = Field(
        0.0,
        description="Fixed time (s) added to every bucket's communication.")
    launch_overhead_s: Number = Field(
        0.0, ge=0.0, le=MAX_CALL_S,
        description="Host time (s) to launch one collective call (framework + library), paid "
        "on the launching thread before the call can start (docs/model.md, 'Host side').")
    hook_overhead_s: Number = Field(
        0.0, ge=0.0, le=MAX_CALL_S,
        description="Host time (s) of the reducer's hook per gradient tensor, on the launching "
        "thread after its layer's backward launch.")
    bucket_compute_s: Number = Field(
        0.0, ge=0.0, le=MAX_CALL_S,
        description="Device time (s) per bucket on the compute stream once its last gradient "
        "is in, before its communication (the framework's scaling kernel of the bucket).")
    comm_concurrency: Int = Field(
        1, ge=1, le=MAX_CONCURRENCY,
        description="Collective calls in flight at once (1: one after another; torch's gloo "
        "process group: 2).")

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {self.schema_version}")
        if self.nodes > 1 and self.inter_link is None:
            raise ValueError(f"inter_link is required when nodes > 1 (nodes = {self.nodes})")
        return self

    # ------------------------------------------------------------------ derived
    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self.nodes * self.gpus_per_node

    @property
    def intra_resource(self) -> str:
        """Resource name of intra-node traffic (``pcie`` when shared with h2d)."""
        return "pcie" if self.shared_pcie else "intra"

    def fingerprint(self) -> str:
        """Stable content hash (plans are bound to it).

        Fields added after the format's first release are left out of the hash while they hold
        their defaults, so clusters (and the plans bound to them) keep their fingerprints.
        """
        exclude: dict[str, Any] = {}
        if self.overlap_slowdown == 1.0:
            exclude["overlap_slowdown"] = True
        if self.comm_slowdown == 1.0:
            exclude["comm_slowdown"] = True
        if self.collective_overhead_s == 0.0:
            exclude["collective_overhead_s"] = True
        for key in ("launch_overhead_s", "hook_overhead_s", "bucket_compute_s"):
            if getattr(self, key) == 0.0:
                exclude[key] = True
        if self.comm_concurrency == 1:
            exclude["comm_concurrency"] = True
        if self.allreduce is not None and self.allreduce.segments is None:
            exclude["allreduce"] = {"segments": True}
        if not exclude:
            return fingerprint(self)
        text = self.model_dump_json(exclude=exclude)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def has_host(self) -> bool:
        """Whether the cluster gives any host-side cost (docs/model.md, "Host side")."""
        return bool(self.launch_overhead_s or self.hook_overhead_s)

    def with_size(self, nodes: int | None = None, gpus_per_node: int | None = None) -> Cluster:
        """Return this cluster at another size (drops a fitted ``allreduce``)."""
        data = self.model_dump()
        data["nodes"] = nodes or self.nodes
        data["gpus_per_node"] = gpus_per_node or self.gpus_per_node
        if data["nodes"] != self.nodes or data["gpus_per_node"] != self.gpus_per_node:
            data["allreduce"] = None
            data["name"] = f"{self.name}@{data['nodes']}x{data['gpus_per_node']}"
        return _resized(data)

    def single_gpu(self) -> Cluster:
        """The one-GPU cluster used as the scaling-efficiency reference."""
        return self.with_size(1, 1)

    def comm_stages(self, collective: str | None = None) -> tuple[CommStage, ...]:
        """The communication tasks of one bucket, in order.

        Parameters
        ----------
        collective
            Override of the cluster's collective (a policy may impose one, e.g. ``ps``).

        Returns
        -------
        tuple of CommStage
            Empty for a single rank (no communication). The per-collective overhead is in the
            first stage's ``alpha_s``.
        """
        stages = self._comm_stages(collective)
        if not stages or self.collective_overhead_s == 0.0:
            return stages
        first, over = stages[0], self.collective_overhead_s
        first = CommStage(first.name, first.resources, first.alpha_s + over,
                          first.beta_s_per_byte, first.segments,
                          first.offset_s + over if first.segments else 0.0)
        return (first, *stages[1:])

    def _comm_stages(self, collective: str | None) -> tuple[CommStage, ...]:
        """The communication tasks of one bucket without the per-collective overhead."""
        p = self.world_size
        if p == 1:
            return ()
        kind = collective or self.collective
        intra = self.intra_resource
        if self.allreduce is not None and kind == self.collective:  # the fit is of this one
            res: tuple[str, ...] = (intra, "inter") if self.nodes > 1 else (intra,)
            return (CommStage("allreduce", res, self.allreduce.alpha_s,
                              self.allreduce.beta_s_per_byte, self.allreduce.stage_segments()),)
        inter = self.inter_link
        if kind == "ps":
            return self._ps_stages()
        if kind == "ring":
            res, alpha, beta = self._ring_link()
            return (CommStage("allreduce", res, 2 * (p - 1) * alpha, 2 * (p - 1) / p * beta),)
        if kind == "tree":
            res, alpha, beta = self._ring_link()
            hops = math.ceil(math.log2(p))
            return (CommStage("allreduce", res, 2 * hops * alpha, 2 * beta),)
        # hierarchical: intra reduce-scatter, inter all-reduce of n/g, intra all-gather
        g, n_nodes = self.gpus_per_node, self.nodes
        a_l, b_l = self.intra_link.latency_s, 1.0 / self.intra_link.bandwidth_Bps
        a_g = inter.latency_s if inter is not None and n_nodes > 1 else 0.0
        # the g concurrent inter-node all-reduces of n/g bytes share min(NICs, g) NICs, so
        # each runs at inter bandwidth x min(NICs, g) / g
        b_g = (
            g / (inter.bandwidth_Bps * min(self.nics_per_node, g))
            if inter is not None and n_nodes > 1
            else 0.0
        )
        rs = CommStage("reduce-scatter", (intra,), (g - 1) * a_l, (g - 1) / g * b_l)
        ar = CommStage("inter-allreduce", ("inter",), 2 * (n_nodes - 1) * a_g,
                       2 * (n_nodes - 1) / n_nodes * b_g / g)
        ag = CommStage("all-gather", (intra,), (g - 1) * a_l, (g - 1) / g * b_l)
        if n_nodes == 1:
            return (CommStage("allreduce", (intra,), 2 * rs.alpha_s, 2 * rs.beta_s_per_byte),)
        if g == 1:
            return (ar,)
        if self.pipelined_hierarchical:
            return (rs, ar, ag)
        return (CommStage("allreduce", (intra, "inter"), rs.alpha_s + ar.alpha_s + ag.alpha_s,
                          rs.beta_s_per_byte + ar.beta_s_per_byte + ag.beta_s_per_byte),)

    def _ring_link(self) -> tuple[tuple[str, ...], float, float]:
        """Resources, alpha (largest latency) and beta (1 / smallest bandwidth) of the ring."""
        if self.nodes == 1:
            return ((self.intra_resource,), self.intra_link.latency_s,
                    1.0 / self.intra_link.bandwidth_Bps)
        inter = self.inter_link
        assert inter is not None
        alpha = max(inter.latency_s, self.intra_link.latency_s if self.gpus_per_node > 1 else 0.0)
        bw = inter.bandwidth_Bps * self.nics_per_node
        if self.gpus_per_node > 1:
            bw = min(bw, self.intra_link.bandwidth_Bps)
            return ((self.intra_resource, "inter"), alpha, 1.0 / bw)
        return (("inter",), alpha, 1.0 / bw)

    def _ps_stages(self) -> tuple[CommStage, ...]:
        """Push then pull through ``servers`` parameter servers.

        Dedicated servers: push holds the workers' uplinks (``ps-up``), pull their downlinks
        (``ps-down``), so a push and an earlier bucket's pull overlap (full duplex); each moves
        ``n · max(1, workers / servers)`` bytes through the busiest NIC. Servers colocated with the
        workers (the default on several nodes): every node's NIC carries its own push and its
        server's pull traffic in both directions, so push and pull each hold both resources and
        move ``n · (workers - 1) / min(servers, workers)`` bytes through the busiest NIC (a
        server's node receives a shard from every other node; with ``servers = workers`` that is
        ``(w - 1)/w · n``). On one node the servers sit on the host, reached over the intra link,
        and ``colocated`` has no effect (the dedicated formula). On several nodes
        with several GPUs each, the push starts with a local reduce and the pull ends with a
        local broadcast, ``(g - 1)/g · n`` bytes over the intra link each.
        """
        ps = self.ps or PSConfig(servers=self.nodes, colocated=True)
        if self.nodes > 1:
            assert self.inter_link is not None
            link, workers = self.inter_link, self.nodes
            bw = link.bandwidth_Bps * self.nics_per_node
        else:  # one node: GPUs push to servers on the host over PCIe
            link, workers = self.intra_link, self.gpus_per_node
            bw = link.bandwidth_Bps
        share = max(1.0, workers / ps.servers)
        # on several nodes the GPUs of a node first reduce locally (and broadcast after the
        # pull): (g-1)/g of the bytes cross the intra link, which both stages then hold
        g = self.gpus_per_node
        local: tuple[str, ...] = ()
        a_loc = b_loc = 0.0
        if self.nodes > 1 and g > 1:
            local = (self.intra_resource,)
            a_loc = (g - 1) * self.intra_link.latency_s
            b_loc = (g - 1) / g / self.intra_link.bandwidth_Bps
        a = link.latency_s + a_loc
        if ps.colocated and self.nodes > 1:
            # a server's node receives (w - 1) shards of n / k bytes from the other nodes (its
            # own node's push stays local): the busiest NIC direction, whatever k
            beta = (workers - 1) / min(ps.servers, workers) / bw
            both = (*local, "ps-up", "ps-down")
            return (CommStage("push", both, a, beta + b_loc),
                    CommStage("pull", both, a, beta + b_loc))
        beta = share / bw
        return (
            CommStage("push", (*local, "ps-up"), a, beta + b_loc),
            CommStage("pull", (*local, "ps-down"), a, beta + b_loc),
        )

    def alpha_beta(self, collective: str | None = None) -> tuple[float, float]:
        """Total ``(alpha, beta)`` of one bucket's communication (sum over its stages)."""
        stages = self.comm_stages(collective)
        return (sum(s.alpha_s for s in stages), sum(s.beta_s_per_byte for s in stages))

    def allreduce_time(self, nbytes: float, collective: str | None = None) -> float:
        """Total communication time of one bucket of ``nbytes`` bytes (stages run back to back)."""
        return sum(s.time(nbytes) for s in self.comm_stages(collective))

    def shard_collective_time(self, nbytes: Any, collective: str | None = None) -> Any:
        """Time of one all-gather, or one reduce-scatter, of ``nbytes`` bytes (sharded plans).

        Each is half of this cluster's all-reduce of ``nbytes`` bytes, the per-collective
        overhead counted once per call: ``overhead + (allreduce_time(n) - overhead) / 2``
        (ring: ``(r-1)`` steps of ``n/r`` bytes; fitted and hierarchical forms halved alike;
        docs/model.md, "Sharded data parallel"). Zero on one rank.

        Parameters
        ----------
        nbytes
            A positive byte count, or an array of them (then an array of times).
        collective
            Override of the cluster's collective.

        Raises
        ------
        SchedoptError
            For the ``ps`` collective, which has no sharded form.
        """
        kind = collective or self.collective
        if kind == "ps":
            raise SchedoptError("a sharded plan needs an all-gather and a reduce-scatter; the ps"
                                " collective has none (use ring, tree or hierarchical)",
                                "collective", kind)
        n = np.asarray(nbytes, dtype=float)
        total: np.ndarray = np.zeros_like(n)
        stages = self.comm_stages(collective)
        if stages:
            over = self.collective_overhead_s
            total = over + (np.sum([st.times(n) for st in stages], axis=0) - over) / 2.0
        return float(total) if np.ndim(nbytes) == 0 else total


class ClusterFamily(BaseModel):
    """A cluster without a fixed node count; :meth:`at` derives the cluster of each size.

    Attributes
    ----------
    base
        The cluster at any size (its ``nodes`` is replaced).
    fits
        Optional fitted all-reduce costs per node count (as strings of integers in JSON).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Int = Field(SCHEMA_VERSION, description="Format version (1).")
    name: str = Field(min_length=1, description="Family name.")
    source: str = Field("", description="Where the figures come from.")
    base: Cluster = Field(description="The cluster at a reference size.")
    fits: dict[int, AllReduceFit] = Field(default_factory=dict, description="Fits per node count.")

    def at(self, nodes: int) -> Cluster:
        """The cluster of ``nodes`` nodes, with its fitted cost when one is known."""
        if nodes < 1:
            raise SchedoptError("must be a positive integer", "nodes", nodes)
        data = self.base.model_dump()
        data["nodes"] = nodes
        data["name"] = f"{self.name}-{nodes}n"
        fit = self.fits.get(nodes)
        data["allreduce"] = fit.model_dump() if fit is not None else None
        return _resized(data)

    @model_validator(mode="after")
    def _check(self) -> ClusterFamily:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {self.schema_version}")
        return self


def _resized(data: dict) -> Cluster:
    """Validate a cluster derived at another size; name the option that asked for it."""
    try:
        return Cluster.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise SchedoptError(f"cannot derive this size of cluster {data['name']!r}: "
                            f"{loc + ': ' if loc else ''}{msg}", "nodes", data["nodes"]) from None
