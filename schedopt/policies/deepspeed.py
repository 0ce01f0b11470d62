"""DeepSpeed gradient reduction (ZeRO stage 0/1/2; DeepSpeed 0.19.8).

Stages 1 and 2 (``runtime/zero/stage_1_and_2.py``). Stage 2, and stage 1 with ``overlap_comm``,
reduce from backward hooks: each hook adds its gradient to the pending ("IPG") bucket, after
first reducing that bucket if the gradient would take it past ``reduce_bucket_size`` elements
(``reduce_independent_p_g_buckets_and_remove_grads``); the end of the backward reduces what is
left. Stage 1 without ``overlap_comm`` walks the parameters in forward order after the backward
(``reduce_gradients``) with the same rule. There is one pending bucket per *communication
dtype*: without ``torch_autocast`` that is the single ``communication_data_type`` of the
optimizer (DeepSpeed flattens a parameter group into one buffer, so every gradient goes through
one bucket sequence whatever its dtype); with ``torch_autocast`` it is every parameter's dtype,
and the end of the backward reduces the pending buckets in ``sort_dtypes`` order (by name).

Each reduced bucket is cut at the boundaries of the ZeRO partitions (``average_tensor``) and
the slices are all-reduced in calls of ``reduce_bucket_size`` elements, a call closing once it
exceeds the size (``allreduce_and_scatter``). A bucket holds at most the size, so it is one call,
except a single tensor larger than the size that crosses a partition boundary: it takes one
call per group of slices, and the plan splits it into those pieces. Partitions are equal shares
of the flattened parameters (forward order) padded to a multiple of ``2 * world_size``.

Stage 0 (``runtime/engine.py``, ``allreduce_gradients``) calls ``buffered_allreduce_fallback``
with the engine's built-in 5e8 elements: the configured size plays no part. Gradients are split
by dtype in the accelerator's order (CUDA: float32, float16, bfloat16; other dtypes are
refused), and each dtype's gradients, in parameter order, are all-reduced in buckets closed once
they exceed 5e8 elements (``allreduce_no_retain``).

With ``overlap_comm`` false the reductions run on the compute stream, so they never overlap
compute: the iteration takes ``sum f + sum b + sum T(bucket)`` whether they are issued during the
backward (stage 2) or after it. The plan says ``overlap=False`` (communication after the whole
backward), which gives exactly that iteration time; only the position of the reductions in a
Gantt chart differs. The post-step all-gather of the updated parameter partitions (ZeRO 1/2) is
not part of the plan; it belongs to ``update_s``.
"""

from __future__ import annotations

from itertools import pairwise

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, piece_name
from schedopt.model.trace import Tensor, Trace
from schedopt.policies.common import Pack, itemsize, new_plan, pack_in_order, positive

__all__ = ["STAGE0_BUCKET_ELEMENTS", "deepspeed", "deepspeed_buckets", "zero_slices"]

#: The accelerator's dtype order for the stage-0 fallback (CUDA ``supported_dtypes``).
_STAGE0_DTYPE_ORDER = ("float32", "float16", "bfloat16")

#: ``MEMORY_OPT_ALLREDUCE_SIZE``: the stage-0 bucket size ``allreduce_gradients`` always uses.
STAGE0_BUCKET_ELEMENTS = 500_000_000


def _stage0_buckets(trace: Trace) -> list[list[str]]:
    """Stage 0: per dtype in the accelerator's order, buckets closed once past 5e8 elements."""
    for k, t in enumerate(trace.tensor_list):
        if t.dtype not in _STAGE0_DTYPE_ORDER:
            raise SchedoptError("DeepSpeed's all-reduce fallback reduces float32, float16 and "
                                "bfloat16 gradients only", f"trace.tensors[{k}].dtype", t.dtype)
    out: list[list[str]] = []
    for dtype in _STAGE0_DTYPE_ORDER:
        walk = [t for t in trace.tensor_list if t.dtype == dtype]
        closed, still_open = pack_in_order(walk, [STAGE0_BUCKET_ELEMENTS], close="exceed",
                                           size=lambda t: t.numel)
        out += [p.members for p in closed + still_open]
    return out


