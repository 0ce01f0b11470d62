"""The exact programme of the wait-for-all class with a host side.

With host costs (docs/model.md, "Host side") a collective call occupies the launching thread,
so where the host paces the backward every call delays the later backward launches: the
period is no longer a function of the communication alone, and the programmes of
:mod:`.dp` optimise the model without a host. For the wait-for-all class on one communication
stage (one task per bucket, one at a time, on a cost line) this programme is exact with the
host side, and with the buckets' compute-stream time (``bucket_compute_s``, ``b``: each
bucket's kernel after the backward that completes it, which delays every later backward the
same way a call delays the later launches).

**Canonical plans.** Layer ``j`` of the readying backward (the last micro-batch's, in chain
order) has its host task end at ``h_j + c_j * launch``, ``h_j`` the host time up to it without
calls and ``c_j`` the calls launched before it. A bucket is launched right after the host task
of the layer ``q`` that completes it and every earlier bucket of the launch order (the prefix
maximum of their readiness positions), so in any plan the buckets launched at one ``q`` form a
run of the launch order whose first bucket is ready only at ``q``: joining the run into one
bucket starts it no later, ends it no later (one start-up and one launch instead of several)
and moves every later host task earlier (and, with ``b``, every later backward). Filling the
buckets with every unit ready by their
``q`` (the exchange argument of :mod:`.dp`: a unit moved into an earlier bucket released no
later than the unit) keeps every ``q``, and so the host chain, and ends the link no later. So
an optimal plan closes at most one bucket per layer, after its last unit, in readiness order:
a plan is the set of layers that close a bucket.

**The recurrence.** Between two closes at ``p < i`` the count ``c`` is fixed, and the device's
end of layer ``i`` is ``D_i = max(D_p + B(p+1..i), c * launch + max_k (h_k + B(k..i))) + b``;
the bucket closed at ``i`` is released at ``max(D_i, h_i + (c + 1) * launch)`` and ends at
``F' = max(F, release) + time(bytes of p+1..i)``. A state after a close is ``(c, D, F)``: all
three only delay what follows, so a state no better in all three than another at the same
layer is dropped (a Pareto front per layer). The period is
``max(D_end, F, h_update + c * launch) + update_s``. A state is retired once a plain lower
bound of its extension (which does not fall as its next close moves later) exceeds the best
period known: a known plan's, then that of closing the rest in one bucket from any new state.

**Exactness.** Iteration ``t`` starts when the update of ``t - 1`` ends: the host then starts
(the loop's synchronisation; its last task precedes that update), the compute stream and the
link are free, and with prefetch 0 the batch arrives ``io + h2d`` later. So the programme's
value is the simulator's period (``exact``). With prefetch the batch's arrival is left out
(``exact`` False) and the value is a lower bound of every plan's period.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from schedopt.model.cluster import CommStage
from schedopt.model.plan import Plan
from schedopt.optimize.host_side import host_chain, model_without_buckets
from schedopt.optimize.instance import Instance, Segments

__all__ = ["CANDIDATE_S", "MAX_STATES", "ROUNDING", "HostProgramme", "HostSolution",
           "host_programme", "pareto", "solve_host_programme"]

#: Most states the programme keeps; beyond it, it gives up (no plan, no bound).
MAX_STATES = 400_000

#: Deterministic charge of one candidate state (seconds of work).
CANDIDATE_S = 2e-7

#: Relative difference of the programme's value and the simulator's period of its plan that is
#: rounding (floating-point sums in another order): the pruning's slack, and the agreement
#: that makes the value the plan's period.
ROUNDING = 1e-9


@dataclass(frozen=True)
class HostProgramme:
    """The data of the programme, in seconds and bytes (module docstring).

    Attributes
    ----------
    start_s
        End of the compute before the readying backward (from the start of the iteration).
    backward_s, host_s, nbytes
        Per layer of the readying backward, in chain order: its device time, the end of its
        host task without collective calls, and the gradient bytes it readies.
    last_unit
        Per layer: the last unit it readies (-1: none).
    launch_s
        One collective call's host time.
    host_update_s
        End of the optimizer step's launches without collective calls.
    update_s
        The update's device time.
    stage
        The one communication stage.
    bucket_s
        Each bucket's compute-stream time (the cluster's ``bucket_compute_s``).
    exact
        Whether the value is the simulator's period (prefetch 0), or a lower bound of it.
    """

    start_s: float
    backward_s: np.ndarray
    host_s: np.ndarray
    nbytes: np.ndarray
    last_unit: np.ndarray
    launch_s: float
    host_update_s: float
    update_s: float
    stage: CommStage
    exact: bool
    bucket_s: float = 0.0


@dataclass(frozen=True)
class HostSolution:
    """The programme's optimum: the bucketing (units, in launch order) and its value."""

    segs: Segments
    value_s: float
    states: int


