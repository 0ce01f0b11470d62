"""Evaluate a plan: earliest starts of the S-SGD DAG whose resource orders the plan fixes.

The DAG of docs/model.md is evaluated iteration by iteration over arrays. Every resource is a
chain of tasks in a fixed order, and a chain whose tasks have release times ``r_i`` and durations
``d_i`` has ends ``e_i = S_i + max_{j<=i}(r_j - S_{j-1})`` (``S`` the prefix sums of ``d``): a
cumulative maximum, so each resource costs a few vector operations per iteration. The iteration
time is the long-run period, found when the normalised state of the system repeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster, CommStage
from schedopt.model.contention import Contention
from schedopt.model.limits import check_finite_result
from schedopt.model.plan import Breakdown, Plan, Schedule
from schedopt.model.sharded import Network, ShardedUnits, comm_member_bytes, peak_bytes, shard_units
from schedopt.model.trace import Trace

__all__ = ["Model", "chain_ends", "recost", "serve_in_sequence", "simulate",
           "simulate_model"]

_NEG = -np.inf
#: Fewest chain tasks run as one vectorised stretch when no communication can overlap them.
_BATCH = 8


def chain_ends(start: float, durations: np.ndarray, releases: np.ndarray) -> np.ndarray:
    """Ends of tasks run back to back on one resource, each no earlier than its release.

    Parameters
    ----------
    start
        Time the resource becomes free.
    durations, releases
        Per task, in resource order.

    Returns
    -------
    numpy.ndarray
        End time of every task.
    """
    if durations.size == 0:
        return durations.astype(float)
    s = np.cumsum(durations)
    s_prev = s - durations
    rel = np.maximum(releases, _NEG)
    rel = rel.copy()
    rel[0] = max(rel[0], start)
    return s + np.maximum.accumulate(rel - s_prev)


def serve_in_sequence(sequence: Sequence[tuple[int, int]], resources: list[tuple[str, ...]],
                      durations: np.ndarray, ready: np.ndarray, free: dict[str, float]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Serve every ``(stage, bucket)`` task in ``sequence`` order on the resources of its stage.

    Each task starts once all of its resources are free and the bucket's previous stage (for
    stage 0, the bucket) is ready; ``free`` (resource -> time, missing: always free) is updated.

    Parameters
    ----------
    sequence
        The tasks in the order the resources serve them (:meth:`Plan.comm_sequence`).
    resources
        Resources held by each stage.
    durations
        ``(buckets, stages)`` task durations.
    ready
        Readiness of every bucket.
    free
        Time each resource becomes free.

    Returns
    -------
    tuple of numpy.ndarray
        Start and end of every task, shape ``(buckets, stages)``.
    """
    dur, rdy = durations.tolist(), ready.tolist()  # plain floats: a scalar loop
    start = [[0.0] * durations.shape[1] for _ in dur]
    end = [[0.0] * durations.shape[1] for _ in dur]
    for s, k in sequence:
        t = rdy[k] if s == 0 else end[k][s - 1]
        held = resources[s]
        for r in held:
            f = free.get(r, _NEG)
            if f > t:
                t = f
        start[k][s] = t
        end[k][s] = e = t + dur[k][s]
        for r in held:
            free[r] = e
    return np.array(start, dtype=float).reshape(durations.shape), np.array(
        end, dtype=float).reshape(durations.shape)


@dataclass
class Model:
    """A trace, a cluster and a plan, turned into the arrays the simulator runs on.

    Build it once with :meth:`build`; :func:`simulate` evaluates it.
    """

    trace: Trace
    cluster: Cluster
    plan: Plan
    stages: tuple[CommStage, ...]
    bucket_bytes: np.ndarray  # (B,)
    bucket_layer: np.ndarray  # (B,) smallest owning layer: readiness and first use
    comm_dur: np.ndarray  # (B, S)
    stage_perm: list[np.ndarray]  # per stage: bucket indices in launch order on that stage
    update_dur: np.ndarray  # (B,) per-bucket share of update_s
    # compute-chain layout of one iteration (per-layer: updates of t-1 interleaved with forwards)
    chain_dur: np.ndarray
    chain_kind: np.ndarray  # 0 fwd, 1 bwd, 2 update (of previous iteration)
    chain_index: np.ndarray  # layer index, or bucket index for updates
    shared_stage_resources: bool
    comm_sequence: np.ndarray  # (n, 2): (stage, bucket) in resource order, when shared
    chain_micro: np.ndarray | None = None  # micro-batch of every chain task (accumulate > 1)
    units: ShardedUnits | None = None  # sharded plans: the units (schedopt.model.sharded)
    host: HostChain | None = None  # the launching thread (None: no host cost; docs/model.md)

    @classmethod
    def build(cls, trace: Trace, cluster: Cluster, plan: Plan) -> Model:
        """Validate ``plan`` against ``trace`` and ``cluster`` and lay out the arrays."""
        units = shard_units(trace, cluster, plan) if plan.sharding is not None else None
        # shard_units has checked a sharded plan already
        members = plan.check_against(trace, cluster) if units is None else plan.members(trace)
        stages = cluster.comm_stages(plan.collective)
        nbytes = members.bucket_bytes()
        if plan.comm_dtype is not None:  # communicated bytes follow comm_dtype
            moved = comm_member_bytes(trace, plan, members.nbytes)
            cbytes = np.bincount(members.bucket, weights=moved, minlength=members.num_buckets)
        else:
            cbytes = nbytes
        bucket_layer = members.ready_layer()
        n_b, n_s = len(nbytes), len(stages)
        comm = np.zeros((n_b, n_s))
        for s, st in enumerate(stages):
            comm[:, s] = st.times(cbytes)
        perms = []
        for s in range(n_s):
            order = plan.stage_orders.get(s)
            perms.append(np.arange(n_b) if order is None else np.asarray(order, dtype=np.int64))
        total = float(nbytes.sum())
        upd = trace.update_s * nbytes / total
        n_l = len(trace.layers)
        if plan.next_forward == "per-layer":
            kinds, idx, dur = [], [], []
            by_layer: dict[int, list[int]] = {}
            for k in range(n_b):
                by_layer.setdefault(int(bucket_layer[k]), []).append(k)
            for lay in range(n_l):
                for k in by_layer.get(lay, []):
                    kinds.append(2)
                    idx.append(k)
                    dur.append(upd[k])
                kinds.append(0)
                idx.append(lay)
                dur.append(trace.forward[lay])
            kinds += [1] * n_l
            idx += list(range(n_l - 1, -1, -1))
            dur += list(trace.backward[::-1])
            chain_kind = np.array(kinds, dtype=np.int8)
            chain_index = np.array(idx, dtype=np.int64)
            chain_dur = np.array(dur, dtype=float)
        else:
            chain_kind = np.r_[np.zeros(n_l, np.int8), np.ones(n_l, np.int8)]
            chain_index = np.r_[np.arange(n_l), np.arange(n_l - 1, -1, -1)]
            chain_dur = np.r_[trace.forward, trace.backward[::-1]]
        chain_kind, chain_index, chain_dur, chain_micro = _accumulate(
            trace, plan.accumulate, chain_kind, chain_index, chain_dur)
        if units is None and cluster.bucket_compute_s > 0.0:
            chain_dur = chain_dur + _bucket_compute(cluster, plan, chain_kind, chain_index,
                                                    chain_micro, bucket_layer, n_l)
        used: list[str] = [r for st in stages for r in st.resources]
        if cluster.comm_concurrency > 1:
            _check_concurrency(cluster, plan, len(stages), units is not None)
        host = None
        if units is None and (trace.has_host or cluster.has_host):
            host = HostChain.build(trace, cluster, plan, chain_kind, chain_index, chain_micro,
                                   bucket_layer, perms[0] if perms else None)
        return cls(
            trace=trace,
            cluster=cluster,
            plan=plan,
            stages=stages,
            bucket_bytes=nbytes,
            bucket_layer=bucket_layer,
            comm_dur=comm,
            stage_perm=perms,
            update_dur=upd,
            chain_dur=chain_dur,
            chain_kind=chain_kind,
            chain_index=chain_index,
            shared_stage_resources=len(used) != len(set(used)),
            comm_sequence=np.asarray(
                plan.comm_sequence(n_s) if len(used) != len(set(used)) else [], dtype=np.int64
            ).reshape(-1, 2),
            chain_micro=chain_micro,
            units=units,
            host=host,
        )

    @property
    def readies(self) -> np.ndarray:
        """Mask of the chain's backward tasks whose ends ready buckets (the last micro-batch)."""
        mask = self.chain_kind == 1
        if self.chain_micro is not None:
            mask &= self.chain_micro == self.plan.accumulate - 1
        return mask


