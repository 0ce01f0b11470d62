"""What the optimizer's model leaves out of a cluster, and how its bound stays valid anyway.

The optimizer's model costs every communication stage with one line ``alpha + beta * n`` and
runs compute at full speed. Two cluster effects go beyond it (docs/model.md):

* a measured **cost curve** (``allreduce.segments``): the true cost ``c(n)`` of a stage may lie
  below its line at some sizes;
* the **overlap slowdown** ``s > 1``: compute that overlaps communication runs slower;
* the **communication slowdown** ``s_c > 1``: communication that overlaps compute runs slower;
* the **host side** (docs/model.md, "Host side"): launch, hook and host times of the launching
  thread (``launch_overhead_s``, ``hook_overhead_s``, the trace's ``host_*_s``).

On such a cluster the optimizer still searches its linear, full-speed model; every plan it
reports is re-simulated (the simulator models both effects exactly), and its bound is made valid
by a relaxation factor ``r``: with ``c(n) >= r * (alpha + beta * n)`` for every stage and every
size ``n >= 1`` and ``r <= 1``, each plan's true period is at least ``r`` times its model period
(the period is a maximum of sums of durations, non-decreasing in each duration, and compute
and communication durations are only lengthened by the slowdowns), so ``r`` times the model's
lower bound bounds the true optimum.

The host side only adds time: its tasks and edges extend the graph of the model without a host
(which is the graph with every host cost at 0), and the longest paths, hence the period, are
non-decreasing in every duration. The model without a host therefore bounds every plan's period
with host costs (factor 1), and a plan whose simulated period meets that bound is proven optimal.
The model's search sees the collective calls only through the link's start-up cost, so with a
host the result also weighs :func:`launch_candidates`: the programme's plans with each call's
launch cost counted as part of the bucket's start-up, judged by the simulator like every plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schedopt.model.cluster import Cluster, CommStage
from schedopt.model.trace import Trace

if TYPE_CHECKING:
    from schedopt.model.plan import Plan
    from schedopt.optimize.instance import Instance, Segments

__all__ = ["LAUNCH_SCALES", "MAX_COUNT_CANDIDATES", "MAX_DESCENT_EVALS",
           "Relaxation", "curve_ratio", "host_free_period", "launch_candidates",
           "relaxation", "simulated_descent", "without_host"]

#: Multiples of the launch cost tried as extra start-up cost per bucket (:func:`launch_candidates`):
#: a call delays its own start by one launch when the host runs ahead, and every later backward
#: launch too when the host is the bottleneck.
LAUNCH_SCALES = (0.5, 1.0, 2.0, 4.0)

#: Largest bucket count whose best bucketing :func:`launch_candidates` offers.
MAX_COUNT_CANDIDATES = 48

#: Most plans :func:`simulated_descent` simulates.
MAX_DESCENT_EVALS = 400


@dataclass(frozen=True)
class Relaxation:
    """How the model relaxes a cluster.

    Attributes
    ----------
    factor
        ``r`` in (0, 1]: the model's bound times ``r`` bounds the true optimum.
    effects
        The effects the model leaves out, in words (for the result's notes).
    host
        Whether the host side is among them (its plans are then also weighed against
        :func:`launch_candidates`).
    """

    factor: float
    effects: tuple[str, ...]
    host: bool = False

    @property
    def only_host(self) -> bool:
        """Whether the host side is all the model leaves out (then a plan's period without a
        host is the model's own, and the model's proven optimum without a host bounds every
        plan with one: :func:`host_free_period`)."""
        return self.host and len(self.effects) == 1

    @property
    def note(self) -> str:
        """One line for the result's notes."""
        return (f"the model leaves out {' and '.join(self.effects)}: plans are judged by the "
                f"simulator and the bound is the model's times {self.factor:.6g}")


def curve_ratio(stage: CommStage) -> float:
    """The largest ``r <= 1`` with ``stage.time(n) >= r * (alpha + beta * n)`` for all n >= 1.

    On each segment both costs are linear in ``n``, so their ratio is monotone there and its
    infimum is at an end of the segment (the last one's is the limit ``beta_k / beta``).
    """
    if not stage.segments:
        return 1.0
    alpha, beta = stage.alpha_s, stage.beta_s_per_byte
    starts = [max(1.0, s[0]) for s in stage.segments]
    ends: list[float] = [*starts[1:], math.inf]
    ratio = 1.0
    for (_, a, b), lo, hi in zip(stage.segments, starts, ends, strict=True):
        for n in (lo, hi):
            if lo >= hi:
                continue
            line = alpha + beta * n if math.isfinite(n) else beta
            cost = stage.offset_s + a + b * n if math.isfinite(n) else b
            if line > 0:
                ratio = min(ratio, max(0.0, cost / line))
    return ratio


def relaxation(cluster: Cluster, stages: Sequence[CommStage] | None = None, *,
               trace: Trace | None = None) -> Relaxation | None:
    """The relaxation of ``cluster`` by the optimizer's model; None when the model is exact.

    Parameters
    ----------
    cluster
        The cluster solved on.
    stages
        Its communication stages (default: ``cluster.comm_stages()``).
    trace
        The trace solved for: its host times count as a left-out effect too (default: only the
        cluster's host costs are looked at).
    """
    stages = cluster.comm_stages() if stages is None else stages
    effects: list[str] = []
    factor = 1.0
    if any(st.segments for st in stages):
        effects.append("the measured cost curve (its single line is used)")
        factor = min(curve_ratio(st) for st in stages)
    if cluster.overlap_slowdown != 1.0:
        effects.append(f"the overlap slowdown {cluster.overlap_slowdown:g}")
    if cluster.comm_slowdown != 1.0:
        effects.append(f"the communication slowdown {cluster.comm_slowdown:g}")
    host = cluster.has_host or (trace is not None and trace.has_host)
    if host:
        effects.append("the host side (launch, hook and host times, which only add time)")
    if not effects:
        return None
    return Relaxation(factor=factor, effects=tuple(effects), host=host)


def launch_candidates(inst: Instance) -> list[Segments]:
    """FIFO plans with few collective calls, to weigh where calls cost host time.

    The wait-for-all programme's best bucketing (cuts between layers) with at most ``c`` buckets
    for ``c = 1 ..`` :data:`MAX_COUNT_CANDIDATES`, and, for each multiple in
    :data:`LAUNCH_SCALES` of the cluster's ``launch_overhead_s``, its best bucketing when each
    bucket's start-up ``a`` also carries that much. They are candidates to simulate, not optima
    (the bound stays the model's without a host).

    Parameters
    ----------
    inst
        The instance of the search (its units, releases and costs in ticks).

    Returns
    -------
    list of Segments
        One plan per distinct extra start-up, in :data:`LAUNCH_SCALES` order (none without
        communication or launch cost).
    """
    from schedopt.optimize.dp import min_makespan, min_makespan_by_count

    launch = inst.cluster.launch_overhead_s
    if not inst.stages or launch <= 0:
        return []
    limit = min(inst.n, MAX_COUNT_CANDIDATES)
    plans = [segs for segs in min_makespan_by_count(inst.r, inst.p, inst.a,
                                                    inst.layer_first_unit,
                                                    lambda count: count >= limit) if segs]
    seen: set[int] = set()
    for scale in LAUNCH_SCALES:
        extra = int(inst.ticks(scale * launch))
        if extra <= 0 or extra in seen:
            continue
        seen.add(extra)
        _, segs = min_makespan(inst.r, inst.p, inst.a + extra, inst.layer_first_unit)
        plans.append(segs)
    return plans


def without_host(trace: Trace, cluster: Cluster) -> tuple[Trace, Cluster]:
    """``trace`` and ``cluster`` with every host cost at 0 (the model without a host).

    Parameters
    ----------
    trace, cluster
        The instance.

    Returns
    -------
    trace, cluster
        New, validated copies (their fingerprints are those of files without the host fields).
    """
    tdoc = trace.model_dump()
    tdoc["host_update_s"] = 0.0
    for layer in tdoc["layers"]:
        layer["host_forward_s"] = layer["host_backward_s"] = 0.0
    cdoc = cluster.model_dump()
    cdoc["launch_overhead_s"] = cdoc["hook_overhead_s"] = 0.0
    return Trace.model_validate(tdoc), Cluster.model_validate(cdoc)


def host_free_period(trace: Trace, cluster: Cluster, plan: Plan) -> float:
    """The simulated period of ``plan`` without any host cost (seconds).

    Every plan's period with host costs is at least this (the host side only adds time), so when
    ``plan`` is the proven optimum of the model without a host, this is a lower bound of every
    plan's period with them.

    Parameters
    ----------
    trace, cluster
        The instance, with its host costs.
    plan
        A plan made for ``trace`` and ``cluster``.
    """
    from schedopt.simulate.simulator import simulate

    free_trace, free_cluster = without_host(trace, cluster)
    moved = plan.model_copy(update={
        "trace_hash": None if plan.trace_hash is None else free_trace.fingerprint(),
        "cluster_hash": None if plan.cluster_hash is None else free_cluster.fingerprint()})
    return simulate(free_trace, free_cluster, moved).iteration_time_s


def _neighbours(segs: Segments, n: int) -> list[Segments]:
    """Contiguous bucketings one move from ``segs``: two neighbours joined, a cut moved by one
    unit, a bucket split in two halves."""
    cuts = [j for _, j in segs[:-1]]
    out: list[list[int]] = []
    for k, c in enumerate(cuts):
        out.append(cuts[:k] + cuts[k + 1:])
        lo = cuts[k - 1] if k else -1
        hi = cuts[k + 1] if k + 1 < len(cuts) else n - 1
        if c - 1 > lo:
            out.append([*cuts[:k], c - 1, *cuts[k + 1:]])
        if c + 1 < hi:
            out.append([*cuts[:k], c + 1, *cuts[k + 1:]])
    for i, j in segs:
        if j > i:
            mid = (i + j) // 2
            out.append(sorted([*cuts, mid]))
    plans: list[Segments] = []
    for cs in out:
        starts = [0, *(c + 1 for c in cs)]
        ends = [*cs, n - 1]
        plans.append(list(zip(starts, ends, strict=True)))
    return plans


def simulated_descent(segs: Segments, n: int, period: Callable[[Segments], float],
                      max_evals: int = MAX_DESCENT_EVALS,
                      stop: Callable[[], bool] | None = None,
                      stats: dict[str, int] | None = None) -> tuple[Segments, float]:
    """Improve a contiguous FIFO bucketing by first-improvement moves judged by ``period``.

    Parameters
    ----------
    segs
        The starting bucketing of units ``0..n-1`` (contiguous, in ready order).
    n
        The number of units.
    period
        The period of a bucketing (seconds; the simulator's, with the host side).
    max_evals
        The most bucketings judged.
    stop
        Called before each judgement; True ends the descent (the time limit).
    stats
        When given, receives ``evals``: the bucketings judged.

    Returns
    -------
    segs, value
        The best bucketing found and its period.
    """
    out = stats if stats is not None else {}
    best, value = list(segs), period(segs)
    evals = 1
    improved = True
    while improved and evals < max_evals:
        improved = False
        for cand in _neighbours(best, n):
            if evals >= max_evals or (stop is not None and stop()):
                improved = False
                break
            val = period(cand)
            evals += 1
            if val < value * (1 - 1e-12):
                best, value, improved = cand, val, True
                break
    out["evals"] = evals
    return best, value