def host_programme(inst: Instance, plan: Plan) -> HostProgramme | None:
    """The programme's data for the class of ``plan`` on ``inst``, or None outside it.

    Parameters
    ----------
    inst
        The fine instance (its units give the bucketings).
    plan
        Any plan of the class: wait-for-all with overlap, not sharded, no ``comm_dtype``, on a
        cluster with host costs or a compute-stream time per bucket, one communication stage
        on a cost line, one call at a time and no contention slowdown.
    """
    from schedopt.simulate.simulator import chain_ends

    trace, cluster = inst.trace, inst.cluster
    if (plan.next_forward != "wait-for-all" or not plan.overlap or plan.sharding is not None
            or plan.comm_dtype is not None or cluster.comm_concurrency != 1
            or cluster.overlap_slowdown != 1.0 or cluster.comm_slowdown != 1.0):
        return None
    stages = cluster.comm_stages(plan.collective)
    if len(stages) != 1 or stages[0].segments:
        return None
    # the chain without the buckets' compute time: that is the programme's own (``b``)
    if trace.has_host or cluster.has_host:
        chain = host_chain(trace, cluster, plan)
        if chain is None:
            return None
        m, pre = chain
        assert m.host is not None
        of_chain = m.host.of_chain
        rel = np.where(of_chain >= 0, pre[np.maximum(of_chain, 0)], -np.inf)
        host_update = float(pre[-1])
    elif cluster.bucket_compute_s > 0.0:  # no host: a thread that never waits
        m = model_without_buckets(trace, cluster, plan)
        rel, host_update = np.full(m.chain_dur.size, -np.inf), -np.inf
    else:
        return None
    readies = np.flatnonzero(m.readies)
    first = int(readies[0])
    if inst.prefetch == 0:
        fwd0 = int(np.flatnonzero(m.chain_kind == 0)[0])
        rel[fwd0] = max(rel[fwd0], trace.io_s + trace.h2d_s)
    before = chain_ends(0.0, m.chain_dur[:first], rel[:first])
    layers = m.chain_index[readies]
    n_l = len(trace.layers)
    per_layer = np.bincount(inst.layer, weights=inst.nbytes, minlength=n_l)
    last_unit = np.full(n_l, -1, dtype=np.int64)
    np.maximum.at(last_unit, inst.layer, np.arange(inst.n))
    return HostProgramme(
        start_s=float(before[-1]) if before.size else 0.0,
        backward_s=m.chain_dur[readies].astype(float), host_s=rel[readies],
        nbytes=np.rint(per_layer[layers]).astype(np.int64), last_unit=last_unit[layers],
        launch_s=float(cluster.launch_overhead_s), host_update_s=host_update,
        update_s=float(trace.update_s), stage=stages[0], exact=inst.prefetch == 0,
        bucket_s=float(cluster.bucket_compute_s))


