"""The optimizer's integer data: the units of :mod:`.units` in ticks, and the period.

An :class:`Instance` is made once the tick is chosen (:func:`choose_tick`, from the units' data
in seconds) and never changes. Times are measured from the start of the backward of one
iteration. :meth:`Instance.evaluate` computes the simulator's period exactly for any list of
segments, in integer ticks (the model's arithmetic) or in seconds: the ends of the buckets here
(one stage: a chain with releases; several: :meth:`Instance.stage_schedule`), the next-forward
mode's terms in :mod:`.period`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Generic, TypeVar, cast

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster, CommStage
from schedopt.model.plan import Plan, interleave
from schedopt.model.trace import Trace
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.period import PeriodTerms, period_terms
from schedopt.optimize.times import BucketTimes, Consts
from schedopt.optimize.units import Segments, Units, build_units
from schedopt.simulate.simulator import chain_ends, serve_in_sequence

__all__ = ["Evaluation", "Instance", "Segments", "build_instance", "choose_tick"]

#: Largest model error, as a fraction of the lower bound, that the tick may cause.
TICK_BUDGET = 5e-4

V = TypeVar("V")


@dataclass(frozen=True, eq=False)
class Evaluation:
    """The period of one list of segments, as the model computes it.

    Attributes
    ----------
    period
        Period (ticks or seconds).
    plan
        The buckets (first and last unit, launch order), their duration on the link (one
        stage: the whole cost; several: the summed cost) and the end of their (last)
        communication, from the start of the backward.
    stage_times
        Several stages: start and end of every bucket on every stage (shape ``(stages,
        buckets)``, :meth:`Instance.stage_schedule`); None with one stage.
    """

    period: Any
    plan: BucketTimes
    stage_times: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def ends(self) -> np.ndarray:
        """End of every bucket's (last) communication, in launch order."""
        return self.plan.ends


class _FromUnits(Generic[V]):
    """A read-only attribute of the instance's :class:`~.units.Units`, under the same name
    (read once, then kept on the instance like a cached property: the units never change)."""

    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Instance | None, owner: type | None = None) -> V:
        if obj is None:  # on the class: not an attribute of its own
            raise AttributeError(self.name)
        value = getattr(obj.units, self.name)
        obj.__dict__[self.name] = value
        return cast(V, value)


