"""Decision and auxiliary variables of the CP-SAT model (names as in docs/formulation.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from schedopt.optimize.instance import Instance

__all__ = ["ModelVariables", "ScheduleValues", "make_variables", "shared_stage_pairs"]


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


@dataclass
class ScheduleValues:
    """The value of every variable family for one plan (ticks), under the family's name in
    :class:`ModelVariables`: what :meth:`ModelVariables.hint` gives CP-SAT as its warm start.

    A family the plan's model does not have keeps its empty default (and a model's family
    without a value here is a mistake :meth:`ModelVariables.hint` refuses).
    """

    cut: np.ndarray
    start: np.ndarray
    end: np.ndarray
    ready: np.ndarray
    period: int
    makespan: int
    link_free: int | None = None
    early: np.ndarray = field(default_factory=_empty)
    early_front: np.ndarray = field(default_factory=_empty)
    late_front: np.ndarray = field(default_factory=_empty)
    late_need: np.ndarray = field(default_factory=_empty)
    upd_before: np.ndarray = field(default_factory=_empty)
    fwd_start: dict[int, int] = field(default_factory=dict)
    update_start: dict[int, int] = field(default_factory=dict)
    update_end: dict[int, int] = field(default_factory=dict)
    stage_start: list[np.ndarray] = field(default_factory=list)
    stage_end: list[np.ndarray] = field(default_factory=list)
    stage_bucket_end: list[np.ndarray] = field(default_factory=list)
    ahead: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    behind: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)


def _hint(m: cp_model.CpModel, var: Any, value: Any) -> None:
    """Hint ``var`` (a variable, or a list or dict of them, nested) with ``value`` of the same
    shape; a family absent from the model (None, empty) is skipped."""
    if var is None or (isinstance(var, list | dict) and not var):
        return
    if isinstance(var, dict):
        for key, x in var.items():
            _hint(m, x, value[key])
    elif isinstance(var, list):
        if len(var) != len(value):
            raise ValueError(f"{len(var)} variables, {len(value)} values")
        for x, y in zip(var, value, strict=True):
            _hint(m, x, y)
    else:
        m.add_hint(var, int(value))


@dataclass
class ModelVariables:
    """Every variable of the model, by family.

    Attributes
    ----------
    cut
        ``cut[i]`` (``i < n - 1``): a bucket ends at unit ``i`` (the next unit starts a new one).
    start, end, comm
        ``comm[i]``: the link interval of unit ``i``; its size is ``p[i] + a * first[i]``, the
        bandwidth part plus the bucket's start-up cost on its first unit.
    ready
        ``ready[i]``: readiness of unit ``i``'s bucket (release of the bucket's last unit).
    upd_before
        ``upd_before[i]`` (``i <= n``): update ticks of the units before the last cut before
        ``i`` (per-layer mode with an update step).
    fwd_start
        ``fwd_start[l]``: start of layer ``l``'s next forward, per layer that owns units (same).
    update, update_start, update_end
        ``update[i]``: optional update interval of the bucket that ends at unit ``i``, present
        when ``i`` ends a bucket (same, with exact update windows).
    early
        ``early[i]``: unit ``i``'s bucket is launched before the last-ready bucket, in readiness
        order; otherwise after it, in reverse readiness order (unimodal launch order).
    early_front, late_front, late_need
        ``early_front[i]``: end of the early units among ``0..i``; ``late_front[i]``: end of the
        late units among ``i..n-1`` (``late_front[n]`` the end of the last-ready bucket);
        ``late_need[i]``: earliest start of unit ``i``'s bucket when it is late.
    stage_start, stage_end
        Several stages (readiness order): ``stage_start[s - 1][i]``, ``stage_end[s - 1][i]``
        are unit ``i``'s times on stage ``s >= 1`` (stage 0 is ``start``, ``end``).
    stage_bucket_end
        ``stage_bucket_end[s][i]``: end of stage ``s`` of unit ``i``'s bucket.
    ahead, behind
        Shared resources: ``ahead[(s, k)][i]``, the end of stage ``s`` of the bucket ``k``
        after unit ``i``'s (the last bucket's when there is none); ``behind[(s, k)][i]``, of
        the bucket ``k`` before it (0 when there is none).
    makespan
        ``max(sum b, end of the last communication)`` (wait-for-all mode).
    link_free
        When the link is free of the next batch's copy (shared PCIe with prefetch), from the
        start of the backward; None otherwise.
    period
        The objective: the period in ticks.
    """

    cut: list[cp_model.IntVar]
    start: list[cp_model.IntVar]
    end: list[cp_model.IntVar]
    comm: list[cp_model.IntervalVar]
    ready: list[cp_model.IntVar]
    period: cp_model.IntVar
    makespan: cp_model.IntVar | None = None
    link_free: cp_model.IntVar | None = None
    early: list[cp_model.IntVar] = field(default_factory=list)
    early_front: list[cp_model.IntVar] = field(default_factory=list)
    late_front: list[cp_model.IntVar] = field(default_factory=list)
    late_need: list[cp_model.IntVar] = field(default_factory=list)
    upd_before: list[cp_model.IntVar] = field(default_factory=list)
    fwd_start: dict[int, cp_model.IntVar] = field(default_factory=dict)
    update: dict[int, cp_model.IntervalVar] = field(default_factory=dict)
    update_start: dict[int, cp_model.IntVar] = field(default_factory=dict)
    update_end: dict[int, cp_model.IntVar] = field(default_factory=dict)
    stage_start: list[list[cp_model.IntVar]] = field(default_factory=list)
    stage_end: list[list[cp_model.IntVar]] = field(default_factory=list)
    stage_bucket_end: list[list[cp_model.IntVar]] = field(default_factory=list)
    ahead: dict[tuple[int, int], list[cp_model.IntVar]] = field(default_factory=dict)
    behind: dict[tuple[int, int], list[cp_model.IntVar]] = field(default_factory=dict)

    @property
    def done(self) -> list[cp_model.IntVar]:
        """End of every unit's last communication stage (what its bucket's tail follows)."""
        return self.stage_end[-1] if self.stage_end else self.end

    def is_cut(self, i: int, n: int) -> cp_model.IntVar | bool:
        """``cut[i]``, or True for the last unit (which always ends a bucket)."""
        return True if i == n - 1 else self.cut[i]

    def hint(self, m: cp_model.CpModel, values: ScheduleValues) -> None:
        """Hint every family of the model with its values in ``values`` (same name); the
        intervals follow from their start and end."""
        m.clear_hints()
        for f in fields(self):
            var = getattr(self, f.name)
            if f.name in _INTERVALS:
                continue
            if not hasattr(values, f.name):
                raise TypeError(f"ScheduleValues has no values for the family {f.name!r}")
            _hint(m, var, getattr(values, f.name))


#: Interval families: fixed by their start, size and end variables.
_INTERVALS = frozenset({"comm", "update"})


def make_variables(m: cp_model.CpModel, inst: Instance, horizon: int,
                   period_lb: int, *, windows: bool = True,
                   unimodal: bool = False) -> ModelVariables:
    """Create the variables of the model for ``inst``.

    Parameters
    ----------
    m
        The model.
    inst
        The instance (integer data).
    horizon
        Upper bound of every time variable (the period of a known plan).
    period_lb
        A proven lower bound of the period (ticks).
    windows
        Create the exact update windows (per-layer mode with an update step).
    unimodal
        Create the variables of the unimodal launch order.
    """
    n = inst.n
    r = inst.r.tolist()
    several = len(inst.stages) > 1
    p = inst.stage_p[0].tolist() if several else inst.p.tolist()
    a = int(inst.stage_a[0]) if several else inst.a
    r_max = max(r)
    cut = [m.new_bool_var(f"cut[{i}]") for i in range(n - 1)]
    start, end, comm, ready = [], [], [], []
    for i in range(n):
        s = m.new_int_var(r[i], horizon, f"start[{i}]")
        e = m.new_int_var(r[i] + p[i], horizon + p[i] + a, f"end[{i}]")
        size = p[i] + a if i == 0 else p[i] + a * cut[i - 1]
        comm.append(m.new_interval_var(s, size, e, f"comm[{i}]"))
        ready.append(m.new_int_var(r[i], r_max, f"ready[{i}]"))
        start.append(s)
        end.append(e)
    period = m.new_int_var(period_lb, max(horizon, period_lb), "period")
    v = ModelVariables(cut=cut, start=start, end=end, comm=comm, ready=ready, period=period)
    if several:
        _stage_variables(m, inst, v, horizon)
    if inst.terms.shared:
        v.link_free = m.new_int_var(-horizon, horizon, "link_free")
    if unimodal:
        v.early = [m.new_bool_var(f"early[{i}]") for i in range(n)]
        v.early_front = [m.new_int_var(0, horizon + a, f"early_front[{i}]") for i in range(n)]
        v.late_front = [m.new_int_var(0, horizon + a, f"late_front[{i}]") for i in range(n + 1)]
        v.late_need = [m.new_int_var(0, horizon + a, f"late_need[{i}]") for i in range(n)]
    if not inst.per_layer:
        v.makespan = m.new_int_var(0, horizon + _total_work(inst), "makespan")
        return v
    u_tot = int(inst.consts.U)
    if u_tot > 0:
        v.upd_before = [m.new_int_var(0, u_tot, f"upd_before[{i}]") for i in range(n + 1)]
    if u_tot > 0 and windows:
        upd = inst.upd_prefix.tolist()
        for lay, (lo, hi) in inst.gate_runs:
            v.fwd_start[lay] = m.new_int_var(0, horizon, f"fwd_start[{lay}]")
            for i in range(lo, hi + 1):
                us = m.new_int_var(0, horizon, f"update_start[{i}]")
                ue = m.new_int_var(0, horizon, f"update_end[{i}]")
                size = upd[i] - v.upd_before[i]
                present = v.is_cut(i, n)
                if present is True:
                    iv = m.new_interval_var(us, size, ue, f"update[{i}]")
                else:
                    iv = m.new_optional_interval_var(us, size, ue, present, f"update[{i}]")
                v.update[i], v.update_start[i], v.update_end[i] = iv, us, ue
    return v


def _total_work(inst: Instance) -> int:
    """Every stage of every unit as its own bucket: an upper bound of any communication."""
    if len(inst.stages) > 1:
        return int(inst.stage_p.sum() + inst.n * inst.stage_a.sum())
    return int(inst.p.sum() + inst.n * inst.a)


def _stage_variables(m: cp_model.CpModel, inst: Instance, v: ModelVariables,
                     horizon: int) -> None:
    """Times of stages ``1..S-1`` and the bucket-level ends that order the shared resources."""
    n, n_s = inst.n, len(inst.stages)
    top = horizon + _total_work(inst)
    r = inst.r.tolist()
    for s in range(1, n_s):
        v.stage_start.append([m.new_int_var(r[i], top, f"stage_start[{s}][{i}]")
                              for i in range(n)])
        v.stage_end.append([m.new_int_var(r[i], top, f"stage_end[{s}][{i}]")
                            for i in range(n)])
    v.stage_bucket_end = [[m.new_int_var(0, top, f"stage_bucket_end[{s}][{i}]")
                           for i in range(n)] for s in range(n_s)]
    for s, s2, d in shared_stage_pairs(inst):
        for k in range(1, d + 1):
            v.ahead[(s, k)] = [m.new_int_var(0, top, f"ahead[{s},{k}][{i}]") for i in range(n)]
        for k in range(1, d + 2):
            v.behind[(s2, k)] = [m.new_int_var(0, top, f"behind[{s2},{k}][{i}]")
                                 for i in range(n)]


def shared_stage_pairs(inst: Instance) -> list[tuple[int, int, int]]:
    """Pairs of stages ``s < s2`` that share a resource, with the lookahead ``d``: the
    simulator serves stage ``s2`` of bucket ``j`` after stage ``s`` of buckets ``<= j + d`` and
    before stage ``s`` of bucket ``j + d + 1`` (:func:`~schedopt.model.plan.interleave`, keys
    ``j + s / 2``)."""
    st = inst.stages
    return [(s, s2, (s2 - s) // 2) for s in range(len(st)) for s2 in range(s + 1, len(st))
            if set(st[s].resources) & set(st[s2].resources)]