def zero_slices(trace: Trace, world_size: int) -> dict[str, list[int]]:
    """Element counts of every tensor's slices at the ZeRO partition boundaries.

    Parameters
    ----------
    trace
        The instance; parameters are flattened in forward order (``tensor_list``).
    world_size
        Data-parallel ranks; the flat buffer is padded to a multiple of ``2 * world_size``
        (``nccl_start_alignment_factor``) and cut into ``world_size`` equal partitions.

    Returns
    -------
    dict
        Tensor name -> slice sizes (one entry for a tensor inside one partition).
    """
    total = sum(t.numel for t in trace.tensor_list)
    align = 2 * world_size
    part = -(-total // align) * align // world_size
    out: dict[str, list[int]] = {}
    start = 0
    for t in trace.tensor_list:
        end = start + t.numel
        cuts = [start, *range((start // part + 1) * part, end, part), end]
        out[t.name] = [b - a for a, b in pairwise(cuts)]
        start = end
    return out


def _calls(slices: list[int], size: int) -> list[int]:
    """Elements per all-reduce call: slices added until the call exceeds ``size``."""
    calls, cur = [], 0
    for s in slices:
        cur += s
        if cur > size:
            calls.append(cur)
            cur = 0
    return [*calls, cur] if cur else calls


def deepspeed_buckets(
    trace: Trace,
    *,
    zero_stage: int,
    bucket_elements: int,
    overlap_comm: bool,
    torch_autocast: bool = False,
) -> list[list[str]]:
    """Reduced buckets (whole tensors) in launch order (see the module docstring)."""
    if zero_stage == 0:
        return _stage0_buckets(trace)
    hooks = zero_stage == 2 or overlap_comm
    order = trace.ready_order if hooks else trace.tensor_list

    def key(t: Tensor) -> str:
        return t.dtype if torch_autocast else "comm"

    closed, still_open = pack_in_order(order, [bucket_elements], close="overflow",
                                       size=lambda t: t.numel, key=key)
    still_open.sort(key=lambda p: str(p.key))  # the epilogue: sort_dtypes order (by name)
    packs: list[Pack] = closed + still_open
    return [p.members for p in packs]


def _split_calls(
    trace: Trace, buckets: list[list[str]], bucket_elements: int, world_size: int
) -> tuple[list[list[str]], dict[str, list[int]]]:
    """Split a lone oversized tensor into one piece per all-reduce call DeepSpeed makes."""
    slices = zero_slices(trace, world_size)
    by_name = {t.name: t for t in trace.tensor_list}
    out: list[list[str]] = []
    partition: dict[str, list[int]] = {}
    for bucket in buckets:
        calls = _calls(slices[bucket[0]], bucket_elements) if len(bucket) == 1 else [0]
        if len(calls) < 2:
            out.append(bucket)
            continue
        name = bucket[0]
        partition[name] = [n * itemsize(by_name[name]) for n in calls]
        out += [[piece_name(name, i)] for i in range(len(calls))]
    return out, partition


def deepspeed(
    trace: Trace,
    cluster: Cluster,
    *,
    zero_stage: int = 2,
    reduce_bucket_size: float = 5e8,
    overlap_comm: bool = False,
    torch_autocast: bool = False,
) -> Plan:
    """DeepSpeed's gradient reduction as a plan.

    Parameters
    ----------
    trace, cluster
        The instance; the cluster's world size sets the ZeRO partitions.
    zero_stage
        ZeRO stage 0, 1 or 2 (default 2).
    reduce_bucket_size
        Bucket size in elements (default 5e8). Stage 0 ignores it, as DeepSpeed's engine does
        (its fallback all-reduce always uses 5e8).
    overlap_comm
        Reduce on a separate stream, overlapped with the backward (default False).
    torch_autocast
        DeepSpeed's ``torch_autocast`` is enabled: one pending bucket per gradient dtype
        (default False: one bucket sequence for all dtypes). Stages 1 and 2 only.

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
    for name, flag in (("overlap_comm", overlap_comm), ("torch_autocast", torch_autocast)):
        if not isinstance(flag, bool):
            raise SchedoptError("must be true or false", f"deepspeed.{name}", flag)
    buckets = deepspeed_buckets(trace, zero_stage=zero_stage, bucket_elements=size,
                                overlap_comm=overlap_comm, torch_autocast=torch_autocast)
    partition: dict[str, list[int]] = {}
    if zero_stage > 0:
        buckets, partition = _split_calls(trace, buckets, size, cluster.world_size)
    knobs = {"zero_stage": zero_stage, "reduce_bucket_size": reduce_bucket_size,
             "overlap_comm": overlap_comm, "torch_autocast": torch_autocast,
             "bucket_elements_used": STAGE0_BUCKET_ELEMENTS if zero_stage == 0 else size}
    return new_plan("deepspeed", trace, cluster, buckets, knobs, partition=partition,
                    overlap=overlap_comm and zero_stage > 0)
