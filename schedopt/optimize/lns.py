"""Windowed large-neighbourhood search around a plan, with the CP-SAT model as the repair step.

A window is a random run of units in ready order. Inside it every cut (and, with reordering,
every launch side of the unimodal order) is free; each maximal piece of a bucket outside it
becomes one coarse unit (:meth:`Instance.coarsen`) with a fixed side, and the cuts between two
outside pieces stay. The coarse model has a few
hundred units even for thousands of tensors, and its objective is the same integer period as
the full model's, so an improvement is an improvement of the plan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from schedopt.optimize.control import Control
from schedopt.optimize.instance import Instance, Segments
from schedopt.optimize.model import CommModel, ModelSolution, unimodal_order

__all__ = ["LnsResult", "windowed_lns"]

log = logging.getLogger("schedopt.optimize")


@dataclass
class LnsResult:
    """Outcome of :func:`windowed_lns`: the best plan, its period (ticks), the number of
    windows solved and of improvements, the deterministic work done (s) and whether the
    wall-clock safety stop ended it."""

    segs: Segments
    value: int
    windows: int
    improvements: int
    work_s: float = 0.0
    wall_stop: bool = False


#: Deterministic charge (s) per coarse unit of a window's model (building it, judging plans).
BUILD_S_PER_UNIT = 1e-3


def _window(inst: Instance, segs: Segments, w_lo: int, w_hi: int
            ) -> tuple[Instance, np.ndarray, dict[int, bool], dict[int, bool], Segments]:
    """Coarse instance for the units ``w_lo..w_hi`` of the plan ``segs`` (unimodal launch
    order): every maximal piece of a bucket outside the window is one coarse unit with a fixed
    launch side; cuts between two outside pieces stay; the rest is free."""
    peak = next(k for k, s in enumerate(segs) if s[1] == inst.n - 1)
    early_of = {s: k <= peak for k, s in enumerate(segs)}
    by_ready = sorted(segs)
    parts: list[tuple[int, int, bool, tuple[int, int]]] = []  # lo, hi, outside, bucket
    for lo, hi in by_ready:
        if lo < w_lo:
            parts.append((lo, min(hi, w_lo - 1), True, (lo, hi)))
        for u in range(max(lo, w_lo), min(hi, w_hi) + 1):
            parts.append((u, u, False, (lo, hi)))
        if hi > w_hi:
            parts.append((max(lo, w_hi + 1), hi, True, (lo, hi)))
    g = np.array([p[0] for p in parts], dtype=np.int64)
    coarse = inst.coarsen(g)
    fixed: dict[int, bool] = {}
    sides: dict[int, bool] = {}
    first_part: dict[tuple[int, int], int] = {}
    last_part: dict[tuple[int, int], int] = {}
    for c, (_lo, hi, outside, bucket) in enumerate(parts):
        first_part.setdefault(bucket, c)
        last_part[bucket] = c
        if outside:
            sides[c] = early_of[bucket]
            if c + 1 < len(parts) and parts[c + 1][2] and hi == bucket[1]:
                fixed[c] = True  # a bucket boundary between two outside pieces
    coarse_segs = [(first_part[b], last_part[b]) for b in segs]
    return coarse, g, fixed, sides, coarse_segs


def _solve_window(inst: Instance, best: Segments, w_lo: int, w_hi: int, *, order: str,
                  reorder: bool, horizon: int, lower: int, exact_updates: bool,
                  time_limit_s: float, work_s: float | None, workers: int, seed: int,
                  control: Control | None) -> tuple[Segments | None, ModelSolution, int]:
    """Solve the coarse window ``w_lo..w_hi`` of ``best`` with CP-SAT.

    Returns the window's better plan in fine units (None when CP-SAT found none better than
    ``horizon``), CP-SAT's solution record, and the number of coarse units (for the work
    charge).
    """
    coarse, g, fixed, sides, coarse_segs = _window(inst, best, w_lo, w_hi)
    cm = CommModel(coarse, order=order, horizon=horizon, period_lb=lower,
                   exact_updates=exact_updates, fixed_cuts=fixed,
                   fixed_early=sides if reorder else None)
    cm.add_hint(coarse_segs)
    sol = cm.solve(time_limit_s=time_limit_s, workers=workers, seed=seed, control=control,
                   work_s=work_s)
    new = None
    if sol.segs is not None and sol.objective is not None and sol.objective < horizon:
        bounds = np.r_[g, inst.n]
        new = [(int(bounds[lo]), int(bounds[hi + 1] - 1)) for lo, hi in sol.segs]
    return new, sol, coarse.n


def windowed_lns(inst: Instance, segs: Segments, value: int, *, reorder: bool,
                 deadline: float, lower: int, seed: int = 0, workers: int = 1,
                 window_units: int = 120, exact_updates: bool = True,
                 control: Control | None = None, work_s: float | None = None,
                 on_improve: Callable[[Segments, int], None] | None = None) -> LnsResult:
    """Improve ``segs`` (period ``value`` ticks) window by window until ``deadline``; with
    reordering the windows use the unimodal launch order with the update tails of
    ``exact_updates``, and every candidate is judged by the exact period.

    Parameters
    ----------
    inst
        The instance.
    segs, value
        Starting plan (launch order) and its period.
    reorder
        Whether launch orders may differ from readiness order.
    deadline
        ``time.perf_counter()`` value at which to stop (only a safety stop with ``work_s``).
    lower
        A proven lower bound: stop when it is reached.
    seed, workers
        CP-SAT seed and workers.
    window_units
        Target number of units per window.
    control
        Stops the search on Ctrl-C or the solve's deadline (:class:`~.control.Control`).
    work_s
        Deterministic limit (s): CP-SAT's deterministic time of the windows plus
        :data:`BUILD_S_PER_UNIT` per coarse unit; the same inputs and seed then give the same
        result whatever the machine's load. None: the windows run on the wall clock.
    on_improve
        Called with every better plan and its period, as found (so that a stop loses none).
    """
    rng = np.random.default_rng(seed)
    best = unimodal_order(inst, list(segs)) if reorder else list(segs)
    best_val = int(inst.evaluate(best).period)
    if best_val > value:  # the unimodal order is never worse with growing tails; keep the input
        best, best_val = list(segs), int(value)
    windows, improvements, stale, used, wall_stop = 0, 0, 0, 0.0, False
    while best_val > lower:
        if time.perf_counter() >= deadline - 0.05:
            wall_stop = work_s is not None
            break
        if work_s is not None and used >= work_s - 0.05:
            break
        # a random run of about window_units units
        size = min(inst.n, max(8, int(window_units * rng.uniform(0.6, 1.4))))
        w_lo = int(rng.integers(0, inst.n - size + 1))
        w_hi = w_lo + size - 1
        if reorder:
            best = unimodal_order(inst, best)
        wall_left = deadline - time.perf_counter()
        left = wall_left if work_s is None else work_s - used
        limit = min(left, max(0.5, min(3.0, left / 4)))
        new, sol, units = _solve_window(
            inst, best, w_lo, w_hi, order="unimodal" if reorder else "fifo", reorder=reorder,
            horizon=best_val, lower=lower, exact_updates=exact_updates,
            time_limit_s=limit if work_s is None else wall_left,
            work_s=None if work_s is None else limit, workers=workers,
            seed=int(rng.integers(1 << 30)), control=control)
        used += sol.work_s + BUILD_S_PER_UNIT * units
        windows += 1
        if sol.interrupted:
            log.warning("lns: interrupted after %.2f s of %.2f s", sol.wall_s, limit)
            break
        if new is not None:
            val = int(inst.evaluate(new).period)
            if val < best_val:
                log.info("lns: window %d..%d: %d -> %d ticks", w_lo, w_hi, best_val, val)
                best, best_val = new, val
                improvements += 1
                if on_improve is not None:
                    on_improve(best, best_val)
                stale = 0
                continue
        stale += 1
        if stale > 8 * max(1, inst.n // max(window_units, 1)):
            break
    return LnsResult(best, best_val, windows, improvements, used, wall_stop)
