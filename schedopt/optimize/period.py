"""The period terms of each next-forward mode, defined once (docs/formulation.md).

Times are measured from the start of the backward of one iteration; ``ends`` are the ends of
the buckets' (last) communication, in launch order. With the constants of
:class:`~.times.Consts`:

* wait-for-all (:class:`WaitForAll`): with ``M = max(B, max ends)``, ``C = F + M + U`` and the
  period is ``C + io + h2d`` (prefetch 0) or ``max(C, io, h2d, (C + io + h2d) / 2)`` (prefetch 1);
* per-layer (:class:`PerLayer`): ``X = max(B + F + U, max_k (C_k + q_k))``, ``q_k`` the forward
  time from bucket ``k``'s gating layer to the end plus the updates that run after its own; the
  period is ``max(X, D - U0)`` (prefetch 0) or ``max(X, io, h2d, (D - U0) / 2)`` (prefetch 1)
  with ``D = B + F + U + io + h2d`` and ``U0`` the updates that run before the first forward;
  with shared PCIe (prefetch 0) also ``max_k C_k + h2d + F + U - U0``.

With shared PCIe and prefetch 1 the copy of the next batch runs on the link before this
iteration's communication: the link is free only from a time ``L`` that follows the previous
iteration's data path and last communication, which adds terms in the link's total work.

Each mode's :class:`PeriodTerms` gives the period of a plan (:meth:`~PeriodTerms.value`, ticks
or seconds: what :meth:`.Instance.evaluate` returns), the same terms as CP-SAT constraints
(:meth:`~PeriodTerms.add_to`; the prefix bounds' :meth:`~PeriodTerms.add_prefix_bound`), the
value of the warm start's link variable (:meth:`~PeriodTerms.link_free_hint`), the plan-free
lower bounds (:meth:`~PeriodTerms.bound`, :meth:`~PeriodTerms.work_bound`) and what the exact
programmes of :mod:`.dp` need: the units' delivery tails (:attr:`~PeriodTerms.unit_tails`) and,
per-layer, the deadlines of a period (:meth:`PerLayer.deadlines`); and what the bounds of
:mod:`.bounds` need: the period of a preemptive relaxation (:meth:`~PeriodTerms.release_bound`)
and the tails the bucketing bound credits (:attr:`~PeriodTerms.bucket_tails`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np
from ortools.sat.python import cp_model

from schedopt.optimize.times import BucketTimes, Consts

__all__ = ["BucketTails", "Deadlines", "PerLayer", "PeriodData", "PeriodTerms",
           "PeriodVariables", "WaitForAll", "period_terms"]


class PeriodData(Protocol):
    """What the period terms read of an instance (:class:`.instance.Instance`): its counts
    and flags, the iteration constants, and per-unit data in ticks and seconds."""

    @property
    def n(self) -> int:
        """Number of units."""

    @property
    def per_layer(self) -> bool:
        """Layer ``l`` of the next forward waits for its own buckets only."""

    @property
    def prefetch(self) -> int:
        """Batches read ahead (0 or 1)."""

    @property
    def pcie_coupled(self) -> bool:
        """The copy of a batch to the GPU shares the link with the communication."""

    @property
    def first_layer_units(self) -> int | None:
        """First unit of layer 0, None when layer 0 has no units."""

    @property
    def layer(self) -> np.ndarray:
        """Gating layer of every unit."""

    @property
    def layer_first_unit(self) -> np.ndarray:
        """First unit of every unit's layer."""

    @property
    def consts(self) -> Consts[int]:
        """Iteration constants in ticks."""

    @property
    def consts_s(self) -> Consts[float]:
        """Iteration constants in seconds."""

    @property
    def upd_prefix(self) -> np.ndarray:
        """Update share of units ``0 .. i`` (ticks)."""

    @property
    def upd_prefix_s(self) -> np.ndarray:
        """Update share of units ``0 .. i`` (seconds)."""

    @property
    def fwd_from(self) -> np.ndarray:
        """Forward time from every layer on (ticks)."""

    @property
    def forward_from_s(self) -> np.ndarray:
        """Forward time from every layer on (seconds)."""


