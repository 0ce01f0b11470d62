"""Several communication stages as a flow shop: per-resource bounds that count every stage.

Every bucket passes through the stages of the collective in order (reduce-scatter, inter-node
all-reduce, all-gather; or push, pull), each stage holding its resources exclusively: a flow
shop per bucket, whose machines are the resources. The simulator serves the stages in the plan's
launch order (:meth:`.Instance.stage_schedule`); the bounds here hold for every launch order and
every order of the tasks on each resource.

**Resource view.** For a resource ``R`` held by the stages ``S_R`` (first ``f``, last ``l``),
a bucket ``[i..j]`` (units in readiness order) does the work ``a_R + P_R(i..j)`` on ``R``
(``a_R``, ``P_R``: start-up costs and bandwidth parts summed over ``S_R``). That work cannot
start before the bucket's release ``r_j`` plus its stages before ``f`` (the *head*
``a_< + P_<(i..j)``), and after it the stages after ``l`` still run (the *tail* ``a_> +
P_>(i..j)``) before the bucket's delivery tail ``q``. Dropping the idle time between the stages
of ``S_R`` and letting ``R`` preempt gives one machine with heads and tails: for the buckets
from unit ``i`` on, the first of which is ``[i..j]``,

    period >= min(r_j + a_< + P_<(i..j), r_{j+1} + a_<) + P_R(i..n-1) + a_R * (buckets)
              + a_> + [j = n-1] P_>(i..j) + q_min(i, j)

(the suffix's work on ``R`` starts after the smallest head and its last piece is followed by
the smallest tail; ``q_min`` is the delivery tail of the bucketing bound of :mod:`.bounds`).
As there, the fewest buckets that keep every term under ``lam`` decide whether ``lam`` is
feasible, and bisection gives the bound (:func:`resource_bound`). Every bucket ``[i..j]`` of
those bucketings also meets its own *chain*, ``r_j + sum_s (a_s + P_s(i..j)) + q(i, j) <= lam``
(it passes its stages one after the other): a plan of period at most ``lam`` meets it with its
own bucketing, and it keeps the preemptive relaxation from ending with a few large buckets.

**Paths** (:func:`pair_bound`). Each stage serves the buckets in launch order, one at a time.
For a run of consecutive stages ``s..t`` and the buckets released from ``r_i`` on (those ending
at unit ``i`` or later), the last of them ends stage ``t`` no earlier than the path through
any bucket ``k``: stage ``s`` of the buckets launched up to ``k``, every stage of ``k``, stage
``t`` of those launched after ``k``. Taking for ``k`` the bucket of the unit ``u`` with the
largest ``sum_run p - min_run p`` and the fastest stage of the run for every other unit:

    end >= r_i + sum_{v >= i} min_run p[v] + max_{v >= i} (sum_run p - min_run p)[v]
           + (every stage's start-up cost once)

then its delivery tail (at least the forward from unit ``i``'s layer). With two equal stages
(push and pull of dedicated servers) this is the classical ``sum + longest`` of a two-machine
flow shop: the largest bucket is paid twice, whatever the order.

**The path view** (:mod:`.twomachine`): the same path between the first and the last stage
over bucketings, a bucket released before the suffix as a possible pivot too, bisected like a
resource view.

**The stage views** (:mod:`.pipeline`): one stage as a non-preemptive machine over
bucketings, a suffix's first bucket in launch order paying its earlier stages and its last
bucket its later stages, with the resource views' terms in the same programme.

In wait-for-all mode the
same programme without delivery tails bounds the end of the communication, and the period's
terms (:meth:`.period.PeriodTerms.bound`) turn it into a bound on the period.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize.bounds import fewest_buckets
from schedopt.optimize.dp import solve_fifo_per_layer, solve_wait_for_all
from schedopt.optimize.heuristics import schrage_order
from schedopt.optimize.instance import Instance, Segments, build_instance
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.pipeline import StageView
from schedopt.optimize.twomachine import PathView

__all__ = ["ENUMERATION_PLANS", "ResourceView", "bottleneck", "bottleneck_plans",
           "enumerate_plans", "flow_order", "pair_bound", "plan_count", "resource_bound",
           "resource_views", "stage_views"]


class ResourceView:
    """One resource of a multi-stage instance as a single machine with heads and tails.

    Parameters
    ----------
    inst
        The instance (several stages).
    on
        The stages that hold the resource (indices, increasing).

    Attributes
    ----------
    p, a
        Bandwidth part of every unit and start-up cost of one bucket on the resource (ticks).
    p_before, a_before, p_after, a_after
        The same for the stages before the first and after the last stage of ``on``.
    """

    def __init__(self, inst: Instance, on: tuple[int, ...]) -> None:
        sp, sa = inst.stage_p, inst.stage_a
        f, last = on[0], on[-1]
        self.on = on
        self.p = sp[list(on)].sum(axis=0).astype(np.int64)
        self.a = int(sa[list(on)].sum())
        self.p_before = sp[:f].sum(axis=0).astype(np.int64)
        self.a_before = int(sa[:f].sum())
        self.p_after = sp[last + 1:].sum(axis=0).astype(np.int64)
        self.a_after = int(sa[last + 1:].sum())

    def fits(self, inst: Instance, lam: int) -> bool:
        """Whether some bucketing meets every term of the view at ``lam``
        (:func:`.bounds.fewest_buckets`)."""
        return fewest_buckets(inst, inst.terms.bucket_tails, lam, self)


#: A view bisected by the flow-shop bound: one resource, the path of the first and last stage,
#: or one stage as a non-preemptive machine.
View = ResourceView | PathView | StageView


def resource_views(inst: Instance) -> list[ResourceView]:
    """One view per resource of the stages (resources held by the same stages share one)."""
    groups: dict[tuple[int, ...], None] = {}
    for res in dict.fromkeys(r for st in inst.stages for r in st.resources):
        groups[tuple(s for s, st in enumerate(inst.stages) if res in st.resources)] = None
    return [ResourceView(inst, on) for on in groups]


def stage_views(inst: Instance, views: list[View]) -> list[StageView]:
    """One non-preemptive view per stage (:mod:`.pipeline`), each with the preemptive terms of
    the resource views among ``views``."""
    machines = [v for v in views if isinstance(v, ResourceView)]
    return [StageView(inst, s, ResourceView(inst, (s,)), machines)
            for s in range(len(inst.stages))]


def _jackson_terms(inst: Instance, view: View) -> tuple[np.ndarray, np.ndarray]:
    """Per layer's first unit: the preemptive end of the communication of the units from it
    on (one start-up cost; heads and tails of start-up costs only), and the unit."""
    p_suffix = np.cumsum(view.p[::-1])[::-1]
    starts = np.array([lo for lo, _ in inst.layer_runs])
    return inst.r[starts] + view.a_before + p_suffix[starts] + view.a + view.a_after, starts


def _jackson_end(inst: Instance, view: View) -> int:
    """The preemptive bound of ``view`` on the end of the communication (ticks)."""
    return int(_jackson_terms(inst, view)[0].max())


def _jackson(inst: Instance, view: View) -> int:
    """The preemptive bound of ``view`` on the period in per-layer mode (ticks)."""
    vals, starts = _jackson_terms(inst, view)
    return int((vals + inst.fwd_from[inst.layer[starts]]).max())


class _Calls:
    """The programmes a bound may still run (:func:`.bounds.fewest_buckets` calls), and those
    run; a view with a ``calls`` attribute is charged that many per programme."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit if limit is not None else 1 << 62
        self.used = 0

    def feasible(self, inst: Instance, view: View, lam: int) -> bool | None:
        """``view``'s programme at ``lam`` (``view.fits``), or None once the calls are spent."""
        if self.left <= 0:
            return None
        cost = getattr(view, "calls", 1)
        self.left -= cost
        self.used += cost
        return view.fits(inst, lam)


