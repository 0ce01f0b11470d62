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
  position.

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

__all__ = ["START_TEMPERATURE", "EvalCost", "anneal"]

#: Starting temperature as a share of the start's period (0.2%: measured on the benchmark's
#: dedicated-server rows, where 0.5% and 1% end worse and 0.05-0.1% barely move).
START_TEMPERATURE = 2e-3


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


def _move(segs: Segments, rng: random.Random) -> Segments | None:
    """One random move of the module docstring, or None when the drawn move does not apply."""
    x = list(segs)
    m = len(x)
    kind = rng.random()
    if kind < 0.4:
        a, b = rng.randrange(m), rng.randrange(m)
        if a == b:
            return None
        x.insert(b, x.pop(a))
    elif kind < 0.6:
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
        nxt = [j for j, (start, _) in enumerate(x) if start == hi + 1]
        if not nxt:
            return None
        j = nxt[0]
        x[k] = (lo, x[j][1])
        del x[j]
    return x


def anneal(inst: Instance, segs: Segments, *, max_evals: int, seed: int,
           deadline: float | None = None, stats: dict[str, int] | None = None,
           cost: EvalCost | None = None) -> tuple[int, Segments]:
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

    Returns
    -------
    tuple of (int, Segments)
        The best period (ticks) and its plan, never worse than the start's.
    """
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
        cand = _move(cur_segs, rng)
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