@dataclass
class _States:
    """The states after a close, in creation order."""

    pos: np.ndarray
    count: np.ndarray
    dev: np.ndarray
    link: np.ndarray
    parent: np.ndarray

    def add(self, pos: int, count: np.ndarray, dev: np.ndarray, link: np.ndarray,
            parent: np.ndarray) -> None:
        self.pos = np.r_[self.pos, np.full(count.size, pos, dtype=np.int64)]
        self.count = np.r_[self.count, count]
        self.dev = np.r_[self.dev, dev]
        self.link = np.r_[self.link, link]
        self.parent = np.r_[self.parent, parent]


def pareto(count: np.ndarray, dev: np.ndarray, link: np.ndarray) -> np.ndarray:
    """Indices of the states no other state matches or beats in all three coordinates (of equal
    ones, the first), in ascending ``(count, dev, link)`` order."""
    order = np.lexsort((np.arange(count.size), link, dev, count))
    keep: list[int] = []
    stair_d = np.empty(0)
    stair_f = np.empty(0)  # the front of the lower counts: dev ascending, link descending
    for c in np.unique(count).tolist():
        idx = order[count[order] == c]
        d, f = dev[idx], link[idx]
        # within the level: a link below every earlier (smaller or equal dev) one
        prior = np.r_[np.inf, np.minimum.accumulate(f)[:-1]]
        own = f < prior
        if stair_d.size:
            at = np.searchsorted(stair_d, d, side="right") - 1
            best = np.where(at >= 0, stair_f[np.maximum(at, 0)], np.inf)
            own &= f < best
        keep += idx[own].tolist()
        all_d = np.r_[stair_d, d[own]]
        all_f = np.r_[stair_f, f[own]]
        srt = np.lexsort((all_f, all_d))
        all_d, all_f = all_d[srt], np.minimum.accumulate(all_f[srt])
        fresh = np.r_[True, all_f[1:] < all_f[:-1]]
        stair_d, stair_f = all_d[fresh], all_f[fresh]
    return np.asarray(keep, dtype=np.int64)


