"""Plan -> DeepSpeed ZeRO config fragment (``reduce_bucket_size``, ``overlap_comm``).

DeepSpeed has one knob for the grouping: a uniform ``reduce_bucket_size`` in elements. Stage 2
reduces from backward hooks, in gradient-ready order, one pending bucket (one bucket sequence
for all dtypes, without ``torch_autocast``) that is reduced before a gradient would take it past
the size. A plan follows one uniform size ``N`` exactly when every bucket of several tensors
holds at most ``N`` elements and every bucket but the last would exceed ``N`` with the next
tensor; a tensor that DeepSpeed reduces in several calls (across a ZeRO partition boundary)
may appear as the policy's pieces. The emitter solves
those inequalities for a round ``N``, checks it with the schedopt ``deepspeed`` policy, and
otherwise tries sizes from the smallest tensor to the whole model and keeps the one whose plan
simulates closest to the plan's iteration time.
"""

from __future__ import annotations

import pprint
import statistics
from collections.abc import Sequence

from schedopt.emit.common import (
    Candidate,
    Emitted,
    deviations,
    round_int_in,
    search,
    size_grid,
    whole_tensor_buckets,
)
from schedopt.emit.zero3 import emit_zero3
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Tensor, Trace

__all__ = ["emit_deepspeed", "overflow_size_interval"]

#: DeepSpeed's default ``reduce_bucket_size`` (elements).
DEFAULT_REDUCE_BUCKET_SIZE = 500_000_000


def overflow_size_interval(
    order: Sequence[Tensor], bucket_of: dict[str, int]
) -> tuple[int, int] | None:
    """Sizes (elements) for which DeepSpeed's overflow rule rebuilds a grouping.

    Parameters
    ----------
    order
        Tensors in the order DeepSpeed adds them to its buckets.
    bucket_of
        Tensor name -> bucket index of the grouping.

    Returns
    -------
    tuple of int or None
        The inclusive interval ``[lo, hi]``, or None when it is empty.
    """
    lo, hi = 1, 2**62
    # one bucket sequence for all dtypes (DeepSpeed without torch_autocast)
    runs: list[list[Tensor]] = []
    for t in order:
        if not runs or bucket_of[runs[-1][-1].name] != bucket_of[t.name]:
            runs.append([])
        runs[-1].append(t)
    for j, run in enumerate(runs):
        elements = sum(t.numel for t in run)
        if len(run) > 1:
            lo = max(lo, elements)
        if j + 1 < len(runs):
            hi = min(hi, elements + runs[j + 1][0].numel - 1)
    return (lo, hi) if lo <= hi else None


def _config(stage: int, size: int, overlap: bool) -> dict:
    return {"zero_optimization": {"stage": stage, "reduce_bucket_size": size,
                                  "overlap_comm": overlap}}


def _candidate(stage: int, size: int, overlap: bool) -> Candidate:
    knobs = {"zero_stage": stage, "reduce_bucket_size": size, "overlap_comm": overlap}
    return Candidate(knobs, _config(stage, size, overlap),
                     f"ZeRO stage {stage}, reduce_bucket_size={size}, overlap_comm={overlap}")


def emit_deepspeed(trace: Trace, cluster: Cluster | None, plan: Plan) -> Emitted:
    """Express ``plan`` as a DeepSpeed ``zero_optimization`` fragment.

    A sharded plan gets ZeRO stage 3 settings instead (:func:`schedopt.emit.zero3.emit_zero3`).
    Exact when the plan's buckets are what one uniform ``reduce_bucket_size`` gives (ZeRO
    stage 2 with ``overlap_comm`` equal to the plan's ``overlap``; stage 1 is also tried for
    plans that communicate after the backward); otherwise the uniform size whose plan
    simulates closest to the plan's (bucket count without a cluster), with both times in the
    notes.

    Parameters
    ----------
    plan, trace
        The plan and the trace it was made for.
    cluster
        The cluster (optional).

    Returns
    -------
    Emitted
        ``deepspeed.json`` (a fragment to merge into ds_config) and ``deepspeed_snippet.py``.
    """
    if plan.sharding is not None:
        return emit_zero3(trace, cluster, plan)
    plan.check_against(trace, cluster)
    groups = whole_tensor_buckets(trace, plan)
    bucket_of = {name: k for k, b in enumerate(groups) for name in b}
    overlap = plan.overlap
    candidates: list[Candidate] = []
    stages = ((2, trace.ready_order),) if overlap else (
        (2, trace.ready_order), (1, trace.tensor_list))
    grid_stage = 2
    if plan.accumulate > 1:  # stage 2 reduces at every micro-batch: stage 1 waits for the last
        stages = ((1, trace.ready_order if overlap else trace.tensor_list),)
        grid_stage = 1
    numel = {t.name: t.numel for t in trace.tensor_list}
    elements = [sum(numel[m] for m in g) for g in groups]
    total = sum(numel.values())
    for stage, order in stages:
        interval = overflow_size_interval(order, bucket_of)
        if interval is not None:
            lo, hi = interval
            size = round_int_in(lo, min(hi, max(lo, 2 * total)))
            candidates.append(_candidate(stage, size, overlap))
    smallest = min(numel.values())
    extra = (DEFAULT_REDUCE_BUCKET_SIZE, round(statistics.mean(elements)), max(elements))
    candidates += [_candidate(grid_stage, n, overlap)
                   for n in size_grid(smallest, total, *extra)]
    blocked = deviations(plan, "DeepSpeed", overlap_always=False)
    # DeepSpeed itself reduces a tensor that crosses a ZeRO partition boundary in several calls
    # (the deepspeed policy's pieces): such a partition is exact when a candidate rebuilds it
    split = [b for b in blocked if "partitioned" in b]
    blocked = [b for b in blocked if b not in split]
    found = search("deepspeed", plan, trace, cluster, candidates, blocked=blocked,
                   structure_cost=lambda p: abs(p.num_buckets - plan.num_buckets))
    if not found.exact and not blocked:
        found.notes[0] = ("the plan's buckets do not follow one uniform reduce_bucket_size "
                          "(DeepSpeed's only grouping knob)")
    if not found.exact:
        found.notes[:0] = split
    config = found.chosen.config
    if plan.accumulate > 1:
        config = {**config, "gradient_accumulation_steps": plan.accumulate}
    return found.emitted("deepspeed", config, _snippet(plan, trace, config, found.exact))


def _snippet(plan: Plan, trace: Trace, config: dict, exact: bool) -> str:
    fragment = pprint.pformat(config, width=96, sort_dicts=False)
    return "\n".join([
        f'"""DeepSpeed settings for the {plan.policy} plan of {trace.name} '
        f"(trace {trace.fingerprint()}).",
        "",
        "Merge the fragment into your ds_config; reduce_bucket_size counts elements.",
        f"{'Exact' if exact else 'Approximate'}: see the notes of `schedopt emit`.",
        '"""',
        "",
        f"DS_FRAGMENT = {fragment}",
        "",
        "",
        "def merge(ds_config):",
        '    """Return ``ds_config`` with the fragment\'s ``zero_optimization`` keys set."""',
        "    out = dict(ds_config)",
        '    out["zero_optimization"] = {**out.get("zero_optimization", {}),',
        '                                **DS_FRAGMENT["zero_optimization"]}',
        "    return out",
        "",
    ])