@dataclass
class HostChain:
    """The launching thread of one iteration (docs/model.md, "Host side"): its tasks in program
    order (forward launches, backward launches each followed by its layer's hooks and the
    collective calls they fire, the optimizer step's launches), back to back."""

    dur: np.ndarray  # host task durations, in host order
    keys: list[tuple]  # host task keys without the iteration: (name, *index)
    of_chain: np.ndarray  # per compute-chain task: its host task (-1: an update of t-1)
    of_launch: np.ndarray  # per bucket: its launch task (-1: no collective call)

    @classmethod
    def build(cls, trace: Trace, cluster: Cluster, plan: Plan, kind: np.ndarray,
              index: np.ndarray, micro: np.ndarray | None, bucket_layer: np.ndarray,
              launch_order: np.ndarray | None) -> HostChain:
        """Lay out the host tasks of one iteration of ``plan`` (``kind``, ``index``,
        ``micro``: the compute chain)."""
        n_l, n_b = len(trace.layers), len(bucket_layer)
        hooks = cluster.hook_overhead_s * np.bincount(trace.ready_layer, minlength=n_l)
        fires: dict[int, list[int]] = {}
        if launch_order is not None:  # buckets fire in launch order, each once it is complete
            order = np.asarray(launch_order, dtype=np.int64)
            at = (np.minimum.accumulate(bucket_layer[order]) if plan.overlap
                  else np.zeros(n_b, np.int64))
            for k, lay in zip(order.tolist(), at.tolist(), strict=True):
                fires.setdefault(int(lay), []).append(int(k))
        last = plan.accumulate - 1
        dur: list[float] = []
        keys: list[tuple] = []
        of_chain = np.full(kind.size, -1, dtype=np.int64)
        of_launch = np.full(n_b, -1, dtype=np.int64)
        for i, (kd, lay) in enumerate(zip(kind.tolist(), index.tolist(), strict=True)):
            if kd == 2:
                continue
            mb = last if micro is None else int(micro[i])
            tag = () if mb == last else (mb,)
            of_chain[i] = len(dur)
            if kd == 0:
                dur.append(float(trace.host_forward[lay]))
                keys.append(("host-fwd", lay, *tag))
                continue
            dur.append(float(trace.host_backward[lay]) + (float(hooks[lay]) if mb == last
                                                          else 0.0))
            keys.append(("host-bwd", lay, *tag))
            for k in fires.get(lay, []) if mb == last else ():
                of_launch[k] = len(dur)
                dur.append(cluster.launch_overhead_s)
                keys.append(("launch", k))
        dur.append(trace.host_update_s)
        keys.append(("host-update",))
        return cls(np.array(dur, dtype=float), keys, of_chain, of_launch)

    @property
    def is_launch(self) -> np.ndarray:
        """Mask of the collective calls among the host tasks."""
        return np.array([k[0] == "launch" for k in self.keys], dtype=bool)

    def ends_without_calls(self, launch_s: float) -> np.ndarray:
        """The end of every host task from the start of the iteration when the collective calls
        (``launch_s`` each) take no time: what the thread's work is whatever the plan."""
        return np.cumsum(self.dur) - launch_s * np.cumsum(self.is_launch)


def _bucket_compute(cluster: Cluster, plan: Plan, kind: np.ndarray, index: np.ndarray,
                    micro: np.ndarray | None, bucket_layer: np.ndarray, n_l: int) -> np.ndarray:
    """The buckets' compute-stream time (``bucket_compute_s`` each) added to the chain: to the
    last micro-batch's backward of the layer whose gradients complete them, which then readies
    them (docs/model.md, "Host side")."""
    last = kind == 1
    if micro is not None:
        last &= micro == plan.accumulate - 1
    per_layer = np.bincount(bucket_layer, minlength=n_l).astype(float)
    out = np.zeros(kind.size)
    out[last] = cluster.bucket_compute_s * per_layer[index[last]]  # other indices: buckets
    return out