class _Sweep:
    """The recurrence's terms over the readying backward (module docstring)."""

    def __init__(self, prog: HostProgramme) -> None:
        self.prog = prog
        self.sb = np.r_[0.0, np.cumsum(prog.backward_s)]
        self.cb = np.r_[0, np.cumsum(prog.nbytes)]
        self.g = prog.host_s - self.sb[:-1]  # h_k - B(0..k-1): the host's term of a device end

    def close(self, p: np.ndarray, c: np.ndarray, dev: np.ndarray, link: np.ndarray, i: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """The device end and link end after closing a bucket at ``i`` from states closed
        at ``p`` with ``c`` calls, the device at ``dev`` and the link at ``link``."""
        prog, sb, cb = self.prog, self.sb, self.cb
        suf = np.maximum.accumulate(self.g[i::-1])[::-1]  # max of g over k..i, k = 0..i
        end = np.maximum(dev + sb[i + 1] - sb[p + 1],
                         c * prog.launch_s + suf[p + 1] + sb[i + 1]) + prog.bucket_s
        release = np.maximum(end, prog.host_s[i] + (c + 1) * prog.launch_s)
        nbytes = (cb[i + 1] - cb[p + 1]).astype(float)
        return end, np.maximum(link, release) + prog.stage.times(nbytes)

    def low(self, i: int, c: np.ndarray, dev: np.ndarray, link: np.ndarray) -> np.ndarray:
        """A lower bound of the period, less the update, of every completion of states just
        closed at ``i``; for one earlier state it does not fall as its next close ``i`` moves
        later (the rest's start-ups and the last call are left out for that)."""
        prog, rest = self.prog, float(self.cb[-1] - self.cb[i + 1])
        return np.maximum.reduce([link + prog.stage.beta_s_per_byte * rest,
                                  dev + self.sb[-1] - self.sb[i + 1],
                                  prog.host_update_s + c * prog.launch_s])

    def period(self, last: int, c: np.ndarray, dev: np.ndarray, link: np.ndarray) -> np.ndarray:
        """The period of states closed at the last layer with gradients ``last``."""
        prog, sb = self.prog, self.sb
        if last + 1 < sb.size - 1:  # layers after the last gradient: launched after every call
            dev = np.maximum(dev + sb[-1] - sb[last + 1],
                             c * prog.launch_s + float(self.g[last + 1:].max()) + sb[-1])
        host = prog.host_update_s + c * prog.launch_s
        return np.maximum.reduce([dev, link, host]) + prog.update_s


def solve_host_programme(prog: HostProgramme, hi_s: float, *, max_states: int = MAX_STATES,
                         stop: Callable[[], bool] | None = None,
                         stats: dict[str, int] | None = None) -> HostSolution | None:
    """The bucketing of least value (module docstring) among those of value at most ``hi_s``.

    The layers are swept in readiness order; every live state is extended to a close at each
    layer with gradients. A state is retired once its extension's lower bound exceeds the
    best value known (``hi_s``, then the value of closing the rest in one bucket from any new
    state), as no later close of it can do better.

    Parameters
    ----------
    prog
        The programme's data (:func:`host_programme`).
    hi_s
        The period of a plan of the class (every plan's value is at most its period, so the
        optimum is at most ``hi_s``).
    max_states
        Most states kept; None is returned beyond it.
    stop
        Called between layers; True gives up (the time limit).
    stats
        Receives ``candidates``: the extensions evaluated.

    Returns
    -------
    HostSolution or None
        None when given up, or when no bucketing's value is at most ``hi_s``.
    """
    out = stats if stats is not None else {}
    out["candidates"] = 0
    positions = np.flatnonzero(prog.nbytes > 0).tolist()
    if not positions:
        return None
    sweep, last = _Sweep(prog), positions[-1]
    best = hi_s
    states = _States(np.array([-1]), np.array([0]), np.array([prog.start_s]),
                     np.array([-np.inf]), np.array([-1]))
    live = np.array([0])
    for i in positions:
        if stop is not None and stop():
            return None
        limit = best * (1 + ROUNDING) - prog.update_s
        c = states.count[live]
        dev, link = sweep.close(states.pos[live], c, states.dev[live], states.link[live], i)
        out["candidates"] += int(live.size)
        ok = sweep.low(i, c + 1, dev, link) <= limit
        live, c, dev, link = live[ok], c[ok], dev[ok], link[ok]
        front = pareto(c + 1, dev, link)
        first = states.pos.size
        states.add(i, c[front] + 1, dev[front], link[front], live[front])
        live = np.r_[live, np.arange(first, states.pos.size)]
        if states.pos.size > max_states:
            return None
        if i < last and front.size:  # the rest in one bucket: a plan, so a better limit
            fd, fl = sweep.close(np.full(front.size, i), c[front] + 1, dev[front], link[front],
                                 last)
            best = min(best, float(sweep.period(last, c[front] + 2, fd, fl).min()))
    return _best(sweep, states, last, hi_s)


def _best(sweep: _Sweep, states: _States, last: int, hi_s: float) -> HostSolution | None:
    """The final state of least period, and its bucketing."""
    at = np.flatnonzero(states.pos == last)
    if at.size == 0:
        return None
    value = sweep.period(last, states.count[at], states.dev[at], states.link[at])
    k = int(np.argmin(value))
    if value[k] > hi_s * (1 + ROUNDING):
        return None
    closes: list[int] = []
    s = int(at[k])
    while s > 0:
        closes.append(int(states.pos[s]))
        s = int(states.parent[s])
    ends = [int(sweep.prog.last_unit[j]) for j in reversed(closes)]
    segs = list(zip([0, *(e + 1 for e in ends[:-1])], ends, strict=True))
    return HostSolution(segs=segs, value_s=float(value[k]), states=int(states.pos.size))
