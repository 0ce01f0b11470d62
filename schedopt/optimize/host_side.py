"""The host side's bound: the launching thread's work and its cycle with the device.

The host side (docs/model.md, "Host side") is one thread that runs an iteration's host tasks
back to back: the forward and backward launches of every layer (with the reducer's hooks), one
collective call per bucket (``launch_overhead_s`` each) and the optimizer step's launches.
These facts of the simulator give bounds that hold for every plan of a class (same ``next_forward``,
``overlap`` and ``accumulate``), whatever its bucketing and launch order:

* **The thread's work.** Iterations follow each other on the one thread, so the period is at
  least one iteration's host time, which is ``H0 + launch * m`` with ``m`` the plan's buckets
  (``H0`` the host time without calls). In wait-for-all mode the next iteration's host tasks
  wait for the end of the update, which starts after the last host task: ``+ update_s``.
  In per-layer mode the step ends with the backward, whose last task (``last``) runs after
  its launch while the host's later calls and optimizer launches run; the simulator's window
  (whole cycles of a repeating state, or the second half of its run) can then hold one
  iteration's ``calls + optimizer launches - last`` less: :data:`.relax.PER_LAYER_MARGIN` of
  it is held back.
* **The cycle.** Iteration ``t + 1``'s host tasks start after iteration ``t``'s compute has
  ended (the loop's synchronisation), and every compute task waits for its launch. So for
  every compute task ``j`` the period is at least the host time up to ``j``'s launch (without
  any collective call, which can only come later) plus the compute of ``j`` and of every task
  after it in the step (the updates of per-layer mode, placed by the plan, are left out).
* **The first forward** (per-layer mode, layer 0 holding gradients). The next step's first
  forward waits for its launch, ``hf0`` after the end of this step's backward, and for the
  updates gated by layer 0, which wait for their buckets: every bucket holding a layer-0
  gradient is ready only at the end of the backward. With ``Z`` the bytes of those buckets
  and ``u0 = U Z / T`` their updates' share, the rest of the next step (``F + B + U - u0``)
  follows that forward's start, so the period is at least
  ``F + B + U + max(hf0 - u0, comm(Z))``: ``comm(Z)`` is the one bucket's stages when layer 0
  is one unit; otherwise, as the updates may run while the later buckets communicate,
  ``max_s (alpha_s + beta_s Z) - u0`` (the updates of all but the last bucket taken out).
  ``Z`` is unknown but at least layer 0's bytes: the bound is the least over ``Z`` of the
  larger of a falling and a rising line.

The number of buckets: a plan whose period is at most ``lam`` has a period at most ``lam``
without its host costs too (they only add time), so it has at least the fewest buckets
``m(lam)`` of any bucketing that meets the bucketing relaxation's terms at ``lam``
(:func:`.shared_link.fewest_bucket_count`, one stage, on the integer model with its rounding
held back). ``lam`` passes when ``lam >= work(m(lam))``; ``m`` does not increase with ``lam``,
so passing is monotone and bisection on the ticks of the instance finds the least passing
``L``. Every plan's period is then above ``(L - 1)`` ticks and, with at most ``L`` ticks, at
least ``work(m(L))``: the bound is the larger of the two.

Where the host paces the step (host-bound, the thread's work above the device's), plans
with few calls reach this bound (:func:`.relax.launch_candidates`, judged by the simulator),
and their optimality is then proven.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize.instance import TICK_BUDGET, Instance
from schedopt.optimize.relax import PER_LAYER_MARGIN, curve_ratio
from schedopt.optimize.shared_link import MAX_UNITS, fewest_bucket_count

if TYPE_CHECKING:  # pragma: no cover
    from schedopt.simulate.simulator import Model

__all__ = ["HostWork", "host_bound", "host_chain", "host_work", "model_without_buckets"]


@dataclass(frozen=True)
class HostWork:
    """What every plan of a class costs the launching thread per iteration (seconds).

    Attributes
    ----------
    fixed_s
        The host time of one iteration without its collective calls (launches, hooks, the
        optimizer step's launches).
    launch_s
        The host time of one collective call.
    after_s
        Device time the next iteration's host waits for after the last host task
        (wait-for-all: the update; per-layer: 0).
    margin
        Share of the calls and the optimizer launches held back for the simulator's window
        (per-layer mode: :data:`.relax.PER_LAYER_MARGIN`; wait-for-all: 0).
    update_host_s
        The host time of the optimizer step (in the margin).
    last_s
        Device time of the step's last compute task (per-layer: the backward that ends the
        step runs while the host's last tasks do; the margin counts only what exceeds it).
    cycle_s
        The cycle bound: the largest host time up to a compute task plus the compute from it
        to the end of the step.
    """

    fixed_s: float
    launch_s: float
    after_s: float
    margin: float
    update_host_s: float
    cycle_s: float
    last_s: float = 0.0

    def serial(self, buckets: int) -> float:
        """The period the thread's work implies for a plan of ``buckets`` buckets."""
        calls = self.launch_s * buckets
        return (self.fixed_s + calls + self.after_s
                - self.margin * max(0.0, calls + self.update_host_s - self.last_s))

    def bound(self, buckets: int) -> float:
        """The larger of :meth:`serial` and the cycle bound."""
        return max(self.serial(buckets), self.cycle_s)


def model_without_buckets(trace: Trace, cluster: Cluster, plan: Plan) -> Model:
    """The simulator's model of ``plan`` without the buckets' compute time
    (``bucket_compute_s``, which depends on the bucketing)."""
    from schedopt.simulate.simulator import Model

    bare = cluster.model_copy(update={"bucket_compute_s": 0.0})
    return Model.build(trace, bare, plan.model_copy(update={"cluster_hash": None}))


def host_chain(trace: Trace, cluster: Cluster, plan: Plan) -> tuple[Model, np.ndarray] | None:
    """The simulator's model of ``plan`` and the end of every host task of an iteration when
    the collective calls take no time (:meth:`.HostChain.ends_without_calls`), or None for
    sharded plans and without a host side. The compute chain leaves out the buckets' compute
    time (``bucket_compute_s``), which depends on the bucketing: what is built on it holds for
    every plan of the class."""
    if plan.sharding is not None:
        return None
    m = model_without_buckets(trace, cluster, plan)
    if m.host is None:
        return None
    return m, m.host.ends_without_calls(float(cluster.launch_overhead_s))


def host_work(trace: Trace, cluster: Cluster, plan: Plan, *,
              first_units: int | None = None) -> HostWork | None:
    """The host work of ``plan``'s class (module docstring), or None without a host side.

    Parameters
    ----------
    trace, cluster
        The instance.
    plan
        Any all-reduce plan of the class (its ``next_forward``, ``overlap`` and
        ``accumulate`` lay out the host tasks; its buckets and order do not matter).
    first_units
        The units (tensors, or pieces with partitioning) of layer 0 in the class: 1 means one
        bucket holds layer 0's gradients (the first forward's bound is then tighter); None,
        any number.

    Returns
    -------
    HostWork or None
        None for sharded plans (their host costs are not modelled) and without host costs.
    """
    chain = host_chain(trace, cluster, plan)
    if chain is None:
        return None
    m, pre = chain
    h = m.host
    assert h is not None
    launch = float(cluster.launch_overhead_s)
    fixed = float(h.dur[~h.is_launch].sum())
    per_layer = plan.next_forward == "per-layer"
    after = 0.0 if per_layer else float(trace.update_s)
    dev = np.where(m.chain_kind == 2, 0.0, m.chain_dur)
    suffix = np.cumsum(dev[::-1])[::-1] + after
    on = np.flatnonzero(h.of_chain >= 0)
    cycle = float((pre[h.of_chain[on]] + suffix[on]).max(initial=0.0))
    if not per_layer:  # the update waits for the optimizer step's launches and every call
        cycle = max(cycle, fixed + after, _comm_cycle(m, pre, launch, plan.comm_dtype is None))
    elif plan.comm_dtype is None and m.stages:
        cycle = max(cycle, _first_forward(m, float(h.dur[0]), float(dev.sum()), first_units))
    return HostWork(fixed_s=fixed, launch_s=launch, after_s=after,
                    margin=PER_LAYER_MARGIN if per_layer else 0.0,
                    update_host_s=float(trace.host_update_s), cycle_s=cycle,
                    last_s=float(m.chain_dur[-1]) if per_layer else 0.0)


def _comm_cycle(m: Model, pre: np.ndarray, launch: float, plain_bytes: bool) -> float:
    """Wait-for-all: the cycle through the communication of the gradients ready last.

    For every layer ``l`` that holds gradients, every byte ``B_l`` of the layers ``0..l`` is
    communicated after the backward of ``l`` (the last micro-batch's) has ended and after a
    call launched after its host task: from ``start_l = pre(l) + max(backward_l, launch)``,
    one call at a time on every stage, each call paying its start-up
    (``c_k(B) = max_s r_s (k alpha_s + beta_s B)`` for ``k`` calls, with the stage's curve
    ratio ``r_s``); the update follows. The lowest such layer ``l0`` is ready last. Either
    no call is launched before ``l0``'s host task, and every byte goes after ``start_l0``:
    ``start_l0 + c_1(B)``; or one is, which delays that task and every call after it by one
    launch (``late = start_l0 + launch``), and for every ``l`` either one call carries
    ``B_l`` (it waits for ``l0``: ``late + c_1(B_l)``) or two at least do
    (``start_l + c_2(B_l)``). The period is at least the smaller of the two cases, plus
    ``update_s``.

    0 without communication or with ``comm_dtype`` (its bytes are the plan's).
    """
    trace, h = m.trace, m.host
    assert h is not None
    if not m.stages or not plain_bytes:
        return 0.0
    n_l = len(trace.layers)
    per_layer_bytes = np.bincount(trace.ready_layer, weights=trace.ready_bytes, minlength=n_l)
    upto = np.cumsum(per_layer_bytes)  # bytes of the layers 0..l
    start = np.full(n_l, np.nan)
    for j in np.flatnonzero(m.readies).tolist():
        if h.of_chain[j] >= 0:
            start[int(m.chain_index[j])] = float(pre[h.of_chain[j]]) + max(
                float(m.chain_dur[j]), launch)
    holding = np.flatnonzero((per_layer_bytes > 0) & ~np.isnan(start))
    if holding.size == 0:
        return 0.0
    ratios = [curve_ratio(st) for st in m.stages]

    def calls(k: int, nbytes: float) -> float:
        return max(r * (k * st.alpha_s + st.beta_s_per_byte * nbytes)
                   for r, st in zip(ratios, m.stages, strict=True))

    l0, first = int(holding[0]), float(start[holding[0]])  # l0 is ready last
    # no call launched before l0's host task: every byte goes after first
    no_early = first + calls(1, float(upto[holding[-1]]))
    # a call launched before it delays it, and every call after it, by one launch
    late = first + launch
    early = max(min(late + calls(1, float(upto[lay])),
                    float(start[lay]) + calls(2, float(upto[lay])) if lay != l0 else np.inf)
                for lay in holding.tolist())
    best = min(no_early, early)
    return best + float(trace.update_s)


def _first_forward(m: Model, host_first: float, device: float, first_units: int | None
                   ) -> float:
    """Per-layer: the first forward's bound (module docstring), 0 when layer 0 holds no
    gradient.

    Parameters
    ----------
    m
        The simulator's model of a plan of the class.
    host_first
        The host time of the step's first launch (``hf0``).
    device
        The step's compute without the updates (``F + B`` over its micro-batches).
    first_units
        Layer 0's units in the class (1: one bucket holds them; None: any number).
    """
    trace = m.trace
    lo = float(trace.ready_bytes[trace.ready_layer == 0].sum())
    if lo <= 0:
        return 0.0
    hi = float(trace.ready_bytes.sum())
    upd = float(trace.update_s)
    w = upd / hi  # update seconds per byte
    ratios = [curve_ratio(st) for st in m.stages]
    # comm(Z) as rising lines (intercept, slope), the updates' share taken out where it can
    # overlap the communication of later buckets
    if first_units == 1:
        lines = [(sum(r * st.alpha_s for r, st in zip(ratios, m.stages, strict=True)),
                  sum(r * st.beta_s_per_byte for r, st in zip(ratios, m.stages, strict=True)))]
    else:
        lines = [(r * st.alpha_s, r * st.beta_s_per_byte - w)
                 for r, st in zip(ratios, m.stages, strict=True)]
    lines.append((host_first, -w))  # the launch, less the updates that fill its wait

    def worst(z: float) -> float:
        return max(c0 + c1 * z for c0, c1 in lines)

    # the upper envelope is convex: its least value on [lo, hi] is at an end or a crossing
    points = [lo, hi]
    for (a0, a1), (b0, b1) in itertools.combinations(lines, 2):
        if a1 != b1:
            z = (b0 - a0) / (a1 - b1)
            if lo < z < hi:
                points.append(z)
    return device + upd + min(worst(z) for z in points)


def _slack_ticks(inst: Instance) -> int:
    """Ticks by which the integer model's period may exceed the simulator's without a host
    (the rounding the tick budget counts), with room to spare."""
    return math.ceil(2 * TICK_BUDGET * inst.lower_bound_s / inst.tick) + 1


def host_bound(work: HostWork, inst: Instance | None, hi_s: float, *,
               stats: dict[str, int] | None = None, max_calls: int = 64) -> float:
    """Lower bound (seconds) on every plan's period from the host side (module docstring).

    Parameters
    ----------
    work
        The class's host work (:func:`host_work`).
    inst
        The fine instance of the search, for the fewest buckets a period allows: one stage, at
        most :data:`.shared_link.MAX_UNITS` units, its costs not above the cluster's (no
        measured curve). None counts one bucket.
    hi_s
        The period of a known plan: the bound stays at or below it.
    stats
        Receives ``calls``, the counting programmes run (each ``O(n^2)``).
    max_calls
        Most counting programmes; the bound proven so far is returned when they are spent.

    Returns
    -------
    float
        The bound, at most ``hi_s``.
    """
    out = stats if stats is not None else {}
    out["calls"] = 0
    if max_calls < 2:
        return min(hi_s, work.bound(1))
    usable = (inst is not None and len(inst.stages) == 1 and inst.n <= MAX_UNITS
              and work.launch_s > 0)
    if not usable:
        return min(hi_s, work.bound(1))
    assert inst is not None
    tick, slack = inst.tick, _slack_ticks(inst)
    memo: dict[int, int | None] = {}

    def count(lam: int) -> int | None:
        """The fewest buckets of a plan of period at most ``lam`` ticks (None: no plan)."""
        if lam not in memo:
            out["calls"] += 1
            got = fewest_bucket_count(inst, lam + slack)
            memo[lam] = None if got is None else max(1, got)
        return memo[lam]

    def passes(lam: int) -> bool:
        m = count(lam)
        return m is not None and lam * tick >= work.bound(m)

    lo = math.floor(work.bound(1) / tick)
    hi = math.ceil(hi_s / tick)
    if lo >= hi or not passes(hi):
        return min(hi_s, work.bound(1))
    while lo < hi and out["calls"] < max_calls:  # lo - 1 fails (or is below every bound)
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid + 1
    if lo < hi:  # spent: every period at or below lo - 1 ticks fails
        return min(hi_s, max((lo - 1) * tick, work.bound(1)))
    return min(hi_s, max((hi - 1) * tick, work.bound(count(hi) or 1)))
