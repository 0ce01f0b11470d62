"""The unimodal programme run backward: the least late slack a state needs to finish.

The forward programme (:mod:`.unimodal`) keeps, at every cut ``j``, a Pareto front of states
``(e, nu)``: the end of the early chain and the late slack. Read backward, the same programme
is one function per cut: ``N_j(e)``, the least ``nu`` from which some choice of the buckets
after the cut meets every tail, given an early chain ending at ``e``. It is non-decreasing in
``e`` and obeys, over the buckets ``j+1..k`` (duration ``d``, tail ``q`` as the forward
programme charges them)::

    early:  N_j(e) <= N_k(max(e, r_k) + d)        if max(e, r_k) + d + q <= lam
    late:   N_j(e) <= N_k(e) + d                  if N_k(e) + d + q <= lam
    peak:   N_j(e) <= max(e, r_last) + d          if it ends by lam - q

and a state whose ``nu`` is below ``N_j(e)`` can reach no plan. :class:`Needs` computes it on a
grid of ``e`` (multiples of ``step`` ticks; above the latest ``e`` that the deadlines of
the later units allow, nothing is feasible). Evaluating ``N_k`` at the grid point at or below
an early chain's end gives a value no larger than the exact one, so every grid value is a
lower bound: the test drops no state that leads to a plan. With ``step = 1`` and layers of at
most two units it is the programme itself (the start's need is finite exactly when the forward
test is feasible).

The tails follow the forward programme's rules (:func:`.unimodal._transitions`): a bucket
starting a layer's bucket run holds the update part of the units before it; the last bucket
of a layer counts its own update share; a bucket ending inside a layer either leaves it (the
next bucket ends in a later layer, own share counted) or stays; when the layer then has one
unit left, the pair of the bucket and that unit is evaluated whole (the unit inherits the
update part; early or late on each side, a late pair as a two-machine flow shop,
:func:`pair_makespan`). With more units of the layer left, the need of the buckets that stay
in the layer is kept at the cut for a few levels of the inherited update part
(:data:`STAY_LEVELS`), and a bucket looks it up at the level at or below its own; a late
bucket then counts the part of its own share that the later buckets' communication cannot
hide (:func:`unhidden_share`), as the forward programme does.
"""

from __future__ import annotations

import time

import numpy as np

from schedopt.optimize.unimodal_tables import UnimodalTables

__all__ = ["INFEASIBLE_NEED", "Needs", "cells_bound", "pair_makespan", "unhidden_share"]

#: The need of a state from which no plan can be reached.
INFEASIBLE_NEED = np.int64(1) << 61

#: Rows between two looks at the wall clock.
_CLOCK_ROWS = 32

#: Grid values computed at once (buckets times cells: a few arrays of this size in memory).
_CHUNK_CELLS = 1 << 20

#: Levels of the inherited update part kept at a cut inside a layer with more than one unit
#: left (:meth:`Needs._stay_layout`).
STAY_LEVELS = 4


def pair_makespan(d_a: np.ndarray, s_a: np.ndarray, d_b: np.ndarray | np.int64,
                  s_b: np.ndarray | np.int64) -> np.ndarray:
    """Shortest makespan of two jobs on a two-machine flow shop (communication, then update)
    in either order: ``min(d_b + s_a + max(d_a, s_b), d_a + s_b + max(d_b, s_a))``."""
    return np.minimum(d_b + s_a + np.maximum(d_a, s_b), d_a + s_b + np.maximum(d_b, s_a))