def _check_concurrency(cluster: Cluster, plan: Plan, n_stages: int, sharded: bool) -> None:
    """Refuse what concurrent collectives are not modelled with: several communication
    stages, sharded plans, the contention slowdowns."""
    why = ("a sharded plan" if sharded else
           f"a collective of {n_stages} stages" if n_stages > 1 else
           "overlap_slowdown or comm_slowdown above 1" if (
               cluster.overlap_slowdown != 1.0 or cluster.comm_slowdown != 1.0) else "")
    if why:
        raise SchedoptError(f"concurrent collectives are modelled for one-stage collectives "
                            f"only, without sharding or contention slowdowns; here: {why}",
                            "cluster.comm_concurrency", cluster.comm_concurrency)


def _accumulate(trace: Trace, k: int, kind: np.ndarray, index: np.ndarray, dur: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The compute chain of ``k`` micro-batches: micro-batch 0's chain (``kind``, ``index``,
    ``dur``), then forward and backward ``k - 1`` times more; and each task's micro-batch
    (None when ``k`` is 1)."""
    if k == 1:
        return kind, index, dur, None
    n_l = len(trace.layers)
    one = 2 * n_l
    micro = np.r_[np.zeros(dur.size, np.int64), np.repeat(np.arange(1, k), one)]
    kind = np.r_[kind, np.tile(np.r_[np.zeros(n_l, np.int8), np.ones(n_l, np.int8)], k - 1)]
    index = np.r_[index, np.tile(np.r_[np.arange(n_l), np.arange(n_l - 1, -1, -1)], k - 1)]
    dur = np.r_[dur, np.resize(np.r_[trace.forward, trace.backward[::-1]], (k - 1) * one)]
    return kind, index, dur, micro


def simulate(
    trace: Trace,
    cluster: Cluster,
    plan: Plan,
    *,
    record: bool = False,
    min_iterations: int = 3,
    max_iterations: int = 256,
) -> Schedule:
    """Simulate ``plan`` and return its :class:`~schedopt.model.plan.Schedule`.

    Parameters
    ----------
    trace, cluster, plan
        The instance and the plan to judge.
    record
        Keep every task's start and end (for checks, Gantt charts and Chrome traces).
    min_iterations, max_iterations
        Bounds on the number of simulated iterations; the simulation stops between them once
        the normalised state repeats.

    Returns
    -------
    Schedule
        Iteration time (long-run period), cold first iteration, breakdown.
    """
    model = Model.build(trace, cluster, plan)
    sim = _simulator(model, record)
    sched = sim.run(min_iterations, max(min_iterations, max_iterations))
    cause = f"trace {trace.name!r} on cluster {cluster.name!r} with plan {plan.policy!r}"
    check_finite_result(sched.iteration_time_s, "iteration_time_s", cause)
    check_finite_result(sched.first_iteration_s, "first_iteration_s", cause)
    return sched


class _Simulator:
    """Iteration-by-iteration evaluation of one :class:`Model`."""

    def __init__(self, m: Model, record: bool) -> None:
        self.m = m
        self.record = record
        self.tasks: dict[tuple, tuple[float, float]] = {}
        self.resources: dict[tuple, tuple[str, ...]] = {}
        self.free: dict[str, float] = {}
        for st in m.stages:
            for r in st.resources:
                self.free[r] = 0.0
        self.free["cpu"] = 0.0
        self.free["pcie"] = 0.0
        #: channels of concurrent collectives, their free times kept in ascending order
        self.channels = [f"channel#{j}" for j in range(m.cluster.comm_concurrency)]
        if len(self.channels) > 1:
            self.free.update(dict.fromkeys(self.channels, 0.0))
        self.compute_free = 0.0
        self.compute_done: dict[int, float] = {}  # end of each iteration's compute (for io)
        self.h2d_end: dict[int, float] = {}
        self.pending_comm = np.full(len(m.bucket_bytes), _NEG)  # comm ends of iteration t-1
        self.gap_comm = 0.0
        self.gap_io = 0.0
        self.gap_host = 0.0
        self.host_end = 0.0  # end of the launching thread's last task
        self.host_prev_update = _NEG  # end of the previous step's optimizer launches
        # this iteration's host releases: per chain task, per bucket, of the update
        self.host_chain_rel: np.ndarray | None = None
        self.host_launch_end = np.full(len(m.bucket_bytes), _NEG)
        self.host_update_end = _NEG

    # --------------------------------------------------------------------------------- host
    def _host(self, t: int) -> None:
        """Run iteration ``t``'s host tasks: they start once the previous step has ended on the
        device (the loop's synchronisation) and the host is free, and run back to back."""
        h = self.m.host
        if h is None:
            return
        start = max(self.host_end, self.compute_done.get(t - 1, 0.0))
        ends = start + np.cumsum(h.dur)
        rel = np.where(h.of_chain >= 0, ends[np.maximum(h.of_chain, 0)], self.host_prev_update)
        self.host_chain_rel = rel
        self.host_launch_end = np.where(h.of_launch >= 0, ends[np.maximum(h.of_launch, 0)], _NEG)
        self.host_prev_update = self.host_update_end = float(ends[-1])
        self.host_end = float(ends[-1])
        if self.record:
            for key, d, e in zip(h.keys, h.dur.tolist(), ends.tolist(), strict=True):
                self._rec((key[0], t, *key[1:]), e - d, e, ("host",))

    # --------------------------------------------------------------------------------- data
    def _data(self, t: int) -> None:
        """Schedule io_t and h2d_t."""
        m, tr = self.m, self.m.trace
        # depth d: batch t may be read once iteration t-1-d has finished its compute
        dep = self.compute_done.get(t - 1 - m.plan.prefetch, 0.0)
        io_s = max(self.free["cpu"], dep)
        io_e = io_s + tr.io_s
        self.free["cpu"] = io_e
        h_s = max(io_e, self.free["pcie"])
        h_e = h_s + tr.h2d_s
        self.free["pcie"] = h_e
        self.h2d_end[t] = h_e
        if self.record:
            self._rec(("io", t), io_s, io_e, ("cpu",))
            self._rec(("h2d", t), h_s, h_e, ("pcie",))

    def _rec(self, key: tuple, start: float, end: float, res: tuple[str, ...]) -> None:
        self.tasks[key] = (float(start), float(end))
        self.resources[key] = res

    # ------------------------------------------------------------------------------ compute
    def _chain(self, t: int, dur: np.ndarray, rel: np.ndarray, kind: np.ndarray,
               index: np.ndarray, micro: np.ndarray | None = None,
               host: np.ndarray | None = None) -> np.ndarray:
        """Run a compute-stream segment and attribute its idle gaps (``micro``: the tasks'
        micro-batches, recorded as a fourth key element for all but the last; ``host``: the
        tasks' host launch ends, whose waits count as host stall first)."""
        ends = chain_ends(self.compute_free, dur, rel if host is None else np.maximum(rel, host))
        starts = ends - dur
        prev = np.r_[self.compute_free, ends[:-1]]
        gaps = starts - prev
        if host is not None:
            h_gap = np.clip(host - prev, 0.0, gaps)
            self.gap_host += float(h_gap.sum())
            gaps = gaps - h_gap
        io_gap = float(gaps[kind == 0].sum())  # only fwd_0 carries a release among forwards
        self.gap_io += io_gap
        self.gap_comm += float(gaps.sum()) - io_gap
        self.compute_free = float(ends[-1])
        if self.record:
            names = ("fwd", "bwd", "update")
            for i in range(len(dur)):
                kd = int(kind[i])
                it = t - 1 if kd == 2 and index[i] >= 0 else t
                if it < 0:
                    continue
                self._rec(self._key(names[kd], it, int(index[i]), micro, i), starts[i],
                          ends[i], ("compute",))
        return ends

    def _key(self, name: str, t: int, index: int, micro: np.ndarray | None, i: int) -> tuple:
        """Task key: ``(name, t, index)``, with the micro-batch appended before the last."""
        if micro is None or micro[i] == self.m.plan.accumulate - 1 or name == "update":
            return (name, t, index)
        return (name, t, index, int(micro[i]))

    # ---------------------------------------------------------------------------- one step
    def step(self, t: int) -> None:
        """Simulate iteration ``t``."""
        m = self.m
        n_l = len(m.trace.layers)
        if t == 0 or not m.plan.prefetch:
            self._data(t)
        if m.plan.prefetch:
            self._data(t + 1)
        self._host(t)
        dur = m.chain_dur.copy()
        rel = np.full(dur.size, _NEG)
        kind, index = m.chain_kind, m.chain_index
        upd = kind == 2
        if t == 0:
            dur[upd] = 0.0
        else:
            rel[upd] = self.pending_comm[index[upd]]
        first_fwd = int(np.flatnonzero(kind == 0)[0])
        rel[first_fwd] = self.h2d_end[t]
        ends = self._chain(t, dur, rel, kind, index, m.chain_micro, self.host_chain_rel)
        bwd_end = np.empty(n_l)
        last = m.readies
        bwd_end[index[last]] = ends[last]
        ready = bwd_end[m.bucket_layer] if m.plan.overlap else np.full(
            len(m.bucket_layer), bwd_end[0]
        )
        if m.host is not None and m.stages:
            ready = np.maximum(ready, self.host_launch_end)
        comm_end = self._comm(t, ready)
        if t == 0:
            self.first_done = max(float(comm_end.max(initial=_NEG)), float(bwd_end[0]))
        if m.plan.next_forward == "per-layer":
            self.pending_comm = comm_end
        else:
            u_rel = float(comm_end.max()) if comm_end.size else _NEG
            # the wait-for-all update is one task (index -1) of this iteration
            self._chain(t, np.array([m.trace.update_s]), np.array([u_rel]), np.array([2]),
                        np.array([-1]), None,
                        None if m.host is None else np.array([self.host_update_end]))
        self.compute_done[t] = self.compute_free

    def _comm(self, t: int, ready: np.ndarray) -> np.ndarray:
        """Schedule every bucket's stages; return the end of each bucket's last stage."""
        m = self.m
        n_b, n_s = m.comm_dur.shape
        if n_s == 0:
            return ready.copy()
        if len(self.channels) > 1:
            return self._comm_concurrent(t, ready)
        if m.shared_stage_resources:
            if len({st.resources for st in m.stages}) == 1:
                return self._comm_one_chain(t, ready)
            return self._comm_general(t, ready)
        end = np.empty((n_b, n_s))
        release = ready
        for s, st in enumerate(m.stages):
            perm = m.stage_perm[s]
            start_free = max(self.free[r] for r in st.resources)
            e = chain_ends(start_free, m.comm_dur[perm, s], release[perm])
            end[perm, s] = e
            for r in st.resources:
                self.free[r] = float(e[-1])
            release = end[:, s]
            if self.record:
                for k in range(n_b):
                    self._rec(("comm", t, k, s), end[k, s] - m.comm_dur[k, s], end[k, s],
                              st.resources)
        return end[:, -1]

    def _comm_one_chain(self, t: int, ready: np.ndarray) -> np.ndarray:
        """Every stage holds the same resources: one chain in :meth:`Plan.comm_sequence` order.

        A later stage of a bucket follows its earlier stage on the same chain, so only the first
        stage waits for anything but the chain itself.
        """
        m = self.m
        n_b, n_s = m.comm_dur.shape
        seq = m.comm_sequence
        stage, bucket = seq[:, 0], seq[:, 1]
        rel = np.where(stage == 0, ready[bucket], _NEG)
        dur = m.comm_dur[bucket, stage]
        res = m.stages[0].resources
        ends = chain_ends(max(self.free[r] for r in res), dur, rel)
        for r in res:
            self.free[r] = float(ends[-1])
        end = np.empty((n_b, n_s))
        end[bucket, stage] = ends
        if self.record:
            for i in range(len(seq)):
                self._rec(("comm", t, int(bucket[i]), int(stage[i])), ends[i] - dur[i], ends[i],
                          res)
        return end[:, -1]

    def _comm_concurrent(self, t: int, ready: np.ndarray) -> np.ndarray:
        """One stage, ``comm_concurrency`` calls in flight: calls start in launch order, each
        once it is ready and a channel is free (the backend's worker threads taking queued calls
        in order: torch 2.13 ``ProcessGroupGloo::enqueue`` and ``runLoop``)."""
        m = self.m
        st, perm, dur = m.stages[0], m.stage_perm[0].tolist(), m.comm_dur[:, 0].tolist()
        free = [self.free[c] for c in self.channels]  # ascending
        end = np.empty(len(dur))
        started = _NEG
        for k in perm:
            j = int(np.argmin(free))
            started = max(float(ready[k]), free[j], started)
            end[k] = free[j] = started + dur[k]
            if self.record:
                self._rec(("comm", t, k, 0), started, end[k],
                          tuple(f"{r}#{j}" for r in st.resources))
        free.sort()
        self.free.update(zip(self.channels, free, strict=True))
        return end

    def _comm_general(self, t: int, ready: np.ndarray) -> np.ndarray:
        """Stages that share a resource: one task list in :meth:`Plan.comm_sequence` order."""
        m = self.m
        seq = [tuple(x) for x in m.comm_sequence.tolist()]
        start, end = serve_in_sequence(seq, [st.resources for st in m.stages], m.comm_dur,
                                       ready, self.free)
        if self.record:
            for s, k in seq:
                self._rec(("comm", t, k, s), start[k, s], end[k, s], m.stages[s].resources)
        return end[:, -1]

    # ---------------------------------------------------------------------------- driver
    def state(self) -> np.ndarray:
        """Everything the future depends on, relative to the end of the current compute."""
        parts = [np.array([v for _, v in sorted(self.free.items())])]
        if self.m.host is not None:
            parts.append(np.array([self.host_end]))
        if self.m.plan.next_forward == "per-layer":
            parts.append(self.pending_comm)
        if self.m.plan.prefetch:
            parts.append(np.array([max(self.h2d_end.values())]))
        return np.concatenate(parts) - self.compute_free

    def run(self, min_iterations: int, max_iterations: int) -> Schedule:
        """Simulate until the normalised state repeats; return the schedule."""
        m = self.m
        ends: list[float] = []
        gaps: list[tuple[float, float, float]] = []
        states: list[np.ndarray] = []
        period = None
        t = 0
        first = 0.0
        cycle = 1
        while t < max_iterations:
            self.step(t)
            ends.append(self.compute_free)
            gaps.append((self.gap_comm, self.gap_io, self.gap_host))
            st = self.state()
            if t == 0:
                first = max(self.first_done, self.compute_free)
            # scale-free: relative to the elapsed time, whatever the unit of the instance
            tol = 1e-9 * abs(self.compute_free)
            for c in range(1, min(8, len(states)) + 1):
                prev = states[-c]
                if (t >= 2 and period is None and st.shape == prev.shape
                        and np.allclose(st, prev, rtol=0.0, atol=tol)):
                    period = (ends[-1] - ends[-1 - c]) / c
                    cycle = c
                    break
            states.append(st)
            t += 1
            if period is not None and t >= min_iterations:
                break
        if period is None:  # no exact repetition: average over the second half
            half = len(ends) // 2
            cycle = len(ends) - 1 - half
            period = (ends[-1] - ends[half]) / cycle
        gi = (gaps[-1][1] - gaps[-1 - cycle][1]) / cycle
        gh = (gaps[-1][2] - gaps[-1 - cycle][2]) / cycle
        tr = m.trace
        f, b, u = self.totals()
        # the measured comm gap equals this up to rounding; taking the difference makes the
        # parts sum exactly to the period
        if abs(gi) < 1e-12 * max(period, 1.0):  # rounding noise of the cumulative sums
            gi = 0.0
        if abs(gh) < 1e-12 * max(period, 1.0):
            gh = 0.0
        gc = period - (f + b + u + gi + gh)
        if abs(gc) < 1e-12 * max(period, 1.0):
            gc = 0.0
        breakdown = Breakdown(f, b, u, gc, gi, gh)
        return Schedule(
            iteration_time_s=float(period),
            first_iteration_s=float(first),
            breakdown=breakdown,
            iterations=t,
            world_size=m.cluster.world_size,
            batch_size=tr.batch_size,
            comm_busy_s=self.comm_busy_s(),
            **self.memory(),
            tasks=self.tasks,
            resources=self.resources,
        )

    def totals(self) -> tuple[float, float, float]:
        """Forward, backward and update time of one step on the compute stream."""
        tr, k = self.m.trace, self.m.plan.accumulate
        return k * float(tr.forward.sum()), k * float(tr.backward.sum()), tr.update_s

    def comm_busy_s(self) -> float:
        """Communication time of one step (sum over its tasks)."""
        return float(self.m.comm_dur.sum())

    def memory(self) -> dict[str, float]:
        """The schedule's memory fields (none for all-reduce plans)."""
        return {}


# ------------------------------------------------------------------------ sharded plans
class _ShardedSimulator(_Simulator):
    """A sharded plan (docs/model.md, "Sharded data parallel"): per micro-batch, each unit's
    forward and backward on the compute stream after its all-gathers; reduce-scatters after the
    last micro-batch's backward; all on one network (:class:`~schedopt.model.sharded.Network`,
    lazily served as the compute stream asks for all-gathers); the step on the shard after the last
    reduce-scatter. Also records the peak memory of every step."""

    def __init__(self, m: Model, record: bool) -> None:
        super().__init__(m, record)
        assert m.units is not None and m.plan.sharding is not None
        self.un, self.sh = m.units, m.plan.sharding
        self.net_res = tuple(sorted({r for st in m.stages for r in st.resources}))
        self.peak = 0.0
        self.busy_s = 0.0
        self.net = Network(self.sh.streams)
        self.mem: list[tuple[float, float, float]] = []
        self.held: dict[int, float] = {}  # grad-op: start of each unit's gathered parameters
        self.grad_from: dict[int, float] = {}  # start of each unit's first backward

    def step(self, t: int) -> None:
        """Simulate step ``t`` (``accumulate`` micro-batches)."""
        m, un = self.m, self.un
        if t == 0 or not m.plan.prefetch:
            self._data(t)
        if m.plan.prefetch:
            self._data(t + 1)
        self.net = net = Network(self.sh.streams,
                                 max((self.free[r] for r in self.net_res), default=0.0))
        self.mem, self.held, self.grad_from = [], {}, {}
        clock = self.compute_free
        phi = max(clock, self.h2d_end[t])
        self.gap_io += phi - clock
        for mb in range(m.plan.accumulate):
            clock = self._backward(t, mb, self._forward(t, mb, phi))
            phi = clock
        net.drain()
        reducing = [g for g in range(len(un.layers)) if un.reduces(g)]
        rs_end = max(net.done[("rs", t, g)][1] for g in reducing)
        for g in reducing:  # gradients live until their reduce-scatter ends
            self.mem.append((self.grad_from[g], net.done[("rs", t, g)][1],
                             float(un.grad_mem[g])))
        if t == 0:
            self.first_done = max(rs_end, clock)
        start = max(clock, rs_end)
        self.gap_comm += start - clock
        self.compute_free = start + m.trace.update_s / m.cluster.world_size
        for r in self.net_res:
            self.free[r] = net.free
        self.busy_s = sum(e - s for s, e in net.done.values())
        self.peak = max(self.peak, peak_bytes(self.mem))
        if self.record:
            self._rec(("update", t, -1), start, self.compute_free, ("compute",))
            for key, (s, e) in net.done.items():
                self._rec(key, s, e, self.net_res)
        self.compute_done[t] = self.compute_free

    def _run_unit(self, t: int, mb: int, clock: float, k: int, ready: float,
                  name: str) -> tuple[float, float]:
        """Run the forward or backward of run ``k`` (:attr:`ShardedUnits.segments`: layers of
        one group) after ``clock`` and ``ready``: (start, end)."""
        start = max(clock, ready)
        self.gap_comm += start - clock
        fwd = name == "fwd"
        end = start + float(self.un.segment_s[k, 0 if fwd else 1])
        if self.record:  # the layers back to back
            times = self.m.trace.forward if fwd else self.m.trace.backward
            lays = self.un.segments[k][1]
            at = start
            for lay in lays if fwd else lays[::-1]:
                key = (name, t, lay) if mb == self.m.plan.accumulate - 1 else (name, t, lay, mb)
                self._rec(key, at, at + float(times[lay]), ("compute",))
                at += float(times[lay])
        return start, end

    def _forward(self, t: int, mb: int, phi: float) -> float:
        """Micro-batch ``mb``'s forward from ``phi``; returns its end. The root group (when the
        plan has one) is all-gathered first and kept (:meth:`_backward` frees it)."""
        un, net, p = self.un, self.net, self.sh.forward_prefetch
        n_u, full, root = un.num_units, self.sh.mode == "full", un.root
        gather = full or mb == 0
        if gather and root is not None:  # FSDP2's root pre-forward, before any unit's
            net.issue(("ag", t, root, mb, "fwd"), phi, float(un.ag_s[root]), False)
        for u in range(min(max(p, 1), n_u) if gather else 0):
            net.issue(("ag", t, u, mb, "fwd"), phi, float(un.ag_s[u]), False)
        clock = phi
        for k, (u, _) in enumerate(un.segments):
            key = ("ag", t, u, mb, "fwd")
            start, clock = self._run_unit(t, mb, clock, k,
                                          net.end_of(key) if gather else _NEG, "fwd")
            if u == root:
                if gather:
                    self.held[u] = net.done[key][0]
                continue
            if gather and p >= 1 and u + p < n_u:
                net.issue(("ag", t, u + p, mb, "fwd"), start, float(un.ag_s[u + p]), False)
            if gather and p == 0 and u + 1 < n_u:
                net.issue(("ag", t, u + 1, mb, "fwd"), clock, float(un.ag_s[u + 1]), False)
            if full:
                self.mem.append((net.done[key][0], clock, float(un.param_bytes[u])))
            elif gather:
                self.held[u] = net.done[key][0]
        return clock

    def _backward(self, t: int, mb: int, clock: float) -> float:
        """Micro-batch ``mb``'s backward from ``clock``; returns its end. The root group is not
        gathered again; it is freed at the end and, on the last micro-batch, reduce-scattered
        after every unit (FSDP2's root post-backward final callback)."""
        un, net, q = self.un, self.net, self.sh.backward_prefetch
        n_u, full, root = un.num_units, self.sh.mode == "full", un.root
        last = mb == self.m.plan.accumulate - 1
        for u in range(n_u - 1, max(n_u - 1 - max(q, 1), -1), -1) if full else ():
            net.issue(("ag", t, u, mb, "bwd"), clock, float(un.ag_s[u]), False)
        for k in range(len(un.segments) - 1, -1, -1):
            u = un.segments[k][0]
            if u == root:
                start, clock = self._run_unit(t, mb, clock, k, _NEG, "bwd")
                self.grad_from.setdefault(u, start)
                continue
            key = ("ag", t, u, mb, "bwd")
            start, clock = self._run_unit(t, mb, clock, k,
                                          net.end_of(key) if full else _NEG, "bwd")
            self.grad_from.setdefault(u, start)
            if full and q >= 1 and u - q >= 0:
                net.issue(("ag", t, u - q, mb, "bwd"), start, float(un.ag_s[u - q]), False)
            if last and un.reduces(u):
                net.issue(("rs", t, u), clock, float(un.rs_s[u]), True)
            if full and q == 0 and u >= 1:
                net.issue(("ag", t, u - 1, mb, "bwd"), clock, float(un.ag_s[u - 1]), False)
            if full:
                self.mem.append((net.done[key][0], clock, float(un.param_bytes[u])))
            elif last:
                self.mem.append((self.held[u], clock, float(un.param_bytes[u])))
        if root is not None and (full or last):
            self.mem.append((self.held[root], clock, float(un.param_bytes[root])))
        if root is not None and last and un.reduces(root):
            net.issue(("rs", t, root), clock, float(un.rs_s[root]), True)
        return clock

    def totals(self) -> tuple[float, float, float]:
        """Forward, backward (``accumulate`` times) and the step on the shard."""
        f, b, _ = super().totals()
        return f, b, self.m.trace.update_s / self.m.cluster.world_size

    def comm_busy_s(self) -> float:
        """Network time of the last step (all-gathers and reduce-scatters)."""
        return self.busy_s

    def memory(self) -> dict[str, float]:
        """Peak of unsharded parameters and unreduced gradients; the parameter shard."""
        return {"peak_memory_bytes": self.peak,
                "shard_bytes": float(self.un.param_bytes.sum()) / self.m.cluster.world_size}


# ------------------------------------------------------------------------ overlap slowdown
class _ContentionSimulator(_Simulator):
    """Evaluation with contention: compute runs at speed ``1/s`` while any communication task
    runs, and communication at speed ``1/s_c`` while compute runs (docs/model.md, "Overlap
    slowdown").

    The compute stream is run task by task through a :class:`~schedopt.model.contention.Contention`
    that holds every communication task: each compute task advances the common clock, and every
    start and end of communication in between changes the rates. Communication tasks are added
    at the start of their iteration in each resource's order (the stage order of the plan, or
    :meth:`Plan.comm_sequence` where stages share resources) and released when their bucket's
    backward ends.
    """

    def __init__(self, m: Model, record: bool) -> None:
        super().__init__(m, record)
        n_b, n_s = m.comm_dur.shape
        by_layer: dict[int, list[int]] = {}
        for k in range(n_b):
            by_layer.setdefault(int(m.bucket_layer[k]), []).append(k)
        self.by_layer = by_layer
        if m.shared_stage_resources:
            self.order = [(int(s), int(k)) for s, k in m.comm_sequence.tolist()]
        else:
            self.order = [(s, int(k)) for s in range(n_s) for k in m.stage_perm[s]]
        self.kind, self.index = m.chain_kind.tolist(), m.chain_index.tolist()
        self.dur, self.comm = m.chain_dur.tolist(), m.comm_dur.tolist()
        self.stage_res = [st.resources for st in m.stages]
        self.net = Contention(m.cluster.overlap_slowdown, m.cluster.comm_slowdown,
                              self._on_end if record else None)
        self.ready: dict[tuple[int, int], float] = {}  # (iteration, bucket): backward end
        self.first_fwd = self.kind.index(0)
        self.releases = [bool(r) and m.plan.overlap and x in by_layer
                         for r, x in zip(m.readies.tolist(), self.index, strict=True)]
        nxt, self.next_release = len(self.kind) - 1, [0] * len(self.kind)
        for i in range(len(self.kind) - 1, -1, -1):
            nxt = i if self.releases[i] else nxt
            self.next_release[i] = nxt
        # a batch copy on a link that communication also uses is served in that link's order
        self.h2d_shared = any("pcie" in res for res in self.stage_res)

    def _on_end(self, key: object, start: float, end: float) -> None:
        res = ("pcie",) if key[0] == "h2d" else self.stage_res[key[3]]  # type: ignore[index]
        self._rec(key, start, end, res)  # type: ignore[arg-type]

    def _data(self, t: int) -> None:
        """io_t and h2d_t; h2d_t joins the communication tasks when they share PCIe."""
        if not self.h2d_shared:
            super()._data(t)
            return
        m, tr = self.m, self.m.trace
        dep = self.compute_done.get(t - 1 - m.plan.prefetch, 0.0)
        io_s = max(self.free["cpu"], dep)
        self.free["cpu"] = io_e = io_s + tr.io_s
        if self.record:
            self._rec(("io", t), io_s, io_e, ("cpu",))
        self.net.add(("h2d", t), tr.h2d_s, ("pcie",), at=io_e, fixed=True)

    def _batch(self, t: int) -> float:
        """Idle the compute stream until batch ``t`` is on the device."""
        if not self.h2d_shared:
            return self.net.flow(until=self.h2d_end[t])
        end = self.net.end_of(("h2d", t))
        start = self.net.flow(wait=("h2d", t)) if end is None else end
        self.h2d_end[t] = start
        return self.net.flow(until=start)

    def _comm_end(self, t: int, k: int) -> tuple[str, int, int, int] | float:
        """The end of bucket ``k``'s communication in iteration ``t``, or the key of its last
        task while it runs."""
        n_s = len(self.stage_res)
        if n_s == 0:
            return self.ready[(t, k)]
        end = self.net.end_of(("comm", t, k, n_s - 1))
        return ("comm", t, k, n_s - 1) if end is None else end

    def _wait(self, t: int, k: int) -> float:
        """Idle the compute stream until bucket ``k`` of iteration ``t`` is communicated."""
        end = self._comm_end(t, k)
        if isinstance(end, tuple):
            return self.net.flow(wait=end)
        return end

    def _add_comm(self, t: int) -> None:
        """Queue iteration ``t``'s communication tasks behind what is still queued."""
        self.net.forget(lambda key: key[1] >= t - 1)  # type: ignore[index]
        self.ready = {key: v for key, v in self.ready.items() if key[0] >= t - 1}
        for s, k in self.order:
            self.net.add(("comm", t, k, s), self.comm[k][s], self.stage_res[s],
                         None if s == 0 else ("comm", t, k, s - 1))

    def _release(self, t: int, buckets: list[int]) -> None:
        for k in buckets:
            self.ready[(t, k)] = self.net.now
            if self.stage_res:
                launch = float(self.host_launch_end[k])
                if launch > self.net.now:  # the call is still being launched on the host
                    self.net.release_at(("comm", t, k, 0), launch)
                else:
                    self.net.release(("comm", t, k, 0))

    def step(self, t: int) -> None:
        """Simulate iteration ``t`` with the compute stream and communication interleaved."""
        m, net = self.m, self.net
        if t == 0 or not m.plan.prefetch:
            self._data(t)
        if m.plan.prefetch:
            self._data(t + 1)
        self._host(t)
        self._add_comm(t)
        i, n = 0, len(self.kind)
        while i < n:
            j = self.next_release[i]
            if not net.tasks and j - i >= _BATCH:
                self._run_alone(t, i, j)  # nothing to overlap: vectorised up to a release
            else:
                j = i
                self._run_one(t, i)
            if self.releases[j]:
                self._release(t, self.by_layer[self.index[j]])
            i = j + 1
        if not m.plan.overlap:
            self._release(t, list(range(len(m.bucket_layer))))
        self._finish_step(t)

    def _run_one(self, t: int, i: int) -> None:
        """Chain task ``i`` through the contention engine."""
        net, kd, k = self.net, self.kind[i], self.index[i]
        free_c = net.now
        if self.host_chain_rel is not None and self.host_chain_rel[i] > free_c:
            waited = net.flow(until=float(self.host_chain_rel[i]))  # waiting for the launch
            self.gap_host += waited - free_c
            free_c = waited
        work = 0.0 if kd == 2 and t == 0 else self.dur[i]
        if kd == 2 and t > 0:
            start = net.flow(until=max(free_c, self._wait(t - 1, k)))
            self.gap_comm += start - free_c
        else:
            start = self._batch(t) if i == self.first_fwd else free_c
            self.gap_io += start - free_c
        stop = net.flow(work) if work > 0.0 else start
        self.gap_comm += (stop - start) - work  # the slowdown counts as exposed communication
        if self.record and (kd != 2 or t > 0):
            it = t - 1 if kd == 2 and k >= 0 else t
            self._rec(self._key(("fwd", "bwd", "update")[kd], it, k, self.m.chain_micro, i),
                      start, stop, ("compute",))

    def _run_alone(self, t: int, i: int, j: int) -> None:
        """Chain tasks ``i..j`` while no communication task is left: the vectorised chain."""
        m, net = self.m, self.net
        seg = slice(i, j + 1)
        kind, index, dur = m.chain_kind[seg], m.chain_index[seg], m.chain_dur[seg].copy()
        rel = np.full(dur.size, _NEG)
        upd = np.flatnonzero(kind == 2)
        if t == 0:
            dur[upd] = 0.0
        else:
            rel[upd] = [self._wait(t - 1, int(k)) for k in index[upd]]
        if i <= self.first_fwd <= j:
            rel[self.first_fwd - i] = self._batch(t) if self.h2d_shared else self.h2d_end[t]
        self.compute_free = net.now
        self._chain(t, dur, rel, kind, index, None if m.chain_micro is None else
                    m.chain_micro[seg],
                    None if self.host_chain_rel is None else self.host_chain_rel[seg])
        net.now = self.compute_free

    def _finish_step(self, t: int) -> None:
        """The cold first iteration's end, the wait-for-all update, the iteration's end."""
        m, n_b = self.m, len(self.m.bucket_layer)
        if t == 0 or self.record:
            # look ahead with compute idle: the cold first iteration's end, and provisional
            # records of this iteration's communication (the next step overwrites them)
            end = self.net.copy(record=self.record).drain()
            if t == 0:
                self.first_done = end
        if m.plan.next_forward != "per-layer":
            free_c = self.net.now
            if m.host is not None and self.host_update_end > free_c:  # the step's launches
                waited = self.net.flow(until=self.host_update_end)
                self.gap_host += waited - free_c
                free_c = waited
            start = max([free_c, *(self._wait(t, k) for k in range(n_b))])
            start = self.net.flow(until=start)
            stop = self.net.flow(m.trace.update_s) if m.trace.update_s > 0 else start
            self.gap_comm += (stop - free_c) - m.trace.update_s
            if self.record:
                self._rec(("update", t, -1), start, stop, ("compute",))
        self.compute_free = self.net.now
        self.compute_done[t] = self.compute_free

    def state(self) -> np.ndarray:
        """The data stream relative to the end of compute, and the communication work left."""
        own = [self.free["cpu"]] + ([] if self.h2d_shared else [self.free["pcie"]])
        if self.m.host is not None:
            own.append(self.host_end)
        parts = [np.array(own) - self.compute_free]  # a shared PCIe is in the engine's tasks
        if self.m.plan.prefetch and self.h2d_end:
            parts.append(np.maximum(np.array([max(self.h2d_end.values())]) - self.compute_free,
                                    0.0))
        parts.append(np.array(self.net.remaining(), dtype=float))
        return np.concatenate(parts)


# ------------------------------------------------------------------------ repeated evaluation
def recost(model: Model, cluster: Cluster) -> Model:
    """``model`` (its trace and plan) on another parameterisation of its cluster.

    Only the communication costs are recomputed when ``cluster`` has the same communication
    structure (stages and resources) and the plan moves its gradients in their own dtype;
    otherwise the model is rebuilt. Used by calibration,
    which evaluates the same rows under many parameter values.
    """
    stages = cluster.comm_stages(model.plan.collective)
    if model.units is not None or model.plan.comm_dtype is not None or [
            st.resources for st in stages] != [st.resources for st in model.stages] or (
            cluster.bucket_compute_s != model.cluster.bucket_compute_s):
        return Model.build(model.trace, cluster, model.plan)
    comm = np.zeros_like(model.comm_dur)
    for s, st in enumerate(stages):
        comm[:, s] = st.times(model.bucket_bytes)
    host = model.host
    if (cluster.launch_overhead_s, cluster.hook_overhead_s) != (
            model.cluster.launch_overhead_s, model.cluster.hook_overhead_s):
        host = None
        if model.trace.has_host or cluster.has_host:
            host = HostChain.build(model.trace, cluster, model.plan, model.chain_kind,
                                   model.chain_index, model.chain_micro, model.bucket_layer,
                                   model.stage_perm[0] if model.stage_perm else None)
    return replace(model, cluster=cluster, stages=stages, comm_dur=comm, host=host)


def simulate_model(model: Model, *, record: bool = False, min_iterations: int = 3,
                   max_iterations: int = 256) -> Schedule:
    """:func:`simulate` of an already built :class:`Model`."""
    return _simulator(model, record).run(min_iterations, max(min_iterations, max_iterations))


def _simulator(model: Model, record: bool) -> _Simulator:
    """The simulator of ``model``: sharded, with contention, or the plain one."""
    if model.units is not None:
        return _ShardedSimulator(model, record)
    if model.cluster.overlap_slowdown != 1.0 or model.cluster.comm_slowdown != 1.0:
        return _ContentionSimulator(model, record)
    return _Simulator(model, record)
