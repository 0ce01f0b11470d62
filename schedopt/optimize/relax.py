"""What the optimizer's model leaves out of a cluster, and how its bound stays valid anyway.

The optimizer's model costs every communication stage with one line ``alpha + beta * n`` and
runs compute at full speed. Two cluster effects go beyond it (docs/model.md):

* a measured **cost curve** (``allreduce.segments``): the true cost ``c(n)`` of a stage may lie
  below its line at some sizes;
* the **overlap slowdown** ``s > 1``: compute that overlaps communication runs slower;
* the **communication slowdown** ``s_c > 1``: communication that overlaps compute runs slower.

On such a cluster the optimizer still searches its linear, full-speed model; every plan it
reports is re-simulated (the simulator models both effects exactly), and its bound is made valid
by a relaxation factor ``r``: with ``c(n) >= r * (alpha + beta * n)`` for every stage and every
size ``n >= 1`` and ``r <= 1``, each plan's true period is at least ``r`` times its model period
(the period is a maximum of sums of durations, non-decreasing in each duration, and compute
and communication durations are only lengthened by the slowdowns), so ``r`` times the model's
lower bound bounds the true optimum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from schedopt.model.cluster import Cluster, CommStage

__all__ = ["Relaxation", "curve_ratio", "relaxation"]


@dataclass(frozen=True)
class Relaxation:
    """How the model relaxes a cluster.

    Attributes
    ----------
    factor
        ``r`` in (0, 1]: the model's bound times ``r`` bounds the true optimum.
    effects
        The effects the model leaves out, in words (for the result's notes).
    """

    factor: float
    effects: tuple[str, ...]

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


def relaxation(cluster: Cluster, stages: Sequence[CommStage] | None = None) -> Relaxation | None:
    """The relaxation of ``cluster`` by the optimizer's model; None when the model is exact.

    Parameters
    ----------
    cluster
        The cluster solved on.
    stages
        Its communication stages (default: ``cluster.comm_stages()``).
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
    if not effects:
        return None
    return Relaxation(factor=factor, effects=tuple(effects))