def _bisect(inst: Instance, view: View, lo: int, hi: int, calls: _Calls) -> int:
    """The least ``lam`` in ``[lo, hi]`` that :func:`.bounds.fewest_buckets` meets, ``lo`` a known
    bound and ``hi`` feasible or a known value; once ``calls`` are spent, the largest ``lam``
    proven infeasible plus one (or ``lo``)."""
    if lo >= hi:
        return hi
    ok = calls.feasible(inst, view, lo)
    if ok is None or ok:
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok = calls.feasible(inst, view, mid)
        if ok is None:
            return lo + 1
        if ok:
            hi = mid
        else:
            lo = mid
    return hi


def _view_bound(inst: Instance, view: View, lo: int, hi: int, calls: _Calls) -> int:
    """The bound of one resource view (ticks), at least ``lo`` (a known bound) and at most
    ``hi`` (a known period), by bisection: on the period in per-layer mode, on the end of the
    communication in wait-for-all mode (the period's terms are increasing in it, and it is at
    most the period)."""
    if inst.per_layer:
        return _bisect(inst, view, max(inst.consts.k0, _jackson(inst, view), lo), hi, calls)
    comm = _bisect(inst, view, _jackson_end(inst, view), hi, calls)
    return max(lo, min(hi, int(inst.terms.bound(comm))))


