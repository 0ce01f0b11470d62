"""Plans of the unimodal programme on coarse units: runs of whole layers.

The unimodal programme (:mod:`.unimodal`) is the strongest plan search of the reordered
per-layer class, but its fronts grow with the number of units: at 5,000 units one exact test
examines far more than its state limit. A restriction keeps it usable: group the units into
runs of whole layers (:meth:`.Instance.coarsen`, the same tick and integer data), so that
buckets may only end between groups, and run the programme on the few hundred coarse units.
Every plan of the coarse instance is a plan of the fine one with the same period
(``Instance.evaluate`` judges it exactly); the coarse programme's bound is a bound of the
*restricted* class only and is never reported.

On ``synthetic-5000`` (per-layer + reorder) the bucketings are few and long (five to seven
buckets), so a coarse grid of 50 or 100 groups already holds a plan within 0.3% of the DP lower
bound over bucketings (docs/formulation.md, section 7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedopt.optimize.instance import Instance, Segments
from schedopt.optimize.unimodal import unimodal_exact

__all__ = ["CoarseResult", "coarse_programme", "layer_groups"]

#: Coarse sizes tried in turn (units), each from the best plan of the one before.
COARSE_SIZES = (50, 100)


@dataclass
class CoarseResult:
    """The best plan found on coarse units (fine segments; empty when none beat ``hi``), its
    period (ticks), the programme's states examined over all sizes, and whether the wall-clock
    safety stop ended a run."""

    segs: Segments
    value: int
    work: int = 0
    wall_stop: bool = False


def layer_groups(inst: Instance, size: int) -> np.ndarray:
    """First units of about ``size`` groups of consecutive whole layers (ready order).

    Parameters
    ----------
    inst
        The instance (units in ready order, ``inst.layer`` non-increasing).
    size
        The number of groups wanted (at least 1); fewer when there are fewer layers.

    Returns
    -------
    numpy.ndarray
        Increasing unit indices, starting with 0: every group starts at a layer's first unit.
    """
    starts = np.flatnonzero(np.r_[True, inst.layer[1:] != inst.layer[:-1]])
    per = max(1, -(-len(starts) // max(1, int(size))))
    return starts[::per].astype(np.int64)


def _fine(groups: np.ndarray, n: int, segs: Segments) -> Segments:
    """Coarse segments (same launch order) as segments of the fine units."""
    bounds = np.r_[groups, n]
    return [(int(bounds[lo]), int(bounds[hi + 1] - 1)) for lo, hi in segs]


def coarse_programme(inst: Instance, lo: int, hi: int, *, deadline: float | None,
                     max_work: int | None, sizes: tuple[int, ...] = COARSE_SIZES
                     ) -> CoarseResult:
    """Run the unimodal programme on coarse units of ``inst``, size after size.

    Parameters
    ----------
    inst
        The fine instance (per-layer, one stage).
    lo
        A period known infeasible for every plan (a proven bound minus one).
    hi
        The period (ticks) of the best plan known: each run looks for a better one.
    deadline
        The ``time.perf_counter()`` safety stop.
    max_work
        The deterministic limit on the states examined over all sizes.
    sizes
        The numbers of coarse units, in the order tried (the programme gives up above its
        :data:`.unimodal.MAX_UNITS`).

    Returns
    -------
    CoarseResult
        The best plan (fine segments) with its exact period, and the work done.
    """
    out = CoarseResult([], int(hi))
    for size in sizes:
        groups = layer_groups(inst, size)
        if max_work is not None and out.work >= max_work:
            continue
        coarse = inst.coarsen(groups)
        left = None if max_work is None else max_work - out.work
        res = unimodal_exact(coarse, lo, out.value, deadline=deadline, max_work=left)
        if res is None:
            continue
        out.work += res.work
        out.wall_stop |= res.wall_stop
        if res.segs:
            segs = _fine(groups, inst.n, res.segs)
            value = int(inst.evaluate(segs).period)
            if value < out.value:
                out.segs, out.value = segs, value
        if res.wall_stop:
            break
    return out
