"""Plan -> Megatron-Core ``DistributedDataParallelConfig`` (``overlap_grad_reduce``,
``bucket_size``).

Megatron-Core groups parameters into one buffer per dtype and walks each in reverse parameter
order (a static guess at the backward order), closing a bucket once it holds at least
``bucket_size`` parameters; with ``overlap_grad_reduce`` each bucket is all-reduced as soon as
its last gradient is ready, without it each buffer is one all-reduce after the backward. A plan
follows one uniform size ``N`` exactly when, per dtype along that walk, every bucket's count
minus its last tensor is below ``N`` and every bucket but the last reaches ``N``; the emitter
solves those inequalities for a round ``N``, checks it with the schedopt ``megatron`` policy, and
otherwise keeps the size (or the non-overlapped setting) whose plan simulates closest to the
plan's iteration time.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from schedopt.emit.common import (
    Candidate,
    Emitted,
    deviations,
    dtype_runs,
    round_int_in,
    search,
    size_grid,
    whole_tensor_buckets,
)
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Tensor, Trace

__all__ = ["emit_megatron", "reach_size_interval"]


def reach_size_interval(
    order: Sequence[Tensor], bucket_of: dict[str, int]
) -> tuple[int, int] | None:
    """Sizes (elements) for which a close-on-reach rule rebuilds a grouping along ``order``.

    Returns
    -------
    tuple of int or None
        The inclusive interval ``[lo, hi]``, or None when it is empty.
    """
    lo, hi = 1, 2**62
    for runs in dtype_runs(order, bucket_of).values():
        for j, run in enumerate(runs):
            elements = sum(t.numel for t in run)
            lo = max(lo, elements - run[-1].numel + 1)
            if j + 1 < len(runs):
                hi = min(hi, elements)
    return (lo, hi) if lo <= hi else None


def _candidate(size: int | None) -> Candidate:
    if size is None:
        return Candidate({"overlap_grad_reduce": False}, {"overlap_grad_reduce": False},
                         "overlap_grad_reduce=False (one all-reduce per buffer)")
    config = {"overlap_grad_reduce": True, "bucket_size": size}
    return Candidate(dict(config), config, f"overlap_grad_reduce=True, bucket_size={size}")


def emit_megatron(trace: Trace, cluster: Cluster | None, plan: Plan) -> Emitted:
    """Express ``plan`` as Megatron-Core DDP settings.

    Parameters
    ----------
    plan, trace
        The plan and the trace it was made for.
    cluster
        The cluster (optional).

    Returns
    -------
    Emitted
        ``megatron.json`` (keyword arguments of ``DistributedDataParallelConfig``) and
        ``megatron_snippet.py``.
    """
    plan.check_against(trace, cluster)
    groups = whole_tensor_buckets(trace, plan)
    bucket_of = {name: k for k, b in enumerate(groups) for name in b}
    candidates: list[Candidate] = []
    if not plan.overlap:
        candidates.append(_candidate(None))
    numel = {t.name: t.numel for t in trace.tensor_list}
    interval = reach_size_interval(list(reversed(trace.tensor_list)), bucket_of)
    if interval is not None:
        lo, hi = interval
        candidates.append(_candidate(round_int_in(lo, min(hi, max(lo, 2 * sum(numel.values()))))))
    elements = [sum(numel[m] for m in g) for g in groups]
    world = cluster.world_size if cluster is not None else 1
    extra = (max(40_000_000, 1_000_000 * world), round(statistics.mean(elements)),
             max(elements))
    grid = size_grid(min(numel.values()), sum(numel.values()), *extra)
    candidates += [_candidate(n) for n in grid]
    if plan.overlap:
        candidates.append(_candidate(None))
    blocked = deviations(plan, "Megatron-Core", overlap_always=False)
    found = search("megatron", plan, trace, cluster, candidates, blocked=blocked)
    if not found.exact and not blocked:
        found.notes[0] = ("the plan's buckets do not follow one uniform bucket_size along "
                          "Megatron's reverse parameter order (its only grouping knob)")
    config = found.chosen.config
    return found.emitted("megatron", config, _snippet(plan, trace, config, found.exact))


def _snippet(plan: Plan, trace: Trace, config: dict, exact: bool) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in config.items())
    return "\n".join([
        f'"""Megatron-Core DDP settings for the {plan.policy} plan of {trace.name} '
        f"(trace {trace.fingerprint()}).",
        "",
        "bucket_size counts parameters.",
        *([f"Accumulation: {plan.accumulate} micro-batches per step (global_batch_size ="
           f" micro_batch_size x {plan.accumulate} x data-parallel size); the schedule runs all"
           " but the last under no_sync, so the gradients are reduced in the last backward."]
          if plan.accumulate > 1 else []),
        f"{'Exact' if exact else 'Approximate'}: see the notes of `schedopt emit`.",
        '"""',
        "",
        f"DDP_CONFIG_KWARGS = {config!r}",
        "",
        "",
        "def ddp_config(**kwargs):",
        f'    """``DistributedDataParallelConfig({args}, **kwargs)``."""',
        "    from megatron.core.distributed import DistributedDataParallelConfig",
        "",
        "    return DistributedDataParallelConfig(**DDP_CONFIG_KWARGS, **kwargs)",
        "",
    ])