def pair_bound(inst: Instance) -> int:
    """The path bound of every run of consecutive stages (ticks; module docstring): from every
    unit ``i`` on, the longest unit's tasks on every stage of the run, the other units on the
    fastest stage of the run, and every stage's start-up cost once."""
    sp, sa = inst.stage_p.astype(np.int64), int(inst.stage_a.sum())
    best = 0
    n_s = len(inst.stages)
    for s, t in itertools.combinations(range(n_s), 2):
        run = sp[s:t + 1]
        fast = run.min(axis=0)
        suffix_min = np.cumsum(fast[::-1])[::-1]
        extra = run.sum(axis=0) - fast
        suffix_max = np.maximum.accumulate(extra[::-1])[::-1]
        ends = inst.r + suffix_min + suffix_max + sa
        if inst.per_layer:
            best = max(best, int((ends + inst.fwd_from[inst.layer]).max()))
        else:
            best = max(best, int(inst.terms.bound(int(ends.max()))))
    return best


def resource_bound(inst: Instance, hi: int, lo: int = 0, *, paths: bool = True,
                   max_calls: int | None = None, stats: dict[str, int] | None = None) -> int:
    """Lower bound on the period (ticks) of every plan of ``inst`` (several stages).

    The best of the paths (:func:`pair_bound`, the path view of :mod:`.twomachine` and the
    stage views of :mod:`.pipeline`, unless ``paths`` is false) and the resource views (module
    docstring), at least ``lo`` (a
    known bound) and at most ``hi`` (a known period). In per-layer mode every view first tries
    ``hi - 1``: a plan at ``hi`` is proven optimal by one programme per view. ``max_calls``
    caps the programmes run (each ``O(n^2)``; a deterministic limit), ``stats["calls"]``
    receives their number.
    """
    calls = _Calls(max_calls)
    out = stats if stats is not None else {}
    out["calls"] = 0
    views: list[View] = list(resource_views(inst)) if len(inst.stages) > 1 else []
    if not views or lo >= hi:
        return min(lo, hi)
    if paths:
        lo = max(lo, min(hi, pair_bound(inst)))
        views[:0] = stage_views(inst, views)  # first: on the pipelined layout the highest
        views.append(PathView(inst))
    if lo >= hi:
        return hi
    if inst.per_layer:
        for view in views:
            if calls.feasible(inst, view, hi - 1) is False:
                out["calls"] = calls.used
                return hi
    for view in views:
        lo = max(lo, _view_bound(inst, view, lo, hi - 1 if inst.per_layer else hi, calls))
    out["calls"] = calls.used
    return lo