class PeriodVariables(Protocol):
    """The CP-SAT variables the period terms constrain (:class:`.variables.ModelVariables`)."""

    @property
    def start(self) -> list[cp_model.IntVar]:
        """Start of every unit's communication."""

    @property
    def done(self) -> list[cp_model.IntVar]:
        """End of every unit's last communication stage."""

    @property
    def period(self) -> cp_model.IntVar:
        """The period (ticks)."""

    @property
    def makespan(self) -> cp_model.IntVar | None:
        """End of the communication and the backward (wait-for-all mode)."""

    @property
    def link_free(self) -> cp_model.IntVar | None:
        """When the link is free of the next batch's copy; None without a shared link."""

    @property
    def upd_before(self) -> list[cp_model.IntVar]:
        """Update ticks of the units before the last cut before every unit."""

    @property
    def fwd_start(self) -> dict[int, cp_model.IntVar]:
        """Start of the next forward of every layer that owns units."""


def _ceil_half(x: Any) -> Any:
    return -((-x) // 2)


def _half(x: Any) -> Any:
    return x / 2


@dataclass(frozen=True)
class BucketTails:
    """The tails (ticks) the DP lower bound over bucketings (:func:`.bounds.bucketing_bound`)
    credits a bucket ``i..j`` with: ``fwd[j]``, plus ``upd_before[i]`` when the bucket is the
    first of its gating layer (``first[j] >= i``), plus ``upd_before[j + 1] - upd_before[i]``
    when it ends at the last unit of its layer (``last[j]``).

    Attributes
    ----------
    fwd
        Forward from the unit's layer on.
    upd_before
        Update ticks of the units before ``i`` (``n + 1`` entries).
    first
        First unit of the unit's layer.
    last
        Whether the unit is the last of its layer.
    """

    fwd: np.ndarray
    upd_before: np.ndarray
    first: np.ndarray
    last: np.ndarray


@dataclass(frozen=True)
class Deadlines:
    """What a period of at most ``lam`` asks of a FIFO bucketing with one bucket end per layer
    (per-layer mode, ticks).

    Attributes
    ----------
    end
        Latest end of the communication of a bucket whose last unit is ``i``.
    last_first
        Largest first unit of the last bucket (the data path's term, through the updates that
        run before the first forward); None when any will do, -1 when none will.
    """

    end: np.ndarray
    last_first: int | None


class PeriodTerms(ABC):
    """The period of one next-forward mode: value, constraints, warm start and bound."""

    def __init__(self, inst: PeriodData) -> None:
        self.inst = inst

    def _arith(self, seconds: bool) -> tuple[Consts[Any], Callable[[Any], Any]]:
        """The constants and the halving of the arithmetic (seconds, or integer ticks with a
        rounded-up half)."""
        inst = self.inst
        return (inst.consts_s, _half) if seconds else (inst.consts, _ceil_half)

    @property
    def shared(self) -> bool:
        """The next batch's copy shares the link with prefetch 1 (the ``link_free`` terms)."""
        return self.inst.pcie_coupled and self.inst.prefetch == 1

    @cached_property
    def unit_tails(self) -> np.ndarray:
        """Delivery tail of every unit (ticks): what follows the end of the unit's bucket
        within the period, for a bucket that ends at the unit (zero when the next forward
        waits for all)."""
        return np.zeros(self.inst.n, dtype=np.int64)

    def _work_term(self, c: Consts[Any], work: Any) -> Any:
        """With a shared link, the period the link's total ``work`` implies (the next batch's
        copy runs on it first); 0 otherwise."""
        return c.h2d + work if self.shared else 0

    def work_bound(self, work: int) -> int:
        """A lower bound (ticks) on the period of every plan whose link does ``work`` ticks in
        all, from the shared link's terms (0 without a shared link)."""
        return int(self._work_term(self.inst.consts, work))

    # --------------------------------------------------------------------------- value
    @abstractmethod
    def value(self, plan: BucketTimes, *, seconds: bool) -> Any:
        """The period of the plan (ticks, or seconds with ``seconds``)."""

    # ------------------------------------------------------------------------ CP-SAT
    def add_to(self, m: cp_model.CpModel, v: PeriodVariables, *, reorder: bool) -> None:
        """Tie ``v.period`` to the schedule (the mode's terms, and the shared link's)."""
        c = self.inst.consts
        lf = v.link_free
        if lf is not None:
            for i in range(self.inst.n):
                m.add(v.start[i] >= lf)
                m.add(lf >= v.done[i] - v.period + c.h2d)
            m.add(v.period >= max(c.io, c.h2d))
        self._add_terms(m, v, reorder=reorder)

    @abstractmethod
    def _add_terms(self, m: cp_model.CpModel, v: PeriodVariables, *, reorder: bool) -> None:
        """The mode's own constraints."""

    @abstractmethod
    def add_prefix_bound(self, m: cp_model.CpModel, v: PeriodVariables, lo: int,
                         ends_by: Any) -> None:
        """A redundant bound: some bucket holding a unit of ``lo``'s layer or an earlier one
        ends no earlier than ``ends_by`` (an expression, ticks)."""

    # -------------------------------------------------------------------- warm start
    @abstractmethod
    def _link_base(self, c_max: int) -> int:
        """The time from which the next batch's copy needs the link, before ``- period``."""

    def link_free_hint(self, c_max: int, period: int) -> int:
        """The least ``link_free`` that ``period`` allows (shared PCIe with prefetch 1), given
        the end ``c_max`` of the last communication."""
        return max(self._link_base(c_max) - period, c_max - period + self.inst.consts.h2d)

    # --------------------------------------------------------------------------- bound
    @abstractmethod
    def bound(self, comm: int) -> int:
        """A lower bound on the period of every plan whose link works at least ``comm`` ticks
        after the backward starts (0: compute and data path only)."""

    @abstractmethod
    def release_bound(self, starts: np.ndarray, ends: np.ndarray) -> int:
        """A lower bound (ticks) on the period of every plan in which the units from each
        layer's first unit ``starts[k]`` on end no earlier than ``ends[k]`` (the preemptive
        relaxation of :func:`.bounds.jackson_bound`)."""

    @property
    def bucket_tails(self) -> BucketTails | None:
        """The tails of the bucketing bound; None when the mode has none to credit (the
        bound is then the preemptive one)."""
        return None

    @property
    def joining_within_a_layer_is_free(self) -> bool:
        """Whether, in FIFO order, joining two buckets that end in one layer never lengthens
        the period (docs/formulation.md, "Dominance"): no update step between them to wait
        for."""
        return True


class WaitForAll(PeriodTerms):
    """The next forward waits for every bucket and the update."""

    def value(self, plan: BucketTimes, *, seconds: bool) -> Any:
        c, half = self._arith(seconds)
        makespan = max(c.B, plan.ends.max())
        cyc = c.F + makespan + c.U
        period = cyc + c.data if self.inst.prefetch == 0 else max(cyc, c.io, c.h2d,
                                                                  half(cyc + c.data))
        if self.shared:  # the next batch's copy runs on the link before this communication
            period = max(period, self._work_term(c, plan.dur.sum()))
        return period

    def _work_term(self, c: Consts[Any], work: Any) -> Any:
        """The copy of the next batch waits for the data path and the update too."""
        return max(c.data + c.U + work, c.h2d + work) if self.shared else 0

    def _add_terms(self, m: cp_model.CpModel, v: PeriodVariables, *, reorder: bool) -> None:
        """``makespan = max(B, end[i])``; with ``C = F + makespan + U``, ``period >= C + io +
        h2d`` (prefetch 0) or ``period >= C, io, h2d`` and ``2 period >= C + io + h2d``."""
        inst, c = self.inst, self.inst.consts
        assert v.makespan is not None
        m.add(v.makespan >= c.B)
        for i in range(inst.n) if reorder else [inst.n - 1]:
            m.add(v.makespan >= v.done[i])
        cyc = c.F + v.makespan + c.U
        if inst.prefetch == 0:
            m.add(v.period >= cyc + c.data)
        else:
            m.add(v.period >= cyc)
            m.add(v.period >= max(c.io, c.h2d))
            m.add(2 * v.period >= cyc + c.data)
        if v.link_free is not None:
            m.add(v.link_free >= v.makespan + c.U + c.data - v.period)
            m.add(v.period >= v.link_free + c.F)

    def add_prefix_bound(self, m: cp_model.CpModel, v: PeriodVariables, lo: int,
                         ends_by: Any) -> None:
        """The makespan follows it."""
        assert v.makespan is not None
        m.add(v.makespan >= ends_by)

    def _link_base(self, c_max: int) -> int:
        c = self.inst.consts
        return max(c.B, c_max) + c.U + c.data

    def bound(self, comm: int) -> int:
        """The period of a makespan of ``comm`` (compute and data path when it is 0)."""
        c = self.inst.consts
        cyc = c.F + max(c.B, comm) + c.U
        if self.inst.prefetch == 0:
            return int(cyc + c.data)
        return int(max(cyc, c.io, c.h2d, _ceil_half(cyc + c.data)))

    def release_bound(self, starts: np.ndarray, ends: np.ndarray) -> int:
        """The period of the latest end as the makespan (with the compute and data path)."""
        return self.bound(int(ends.max()))


class PerLayer(PeriodTerms):
    """Layer ``l`` of the next forward waits for the buckets that hold its tensors and their
    updates (run on the compute stream by gating layer, then launch order)."""

    def value(self, plan: BucketTimes, *, seconds: bool) -> Any:
        inst = self.inst
        c, half = self._arith(seconds)
        lo, hi, ends = plan.lo, plan.hi, plan.ends
        if seconds:
            upref, fwd_from = np.r_[0.0, inst.upd_prefix_s], inst.forward_from_s
        else:
            upref, fwd_from = np.r_[0, inst.upd_prefix], inst.fwd_from
        # a bucket's tail holds the updates from its own on (by gating layer, then launch
        # order) and the forwards from its layer on
        gl = inst.layer[hi]
        order = np.lexsort((np.arange(len(lo)), gl))
        share = upref[hi + 1] - upref[lo]
        suffix = np.cumsum(share[order][::-1])[::-1]
        upart = np.empty_like(suffix)
        upart[order] = suffix
        tails = fwd_from[gl] + upart
        x = max(c.k0, (ends + tails).max())
        if c.data <= 0 and not inst.pcie_coupled:
            return x
        u0 = share[gl == 0].sum() if np.any(gl == 0) else 0
        first_fwd = c.F + c.U - u0  # from the first forward to the next backward
        if inst.prefetch == 0:
            if inst.pcie_coupled:  # the copy waits for the last communication
                x = max(x, ends.max() + c.h2d + first_fwd)
            return max(x, c.B + c.data + first_fwd)
        period = max(x, c.io, c.h2d, half(c.B + c.data + first_fwd))
        if self.shared:
            # the link is free only once the next batch is copied (time L): every bucket
            # ends by L + its launch-order prefix of work, and L follows both the previous
            # backward (through io) and the previous iteration's last communication
            late = max(first_fwd, (np.cumsum(plan.dur) + tails).max())
            period = max(period, self._work_term(c, plan.dur.sum()),
                         half(c.B + c.data + late), half(ends.max() + c.h2d + late))
        return period

    @cached_property
    def unit_tails(self) -> np.ndarray:
        """The forward from the unit's layer on plus the updates of units ``0 .. i``; with
        shared PCIe and prefetch 0 at least the next batch's copy, forward and update (the
        copy waits for the last communication on the shared resource)."""
        inst, c = self.inst, self.inst.consts
        tail = inst.fwd_from[inst.layer] + inst.upd_prefix
        if inst.pcie_coupled and inst.prefetch == 0:
            tail = np.maximum(tail, c.h2d + c.F + c.U)
        return tail

    def deadlines(self, lam: int) -> Deadlines | None:
        """The deadlines of a FIFO bucketing with one bucket end per layer whose period is at
        most ``lam`` ticks, or None when no plan has one: ``end[i] + tail[i] <= lam``, and the
        data path ``D - U0 <= lam`` (prefetch 0) or ``<= 2 lam`` (prefetch 1), ``U0`` the
        update share of the last bucket (the one that ends in layer 0), i.e. of units
        ``i .. n-1`` for its first unit ``i``. Exact except for the shared link's terms."""
        inst, c = self.inst, self.inst.consts
        if c.k0 > lam:
            return None
        last_first = None
        if c.data > 0:
            if inst.prefetch == 1 and max(c.io, c.h2d) > lam:
                return None
            limit = lam if inst.prefetch == 0 else 2 * lam
            base = c.k0 + c.data - c.U
            if inst.first_layer_units is None:
                if base + c.U > limit:
                    return None
            else:
                upref = np.r_[0, inst.upd_prefix]  # update ticks of units 0..i-1
                ok = np.flatnonzero(base + upref[: inst.n] <= limit)
                last_first = int(ok[-1]) if len(ok) else -1
        return Deadlines(lam - self.unit_tails, last_first)

    def _add_terms(self, m: cp_model.CpModel, v: PeriodVariables, *, reorder: bool) -> None:
        """``period >= B + F + U``, ``period >= end[i] + tail`` (exact without an update step;
        with one, the update windows of :class:`~.constraints.Constraints` give the exact value
        and this family is redundant), and the data path with ``U0``, the updates that run
        before the first forward."""
        inst, c, n = self.inst, self.inst.consts, self.inst.n
        m.add(v.period >= c.k0)
        fwd_from = inst.fwd_from[inst.layer].tolist()
        if v.upd_before:
            upd = inst.upd_prefix.tolist()
            first = inst.layer_first_unit.tolist()
            own = bool(v.fwd_start)  # with exact windows the bucket's own share is certain too
            for i in range(n):
                tail = fwd_from[i] + v.upd_before[first[i]]
                if own:
                    tail += upd[i] - v.upd_before[i]
                m.add(v.period >= v.done[i] + tail)
        else:
            for i in range(n):
                m.add(v.period >= v.done[i] + fwd_from[i])
        first0 = inst.first_layer_units
        u0 = c.U - v.upd_before[first0] if first0 is not None and v.upd_before else 0
        first_fwd = c.F + c.U - u0  # from the first forward to the next backward
        if inst.pcie_coupled and inst.prefetch == 0:  # the copy waits for the last bucket
            for i in range(n):
                m.add(v.period >= v.done[i] + c.h2d + first_fwd)
        if c.data > 0:
            dterm = c.B + c.data + first_fwd
            if inst.prefetch == 0:
                m.add(v.period >= dterm)
            else:
                m.add(v.period >= max(c.io, c.h2d))
                m.add(2 * v.period >= dterm)
        if v.link_free is not None:
            m.add(v.link_free >= c.B + c.data - v.period)
            m.add(v.period >= v.link_free + first_fwd)

    def add_prefix_bound(self, m: cp_model.CpModel, v: PeriodVariables, lo: int,
                         ends_by: Any) -> None:
        """The period follows it by at least the tail of ``lo``'s layer: its forward on, and
        the updates of the buckets before ``lo`` when the update step is modelled."""
        tail = int(self.inst.fwd_from[self.inst.layer[lo]])
        if v.upd_before:
            m.add(v.period >= ends_by + tail + v.upd_before[lo])
        else:
            m.add(v.period >= ends_by + tail)

    def _link_base(self, c_max: int) -> int:
        c = self.inst.consts
        return c.B + c.data

    def bound(self, comm: int) -> int:
        """Compute, the link's work, and the data path with every update before the first
        forward (``U0 <= U``)."""
        inst, c = self.inst, self.inst.consts
        lb = max(c.k0, comm)
        if c.data > 0:
            dterm = c.k0 + c.data - c.U
            lb = max(lb, dterm) if inst.prefetch == 0 else max(lb, c.io, c.h2d,
                                                              _ceil_half(dterm))
        return int(lb)

    def release_bound(self, starts: np.ndarray, ends: np.ndarray) -> int:
        """Each end followed by the forward from its layer on."""
        inst = self.inst
        return int((ends + inst.fwd_from[inst.layer[starts]]).max())

    @property
    def joining_within_a_layer_is_free(self) -> bool:
        """Only without an update step: the update shares make a bucket's tail depend on
        where it ends."""
        return self.inst.consts.U == 0

    @cached_property
    def bucket_tails(self) -> BucketTails:
        """The forward from the gating layer on, the updates of the buckets gated by later
        layers and, for the last bucket of its layer, its own update share."""
        inst = self.inst
        return BucketTails(fwd=inst.fwd_from[inst.layer],
                           upd_before=np.r_[0, inst.upd_prefix],
                           first=inst.layer_first_unit,
                           last=np.r_[inst.layer[1:] != inst.layer[:-1], True])


def period_terms(inst: PeriodData) -> PeriodTerms:
    """The period terms of ``inst``'s next-forward mode."""
    return PerLayer(inst) if inst.per_layer else WaitForAll(inst)
