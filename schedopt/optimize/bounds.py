"""Lower bounds on the period that hold for every launch order (ticks).

* :func:`constant_bound`: compute, one pass of all bytes, the data path.
* :func:`jackson_bound`: the preemptive single-link bound with one start-up cost.
* :func:`bucketing_bound`: the *DP lower bound over bucketings*: for a fixed bucketing, buckets
  ``k, k+1, ...`` (ready order) are all released at or after bucket ``k`` and each has a tail of
  at least bucket ``k``'s, so the last of them ends no earlier than ``R_k + sum d`` and the period
  is at least ``R_k + sum_{k' >= k} d_k' + Q_k`` (the preemptive relaxation). The bound is the
  smallest such value over all bucketings: a right-to-left programme that, for a bound ``lam``,
  finds the fewest buckets covering units ``i..n-1`` (fewer buckets only help the buckets on the
  left, which see the suffix through its number of start-up costs), bisected on ``lam``.
  Tails hold the forward from the bucket's gating layer, the updates of the buckets gated by
  later layers and, for a bucket that ends at the last unit of its layer (the last of its
  gating layer), its own update share: lower tails that still grow with readiness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from schedopt.model.cluster import Cluster, CommStage
from schedopt.model.trace import Trace
from schedopt.optimize.dp import solve_fifo
from schedopt.optimize.instance import TICK_BUDGET, Instance, build_instance
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.period import BucketTails

__all__ = ["bucketing_bound", "constant_bound", "jackson_bound", "lower_bound", "lower_tails",
           "no_tails", "stage_bound", "stage_groups", "stage_heads", "stage_relaxation"]


def constant_bound(inst: Instance) -> int:
    """Bounds that do not depend on the plan (ticks): the mode's terms
    (:meth:`.period.PeriodTerms.bound`) with one pass of all bytes; with several communication
    stages (whose summed cost bounds nothing) only the compute and the data path."""
    comm = inst.a + int(inst.p.sum()) if len(inst.stages) == 1 else 0
    return inst.terms.bound(comm)


def jackson_bound(inst: Instance) -> int:
    """Preemptive bound: for every layer ``l``, the units of layers ``<= l`` are released at
    ``r_l``, need their bandwidth parts and one start-up cost, and have tails ``>= q_l``."""
    if not inst.stages:
        return 0
    p_suffix = np.cumsum(inst.p[::-1])[::-1]
    starts = np.array([lo for lo, _ in inst.layer_runs])
    vals = inst.r[starts] + p_suffix[starts] + inst.a
    return inst.terms.release_bound(starts, vals)


class Machine(Protocol):
    """One resource as a single machine with heads and tails (``flowshop.ResourceView``):
    bandwidth parts ``p`` and start-up ``a`` on it, and those of the stages before and after."""

    p: np.ndarray
    a: int
    p_before: np.ndarray
    a_before: int
    p_after: np.ndarray
    a_after: int


def fewest_buckets(inst: Instance, tails: BucketTails | None, lam: int,
                   machine: Machine | None = None) -> bool:
    """Whether some bucketing has every preemptive suffix term at most ``lam``.

    The term of a bucket ``i..j`` followed by the fewest buckets that keep the later terms
    within ``lam``: its release, the bandwidth parts from ``i`` on, one start-up per bucket
    left, and its tails (``tails``; None: none). With ``machine``, on that resource alone: the
    stages before it a head, those after it a tail (docs/formulation.md, "Several stages");
    and every bucket ``i..j`` meets its own *chain*: released at ``r_j``, it passes every stage
    one after the other (each stage starts after the bucket's previous stage ends), so its last
    stage ends no earlier than ``r_j + sum_s (a_s + P_s(i..j))``, followed by its tail (the
    same lower tail as its term). A plan of period at most ``lam`` meets every term and every
    chain with its own bucketing, so the test stays a relaxation.
    """
    n = inst.n
    big = np.iinfo(np.int64).max // 4
    r = np.r_[inst.r.astype(np.int64), big]
    p, a = (inst.p, inst.a) if machine is None else (machine.p, machine.a)
    p_suffix = np.r_[np.cumsum(p[::-1])[::-1], 0]
    if tails is None:  # no tails to credit: ``lam`` bounds the end of the communication
        tails = no_tails(n)
    chain = _chains(inst) if machine is not None else None

    def accepts(i: int, j: np.ndarray, rest: np.ndarray) -> np.ndarray:
        tail = lower_tails(tails, i, j)
        term = p_suffix[i] + a * (1 + rest) + tail + _head_tail(inst, machine, r, i, j)
        ok = term <= lam
        if chain is not None:  # the bucket's own stages, one after the other, then its tail
            ok &= r[j] + chain[1] + chain[0][j + 1] - chain[0][i] + tail <= lam
        return ok

    return fewest_count(n, accepts) is not None


#: Bucket counts the right-to-left programme has not reached (:func:`fewest_count`).
UNREACHED = np.iinfo(np.int64).max // 4


def fewest_count(n: int, accepts: Callable[[int, np.ndarray, np.ndarray], np.ndarray]
                 ) -> int | None:
    """The right-to-left programme of the bucketing relaxations: the fewest buckets of a
    bucketing of ``n`` units in which every bucket ``i..j`` is accepted, or None when none is.

    ``accepts(i, j, rest)`` tells, for the buckets ``i..j`` (``j`` an array of ``i..n-1``)
    followed by the fewest buckets ``rest`` of the units after them, which are accepted;
    entries whose ``rest`` is :data:`UNREACHED` are ignored. The fewest buckets of the units
    from ``i`` on keep the terms on their left smallest when each term grows with the count
    after it; ``O(n^2)``.
    """
    count = np.full(n + 1, UNREACHED, dtype=np.int64)
    count[n] = 0
    for i in range(n - 1, -1, -1):
        j = np.arange(i, n)
        rest = count[i + 1:]
        ok = (rest < UNREACHED) & accepts(i, j, rest)
        if ok.any():
            count[i] = 1 + int(rest[ok].min())
    return int(count[0]) if count[0] < UNREACHED else None


def no_tails(n: int) -> BucketTails:
    """Tails of zero for ``n`` units (nothing to credit: a bound on the end of the
    communication)."""
    return BucketTails(np.zeros(n, np.int64), np.zeros(n + 1, np.int64), np.zeros(n, np.int64),
                       np.zeros(n, dtype=bool))


def lower_tails(tails: BucketTails, i: int, j: np.ndarray) -> np.ndarray:
    """The lower tails (ticks) of the buckets ``i..j`` for every ``j`` (:class:`.BucketTails`):
    the forward from the gating layer on, the updates of the units before ``i`` when the bucket
    is the first of its layer, and its own update share when it ends its layer. They grow with
    readiness: every bucket after ``i..j`` has a true tail at least that of ``i..j``."""
    upd = np.where(tails.first[j] >= i, tails.upd_before[i], 0) + np.where(
        tails.last[j], tails.upd_before[j + 1] - tails.upd_before[i], 0)
    return tails.fwd[j] + upd


def _chains(inst: Instance) -> tuple[np.ndarray, int]:
    """Prefix sums of every unit's bandwidth parts summed over the stages, and the start-up
    costs of every stage summed (ticks): the bucket ``i..j`` passes its stages one after the
    other in at least ``chain[1] + chain[0][j + 1] - chain[0][i]`` from its release."""
    per_unit = inst.stage_p.sum(axis=0).astype(np.int64)
    return np.r_[0, np.cumsum(per_unit)].astype(np.int64), int(inst.stage_a.sum())


def _head_tail(inst: Instance, machine: Machine | None, r: np.ndarray, i: int, j: np.ndarray
               ) -> np.ndarray:
    """The release of buckets ``i..j`` on ``machine`` (after the stages before it) plus the
    stages after it; without a machine, the release."""
    if machine is None:
        return r[j]
    n = inst.n
    pre_b = np.r_[0, np.cumsum(machine.p_before)]
    pre_a = np.r_[0, np.cumsum(machine.p_after)]
    head = np.minimum(r[j] + pre_b[j + 1] - pre_b[i], r[j + 1]) + machine.a_before
    return head + machine.a_after + np.where(j == n - 1, pre_a[n] - pre_a[i], 0)


def bucketing_bound(inst: Instance, hi: int) -> int:
    """The DP lower bound over bucketings (ticks), at most ``hi`` (a known period)."""
    if not inst.stages:
        return 0
    tails = inst.terms.bucket_tails
    if tails is None:  # no tail to credit (wait-for-all: the class's DP is exact)
        return jackson_bound(inst)
    c = inst.consts
    lo = max(c.B + c.F + c.U, jackson_bound(inst)) - 1
    if fewest_buckets(inst, tails, lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fewest_buckets(inst, tails, mid):
            hi = mid
        else:
            lo = mid
    return hi


def lower_bound(inst: Instance, hi: int, *, with_dp: bool = True) -> int:
    """The best of the bounds above (ticks); ``hi`` is the period of a known plan."""
    lb = max(constant_bound(inst), jackson_bound(inst))
    if with_dp and inst.terms.bucket_tails is not None:
        lb = max(lb, bucketing_bound(inst, hi))
    return min(lb, hi)


def stage_groups(inst: Instance) -> list[int | tuple[int, ...]]:
    """The one-stage relaxations of several stages, as ``build_instance``'s ``stage``: each
    stage alone, and per resource of the last stage the stages that hold it (as one task)."""
    groups: list[int | tuple[int, ...]] = list(range(len(inst.stages)))
    groups += list(dict.fromkeys(on for on in inst.last_stage_groups() if len(on) > 1))
    return groups


def stage_heads(one: Instance, stages: tuple[CommStage, ...], s: int) -> Instance:
    """The one-stage relaxation ``one`` of stage ``s`` alone (of ``stages``), its releases
    moved later by what the other stages cost every bucket in every plan.

    In a plan, stage ``s`` of the bucket ``i..j`` starts no earlier than ``r_j`` plus the
    stages before it, ``sum_{s' < s} (a_s' + P_s'(i..j)) >= sum_{s' < s} (a_s' + p_s'[j])``,
    and after it the bucket's last stage ends no earlier than ``sum_{s' > s} a_s'`` later.
    Moving the plan's schedule of stage ``s`` later by that last sum keeps it one task at a
    time in launch order, starts every bucket at or after ``r_j + sum_{s' < s} p_s'[j] +
    sum_{s' != s} a_s'``, and ends every bucket no later than its last stage: the one-stage
    period of the same launch order with these releases, which serves every bucket as early
    as it may, is at most the plan's (the period grows with the ends). The releases used are
    smaller still, so that they stay equal within a layer and increase with readiness, as the
    one-stage programmes expect: per unit, the least of those values over the units from the
    first of its layer on, in seconds, rounded down to ticks. ``one`` itself when there is
    nothing to move (one stage, or a PCIe link shared with the batch copy, where the period
    formula is not exact)."""
    if len(stages) < 2 or one.pcie_coupled or one.n == 0:
        return one
    after = float(sum(st.alpha_s for k, st in enumerate(stages) if k != s))
    before = float(sum(st.beta_s_per_byte for st in stages[:s]))
    rel = np.asarray(one.release_s, dtype=float) + before * np.asarray(one.nbytes, dtype=float)
    rel = np.minimum.accumulate(rel[::-1])[::-1][np.asarray(one.layer_first_unit)]
    r = np.floor((rel + after) / one.tick).astype(np.int64)
    out = Instance(one.units, one.tick)
    out.__dict__["r"] = r  # the cached releases, replaced
    return out


def stage_relaxation(trace: Trace, cluster: Cluster, opts: SolveOptions, inst: Instance,
                     group: int | tuple[int, ...], *, merge: bool | None = None) -> Instance:
    """The one-stage relaxation of ``group`` (:func:`stage_groups`), a stage alone with its
    releases moved later by the other stages (:func:`stage_heads`)."""
    one = build_instance(trace, cluster, opts, merge=merge, stage=group)
    return stage_heads(one, inst.stages, group) if isinstance(group, int) else one


def stage_bound(trace: Trace, cluster: Cluster, opts: SolveOptions, inst: Instance) -> int:
    """Lower bound (``inst``'s ticks) for several communication stages, from one-stage
    relaxations: each stage alone (dropping the others only makes buckets finish earlier;
    every bucket still waits for its stages before and is followed by the start-up costs of
    those after: :func:`stage_heads`), and, per resource of the last stage, the stages that
    hold it as one task (the resource serves them one at a time after the bucket is ready, and
    the last stage ends after them). Valid for every launch order with ``opts.reorder``, for
    readiness order otherwise."""
    bound = 0
    for s in stage_groups(inst):
        one = stage_relaxation(trace, cluster, opts, inst, s)
        v1, _, proven = solve_fifo(one, reorder=opts.reorder)
        b1 = v1 if proven else lower_bound(one, v1)
        # the two integer models round differently: keep both tick budgets in hand
        slack = TICK_BUDGET * (one.lower_bound_s + inst.lower_bound_s)
        bound = max(bound, int(np.floor((b1 * one.tick - slack) / inst.tick)))
    return bound
