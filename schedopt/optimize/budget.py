"""The time limit of one solve and the shares of it its steps get.

:class:`Budget` owns the time limit and the deterministic work of the search; a step asks it
for a :class:`Share` of what is left. :func:`.solve.solve` and the sharded search
(:mod:`.sharding.solve`) run under it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["AGREE", "WORK_FRACTION", "Budget", "Share"]

#: Relative tolerance of "objective and simulation agree".
AGREE = 1e-3

#: The deterministic work of the search steps, as a fraction of the time limit (the rest
#: covers what the work measures leave out: building models, judging plans, the baselines).
WORK_FRACTION = 0.7


@dataclass(frozen=True)
class Share:
    """A step's share of the time left: ``min(cap_s, fraction * left)`` seconds."""

    fraction: float
    cap_s: float = float("inf")


class Budget:
    """The time limit of one solve and the shares its steps get.

    Every search step runs under a deterministic limit, a share of the work left
    (:meth:`work`): CP-SAT's deterministic time, the candidates of the local search, the
    states of the unimodal programme. The same inputs, seed and one worker thus give the same
    result whatever the machine's load. The wall clock (``deadline``) is only a safety stop.

    Parameters
    ----------
    limit_s
        The time limit (s), counted from construction.
    work_limit_s
        The search's deterministic work (s); None: :data:`WORK_FRACTION` of ``limit_s``.
    """

    def __init__(self, limit_s: float, work_limit_s: float | None = None) -> None:
        self.t0 = time.perf_counter()
        self.limit_s = limit_s
        self.deadline = self.t0 + limit_s
        self.work_limit_s = WORK_FRACTION * limit_s if work_limit_s is None else work_limit_s
        self.work_used_s = 0.0

    def work_left(self) -> float:
        """Deterministic seconds left for the search."""
        return max(0.0, self.work_limit_s - self.work_used_s)

    def work(self, share: Share) -> float:
        """Deterministic seconds of a step taking ``share`` of the work left."""
        return min(share.cap_s, share.fraction * self.work_left())

    def spend(self, work_s: float) -> None:
        """Count ``work_s`` deterministic seconds as done."""
        self.work_used_s += max(0.0, work_s)

    def elapsed(self) -> float:
        """Seconds since the start."""
        return time.perf_counter() - self.t0

    def left(self) -> float:
        """Seconds left (negative once the limit has passed)."""
        return self.deadline - time.perf_counter()

    def until(self, share: Share) -> float:
        """The ``perf_counter`` deadline of a step taking ``share`` of the time left."""
        now = time.perf_counter()
        return now + min(share.cap_s, share.fraction * (self.deadline - now))

    def of_limit(self, share: Share) -> float:
        """The ``perf_counter`` deadline of ``share`` of the whole limit, from the start."""
        return self.t0 + min(share.cap_s, share.fraction * self.limit_s)
