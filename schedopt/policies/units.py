"""Building blocks of the sharded baselines: grouping layers into units, building the plan.

A unit is a contiguous run of layers (forward order) holding at least one tensor
(:class:`~schedopt.model.plan.Sharding`). The rules here turn a framework's wrapping rule into such
runs: :func:`block_units` (a unit per repeated block, the rest in contiguous runs),
:func:`child_units` (a unit per top-level child), :func:`size_units` (close a unit once it holds
enough parameters); :func:`merge_tensorless` folds units without tensors into a neighbour.
"""

from __future__ import annotations

from typing import Any, Literal

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import MAX_PREFETCH, Plan, Sharding
from schedopt.model.trace import Trace
from schedopt.policies.common import new_plan

__all__ = ["block_key", "block_units", "block_units_with_root", "child_units",
           "merge_tensorless", "prefetch_depth", "root_layers", "sharded_plan", "size_units"]


def block_key(name: str) -> str | None:
    """The block a layer belongs to: its name up to its first numeric component
    (``transformer.h.3.attn.c_attn`` -> ``transformer.h.3``); None when no component is a number
    (embeddings, final norm, head: the root's own parameters)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return None


def _runs(keys: list[str | None]) -> list[list[int]]:
    """Layer indices grouped into maximal runs of equal keys."""
    out: list[list[int]] = []
    for i, key in enumerate(keys):
        if out and keys[out[-1][-1]] == key:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def block_units(trace: Trace) -> list[list[int]]:
    """A unit per block (:func:`block_key`); the layers outside every block form a unit per
    contiguous run. Units without tensors are merged (:func:`merge_tensorless`)."""
    return merge_tensorless(trace, _runs([block_key(la.name) for la in trace.layers]))


def root_layers(trace: Trace) -> list[int]:
    """The root's own layers: those outside every block (:func:`block_key` None), forward
    order."""
    return [i for i, la in enumerate(trace.layers) if block_key(la.name) is None]


def block_units_with_root(trace: Trace) -> tuple[list[list[int]], list[int]]:
    """A unit per block and the root's own layers as one root group (FSDP2's ``fully_shard``
    per block, then on the root). Blocks without tensors are folded into a neighbour block
    (:func:`merge_tensorless`). Without a block, or when the root's layers own no tensor,
    there is no root group: :func:`block_units` (the root's runs as units) and ``[]``.
    """
    root = root_layers(trace)
    blocks = [run for run in _runs([block_key(la.name) for la in trace.layers])
              if block_key(trace.layers[run[0]].name) is not None]
    if not blocks or not _owns_any(trace, root) or not _owns_any(
            trace, [i for b in blocks for i in b]):
        return block_units(trace), []
    return merge_tensorless(trace, blocks), root


def _owns_any(trace: Trace, layers: list[int]) -> bool:
    """Whether ``layers`` own a gradient tensor or a frozen parameter."""
    own = {*trace.tensor_layer_by_name.values(), *trace.frozen_layer_by_name.values()}
    return any(lay in own for lay in layers)


def child_units(trace: Trace) -> list[list[int]]:
    """A unit per top-level child (the first component of the layer name), contiguous runs."""
    return merge_tensorless(trace, _runs([la.name.split(".")[0] for la in trace.layers]))


def size_units(trace: Trace, limit: int, *, backward: bool = True) -> list[list[int]]:
    """Walk the layers (in backward order by default) and close a unit once it holds at least
    ``limit`` parameters (elements); units in forward order."""
    order = list(range(len(trace.layers)))[::-1] if backward else list(range(len(trace.layers)))
    own = trace.tensor_layer_by_name
    numel = [0] * len(trace.layers)
    for t in trace.tensor_list:
        numel[own[t.name]] += t.numel
    out: list[list[int]] = [[]]
    held = 0
    for lay in order:
        out[-1].append(lay)
        held += numel[lay]
        if held >= limit:
            out.append([])
            held = 0
    units = [sorted(u) for u in out if u]
    return merge_tensorless(trace, sorted(units))


def merge_tensorless(trace: Trace, units: list[list[int]]) -> list[list[int]]:
    """Fold every unit that owns no tensor (gradient or frozen) into the next unit (the last
    into the one before).

    Raises
    ------
    SchedoptError
        When the trace has no tensor at all (nothing to shard).
    """
    out: list[list[int]] = []
    carry: list[int] = []
    for unit in units:
        carry = carry + unit
        if _owns_any(trace, carry):
            out.append(carry)
            carry = []
    if carry:
        if not out:
            raise SchedoptError("the trace has no tensor to shard", "trace", trace.name)
        out[-1] = out[-1] + carry
    return out


def prefetch_depth(sizes: list[int], limit: int) -> int:
    """Units a prefetch bucket of ``limit`` elements runs ahead.

    DeepSpeed's loop adds the next units while fewer than ``limit`` elements are queued; the
    depth is the (lower) median of the counts it reaches at the units where the limit, not the
    end of the model, stops it (all units ahead when the end always stops it first), capped at
    the schema's maximum.
    """
    if limit <= 0 or len(sizes) < 2:
        return 0
    counts = []
    for u in range(len(sizes) - 1):
        held, n = 0, 0
        while u + 1 + n < len(sizes) and held < limit:
            held += sizes[u + 1 + n]
            n += 1
        if held >= limit:
            counts.append(n)
    if not counts:
        return min(MAX_PREFETCH, len(sizes) - 1)
    counts.sort()
    return min(MAX_PREFETCH, counts[(len(counts) - 1) // 2])


def sharded_plan(policy: str, trace: Trace, cluster: Cluster, units: list[list[int]],
                 knobs: dict[str, Any], *, mode: Literal["full", "grad-op"],
                 forward_prefetch: int, backward_prefetch: int, streams: Literal[1, 2],
                 comm_dtype: Any = None, padding: Literal["none", "dim0"] = "none",
                 root: list[int] | None = None) -> Plan:
    """A sharded :class:`Plan` of ``units`` (layer indices, forward order) and the root group
    ``root`` (layer indices; None or empty: none), bound to ``trace`` and ``cluster``; buckets
    are the groups' gradient tensors in reduce-scatter order (units in backward order, then
    the root group)."""
    names = [[trace.layers[i].name for i in unit] for unit in units]
    sharding = Sharding(mode=mode, units=names, forward_prefetch=min(forward_prefetch,
                                                                     MAX_PREFETCH),
                        backward_prefetch=min(backward_prefetch, MAX_PREFETCH), streams=streams,
                        padding=padding,
                        root=[trace.layers[i].name for i in root] if root else None)
    sharding.check_against(trace)
    return new_plan(policy, trace, cluster, sharding.bucket_tensors(trace), knobs,
                    sharding=sharding, comm_dtype=comm_dtype)