def bottleneck_plans(trace: Trace, cluster: Cluster, opts: SolveOptions, inst: Instance
                     ) -> list[Segments]:
    """Plans paced by one resource: per resource view, the one-stage instance of its stages
    (one stage alone, or the stages that share the resource as one task), its readiness-order
    programme's plan and, with reordering, Schrage's rule on that instance (durations of the
    resource alone: on the summed costs of every stage the rule may wait for work the
    resource has long finished) and on the summed costs, applied to that plan, to every unit
    alone and to every layer alone. Segments of ``inst`` (built with
    ``merge=bool(opts.merge_layers)``, as :func:`.solve.solve` builds it), to be judged by the
    exact multi-stage period."""
    merge = bool(opts.merge_layers)
    plans: list[Segments] = []
    fine: Segments = [(i, i) for i in range(inst.n)]
    for view in resource_views(inst):
        on = view.on[0] if len(view.on) == 1 else view.on
        one = build_instance(trace, cluster, opts, merge=merge, stage=on)
        if one.n != inst.n:
            continue
        segs = solve_fifo_per_layer(one)[1] if one.per_layer else solve_wait_for_all(one)[1]
        cands = [segs]
        if opts.reorder:
            for c in (segs, fine, list(inst.layer_runs)):
                cands += [schrage_order(one, c), schrage_order(inst, c)]
        plans += [c for c in cands if c not in plans]
    return plans



#: Most plans :func:`enumerate_plans` is used for (every bucketing and launch order).
ENUMERATION_PLANS = 20_000


def plan_count(n: int, reorder: bool, limit: int | None = None) -> int:
    """The plans of ``n`` units: ``C(n - 1, m - 1)`` bucketings of ``m`` buckets, each in
    ``m!`` launch orders with ``reorder`` (one without); once the count passes ``limit``, a
    number above it (the sum stops there)."""
    total, comb, orders = 0, 1, 1
    for m in range(1, n + 1):
        if m > 1:  # C(n - 1, m - 1) from C(n - 1, m - 2); m! from (m - 1)!
            comb = comb * (n - m + 1) // (m - 1)
            orders *= m if reorder else 1
        total += comb * orders
        if limit is not None and total > limit:
            return total
    return total


def enumerate_plans(inst: Instance, reorder: bool) -> tuple[int, Segments]:
    """The best plan over every bucketing and (with ``reorder``) every launch order, by the
    exact period (ticks): the optimum of the class, the first such plan in enumeration
    order. :func:`plan_count` plans are evaluated."""
    best: tuple[int, Segments] | None = None
    for bits in itertools.product((False, True), repeat=max(0, inst.n - 1)):
        segs = inst.segments_from_cuts(np.array(bits, dtype=bool))
        orders = itertools.permutations(segs) if reorder else iter([tuple(segs)])
        for order in orders:
            val = int(inst.evaluate(list(order)).period)
            if best is None or val < best[0]:
                best = (val, list(order))
    assert best is not None
    return best


def bottleneck(inst: Instance) -> ResourceView:
    """The resource view with the most work (start-up cost and bandwidth parts of all units)."""
    return max(resource_views(inst), key=lambda v: v.a + int(v.p.sum()))


def flow_order(trace: Trace, cluster: Cluster, opts: SolveOptions, inst: Instance
               ) -> Callable[[Segments], Segments]:
    """The launch order the local search gives a bucketing of several stages: the better, by
    the exact period, of Schrage's rule on the one-stage instance of the bottleneck resource
    (:func:`bottleneck`) and on the summed costs."""
    on = bottleneck(inst).on
    one = build_instance(trace, cluster, opts, merge=bool(opts.merge_layers),
                         stage=on[0] if len(on) == 1 else on)
    if one.n != inst.n:
        return lambda segs: schrage_order(inst, segs)

    def order(segs: Segments) -> Segments:
        cands = (schrage_order(one, segs), schrage_order(inst, segs))
        return min(cands, key=lambda c: inst.evaluate(c).period)

    return order