@dataclass(frozen=True, eq=False)
class Instance:
    """The units' data in integer ticks, and the period formula.

    Every attribute of :class:`~.units.Units` (``n``, ``layer``, ``stages``, ``to_plan``, ...)
    reads through under the same name.

    Attributes
    ----------
    units
        The units, in seconds and bytes.
    tick
        Seconds per integer tick (positive).
    """

    units: Units
    tick: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.tick) and self.tick > 0):
            raise SchedoptError("the time unit must be a positive number", "tick", self.tick)

    # ------------------------------------------------------- the units, under their names
    trace = _FromUnits[Trace]()
    cluster = _FromUnits[Cluster]()
    mode = _FromUnits[str]()
    prefetch = _FromUnits[int]()
    stages = _FromUnits[tuple[CommStage, ...]]()
    alpha = _FromUnits[float]()
    beta = _FromUnits[float]()
    tensors = _FromUnits[list[str]]()
    base_tensor = _FromUnits[np.ndarray]()
    base_offset = _FromUnits[np.ndarray]()
    base_bytes = _FromUnits[np.ndarray]()
    unit_start = _FromUnits[np.ndarray]()
    layer = _FromUnits[np.ndarray]()
    nbytes = _FromUnits[np.ndarray]()
    n = _FromUnits[int]()
    per_layer = _FromUnits[bool]()
    pcie_coupled = _FromUnits[bool]()
    layer_first_unit = _FromUnits[np.ndarray]()
    layer_runs = _FromUnits[list[tuple[int, int]]]()
    gate_runs = _FromUnits[list[tuple[int, tuple[int, int]]]]()
    first_layer_units = _FromUnits[int | None]()
    F = _FromUnits[float]()
    B = _FromUnits[float]()
    layer_ready_s = _FromUnits[np.ndarray]()
    forward_from_s = _FromUnits[np.ndarray]()
    release_s = _FromUnits[np.ndarray]()
    prefix_bytes = _FromUnits[np.ndarray]()
    total_bytes = _FromUnits[int]()
    upd_prefix_s = _FromUnits[np.ndarray]()
    consts_s = _FromUnits[Consts[float]]()
    lower_bound_s = _FromUnits[float]()

    def last_stage_groups(self) -> list[tuple[int, ...]]:
        """:meth:`.Units.last_stage_groups`."""
        return self.units.last_stage_groups()

    def segments_from_cuts(self, cuts: np.ndarray) -> Segments:
        """:meth:`.Units.segments_from_cuts`."""
        return self.units.segments_from_cuts(cuts)

    def to_plan(self, segs: Segments, policy: str = "optimal", knobs: dict | None = None) -> Plan:
        """:meth:`.Units.to_plan`."""
        return self.units.to_plan(segs, policy, knobs)

    def segments_of_plan(self, plan: Plan) -> tuple[Segments, str]:
        """:meth:`.Units.segments_of_plan`."""
        return self.units.segments_of_plan(plan)

    def is_fifo(self, segs: Segments) -> bool:
        """:meth:`.Units.is_fifo`."""
        return self.units.is_fifo(segs)

    # -------------------------------------------------------------------------- ticks
    def ticks(self, seconds: float | np.ndarray) -> np.ndarray:
        """Round seconds to integer ticks."""
        return np.rint(np.asarray(seconds, dtype=float) / self.tick).astype(np.int64)

    @cached_property
    def r(self) -> np.ndarray:
        """Release of every unit (ticks)."""
        return self.ticks(self.release_s)

    @cached_property
    def base_p(self) -> np.ndarray:
        """Bandwidth part ``beta * bytes`` of every base piece (ticks)."""
        return self.ticks(self.beta * self.base_bytes)

    @cached_property
    def p(self) -> np.ndarray:
        """Bandwidth part of every unit (ticks): the sum over its base pieces, so that
        coarser units (:meth:`coarsen`) add up to the same integers."""
        return np.add.reduceat(self.base_p, self.unit_start[:-1])

    @cached_property
    def a(self) -> int:
        """Start-up cost ``alpha`` of one bucket (ticks), at least one tick when there is
        communication.

        A bucket of zero ticks would be an empty interval, which CP-SAT's no-overlap lets sit
        inside another bucket, while the simulator still runs it in its launch-order slot; one
        tick keeps the two the same (the tick budget counts this rounding).
        """
        a = int(self.ticks(self.alpha))
        return max(a, 1) if self.stages else a

    @cached_property
    def stage_p(self) -> np.ndarray:
        """Bandwidth part of every unit on every stage (ticks, shape ``(stages, n)``), summed
        over base pieces like :attr:`p`."""
        rows = [np.add.reduceat(self.ticks(st.beta_s_per_byte * self.base_bytes),
                                self.unit_start[:-1]) for st in self.stages]
        return np.array(rows, dtype=np.int64).reshape(len(self.stages), self.n)

    @cached_property
    def _prefix_p(self) -> np.ndarray:
        """Prefix sums of :attr:`p`, a zero first."""
        return np.r_[0, np.cumsum(self.p)]

    @cached_property
    def _stage_prefix(self) -> np.ndarray:
        """Prefix sums of :attr:`stage_p` along the units, a zero column first."""
        return np.c_[np.zeros((len(self.stages), 1), np.int64), np.cumsum(self.stage_p, axis=1)]

    @cached_property
    def _stage_resources(self) -> list[tuple[str, ...]]:
        """The resources each stage holds."""
        return [st.resources for st in self.stages]

    @cached_property
    def stage_a(self) -> np.ndarray:
        """Start-up cost of one bucket on every stage (ticks)."""
        return self.ticks(np.array([st.alpha_s for st in self.stages], dtype=float))

    @cached_property
    def upd_prefix(self) -> np.ndarray:
        """Update share of units ``0 .. i`` (ticks), a non-decreasing array."""
        return self.ticks(self.upd_prefix_s)

    @cached_property
    def fwd_from(self) -> np.ndarray:
        """``sum_{m >= l} f_m`` per layer (ticks)."""
        return self.ticks(self.forward_from_s)

    @cached_property
    def fwd_before(self) -> np.ndarray:
        """Forward time of the layers before ``l`` (ticks), as ``F - fwd_from[l]`` so that
        the two add up exactly."""
        return int(self.ticks(self.F)) - self.fwd_from

    @cached_property
    def consts(self) -> Consts[int]:
        """Iteration constants in ticks: F, B, U, io, h2d."""
        tr = self.trace
        return Consts(F=int(self.ticks(self.F)), B=int(self.ticks(self.B)),
                      U=int(self.upd_prefix[-1]), io=int(self.ticks(tr.io_s)),
                      h2d=int(self.ticks(tr.h2d_s)))

    @cached_property
    def terms(self) -> PeriodTerms:
        """The period terms of the next-forward mode (:mod:`.period`)."""
        return period_terms(self)

    @property
    def tail(self) -> np.ndarray:
        """Delivery tail of every unit (ticks): :attr:`.period.PeriodTerms.unit_tails`."""
        return self.terms.unit_tails

    # ------------------------------------------------------------------------ evaluation
    def stage_schedule(self, segs: Segments, *, seconds: bool = False
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of every bucket on every stage (shape ``(stages, buckets)``), exactly
        as the simulator serves several stages.

        Every stage keeps the launch order; the tasks go through the shared resources in the
        order of :func:`~schedopt.model.plan.interleave`, each starting once its resources are free
        and the bucket's previous stage (or, for the first, the bucket) is ready. The
        resources start free: each iteration's communication ends before the next backward.
        """
        return self._schedule(*_bounds_of(segs), seconds)

    def _schedule(self, lo: np.ndarray, hi: np.ndarray, seconds: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`stage_schedule` of the buckets ``lo[k]..hi[k]``."""
        m, n_s = len(lo), len(self.stages)
        if seconds:
            prefix = np.r_[0, np.cumsum(self.nbytes)].astype(float)
            dur = np.array([st.alpha_s + st.beta_s_per_byte * (prefix[hi + 1] - prefix[lo])
                            for st in self.stages])
            rel = self.release_s[hi].astype(float)
        else:
            prefix_p = self._stage_prefix
            dur = self.stage_a[:, None] + prefix_p[:, hi + 1] - prefix_p[:, lo]
            rel = self.r[hi]
        start, end = serve_in_sequence(stage_sequence(m, n_s), self._stage_resources,
                                       dur.T.astype(float), rel.astype(float), {})
        kind = float if seconds else np.int64
        return start.T.astype(kind), end.T.astype(kind)

    def evaluate(self, segs: Segments, *, seconds: bool = False) -> Evaluation:
        """Period of the plan made of ``segs`` (launch order), exactly as the simulator has it
        (the bucket ends here, the mode's terms in :attr:`terms`).

        Parameters
        ----------
        segs
            Segments ``(lo, hi)`` covering every unit once, in launch order.
        seconds
            Compute in seconds (float) instead of integer ticks.
        """
        lo, hi = _bounds_of(segs)
        if seconds:
            prefix_p = np.r_[0.0, np.cumsum(self.beta * self.nbytes)]
            dur = self.alpha + prefix_p[hi + 1] - prefix_p[lo]
            rel = self.release_s[hi]
        else:
            prefix_p = self._prefix_p
            dur = self.a + prefix_p[hi + 1] - prefix_p[lo]
            rel = self.r[hi]
        if not self.stages:
            dur = dur * 0
        stage_times = None
        if len(self.stages) > 1:  # the end of every bucket's last stage
            stage_times = self._schedule(lo, hi, seconds)
            ends = stage_times[1][-1]
        else:
            ends = chain_ends(-np.inf, dur.astype(float), rel.astype(float))
            if not seconds:
                ends = np.rint(ends).astype(np.int64)
        plan = BucketTimes(lo, hi, dur, ends)
        return Evaluation(self.terms.value(plan, seconds=seconds), plan, stage_times)

    def coarsen(self, groups: np.ndarray) -> Instance:
        """A new instance, with the same tick, whose units are runs of this one's
        (:meth:`.Units.coarsen`); all integer data stay sums of the same base ticks, so a plan
        has the same period in both."""
        return Instance(self.units.coarsen(groups), self.tick)


def _bounds_of(segs: Segments) -> tuple[np.ndarray, np.ndarray]:
    """The first and last unit of every segment, as arrays."""
    m = len(segs)
    return (np.fromiter((s[0] for s in segs), dtype=np.int64, count=m),
            np.fromiter((s[1] for s in segs), dtype=np.int64, count=m))


@lru_cache(maxsize=64)
def stage_sequence(m: int, stages: int) -> tuple[tuple[int, int], ...]:
    """The ``(stage, bucket)`` tasks of ``m`` buckets on ``stages`` stages, every stage in
    launch order, in the order the shared resources serve them
    (:func:`~schedopt.model.plan.interleave`); kept, since plans of one size share it (the
    last 64 sizes; one of 5,000 buckets on three stages holds 1.2 MB)."""
    return tuple(interleave([list(range(m))] * stages))


def choose_tick(units: Units) -> float:
    """Seconds per tick for ``units``: small enough that the rounding of every quantity of one
    period (half a tick per piece on every stage, per release and update share, per forward
    and backward sum, one tick per bucket start-up, see :attr:`Instance.a`) stays within
    :data:`TICK_BUDGET` of the lower bound :attr:`.Units.lower_bound_s`."""
    n_tasks = (2 + max(1, len(units.stages))) * len(units.base_bytes) + 2 * len(
        units.trace.layers) + 4
    tick = TICK_BUDGET * 2 * units.lower_bound_s / n_tasks
    if tick <= 0 or not np.isfinite(tick):
        raise SchedoptError("cannot choose a time unit (all times are zero)", "trace",
                            units.trace.name)
    return tick


def build_instance(trace: Trace, cluster: Cluster, opts: SolveOptions, *,
                   merge: bool | None = None, stage: int | tuple[int, ...] | None = None
                   ) -> Instance:
    """Build the optimizer's :class:`Instance` for ``trace`` on ``cluster`` under ``opts``:
    the units (:func:`.units.build_units`, same ``merge`` and ``stage``), then the tick.

    Raises
    ------
    SchedoptError
        A cluster with concurrent collectives: the formulations serve one call at a time, so
        their bounds would not hold.
    """
    if cluster.comm_concurrency > 1:
        raise SchedoptError("the optimizer serves one collective at a time; this cluster runs "
                            f"{cluster.comm_concurrency} at once (simulate and compare its "
                            "plans instead)", "cluster.comm_concurrency",
                            cluster.comm_concurrency)
    units = build_units(trace, cluster, opts, merge=merge, stage=stage)
    return Instance(units, choose_tick(units))
