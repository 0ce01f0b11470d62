"""Windowed large-neighbourhood search around a plan, with the CP-SAT model as the repair step.

A window is a run of consecutive buckets in ready order. Inside it every cut (and, with
reordering, every launch side of the unimodal order) is free; each bucket outside it becomes one
coarse unit (:meth:`Instance.coarsen`) whose cuts and side are fixed. The coarse model has a few
hundred units even for thousands of tensors, and its objective is the same integer period as
the full model's, so an improvement is an improvement of the plan.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from .instance import Instance, Segments
from .model import CommModel, unimodal_order

__all__ = ["LnsResult", "windowed_lns"]

log = logging.getLogger("schedopt.optimize")


@dataclass
class LnsResult:
    """Outcome of :func:`windowed_lns`: the best plan, its period (ticks), the number of
    windows solved and of improvements."""

    segs: Segments
    value: int
    windows: int
    improvements: int


def _window(inst: Instance, segs: Segments, k0: int, k1: int
            ) -> tuple[Instance, np.ndarray, dict[int, bool], dict[int, bool], Segments]:
    """Coarse instance for the window of buckets ``k0..k1`` (ready order) of ``segs`` (in
    unimodal launch order), with the fixed cuts and launch sides of the outside buckets."""
    peak = next(k for k, s in enumerate(segs) if s[1] == inst.n - 1)
    early_of = {s: k <= peak for k, s in enumerate(segs)}
    by_ready = sorted(segs)
    w_lo, w_hi = by_ready[k0][0], by_ready[k1][1]
    groups: list[int] = []
    for lo, hi in by_ready:
        if lo >= w_lo and hi <= w_hi:
            groups.extend(range(lo, hi + 1))
        else:
            groups.append(lo)
    g = np.array(groups, dtype=np.int64)
    coarse = inst.coarsen(g)
    index = {int(u): c for c, u in enumerate(g)}
    fixed: dict[int, bool] = {}
    sides: dict[int, bool] = {}
    coarse_segs: Segments = []
    for lo, hi in segs:  # launch order
        inside = lo >= w_lo and hi <= w_hi
        c_lo = index[lo]
        c_hi = index[hi] if inside else c_lo
        coarse_segs.append((c_lo, c_hi))
        if not inside:
            fixed[c_lo] = True
            if c_lo > 0:
                fixed[c_lo - 1] = True
            sides[c_lo] = early_of[(lo, hi)]
    return coarse, g, fixed, sides, coarse_segs


def windowed_lns(inst: Instance, segs: Segments, value: int, *, reorder: bool,
                 deadline: float, lower: int, seed: int = 0, workers: int = 1,
                 window_units: int = 120, exact_updates: bool = True) -> LnsResult:
    """Improve ``segs`` (period ``value`` ticks) window by window until ``deadline``.

    Parameters
    ----------
    inst
        The instance.
    segs, value
        Starting plan (launch order) and its period.
    reorder
        Whether launch orders may differ from readiness order.
    deadline
        ``time.perf_counter()`` value at which to stop.
    lower
        A proven lower bound: stop when it is reached.
    seed, workers
        CP-SAT seed and workers.
    window_units
        Target number of units per window.

    With reordering the windows use the unimodal launch order with the update tails of
    ``exact_updates``; every candidate is judged by the exact period.
    """
    rng = np.random.default_rng(seed)
    order = "unimodal" if reorder else "fifo"
    best = unimodal_order(inst, list(segs)) if reorder else list(segs)
    best_val = int(inst.evaluate(best).period)
    if best_val > value:  # the unimodal order is never worse with growing tails; keep the input
        best, best_val = list(segs), int(value)
    windows = improvements = 0
    stale = 0
    while time.perf_counter() < deadline - 0.05 and best_val > lower:
        by_ready = sorted(best)
        sizes = np.array([hi - lo + 1 for lo, hi in by_ready])
        # pick a random start bucket, grow to about window_units units
        target = int(window_units * rng.uniform(0.6, 1.4))
        k0 = int(rng.integers(0, len(by_ready)))
        k1 = k0
        total = sizes[k0]
        while total < target and (k1 + 1 < len(by_ready) or k0 > 0):
            if k1 + 1 < len(by_ready) and (k0 == 0 or rng.random() < 0.5):
                k1 += 1
                total += sizes[k1]
            else:
                k0 -= 1
                total += sizes[k0]
        if reorder:
            best = unimodal_order(inst, best)
        coarse, g, fixed, sides, coarse_segs = _window(inst, best, k0, k1)
        left = deadline - time.perf_counter()
        limit = min(left, max(0.5, min(3.0, left / 4)))
        cm = CommModel(coarse, order=order, horizon=best_val, period_lb=lower,
                       exact_updates=exact_updates, fixed_cuts=fixed,
                       fixed_early=sides if reorder else None)
        cm.add_hint(coarse_segs)
        sol = cm.solve(time_limit_s=limit, workers=workers, seed=int(rng.integers(1 << 30)))
        windows += 1
        if sol.interrupted:
            log.warning("lns: interrupted")
            break
        if sol.segs is not None and sol.objective is not None and sol.objective < best_val:
            bounds = np.r_[g, inst.n]
            new = [(int(bounds[lo]), int(bounds[hi + 1] - 1)) for lo, hi in sol.segs]
            val = int(inst.evaluate(new).period)
            if val < best_val:
                log.info("lns: window %d..%d (%d units): %d -> %d ticks", k0, k1, total,
                         best_val, val)
                best, best_val = new, val
                improvements += 1
                stale = 0
                continue
        stale += 1
        if stale > 4 * max(1, len(by_ready) * 40 // max(window_units, 1)):
            break
    return LnsResult(best, best_val, windows, improvements)
