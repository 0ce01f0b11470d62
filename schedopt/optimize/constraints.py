"""Constraint families of the CP-SAT model, one private method each (docs/formulation.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from schedopt.optimize.instance import Instance
from schedopt.optimize.variables import ModelVariables, shared_stage_pairs

#: Above this many terms (layer runs times units) the prefix bounds count the cuts through a
#: chain of variables (O(n) terms) rather than one sum per layer run (O(n^2) memory).
PREFIX_TERMS = 1_000_000

__all__ = ["Constraints"]


class Constraints:
    """Adds every constraint family of the model.

    Parameters
    ----------
    m, inst, v
        The model, the instance, the variables.
    order
        ``fifo``: readiness order (a chain); ``any``: any launch order (a no-overlap link);
        ``unimodal``: the buckets before the last-ready one in readiness order, the others after
        it in reverse readiness order (two chains; as good as ``any``, see docs/formulation.md).
    fixed_cuts
        Cuts fixed by the caller (large-neighbourhood search): unit index -> value.
    fixed_early
        Launch sides fixed by the caller (unimodal order): unit index -> early.
    without
        Redundant or dominance families to leave out (``prefix_bounds``,
        ``one_bucket_end_per_layer``), for measuring what they buy.
    """

    def __init__(self, m: cp_model.CpModel, inst: Instance, v: ModelVariables, *,
                 order: str, fixed_cuts: dict[int, bool] | None = None,
                 fixed_early: dict[int, bool] | None = None,
                 without: frozenset[str] = frozenset()) -> None:
        self.m = m
        self.without = without
        self.inst = inst
        self.v = v
        self.order = order
        self.reorder = order != "fifo"
        self.fixed_cuts = fixed_cuts or {}
        self.fixed_early = fixed_early or {}

    def add_all(self) -> None:
        """Add every family that applies to the instance."""
        several = len(self.inst.stages) > 1
        if several and self.order != "fifo":
            raise ValueError("several communication stages: the model has readiness order only")
        self._fixed_cuts()
        self._bucket_release()
        self._bucket_contiguity()
        if several:
            self._stage_chains()
            self._shared_resources()
        if self.order == "any":
            self._link_no_overlap()
        elif self.order == "unimodal":
            self._unimodal_launch_order()
        else:
            self._link_fifo()
        if self._one_end_per_layer_is_dominant() and "one_bucket_end_per_layer" not in (
                self.without) and not several:
            self._one_bucket_end_per_layer()
        if self.v.upd_before:
            self._update_prefix()
        if self.v.fwd_start:
            self._update_windows()
        if "prefix_bounds" not in self.without:
            self._prefix_bounds()

    # ------------------------------------------------------------------------ families
    def _fixed_cuts(self) -> None:
        """Cuts fixed by the caller stay fixed."""
        for i, val in self.fixed_cuts.items():
            if i < self.inst.n - 1:
                self.m.add(self.v.cut[i] == int(val))

    def _bucket_release(self) -> None:
        """A bucket starts once its last unit is ready: ``start[i] >= ready[i]``, and
        ``ready[i] >= ready[i + 1]`` inside a bucket."""
        v, n = self.v, self.inst.n
        for i in range(n):
            self.m.add(v.start[i] >= v.ready[i])
            if i < n - 1:
                self.m.add(v.ready[i] >= v.ready[i + 1]).only_enforce_if(~v.cut[i])

    def _bucket_contiguity(self) -> None:
        """The units of one bucket are one communication: back to back, in ready order."""
        v = self.v
        for i in range(self.inst.n - 1):
            self.m.add(v.start[i + 1] == v.end[i]).only_enforce_if(~v.cut[i])

    def _link_no_overlap(self) -> None:
        """The link runs one unit at a time (any launch order, no preemption)."""
        self.m.add_no_overlap(self.v.comm)

    def _link_fifo(self) -> None:
        """The link runs the units in ready order (FIFO launch order)."""
        v = self.v
        for i in range(self.inst.n - 1):
            self.m.add(v.start[i + 1] >= v.end[i])

    def _stage_chains(self) -> None:
        """Stages ``1..S-1``: every bucket is one task per stage (its units back to back, the
        first paying the stage's start-up cost), the stages of one bucket in order, and each
        stage in readiness order; ``stage_bucket_end`` carries every bucket's end per stage."""
        inst, v, m, n = self.inst, self.v, self.m, self.inst.n
        p, a = inst.stage_p.tolist(), inst.stage_a.tolist()
        starts = [v.start, *v.stage_start]
        ends = [v.end, *v.stage_end]
        for s in range(len(inst.stages)):
            be = v.stage_bucket_end[s]
            m.add(be[n - 1] == ends[s][n - 1])
            for i in range(n - 1):
                m.add(be[i] == ends[s][i]).only_enforce_if(v.cut[i])
                m.add(be[i] == be[i + 1]).only_enforce_if(~v.cut[i])
            if s == 0:
                continue
            for i in range(n):
                first = 1 if i == 0 else v.cut[i - 1]
                m.add(ends[s][i] == starts[s][i] + p[s][i] + a[s] * first)
                m.add(starts[s][i] >= v.stage_bucket_end[s - 1][i])
                if i < n - 1:
                    m.add(starts[s][i + 1] == ends[s][i]).only_enforce_if(~v.cut[i])
                    m.add(starts[s][i + 1] >= ends[s][i])

    def _shared_resources(self) -> None:
        """Stages ``s < s2`` that share a resource take it in the simulator's order: stage
        ``s2`` of a bucket after stage ``s`` of the bucket ``d`` later, and stage ``s`` of the
        bucket ``d + 1`` later after it."""
        inst, v, m, n = self.inst, self.v, self.m, self.inst.n
        starts = [v.start, *v.stage_start]
        ends = [v.end, *v.stage_end]
        for s, s2, d in shared_stage_pairs(inst):
            ahead = [v.stage_bucket_end[s]] + [v.ahead[(s, k)] for k in range(1, d + 1)]
            for k in range(1, d + 1):
                m.add(ahead[k][n - 1] == ends[s][n - 1])
                for i in range(n - 1):
                    m.add(ahead[k][i] == ahead[k][i + 1]).only_enforce_if(~v.cut[i])
                    m.add(ahead[k][i] == ahead[k - 1][i + 1]).only_enforce_if(v.cut[i])
            behind = [v.stage_bucket_end[s2]] + [v.behind[(s2, k)] for k in range(1, d + 2)]
            for k in range(1, d + 2):
                m.add(behind[k][0] == 0)
                for i in range(n - 1):
                    m.add(behind[k][i + 1] == behind[k][i]).only_enforce_if(~v.cut[i])
                    m.add(behind[k][i + 1] == behind[k - 1][i]).only_enforce_if(v.cut[i])
            for i in range(n):
                m.add(starts[s2][i] >= ahead[d][i])
                m.add(starts[s][i] >= behind[d + 1][i])

    def _unimodal_launch_order(self) -> None:
        """Early buckets run in readiness order and end with the last-ready bucket; late ones
        follow it in reverse readiness order (an exchange argument shows some optimal plan has
        this order when tails grow with readiness, docs/formulation.md)."""
        v, m, n = self.v, self.m, self.inst.n
        early, ef, lf, need = v.early, v.early_front, v.late_front, v.late_need
        m.add(early[n - 1] == 1)  # the last-ready bucket closes the early chain
        for i, val in self.fixed_early.items():
            m.add(early[i] == int(val))
        for i in range(n):
            if i < n - 1:
                m.add(early[i] == early[i + 1]).only_enforce_if(~v.cut[i])
            if i > 0:
                m.add(ef[i] >= ef[i - 1])
                m.add(v.start[i] >= ef[i - 1]).only_enforce_if(early[i])
            m.add(ef[i] >= v.end[i]).only_enforce_if(early[i])
        m.add(lf[n] >= v.end[n - 1])
        for i in range(n - 1, -1, -1):
            m.add(lf[i] >= lf[i + 1])
            m.add(lf[i] >= v.end[i]).only_enforce_if(~early[i])
            m.add(v.start[i] >= need[i]).only_enforce_if(~early[i])
            if i == n - 1:
                m.add(need[i] >= lf[n])
            else:
                m.add(need[i] >= lf[i + 1]).only_enforce_if(v.cut[i])
                m.add(need[i] >= need[i + 1]).only_enforce_if(~v.cut[i])

    def _one_end_per_layer_is_dominant(self) -> bool:
        """In FIFO order without an update step (or in wait-for-all mode), joining two buckets
        that end in one layer never hurts (docs/formulation.md, "Dominance")."""
        return not self.reorder and self.inst.terms.joining_within_a_layer_is_free

    def _one_bucket_end_per_layer(self) -> None:
        """At most one bucket ends in each layer (dominance)."""
        v, n = self.v, self.inst.n
        for lo, hi in self.inst.layer_runs:
            inner = [v.cut[i] for i in range(lo, min(hi, n - 2) + 1)]
            if not inner:
                continue
            if hi == n - 1:
                self.m.add(sum(inner) == 0)
            elif len(inner) > 1:
                self.m.add(sum(inner) <= 1)

    def _update_prefix(self) -> None:
        """``upd_before[i + 1]`` is the update share of units ``0..i`` if ``i`` ends a bucket,
        else ``upd_before[i]``."""
        v, n = self.v, self.inst.n
        upd = self.inst.upd_prefix.tolist()
        self.m.add(v.upd_before[0] == 0)
        self.m.add(v.upd_before[n] == upd[n - 1])
        for i in range(n - 1):
            self.m.add(v.upd_before[i + 1] == upd[i]).only_enforce_if(v.cut[i])
            self.m.add(v.upd_before[i + 1] == v.upd_before[i]).only_enforce_if(~v.cut[i])

    def _update_windows(self) -> None:
        """The next forward: per layer that owns units, the updates of the buckets that end in
        it run (one at a time, each after its communication) between the previous forward and
        its own, then its forward."""
        inst, v, m = self.inst, self.v, self.m
        fwd = inst.fwd_before.tolist()  # forward of the layers before l
        prev_layer, prev_fs = None, None
        for lay, (lo, hi) in inst.gate_runs:
            if prev_layer is None:
                window = inst.consts.B + fwd[lay]
            else:
                window = prev_fs + (fwd[lay] - fwd[prev_layer])
            fs = v.fwd_start[lay]
            group = v.upd_before[hi + 1] - v.upd_before[lo]
            m.add(fs >= window + group)
            for i in range(lo, hi + 1):
                lit = v.is_cut(i, inst.n)
                cons = [
                    m.add(v.update_start[i] >= v.done[i]),
                    m.add(v.update_start[i] >= window),
                    m.add(v.update_end[i] <= fs),
                ]
                if lit is not True:
                    for c in cons:
                        c.only_enforce_if(lit)
            if hi > lo:
                m.add_no_overlap([v.update[i] for i in range(lo, hi + 1)])
            prev_layer, prev_fs = lay, fs
        assert prev_layer is not None and prev_fs is not None
        m.add(v.period >= prev_fs + int(inst.fwd_from[prev_layer]))

    def _prefix_bounds(self) -> None:
        """Jackson-type redundant bounds: the buckets that hold units of layers ``<= l`` start
        after ``l`` is ready and each costs ``a`` plus its bytes; the last of them ends no
        earlier than their sum, and its tail is at least ``l``'s. With several stages the
        sum is over the stages that hold a resource of the last stage: they take it one at a
        time, and every bucket's last stage ends after its others."""
        for p, a in self._resource_work():
            self._prefix_bounds_of(p, a)

    def _resource_work(self) -> list[tuple[np.ndarray, int]]:
        """Per resource of the last stage: the bandwidth part of every unit and the start-up
        cost of one bucket, summed over the stages that hold it."""
        inst = self.inst
        if len(inst.stages) <= 1:
            return [(inst.p, inst.a)]
        return [(inst.stage_p[list(on)].sum(axis=0), int(inst.stage_a[list(on)].sum()))
                for on in inst.last_stage_groups()]

    def _suffix_cuts(self) -> dict[int, Any]:
        """For each layer run's first unit ``lo``: the number of cuts from ``lo`` on, as one
        linear expression per run (small models) or as a chain of counting variables, one per
        run (O(n) terms in all, for models with more than :data:`PREFIX_TERMS` terms)."""
        inst, v, m = self.inst, self.v, self.m
        n = inst.n
        starts = [lo for lo, _hi in inst.layer_runs]
        if len(starts) * n <= PREFIX_TERMS:
            return {lo: sum(v.cut[i] for i in range(lo, n - 1)) for lo in starts if lo < n - 1}
        out: dict[int, Any] = {}
        after: Any = 0
        for k in range(len(starts) - 1, -1, -1):
            lo = starts[k]
            if lo >= n - 1:
                continue
            end = min(starts[k + 1] if k + 1 < len(starts) else n - 1, n - 1)
            cnt = m.new_int_var(0, n - 1 - lo, f"cuts_from_{lo}")
            m.add(cnt == sum(v.cut[i] for i in range(lo, end)) + after)
            out[lo], after = cnt, cnt
        return out

    def _prefix_bounds_of(self, p: np.ndarray, a: int) -> None:
        inst, v, m = self.inst, self.v, self.m
        p_suffix = np.cumsum(p[::-1])[::-1].tolist()
        r = inst.r.tolist()
        suffix = self._suffix_cuts()
        for lo, _hi in inst.layer_runs:
            cuts = suffix.get(lo)
            work = p_suffix[lo] + a * (1 + cuts) if cuts is not None else p_suffix[lo] + a
            inst.terms.add_prefix_bound(m, v, lo, r[lo] + work)
