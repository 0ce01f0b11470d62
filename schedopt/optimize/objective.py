"""The objective of the CP-SAT model: the simulator's period in integer ticks."""

from __future__ import annotations

from ortools.sat.python import cp_model

from .instance import Instance
from .variables import ModelVariables

__all__ = ["add_objective"]


def add_objective(m: cp_model.CpModel, inst: Instance, v: ModelVariables, *,
                  reorder: bool) -> None:
    """Tie ``period`` to the schedule and minimise it.

    wait-for-all: ``makespan = max(sum b, end[i])`` and, with ``C = sum f + makespan + U``,
    ``period >= C + io + h2d`` (prefetch 0) or ``period >= C, io, h2d`` and
    ``2 period >= C + io + h2d`` (prefetch 1).

    per-layer: ``period >= sum b + sum f + U``, ``period >= end[i] + tail`` (exact without an
    update step; with one, the update windows of :class:`~.constraints.Constraints` give the
    exact value and this family is redundant), and the data path with ``U0``, the updates that
    run before the first forward.

    With shared PCIe the copy of the next batch and the gradients share the link: with prefetch
    1 the link is free only from ``link_free`` on, which follows the previous iteration's data
    path and last communication; with prefetch 0 the copy waits for the last communication.
    """
    c = inst.consts
    n = inst.n
    data = c["io"] + c["h2d"]
    lf = v.link_free
    if lf is not None:
        for i in range(n):
            m.add(v.start[i] >= lf)
            m.add(lf >= v.done[i] - v.period + c["h2d"])
        m.add(v.period >= max(c["io"], c["h2d"]))
    if not inst.per_layer:
        assert v.makespan is not None
        m.add(v.makespan >= c["B"])
        for i in range(n) if reorder else [n - 1]:
            m.add(v.makespan >= v.done[i])
        cyc = c["F"] + v.makespan + c["U"]
        if inst.prefetch == 0:
            m.add(v.period >= cyc + data)
        else:
            m.add(v.period >= cyc)
            m.add(v.period >= max(c["io"], c["h2d"]))
            m.add(2 * v.period >= cyc + data)
        if lf is not None:
            m.add(lf >= v.makespan + c["U"] + data - v.period)
            m.add(v.period >= lf + c["F"])
        m.minimize(v.period)
        return
    k0 = c["B"] + c["F"] + c["U"]
    m.add(v.period >= k0)
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
    u0 = c["U"] - v.upd_before[first0] if first0 is not None and v.upd_before else 0
    first_fwd = c["F"] + c["U"] - u0  # from the first forward to the next backward
    if inst.pcie_coupled and inst.prefetch == 0:  # the copy waits for the last bucket
        for i in range(n):
            m.add(v.period >= v.done[i] + c["h2d"] + first_fwd)
    if data > 0:
        dterm = c["B"] + data + first_fwd
        if inst.prefetch == 0:
            m.add(v.period >= dterm)
        else:
            m.add(v.period >= max(c["io"], c["h2d"]))
            m.add(2 * v.period >= dterm)
    if lf is not None:
        m.add(lf >= c["B"] + data - v.period)
        m.add(v.period >= lf + first_fwd)
    m.minimize(v.period)
