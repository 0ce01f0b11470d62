"""Primal heuristics for reordered plans: list scheduling and a local search over cuts.

With per-layer next forward the buckets have releases and tails that grow together along the
ready order (a later-ready bucket is also more urgent), so Schrage's rule — when the link is
free, start the available bucket with the largest tail — launches the most recently ready bucket
first. :func:`local_search` improves the bucketing under that rule; the CP-SAT model then
polishes the plan and proves its bound.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

import numpy as np

from schedopt.optimize.instance import Instance, Segments

__all__ = ["jackson_orders", "local_search", "schrage_order"]


def schrage_order(inst: Instance, segs: Segments) -> Segments:
    """Launch order of the buckets ``segs`` by Schrage's rule (largest tail first among the
    ready buckets; ties to the later-ready one)."""
    by_ready = sorted(segs)
    pp = np.r_[0, np.cumsum(inst.p)]
    hi = np.array([s[1] for s in by_ready])
    lo = np.array([s[0] for s in by_ready])
    rel = inst.r[hi].tolist()
    tail = inst.terms.unit_tails[hi].tolist()
    dur = (inst.a + pp[hi + 1] - pp[lo]).tolist()
    m = len(by_ready)
    order: Segments = []
    heap: list[tuple[int, int]] = []
    t = -(1 << 62)
    i = 0
    while len(order) < m:
        while i < m and rel[i] <= t:
            heapq.heappush(heap, (-tail[i], -i))
            i += 1
        if not heap:
            t = rel[i]
            continue
        _, k = heapq.heappop(heap)
        k = -k
        order.append(by_ready[k])
        t = max(t, rel[k]) + dur[k]
    return order


def jackson_orders(segs: Segments) -> list[Segments]:
    """The launch orders of ``segs`` that Jackson's rules give around the last-ready bucket
    (the one holding the last unit in readiness order), each different from ``segs``.

    After that bucket every gradient is ready, and a bucket's delivery tail (the next forward
    from its first layer) grows with its last unit: the buckets launched after it, in
    decreasing order of their last unit, go largest tail first. The buckets launched before it
    go in the order they become ready. The two reorderings, alone and together, are the
    candidates; a random search reaches them only through several swaps, each of which can
    lengthen the period on its own."""
    last = max(hi for _, hi in segs)
    p = next(k for k, (_, hi) in enumerate(segs) if hi == last)
    before = sorted(segs[:p], key=lambda s: s[1])
    after = sorted(segs[p + 1:], key=lambda s: -s[1])
    out: list[Segments] = []
    for cand in ([*segs[:p + 1], *after], [*before, *segs[p:]], [*before, segs[p], *after]):
        if cand != list(segs) and cand not in out:
            out.append(cand)
    return out


def _value(inst: Instance, cuts: np.ndarray, reorder: bool,
           order: Callable[[Segments], Segments] | None = None) -> tuple[int, Segments]:
    segs = inst.segments_from_cuts(cuts)
    if reorder:
        segs = order(segs) if order is not None else schrage_order(inst, segs)
    return int(inst.evaluate(segs).period), segs


def local_search(inst: Instance, segs: Segments, *, reorder: bool, deadline: float,
                 seed: int = 0, max_rounds: int = 50, max_evals: int | None = None,
                 on_improve: Callable[[Segments, int], None] | None = None,
                 stats: dict[str, int] | None = None,
                 order: Callable[[Segments], Segments] | None = None) -> tuple[int, Segments]:
    """Hill-climb on the cut positions (add, remove, move a cut), each candidate launched by
    Schrage's rule when ``reorder``; keep the best plan found before ``deadline``.

    Parameters
    ----------
    inst
        The instance.
    segs
        Starting plan (its buckets; the order is recomputed).
    reorder
        Launch by Schrage's rule (else readiness order).
    deadline
        ``time.perf_counter()`` value at which to stop (a safety stop when ``max_evals`` is
        given: ``stats["deadline_stop"]`` is then set to 1).
    seed
        Seed of the move order.
    max_rounds
        Rounds without limit on improvements, each a full pass over the moves.
    max_evals
        Deterministic limit: the number of candidate plans evaluated (None: no limit).
    on_improve
        Called with every better plan and its period, as found (so that a stop loses none).
    stats
        When given, receives ``evals`` (candidates evaluated) and ``deadline_stop``.
    order
        The launch order of a bucketing when ``reorder`` (default: Schrage's rule on ``inst``;
        several stages use the rule of their bottleneck, :func:`.flowshop.flow_order`).
    """
    out = stats if stats is not None else {}
    out["evals"], out["deadline_stop"] = 0, 0
    cap = max_evals if max_evals is not None else 1 << 62
    rng = np.random.default_rng(seed)
    n = inst.n
    if n < 2:
        return int(inst.evaluate(segs).period), segs
    cuts = np.zeros(n - 1, dtype=bool)
    for _, hi in segs:
        if hi < n - 1:
            cuts[hi] = True
    best_val, best_segs = _value(inst, cuts, reorder, order)
    start_val = int(inst.evaluate(segs).period)
    if start_val < best_val:
        best_val, best_segs = start_val, segs
    for _ in range(max_rounds):
        improved = False
        positions = rng.permutation(n - 1)
        for i in positions.tolist():
            if out["evals"] >= cap:
                return best_val, best_segs
            if time.perf_counter() > deadline:
                out["deadline_stop"] = 1
                return best_val, best_segs
            moves = [("flip", i, 0)]
            if cuts[i]:
                moves += [("move", i, d) for d in (-3, -2, -1, 1, 2, 3) if 0 <= i + d < n - 1]
            for kind, j, d in moves:
                cand = cuts.copy()
                if kind == "flip":
                    cand[j] = not cand[j]
                else:
                    if cand[j + d]:
                        continue
                    cand[j], cand[j + d] = False, True
                val, s = _value(inst, cand, reorder, order)
                out["evals"] += 1
                if val < best_val:
                    best_val, best_segs, cuts = val, s, cand
                    improved = True
                    if on_improve is not None:
                        on_improve(best_segs, best_val)
                    break
        if not improved:
            break
    return best_val, best_segs
