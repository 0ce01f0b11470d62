"""The times a period is made of: the iteration's constants and one plan's buckets.

:class:`Consts` come from the units (seconds, :attr:`.units.Units.consts_s`) and the instance
(ticks, :attr:`.instance.Instance.consts`); :class:`BucketTimes` from
:meth:`.instance.Instance.evaluate`. The period terms of :mod:`.period` read both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

__all__ = ["BucketTimes", "Consts"]

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class Consts(Generic[T]):
    """Iteration constants, in ticks (``Consts[int]``) or seconds (``Consts[float]``).

    Attributes
    ----------
    F, B
        Sum of forward times, sum of backward times.
    U
        The update step of all parameters (ticks: the sum of the units' rounded shares).
    io, h2d
        Read and decode one batch; copy it to the GPU.
    """

    F: T
    B: T
    U: T
    io: T
    h2d: T

    @property
    def data(self) -> T:
        """The data path of one batch, ``io + h2d``."""
        return self.io + self.h2d  # type: ignore[operator,no-any-return]

    @property
    def k0(self) -> T:
        """The compute of one iteration, ``B + F + U``."""
        return self.B + self.F + self.U  # type: ignore[operator,no-any-return]


@dataclass(frozen=True)
class BucketTimes:
    """One plan's communication as the period terms need it (ticks or seconds).

    Attributes
    ----------
    lo, hi
        First and last unit of every bucket (launch order).
    dur
        Duration of every bucket on the link (one stage).
    ends
        End of every bucket's (last) communication, from the start of the backward.
    """

    lo: np.ndarray
    hi: np.ndarray
    dur: np.ndarray
    ends: np.ndarray
