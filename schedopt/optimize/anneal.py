"""Simulated annealing over bucketings and launch orders, judged by the exact period.

The local search of :mod:`.heuristics` moves one cut or one bucket at a time and keeps a move
only when the period falls. On several communication stages with reordering that is not
enough: a plan can be better only after several moves together (a large bucket launched
elsewhere, and the buckets around it split or merged to fill the gaps it leaves on each
link), and every single one of them makes the period worse. Annealing accepts such moves for
a while. From the best plan, each step draws one move:

* *relocate*: take one bucket out of the launch order and put it back elsewhere;
* *swap*: exchange the launch positions of two buckets;
* *split*: cut one bucket in two at a random unit, the halves launched one after the other
  in either order;
* *merge*: join a bucket with the bucket that holds the next units, at the first one's
  position;
* *shift* (only with ``shift > 0``, drawn instead of some splits and merges): move one to
  :data:`SHIFT_UNITS` units across the border of a bucket and the bucket that holds the units
  next to it, both keeping their launch positions. Split and merge reach the same plan in two
  steps, the first of which usually lengthens the period; where a bucket's start-up cost
  weighs as much as a unit's transfer (:func:`regime`) the borders decide the plan.

Each keeps the plan valid (contiguous runs of units covering every unit once). A move that
does not lengthen the period is taken; a longer one with probability ``exp(-delta / T)``, where
the temperature ``T`` falls linearly from :data:`START_TEMPERATURE` times the start's period
to one tick over the evaluations. The number of evaluations sets the run; a deterministic
work limit (:class:`EvalCost`: a charge per evaluation and per bucket of the plan evaluated)
may stop it early, at the same point on every machine, and a larger limit continues the same
run. The random stream is seeded, so the same inputs and seed give the same plan; a deadline
is only a safety stop. The best plan seen is returned, never worse than the start.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from schedopt.optimize.instance import Instance, Segments

__all__ = ["SHIFT_SHARE", "SHIFT_UNITS", "SHIFT_WEIGHT", "START_TEMPERATURE", "EvalCost",
           "Regime", "anneal", "fresh_start", "regime", "startup_weight"]

#: Starting temperature as a share of the start's period (0.2%: measured on the benchmark's
#: dedicated-server rows, where 0.5% and 1% end worse and 0.05-0.1% barely move).
START_TEMPERATURE = 2e-3

#: Share of the moves that are shifts where start-up costs weigh (:func:`regime`), taken from
#: the splits and merges (measured on the benchmark's pipelined rows, section 6 of
#: docs/formulation.md).
SHIFT_SHARE = 0.2

#: Most units one shift moves across a border.
SHIFT_UNITS = 3

#: Start-up weight (:func:`startup_weight`) from which start-up costs weigh (:func:`regime`).
SHIFT_WEIGHT = 0.5

#: Share of the draws that reorder (relocations below 0.4, swaps up to this); the splits and
#: merges, and the shifts taken from them, share the rest.
_REORDER = 0.6


@dataclass(frozen=True)
class EvalCost:
    """The deterministic charge of the evaluations of a run, and the most it may spend.

    Attributes
    ----------
    per_eval_s
        Seconds charged per evaluation (the call and the move).
    per_bucket_s
        Seconds charged per bucket of the plan evaluated (the serving of its stages).
    limit_s
        The most a run may spend (seconds of work).
    """

    per_eval_s: float
    per_bucket_s: float
    limit_s: float

    def work(self, evals: int, buckets: int) -> float:
        """Seconds charged for ``evals`` evaluations of ``buckets`` buckets in all."""
        return evals * self.per_eval_s + buckets * self.per_bucket_s


@dataclass(frozen=True)
class Regime:
    """How the annealing searches an instance (:func:`regime`).

    Attributes
    ----------
    shift
        The share of shift moves (0: none, and the moves of a run without them).
    restarts
        Whether the runs of ``solve`` after the first start from :func:`fresh_start` instead of
        the best plan.
    """

    shift: float
    restarts: bool


def startup_weight(inst: Instance) -> float:
    """A bucket's start-up costs (every stage's, summed) over a unit's mean transfer time
    over the stages: 1.8-5.5 on the benchmark's pipelined hierarchical all-reduce rows
    (``benchmarks/bench_multistage.py``, seeds 0-7), 0.005-0.014 on its dedicated parameter
    servers."""
    per_unit = float(inst.stage_p.sum()) / max(1, inst.n)
    return float(inst.stage_a.sum()) / per_unit if per_unit > 0 else float("inf")


def regime(inst: Instance) -> Regime:
    """Where start-up costs weigh (:func:`startup_weight` at least :data:`SHIFT_WEIGHT`) the
    borders of the buckets decide the plan, and runs from the best plan tend to end in its
    basin: shifts (:data:`SHIFT_SHARE`), and the runs after the first from a fresh start.
    Elsewhere (the dedicated servers, where the launch order decides) neither helps: the four
    other moves only, every run from the best plan."""
    if startup_weight(inst) >= SHIFT_WEIGHT:
        return Regime(SHIFT_SHARE, True)
    return Regime(0.0, False)


def fresh_start(inst: Instance) -> Segments:
    """One bucket per unit, the last ready launched first: the start of a restart, as far
    from every bucketing as any."""
    return [(u, u) for u in range(inst.n - 1, -1, -1)]


def _holding(x: Segments, unit: int) -> int | None:
    """The position of the bucket of ``x`` that holds ``unit``, or None (no such unit)."""
    return next((j for j, (lo, hi) in enumerate(x) if lo <= unit <= hi), None)


def _shift(x: Segments, rng: random.Random) -> Segments | None:
    """A shift (module docstring) of ``x`` in place, or None when the drawn one does not
    apply (no such neighbour, or the giving bucket would be left empty)."""
    k = rng.randrange(len(x))
    lo, hi = x[k]
    right = rng.random() < 0.5
    d = rng.randint(1, SHIFT_UNITS)
    take = rng.random() < 0.5
    j = _holding(x, hi + 1 if right else lo - 1)
    if j is None:
        return None
    lo2, hi2 = x[j]
    if (hi2 - lo2 if take else hi - lo) < d:  # the giver keeps a unit at least
        return None
    if right:
        x[k], x[j] = ((lo, hi + d), (lo2 + d, hi2)) if take else ((lo, hi - d), (hi - d + 1, hi2))
    else:
        x[k], x[j] = ((lo - d, hi), (lo2, hi2 - d)) if take else ((lo + d, hi), (lo2, lo + d - 1))
    return x


def _move(segs: Segments, rng: random.Random, shift: float = 0.0) -> Segments | None:
    """One random move of the module docstring, or None when the drawn move does not apply;
    ``shift`` of the draws are shifts (taken from splits and merges; none draws exactly the
    moves of a run without them)."""
    x = list(segs)
    m = len(x)
    kind = rng.random()
    if shift > 0 and kind >= _REORDER:
        if kind < _REORDER + shift:
            return _shift(x, rng)
        kind = _REORDER + (kind - _REORDER - shift) * (1 - _REORDER) / (1 - _REORDER - shift)
    if kind < 0.4:
        a, b = rng.randrange(m), rng.randrange(m)
        if a == b:
            return None
        x.insert(b, x.pop(a))
    elif kind < _REORDER:
        a, b = rng.randrange(m), rng.randrange(m)
        if a == b:
            return None
        x[a], x[b] = x[b], x[a]
    elif kind < 0.8:
        k = rng.randrange(m)
        lo, hi = x[k]
        if lo == hi:
            return None
        c = rng.randrange(lo, hi)
        halves = [(lo, c), (c + 1, hi)]
        x[k:k + 1] = halves if rng.random() < 0.5 else halves[::-1]
    else:
        k = rng.randrange(m)
        lo, hi = x[k]
        j = _holding(x, hi + 1)
        if j is None:
            return None
        x[k] = (lo, x[j][1])
        del x[j]
    return x


def anneal(inst: Instance, segs: Segments, *, max_evals: int, seed: int,
           deadline: float | None = None, stats: dict[str, int] | None = None,
           cost: EvalCost | None = None, shift: float = 0.0) -> tuple[int, Segments]:
    """The best plan found by annealing from ``segs`` (module docstring).

    Parameters
    ----------
    inst
        The instance; plans are judged by ``inst.evaluate`` (the exact period, every stage).
    segs
        The start: buckets in launch order.
    max_evals
        Periods evaluated at most (the deterministic limit).
    seed
        Seed of the random moves.
    deadline
        A ``time.perf_counter()`` value: a safety stop only.
    stats
        Receives ``evals``, ``buckets`` (the buckets of every plan evaluated, summed) and
        ``deadline_stop`` (1: the deadline stopped it).
    cost
        The deterministic charge of one evaluation and the work the run may spend: it stops
        once the next evaluation could pass it. The temperature falls over ``max_evals``
        whatever the work, so a run stopped by its work is the start of the run that a larger
        budget completes, and ends no better.
    shift
        The share of shift moves (:class:`Regime`; 0: none), below 0.4 (the share of the splits
        and merges it is taken from).

    Returns
    -------
    tuple of (int, Segments)
        The best period (ticks) and its plan, never worse than the start's.
    """
    if not 0.0 <= shift < 1 - _REORDER:
        raise ValueError(f"shift must be in [0, {1 - _REORDER:g}) (a share of the moves), "
                         f"got {shift!r}")
    out = stats if stats is not None else {}
    cur_segs, cur = list(segs), int(inst.evaluate(segs).period)
    best, best_segs = cur, list(segs)
    rng = random.Random(seed)
    start_t = START_TEMPERATURE * cur
    evals = draws = 1
    buckets = len(segs)
    deadline_stop = False
    while evals < max_evals and draws < 4 * max_evals:  # draws: a plan no move applies to
        draws += 1
        if deadline is not None and draws % 64 == 0 and time.perf_counter() > deadline:
            deadline_stop = True
            break
        cand = _move(cur_segs, rng, shift)
        if cand is None:
            continue
        if cost is not None and cost.work(evals + 1, buckets + len(cand)) > cost.limit_s:
            break
        value = int(inst.evaluate(cand).period)
        evals += 1
        buckets += len(cand)
        temp = start_t * (1.0 - evals / max_evals) + 1.0
        if value <= cur or rng.random() < math.exp((cur - value) / temp):
            cur_segs, cur = cand, value
            if value < best:
                best, best_segs = value, list(cand)
    out["evals"], out["buckets"], out["deadline_stop"] = evals, buckets, int(deadline_stop)
    return best, best_segs

