"""An exact programme over unit boundaries for the sharded classes whose step is a sum of
local terms (docs/formulation.md, section 10, "Exact programme").

With full sharding, a forward depth ``p <= 1`` and either one stream with a backward depth
``q <= 1`` or two streams with ``q = 0`` (and a backward that takes time in every layer), the
replay of :func:`~.evaluate.step_time` has a closed form in which every
unit contributes a term that depends only on itself and its two neighbours (``ag``: all-gather,
``rs``: reduce-scatter, ``F``, ``B``: compute of a unit; ``u - 1`` the previous unit in
forward order, ``u + 1`` the next; ``rs`` of a unit past the last is 0):

* forward, ``p = 0``: ``F(u) + ag(u)`` (each gather issued when the previous forward ends);
  ``p = 1``: ``ag(0)`` and ``max(F(u), ag(u + 1))`` (the next gather runs during ``F(u)``);
* backward, the last unit's gather ``ag(U - 1)`` and then per unit ``u >= 1``:

  - one stream, ``q = 1``: ``max(B(u), rs(u + 1) + ag(u - 1))`` (``RS(u + 1)`` is served when
    ``B(u)`` starts, ``AGb(u - 1)`` behind it);
  - one stream, ``q = 0``: ``B(u) + rs(u) + ag(u - 1)``;
  - two streams, ``q = 0``: ``max(B(u), rs(u + 1)) + ag(u - 1)``;

  and for the first unit ``max(B(0), rs(1)) + rs(0)`` (``B(0) + rs(0)`` with ``q = 0`` on one
  stream);

plus the optimizer step on the shard. With ``k`` micro-batches every forward repeats its
terms, and each backward before the last (no reduce-scatter: the network is free when each
backward unit starts) adds ``ag(U - 1)`` and per unit ``max(B(u), ag(u - 1))`` with
``q = 1``, ``B(u) + ag(u - 1)`` with ``q = 0`` (``B(0)`` for the first). The least sum over
partitions is a shortest path over states ``(start of the previous unit, start and end of
the last)``: O(n^4 / 24) cells and O(n^3) memory for ``n`` layers. The memory peak is not a
sum: under a cap the programme leaves out units that cannot fit alone (``2 P_u`` with a
backward, ``P_u``), and its optimum is the optimum of its class within the cap exactly when
its plan fits (checked by the caller with :func:`~.evaluate.step_time`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from schedopt.optimize.sharding.evaluate import Config, ShardedInstance

__all__ = ["EXACT_LAYERS", "Knobs", "best_units", "separable_classes"]

#: Largest number of layers for :func:`best_units`.
EXACT_LAYERS = 120


@dataclass(frozen=True)
class Knobs:
    """A separable class: forward depth (0 or 1), backward depth (0 or 1) and streams."""

    forward_prefetch: int
    backward_prefetch: int
    streams: int


def separable_classes(inst: ShardedInstance) -> list[Knobs]:
    """The classes of ``inst`` whose step is a sum of local terms (none unless full sharding
    with at most :data:`EXACT_LAYERS` layers; two streams only when every layer's backward
    takes time, so that a gather never ties with a reduce-scatter)."""
    if inst.mode != "full" or inst.n > EXACT_LAYERS:
        return []
    out = [Knobs(p, q, 1) for p in (0, 1) for q in (0, 1)]
    if bool(np.all(inst.b > 0)):
        out += [Knobs(p, 0, 2) for p in (0, 1)]
    return out


@dataclass
class _Terms:
    """Per-unit sums of every candidate unit ``[i, j)`` (``n + 1`` square matrices)."""

    F: np.ndarray
    B: np.ndarray
    ag: np.ndarray
    rs: np.ndarray
    ok: np.ndarray


def _terms(inst: ShardedInstance, cap: int | None) -> _Terms:
    """Candidate units: compute, collectives, and whether the unit may be one (holds a
    tensor; under a cap, fits alone)."""
    cs = inst.sums
    F = cs[None, :, 0] - cs[:, None, 0]
    B = cs[None, :, 1] - cs[:, None, 1]
    held = cs[None, :, 2] - cs[:, None, 2]
    cum_t = np.r_[0, np.cumsum(inst.has_tensor)]
    ok = (cum_t[None, :] > cum_t[:, None]) & np.triu(np.ones_like(F, dtype=bool), 1)
    if cap is not None:
        ok &= (held <= cap) & ~((B > 0) & (2 * held > cap))
    G = cs[None, :, 3] - cs[:, None, 3]
    ag, rs = np.zeros_like(F), np.zeros_like(F)
    for i, j in zip(*np.nonzero(ok), strict=True):  # the cost model itself, memoised
        ag[i, j], rs[i, j] = inst.cost(float(held[i, j])), inst.cost(float(G[i, j]))
    return _Terms(F, B, ag, rs, ok)


def _term(t: _Terms, k: Knobs, i: int, j: int, prev: np.ndarray | None,
          nxt: np.ndarray | None, micro: int = 1) -> np.ndarray:
    """The term of unit ``[i, j)`` for previous units ``[prev, i)`` (rows; None: the first
    unit) and next units ``[j, nxt)`` (columns; None: the last), over ``micro``
    micro-batches: each forward, the backwards before the last (gathers only), the last."""
    F, B, ag_c, rs_c = t.F[i, j], t.B[i, j], t.ag[i, j], t.rs[i, j]
    ag_n = t.ag[j, nxt][None, :] if nxt is not None else np.zeros((1, 1))
    rs_n = t.rs[j, nxt][None, :] if nxt is not None else np.zeros((1, 1))
    ag_p = t.ag[prev, i][:, None] if prev is not None else None
    out = np.zeros((1 if prev is None else prev.size, 1 if nxt is None else nxt.size))
    if k.forward_prefetch == 0:
        out += micro * (F + ag_c)
    else:
        out += micro * ((ag_c if prev is None else 0.0)
                        + (np.maximum(F, ag_n) if nxt is not None else F))
    if nxt is None:
        out += micro * ag_c  # every backward starts with the last unit's gather
    q, s = k.backward_prefetch, k.streams
    if micro > 1:  # the backwards without reduce-scatters: the network is free at s_u
        plain = (B if ag_p is None else np.maximum(B, ag_p) if q == 1 else B + ag_p)
        out = out + (micro - 1) * plain
    if ag_p is None:  # the first unit ends the step
        return out + (B if q == 0 and s == 1 else np.maximum(B, rs_n)) + rs_c
    if q == 1:
        return out + np.maximum(B, rs_n + ag_p)
    if s == 1:
        return out + B + rs_c + ag_p
    return out + np.maximum(B, rs_n) + ag_p


def best_units(inst: ShardedInstance, knobs: Knobs, cap: int | None = None,
               check: Callable[[], None] | None = None) -> tuple[float, Config] | None:
    """The least step (s) over every partition of ``inst`` into units in class ``knobs``
    (:func:`separable_classes`), and its configuration; None when no partition qualifies.
    ``check`` is called between rows (it may raise to stop)."""
    n = inst.n
    t = _terms(inst, cap)
    # V[x, i, j]: least sum of the terms of the units before [i, j), previous unit [x, i)
    # (x = 0 when [i, j) is the first unit); W[x, i, j]: the start of the unit before [x, i)
    V = np.full((n + 1, n + 1, n + 1), np.inf)
    W = np.full((n + 1, n + 1, n + 1), -1, dtype=np.int32)
    V[0, 0, 1:] = np.where(t.ok[0, 1:], 0.0, np.inf)
    best, best_state = np.inf, None
    ends = np.arange(n + 1)
    for i in range(n):
        if check is not None:
            check()
        prev = None if i == 0 else np.arange(i)
        rows_of = slice(0, 1) if i == 0 else slice(0, i)
        for j in range(i + 1, n + 1):
            val = V[rows_of, i, j]
            if not np.isfinite(val).any():
                continue
            if j == n:
                last = val + _term(t, knobs, i, j, prev, None, inst.accumulate)[:, 0]
                x = int(np.argmin(last))
                if last[x] < best:
                    best, best_state = float(last[x]), (x, i)
                continue
            nxt = ends[j + 1:][t.ok[j, j + 1:]]
            if not nxt.size:
                continue
            cost = val[:, None] + _term(t, knobs, i, j, prev, nxt, inst.accumulate)
            rows = np.argmin(cost, axis=0)
            V[i, j, nxt] = cost[rows, np.arange(nxt.size)]
            W[i, j, nxt] = rows if i > 0 else -1
    if best_state is None:
        return None
    starts = _walk(W, best_state, n)
    cfg = Config(starts, knobs.forward_prefetch, knobs.backward_prefetch, knobs.streams)
    return best + inst.update_s, cfg


def _walk(W: np.ndarray, state: tuple[int, int], n: int) -> tuple[int, ...]:
    """Unit starts of the optimum whose last unit starts at ``state[1]`` after a unit
    starting at ``state[0]``."""
    x, i = state
    starts, j = [i], n
    while i > 0:
        starts.append(x)
        x, i, j = int(W[x, i, j]), x, i
    return tuple(reversed(starts))
