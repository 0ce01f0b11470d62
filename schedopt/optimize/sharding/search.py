"""The sharded search: units (contiguous groups of layers), prefetch depths and streams under a
memory cap (docs/formulation.md, "Sharded data parallel").

* Small instances: every contiguous partition into units with a tensor each, every prefetch
  depth that makes a difference (``0..U``) and both stream layouts are evaluated
  (:func:`enumerate_all`): the best is proven optimal.
* Otherwise: starts (the expressible sharded baselines; units of ``g`` blocks and of ``g``
  tensor-holding layers for every ``g``, with small depths), then a first-improvement local
  search on the unit boundaries and the knobs (:func:`local_search`), judged by the closed-form step
  (:func:`~.evaluate.step_time`); the bound is :func:`~.bound.step_bound`.

Configurations over the cap rank after every one within it, by their excess, so the search
walks towards the cap when it starts above it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from schedopt.optimize.sharding.evaluate import Config, ShardedInstance, Step, step_time

__all__ = ["Scored", "block_of", "block_starts", "count_partitions", "enumerate_all", "kick",
           "local_search", "partitions", "pattern_layouts", "pattern_starts", "repeated_blocks",
           "shortened", "uniform_starts"]


#: Largest number of layers in a repeated block for :func:`pattern_starts` (``2^m - 1``
#: cut patterns).
PATTERN_LAYERS = 10

#: Up to this many layers, the local search tries a cut at every layer; above, it splits each
#: unit at half its bytes.
SPLIT_EVERYWHERE = 200


@dataclass(frozen=True)
class Scored:
    """A configuration with its step and its rank key (feasible first, then excess, then
    iteration time)."""

    config: Config
    step: Step
    key: tuple[int, float, float]


def score(inst: ShardedInstance, c: Config, cap: int | None) -> Scored:
    """Evaluate ``c`` and rank it under ``cap`` (None: no cap)."""
    st = step_time(inst, c)
    over = 0 if cap is None else max(0, st.peak_bytes - cap)
    return Scored(c, st, (int(over > 0), float(over), st.period_s))


def _depths(inst: ShardedInstance, units: int) -> list[tuple[int, int]]:
    """Distinct ``(forward, backward)`` prefetch depths for ``units`` units (a depth >= U acts
    as U; grad-op has no backward gather, its depth stays 1)."""
    d = list(range(units + 1))
    if inst.mode == "full":
        return [(p, q) for p in d for q in d]
    return [(p, 1) for p in d]


def partitions(inst: ShardedInstance) -> Iterator[tuple[int, ...]]:
    """Every contiguous partition into units that each hold a tensor (unit starts)."""
    n = inst.n

    def rec(start: int) -> Iterator[tuple[int, ...]]:
        for end in range(start + 1, n + 1):
            if not inst.has_tensor[start:end].any():
                continue
            if end == n:
                yield (start,)
            elif inst.has_tensor[end:].any():
                for rest in rec(end):
                    yield (start, *rest)

    return rec(0)


def count_partitions(inst: ShardedInstance, limit: int) -> int:
    """Work of :func:`enumerate_all` (its configurations' units), counted up to ``limit``."""
    n = inst.n
    if 2 ** (int(inst.has_tensor.sum()) - 1) > limit:  # at least one unit per cut set
        return limit + 1
    # ways[i][u]: partitions of layers i.. into u units
    ways: list[dict[int, int]] = [dict() for _ in range(n + 1)]
    ways[n] = {0: 1}
    for i in range(n - 1, -1, -1):
        acc: dict[int, int] = {}
        for end in range(i + 1, n + 1):
            if not inst.has_tensor[i:end].any():
                continue
            for u, w in ways[end].items():
                acc[u + 1] = min(limit + 1, acc.get(u + 1, 0) + w)
        ways[i] = acc
    total = sum(w * len(_depths(inst, u)) * 2 * u for u, w in ways[0].items())
    return min(total, limit + 1)


def enumerate_all(inst: ShardedInstance, cap: int | None,
                  check: Callable[[], None]) -> Scored | None:
    """The best configuration of all (None when none fits the cap); ``check`` may stop."""
    best: Scored | None = None
    for starts in partitions(inst):
        check()
        for p, q in _depths(inst, len(starts)):
            for streams in (1, 2):
                s = score(inst, Config(starts, p, q, streams), cap)
                if best is None or s.key < best.key:
                    best = s
    return best


def atoms(inst: ShardedInstance) -> list[int]:
    """Layer index where each tensor-holding layer's smallest unit starts (tensorless layers
    join the next tensor-holding layer; trailing ones the last)."""
    holders = np.flatnonzero(inst.has_tensor)
    return [0, *[int(h) for h in holders[:-1] + 1]]


def uniform_starts(inst: ShardedInstance) -> list[tuple[int, ...]]:
    """Units of ``g`` tensor-holding layers each, for every ``g`` (the last unit takes the
    rest)."""
    at = atoms(inst)
    return [tuple(at[::g]) for g in range(1, len(at) + 1)]


def block_of(name: str) -> str:
    """The block a layer belongs to: its name up to the first numeric component
    (``model.layers.3.mlp.up_proj`` -> ``model.layers.3``); the whole name without one."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 1])
    return name


def block_starts(inst: ShardedInstance) -> list[tuple[int, ...]]:
    """Units of ``g`` blocks each (:func:`block_of`; FSDP's one unit per transformer block
    is ``g = 1``), for every ``g``; a block without a tensor joins the next."""
    heads = [i for i in range(inst.n) if i == 0 or block_of(inst.names[i])
             != block_of(inst.names[i - 1])]
    out: list[tuple[int, ...]] = []
    for g in range(1, len(heads) + 1):
        starts = [0]
        for h in heads[g::g]:
            if inst.has_tensor[starts[-1]:h].any() and inst.has_tensor[h:].any():
                starts.append(h)
        if tuple(starts) not in out:
            out.append(tuple(starts))
    return out


def repeated_blocks(inst: ShardedInstance) -> tuple[int, int, int] | None:
    """The longest run of consecutive numbered blocks (:func:`block_of`: ``model.layers.3``)
    with the same layers (names after the block's prefix): ``(first layer, layers per block,
    blocks)``; None when no two consecutive numbered blocks repeat."""
    heads = [i for i in range(inst.n) if i == 0 or block_of(inst.names[i])
             != block_of(inst.names[i - 1])]
    ends = [*heads[1:], inst.n]

    def signature(j: int) -> tuple[str, ...]:
        prefix = block_of(inst.names[heads[j]])
        return tuple(inst.names[i][len(prefix):] for i in range(heads[j], ends[j]))

    def numbered(j: int) -> bool:
        return block_of(inst.names[heads[j]]).rsplit(".", 1)[-1].isdigit()

    sigs = [signature(j) if numbered(j) else None for j in range(len(heads))]
    best: tuple[int, int, int] | None = None
    j = 0
    while j < len(heads):
        r = j + 1
        while r < len(heads) and sigs[r] == sigs[j]:
            r += 1
        if sigs[j] is not None and r - j >= 2 and (best is None or r - j > best[2]):
            best = (heads[j], ends[j] - heads[j], r - j)
        j = r
    return best


def pattern_starts(inst: ShardedInstance) -> list[tuple[int, ...]]:
    """Units that repeat one cut pattern in every block of :func:`repeated_blocks` (a block
    of ``m`` layers has ``2^m - 1`` non-empty patterns of cuts at its layers; a pattern
    without a cut at the block's first layer makes units that cross blocks), every layer
    before and after the run a unit of its own (the local search merges them); valid
    partitions only, none when the block has more than :data:`PATTERN_LAYERS` layers."""
    return [layout for _, layout in pattern_layouts(inst)]


def pattern_layouts(inst: ShardedInstance) -> list[tuple[int, tuple[int, ...]]]:
    """:func:`pattern_starts` with each layout's pattern (bit ``j``: a cut at the block's
    layer ``j``)."""
    run = repeated_blocks(inst)
    if run is None or run[1] > PATTERN_LAYERS:
        return []
    first, m, count = run
    last = first + m * count
    edges = [*range(1, first + 1), *range(last, inst.n)]
    out: list[tuple[int, tuple[int, ...]]] = []
    for mask in range(1, 2 ** m):
        cuts = [j for j in range(m) if mask >> j & 1]
        inner = [first + m * i + j for i in range(count) for j in cuts]
        starts = tuple(sorted({0, *edges, *inner} - {inst.n}))
        if inst.valid(starts):
            out.append((mask, starts))
    return out


def shortened(inst: ShardedInstance, blocks: int) -> ShardedInstance | None:
    """``inst`` with its run of repeated blocks (:func:`repeated_blocks`) cut to its first
    ``blocks`` blocks (the layers before and after kept); None when the run is not longer."""
    run = repeated_blocks(inst)
    if run is None or run[2] <= blocks:
        return None
    first, m, count = run
    keep = np.r_[0:first + m * blocks, first + m * count:inst.n]
    return replace(inst, names=[inst.names[i] for i in keep], f=inst.f[keep], b=inst.b[keep],
                   p=inst.p[keep], g=inst.g[keep], has_tensor=inst.has_tensor[keep],
                   tensors=[inst.tensors[i] for i in keep] if inst.tensors else [])


def _neighbours(inst: ShardedInstance, c: Config) -> Iterator[Config]:
    """Moves: the knobs by one, each boundary moved by one, removed, and each cut added."""
    full = inst.mode == "full"
    for dp in (1, -1):
        if 0 <= c.forward_prefetch + dp <= len(c.starts):
            yield Config(c.starts, c.forward_prefetch + dp, c.backward_prefetch, c.streams)
        if full and 0 <= c.backward_prefetch + dp <= len(c.starts):
            yield Config(c.starts, c.forward_prefetch, c.backward_prefetch + dp, c.streams)
    yield Config(c.starts, c.forward_prefetch, c.backward_prefetch, 3 - c.streams)
    s = c.starts
    for i in range(1, len(s)):
        for new in (s[i] - 1, s[i] + 1):
            if s[i - 1] < new < (s[i + 1] if i + 1 < len(s) else inst.n):
                yield Config((*s[:i], new, *s[i + 1:]), c.forward_prefetch,
                             c.backward_prefetch, c.streams)
        yield Config((*s[:i], *s[i + 1:]), c.forward_prefetch, c.backward_prefetch, c.streams)
    cuts = set(s)
    if inst.n <= SPLIT_EVERYWHERE:
        splits: list[int] = [j for j in range(1, inst.n) if j not in cuts]
    else:  # each unit at the layer nearest half its bytes
        ends = (*s[1:], inst.n)
        pp = inst.sums[:, 2]
        splits = []
        for a, b in zip(s, ends, strict=True):
            j = int(np.searchsorted(pp, 0.5 * (pp[a] + pp[b])))
            j = min(max(j, a + 1), b - 1)
            if a < j < b:
                splits.append(j)
    for j in splits:
        yield Config(tuple(sorted((*s, j))), c.forward_prefetch, c.backward_prefetch,
                     c.streams)


def local_search(inst: ShardedInstance, start: Scored, cap: int | None, max_work: int,
                 check: Callable[[], None], on_improve: Callable[[Scored], None]
                 ) -> tuple[Scored, int]:
    """First-improvement descent from ``start`` over :func:`_neighbours` within ``max_work``
    unit evaluations (a configuration of ``U`` units counts ``U``); returns the best and the
    work spent."""
    best, evals = start, 0
    seen: set[Config] = {start.config}
    improved = True
    while improved and evals < max_work:
        improved = False
        for c in _neighbours(inst, best.config):
            if c in seen or not inst.valid(c.starts):
                continue
            seen.add(c)
            check()
            s = score(inst, c, cap)
            evals += len(c.starts)
            if s.key < best.key:
                best, improved = s, True
                on_improve(best)
                break
            if evals >= max_work:
                break
    return best, evals


def kick(inst: ShardedInstance, c: Config, rng: np.random.Generator, moves: int = 5) -> Config:
    """``c`` with ``moves`` random boundaries removed or added (the perturbation of the
    iterated local search); an invalid result is returned unchanged."""
    s = list(c.starts)
    for _ in range(moves):
        if rng.random() < 0.5 and len(s) > 2:
            s.pop(int(rng.integers(1, len(s))))
        elif inst.n > 1:
            j = int(rng.integers(1, inst.n))
            if j not in s:
                s = sorted([*s, j])
    out = Config(tuple(s), c.forward_prefetch, c.backward_prefetch, c.streams)
    return out if inst.valid(out.starts) else c
