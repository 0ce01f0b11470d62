"""DeepSpeed ZeRO stage 1/2 gradient reduction (``reduce_bucket_size``, ``overlap_comm``).

Stage 2 (and stage 1 with ``overlap_comm``) reduces gradients from backward hooks: each hook
adds its gradient to the pending ("IPG") bucket of its dtype, after first reducing that bucket if
the gradient would take it past ``reduce_bucket_size`` elements; the end of the backward reduces
what is left, dtype by dtype in order of name (DeepSpeed's ``sort_dtypes``). Stage 1 without
``overlap_comm`` walks the parameters in order (forward order) after the backward, with the same
bucket rule. Stage 0 (plain data parallelism) all-reduces the
gradients after the backward per dtype, in buckets of ``allreduce_bucket_size`` elements closed
once they exceed it.

With ``overlap_comm`` false the reductions run on the compute stream, so they never overlap
compute: the iteration takes ``sum f + sum b + sum T(bucket)`` whether they are issued during the
backward (stage 2) or after it. The plan says ``overlap=False`` (communication after the whole
backward), which gives exactly that iteration time; only the position of the reductions in a
Gantt chart differs. The post-step all-gather of the updated parameter partitions (ZeRO 1/2) is
not part of the plan; it belongs to ``update_s``.
"""

from __future__ import annotations

from ..cluster import Cluster
from ..errors import SchedoptError
from ..plan import Plan
from ..trace import Trace
from .common import new_plan, pack_in_order, positive

__all__ = ["deepspeed", "deepspeed_buckets"]

#: DeepSpeed's dtype order for the stage-0 fallback all-reduce (``split_half_float_double``).
_STAGE0_DTYPE_ORDER = ("float16", "float32", "float64", "bfloat16")


def deepspeed_buckets(
    trace: Trace, *, zero_stage: int, bucket_elements: int, overlap_comm: bool
) -> list[list[str]]:
    """Reduction buckets in launch order (see the module docstring)."""
    if zero_stage == 0:
        closed, still_open = pack_in_order(trace.tensor_list, [bucket_elements], close="exceed",
                                           size=lambda t: t.numel)
        packs = closed + still_open
        rank = {d: i for i, d in enumerate(_STAGE0_DTYPE_ORDER)}
        # one dtype after another, each in its own walk order (stable sort keeps it)
        packs.sort(key=lambda p: rank.get(str(p.key), len(rank)))
        return [p.members for p in packs]
    hooks = zero_stage == 2 or overlap_comm
    order = trace.ready_order if hooks else trace.tensor_list
    closed, still_open = pack_in_order(order, [bucket_elements], close="overflow",
                                       size=lambda t: t.numel)
    # the epilogue reduces the pending buckets in DeepSpeed's sort_dtypes order (by name)
    still_open.sort(key=lambda p: str(p.key))
    return [p.members for p in closed + still_open]


def deepspeed(
    trace: Trace,
    cluster: Cluster,
    *,
    zero_stage: int = 2,
    reduce_bucket_size: float = 5e8,
    overlap_comm: bool = False,
) -> Plan:
    """DeepSpeed's gradient reduction as a plan.

    Parameters
    ----------
    trace, cluster
        The instance.
    zero_stage
        ZeRO stage 0, 1 or 2 (default 2). For stage 0, ``reduce_bucket_size`` plays the role of
        ``allreduce_bucket_size`` (same default).
    reduce_bucket_size
        Bucket size in elements (default 5e8).
    overlap_comm
        Reduce on a separate stream, overlapped with the backward (default False).

    Returns
    -------
    Plan
        Buckets in launch order; overlapped with the backward only with ``overlap_comm`` (stage
        0 never overlaps); the optimizer step waits for all.
    """
    if zero_stage not in (0, 1, 2):
        raise SchedoptError("must be 0, 1 or 2 (stage 3 is not modelled)",
                            "deepspeed.zero_stage", zero_stage)
    size = int(positive(reduce_bucket_size, "deepspeed.reduce_bucket_size"))
    if not isinstance(overlap_comm, bool):
        raise SchedoptError("must be true or false", "deepspeed.overlap_comm", overlap_comm)
    buckets = deepspeed_buckets(trace, zero_stage=zero_stage, bucket_elements=size,
                                overlap_comm=overlap_comm)
    knobs = {"zero_stage": zero_stage, "reduce_bucket_size": reduce_bucket_size,
             "overlap_comm": overlap_comm}
    return new_plan("deepspeed", trace, cluster, buckets, knobs,
                    overlap=overlap_comm and zero_stage > 0)