class Needs:
    """``N_j`` of every cut on a grid of ``step`` ticks at ``lam`` (module docs).

    Parameters
    ----------
    t
        The forward programme's tables (the same tails, releases and update parts).
    lam
        The period tested (ticks).
    step
        The grid of ``e`` (ticks, at least 1).
    first_live
        For every unit ``k``, the first unit that a live bucket ending at ``k`` can start
        at (:func:`.unimodal._first_lives`).
    deadline
        ``time.perf_counter()`` value past which the computation stops (:attr:`complete`
        is then False).
    pairs
        Count a late pair as a flow shop (False: the weaker tail that the forward
        programme's ``pairs=False`` uses).
    max_cells
        Stop (:attr:`complete` False) once more grid values than this are computed (a
        deterministic limit).

    Attributes
    ----------
    cells
        Grid values computed over all buckets (the deterministic measure of the work).
    complete
        False when the deadline or ``max_cells`` stopped the computation (the needs are
        then unknown).
    """

    def __init__(self, t: UnimodalTables, lam: int, step: int, first_live: np.ndarray,
                 deadline: float | None = None, pairs: bool = True,
                 max_cells: int | None = None) -> None:
        n = t.n
        self.t, self.lam, self.pairs = t, lam, pairs
        self.step = s = max(1, int(step))
        # row j + 1 holds cut j, then one infeasible cell for every e beyond its last
        self.first, self.width = _layout(t, lam, s)
        self.offset = np.r_[0, np.cumsum(self.width + 1)]
        self.values = np.full(int(self.offset[-1]), INFEASIBLE_NEED, dtype=np.int64)
        self.least = np.full(n, INFEASIBLE_NEED, dtype=np.int64)  # N_j at its smallest e
        self.kmax = _last_ends(first_live)
        self._stay_layout(first_live)
        self.cells = 0
        self.complete = True
        for row in range(n - 1, -1, -1):
            if ((max_cells is not None and self.cells > max_cells)
                    or (deadline is not None and row % _CLOCK_ROWS == 0
                        and time.perf_counter() > deadline)):
                self.complete = False
                return
            self._row(row)

    def need(self, cut: int, e: np.ndarray) -> np.ndarray:
        """The least ``nu`` of states at ``cut`` (between layers, or inside a layer with a
        promise to leave it) whose early chain ends at ``e``."""
        return self._at(np.array([cut + 1]), (e // self.step)[None, :])[0]

    @property
    def start_feasible(self) -> bool:
        """Whether the relaxation admits any plan (False proves ``lam`` infeasible)."""
        return bool(self.least[0] < INFEASIBLE_NEED)

    def _at(self, rows: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """``N`` of the cuts ``rows - 1`` (one per row of ``cell``) at the cells ``cell``
        (``e // step``: the grid point at or below ``e``)."""
        c = np.clip(cell - self.first[rows][:, None], 0, self.width[rows][:, None])
        return self.values[self.offset[rows][:, None] + c]

    def _row(self, row: int) -> None:
        """``N`` of cut ``row - 1`` from the rows after it (its buckets that leave the
        layer), and, at a cut inside a layer with more than one unit left, the need of the
        buckets that stay in it at every level of the inherited update part."""
        t = self.t
        width = int(self.width[row])
        if width == 0:
            return
        cells = self.first[row] + np.arange(width, dtype=np.int64)
        ks = np.arange(_first_end(t, row), int(self.kmax[row]) + 1)
        best = self._least(row, cells, ks, t.upd_in[row])
        self.values[self.offset[row]:self.offset[row] + width] = best
        self.least[row] = best[0]
        if self.stay_count[row]:
            ks = np.arange(row, min(int(t.layer_last[row - 1]), int(self.kmax[row])) + 1)
            for i, ug in enumerate(self.stay_levels[row, :self.stay_count[row]].tolist()):
                at = int(self.stay_base[row]) + i * (width + 1)
                self.stay_values[at:at + width] = self._least(row, cells, ks, np.int64(ug))

    def _least(self, start: int, cells: np.ndarray, ks: np.ndarray, ug: np.int64
               ) -> np.ndarray:
        """The least need at ``cells`` over the buckets from ``start`` to each of ``ks``,
        whose update part is ``ug`` when they stay in the layer of ``start`` (otherwise
        ``upd_in[start]``: the same for a bucket opening its layer)."""
        t, lam = self.t, self.lam
        n = t.n
        best = np.full(len(cells), INFEASIBLE_NEED, dtype=np.int64)
        if len(ks) == 0:
            return best
        d = t.a + t.pp[ks + 1] - t.pp[start]
        q_base = t.q[ks] + ug
        q_own = q_base + t.upd_own[ks + 1] - t.upd_own[start]
        inside = t.inside[ks] & (ks < n - 1)
        # buckets that are neither early nor late at the row's least e are left out
        e0 = np.maximum(cells[0] * self.step, t.r[ks]) + d
        tail0 = np.where(inside, q_base, q_own)
        late0 = np.where(ks < n - 1, self.least[np.minimum(ks + 1, n - 1)], INFEASIBLE_NEED)
        useful = inside | (e0 + tail0 <= lam) | (late0 + d + tail0 <= lam)
        ks, d, q_base, q_own, inside = (ks[useful], d[useful], q_base[useful],
                                        q_own[useful], inside[useful])
        chunk = max(1, _CHUNK_CELLS // len(cells))  # buckets at a time (bounded memory)
        for lo in range(0, len(ks), chunk):
            part = slice(lo, lo + chunk)
            best = np.minimum(best, self._buckets(start, ug, cells, ks[part], d[part],
                                                  q_base[part], q_own[part], inside[part]))
        return best

    def _buckets(self, start: int, ug: np.int64, cells: np.ndarray, ks: np.ndarray,
                 d: np.ndarray, q_base: np.ndarray, q_own: np.ndarray, inside: np.ndarray
                 ) -> np.ndarray:
        """The least need over the buckets from ``start`` to each of ``ks`` at the row's
        ``cells`` (``ug``: the update part of a bucket that stays in its layer)."""
        t, lam, n = self.t, self.lam, self.t.n
        end = np.maximum(cells[None, :] * self.step, t.r[ks][:, None]) + d[:, None]
        self.cells += end.size
        best = np.full(len(cells), INFEASIBLE_NEED, dtype=np.int64)
        peak = ks == n - 1
        if peak.any():
            i = np.flatnonzero(peak)
            best = np.minimum(best, _masked(end[i], end[i] + q_own[i][:, None] <= lam).min(0))
        rest = np.flatnonzero(~peak)
        if len(rest):
            grid = np.broadcast_to(cells[None, :], (len(rest), len(cells)))
            best = np.minimum(best, self._sides(ks[rest] + 1, end[rest], grid, d[rest],
                                                q_own[rest], q_own[rest]).min(0))
            ins = rest[inside[rest]]
            if len(ins):
                best = np.minimum(best, self._stay(start, ug, ks[ins], end[ins],
                                                   grid[:len(ins)], d[ins], q_base[ins],
                                                   q_own[ins]).min(0))
        return best

    def _sides(self, rows: np.ndarray, end: np.ndarray, grid: np.ndarray, d: np.ndarray,
               tail_early: np.ndarray, tail_late: np.ndarray) -> np.ndarray:
        """The need through one bucket to the cuts ``rows - 1``, early (its end ``end``)
        or late (from the row's cells ``grid``), with these tails."""
        lam = self.lam
        early = _masked(self._at(rows, end // self.step), end + tail_early[:, None] <= lam)
        late = self._at(rows, grid) + d[:, None]
        return np.minimum(early, _masked(late, late + tail_late[:, None] <= lam))

    def _stay(self, start: int, ug: np.int64, k: np.ndarray, end_a: np.ndarray,
              grid: np.ndarray, d_a: np.ndarray, q_base: np.ndarray, q_own: np.ndarray
              ) -> np.ndarray:
        """The need through a bucket ``A`` (from ``start`` to ``k``, ending inside a layer)
        whose next bucket ends in the same layer and inherits ``A``'s update part ``ug``. With
        one unit ``B`` left, the pair whole (``A`` early counts its own share unless in the
        peak's layer; ``A`` late with ``B`` early counts it; both late: the flow shop of the
        pair). With more units left, the stored need of the cut after ``A`` at the level of
        ``ug`` (:meth:`_stay_layout`); ``A`` late then counts the part of its share that the
        later buckets' communication cannot hide (:func:`unhidden_share`)."""
        t, lam, n = self.t, self.lam, self.t.n
        tail_early = np.where(t.layer[k] != t.layer[n - 1], q_own, q_base)
        early_ok = end_a + tail_early[:, None] <= lam
        one = t.one_left[k]
        out = np.full(end_a.shape, INFEASIBLE_NEED, dtype=np.int64)
        more = np.flatnonzero(~one)
        if len(more):
            km = k[more]
            # (every bucket that can open the layer brings at least the lowest level)
            level = np.maximum((self.stay_levels[km + 1] <= ug).sum(axis=1) - 1, 0)
            early = _masked(self._stay_at(km + 1, level, end_a[more] // self.step),
                            early_ok[more])
            s_a = t.upd_own[km + 1] - t.upd_own[start]
            hidden = (unhidden_share(s_a, t.rest_max[km], t.rest_min_upd[km]) if self.pairs
                      else 0)
            late = self._stay_at(km + 1, level, grid[more]) + d_a[more][:, None]
            out[more] = np.minimum(early, _masked(
                late, late + (q_base[more] + hidden)[:, None] <= lam))
        i = np.flatnonzero(one)
        if len(i) == 0:
            return out
        k, end_a, d_a, grid = k[i], end_a[i], d_a[i], grid[i]
        b = k + 1
        d_b = t.a + t.p[b]
        s_a = t.upd_own[k + 1] - t.upd_own[start]
        s_b = t.upd_own[b + 1] - t.upd_own[b]
        tail_b = t.q[b] + ug + s_b
        early_b, late_b = self._last_unit(b, end_a, end_a // self.step, d_b, tail_b)
        early = _masked(np.minimum(early_b, late_b), early_ok[i])
        early_b, late_b = self._last_unit(b, grid * self.step, grid, d_b, tail_b)
        flow = pair_makespan(d_a, s_a, d_b, s_b) - d_a - d_b if self.pairs else 0
        late_b_early = early_b + d_a[:, None]
        late_b_late = late_b + d_a[:, None]
        late = np.minimum(
            _masked(late_b_early, late_b_early + q_own[i][:, None] <= lam),
            _masked(late_b_late, late_b_late + (q_base[i] + flow)[:, None] <= lam))
        out[i] = np.minimum(early, late)
        return out

    def _stay_layout(self, first_live: np.ndarray) -> None:
        """Room for the needs of the buckets that stay in a layer, at the cuts inside it
        with more than one unit left: one row of cells per level of the update part that the
        layer's opening bucket can bring, the values of ``upd_in`` from the first start a
        live bucket ending at the layer's first unit can have to that first unit, at most
        :data:`STAY_LEVELS` of them (an update part is looked up at the level at or below
        it, so the needs stay lower bounds)."""
        t, n = self.t, self.t.n
        rows = np.arange(n)
        cut = np.maximum(rows - 1, 0)
        many = (rows > 0) & t.inside[cut] & ~t.one_left[cut]
        self.stay_levels = np.full((n, STAY_LEVELS), INFEASIBLE_NEED, dtype=np.int64)
        self.stay_count = np.zeros(n, dtype=np.int64)
        for row in np.flatnonzero(many).tolist():
            first = int(t.first[row - 1])
            lo = int(first_live[first])
            picks = np.unique(np.linspace(lo, first, STAY_LEVELS).round().astype(np.int64))
            levels = np.unique(t.upd_in[picks])
            self.stay_levels[row, :len(levels)] = levels
            self.stay_count[row] = len(levels)
        self.stay_base = np.r_[0, np.cumsum(self.stay_count * (self.width + 1))]
        self.stay_values = np.full(int(self.stay_base[-1]) + 1, INFEASIBLE_NEED,
                                   dtype=np.int64)

    def _stay_at(self, rows: np.ndarray, level: np.ndarray, cell: np.ndarray) -> np.ndarray:
        """The stored need of staying at the cuts ``rows - 1`` (one per row of ``cell``), at
        the levels ``level``, at the cells ``cell``."""
        w = self.width[rows][:, None]
        c = np.clip(cell - self.first[rows][:, None], 0, w)
        return self.stay_values[self.stay_base[rows][:, None] + level[:, None] * (w + 1) + c]

    def _last_unit(self, b: np.ndarray, e: np.ndarray, cell: np.ndarray, d_b: np.ndarray,
                   tail_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The need through the bucket of a layer's last unit ``b`` alone from ``e`` (its
        cells ``cell``): early (the peak, when ``b`` is the last unit), and late."""
        t, lam, n = self.t, self.lam, self.t.n
        end = np.maximum(e, t.r[b][:, None]) + d_b[:, None]
        is_peak = (b == n - 1)[:, None]
        rows = np.minimum(b + 1, n - 1)
        after = np.where(is_peak, end, self._at(rows, end // self.step))
        early = _masked(after, end + tail_b[:, None] <= lam)
        late = np.where(is_peak, INFEASIBLE_NEED, self._at(rows, cell) + d_b[:, None])
        return early, _masked(late, late + tail_b[:, None] <= lam)


def unhidden_share(s_a: np.ndarray, work_after: np.ndarray | np.int64 | int,
                   least_update: np.ndarray | np.int64 | int) -> np.ndarray:
    """What a late bucket's update ``s_a`` adds to its layer's flow shop beyond the
    communication of the bucket and of the later late buckets of its layer (at least one, at
    most ``work_after`` of communication in all, each with an update of at least
    ``least_update``): ``max(0, s_a - max(0, work_after - least_update))``.

    Whatever the order, either the bucket is the last of the flow shop (its update follows all
    the communication) or another one follows it (after its update comes at least that one's).
    """
    return np.maximum(0, s_a - np.maximum(0, np.asarray(work_after) - np.asarray(least_update)))


def cells_bound(t: UnimodalTables, lam: int, step: int, first_live: np.ndarray) -> int:
    """The grid values :class:`Needs` computes at most (every live bucket at every cell of
    its row, and the buckets that stay in a layer at every level): the cost of the needs,
    known before they are computed."""
    _, width = _layout(t, lam, max(1, int(step)))
    kmax = _last_ends(first_live)
    rows = np.arange(t.n)
    cut = np.maximum(rows - 1, 0)
    inside = (rows > 0) & t.inside[cut]
    first_end = np.where(inside, t.layer_last[cut] + 1, rows)
    leave = width * np.maximum(0, kmax[:t.n] - first_end + 1)
    stay = np.where(inside & ~t.one_left[cut],
                    STAY_LEVELS * width * (t.layer_last[cut] - rows + 1), 0)
    return int((leave + stay).sum())


def _layout(t: UnimodalTables, lam: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The first cell and the number of cells of every row: row ``j + 1`` (cut ``j``) from
    the release of unit ``j + 1`` (below it, the same need) to the latest end of the early
    chain that the later units' deadlines allow (``lam + edf``)."""
    first = t.r // step
    top = np.minimum(lam, lam + t.edf[:t.n]) // step
    return first, np.maximum(0, top - first + 1)


def _last_ends(first_live: np.ndarray) -> np.ndarray:
    """For every start unit (and one past the last), the last unit a live bucket from it
    can end at."""
    n = len(first_live)
    return np.searchsorted(first_live, np.arange(n + 1), side="right") - 1


def _first_end(t: UnimodalTables, row: int) -> int:
    """The first unit the bucket after cut ``row - 1`` can end at and leave its layer: a
    cut inside a layer leaves it only with a bucket ending in a later layer (the buckets
    that stay are :meth:`Needs._stay`'s)."""
    return int(t.layer_last[row - 1]) + 1 if row > 0 and t.inside[row - 1] else row


def _masked(values: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """``values`` where ``ok``, else :data:`INFEASIBLE_NEED`."""
    return np.where(ok, values, INFEASIBLE_NEED)
