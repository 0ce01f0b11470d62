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

Stage 1 with ``bf16`` and ``grad_accum_dtype`` fp32 (``runtime/engine.py``,
``_do_optimizer_sanity_check``: without CPU offload the engine wraps the optimizer in
``BF16_Optimizer``, not the ZeRO one) keeps no buckets: ``BF16_Optimizer`` flattens the
parameter group into one buffer padded to a multiple of ``2 * world_size`` elements and
accumulates the gradients into an fp32 copy of it after the backward (``backward_epilogue``);
``allreduce_gradients`` then hands that buffer to ``buffered_allreduce_fallback``
(``get_grads_for_reduction``), which all-reduces it whole, cast to the communication dtype
(``communication_data_type``, bfloat16 unless set). ``reduce_bucket_size`` and ``overlap_comm``
play no part.
"""

from __future__ import annotations

from itertools import pairwise

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, piece_name
from schedopt.model.trace import Tensor, Trace
from schedopt.policies.common import Pack, itemsize, new_plan, pack_in_order, positive

__all__ = ["STAGE0_BUCKET_ELEMENTS", "check_accumulate", "deepspeed", "deepspeed_buckets",
           "uses_bf16_optimizer", "zero_slices"]

#: The accelerator's dtype order for the stage-0 fallback (CUDA ``supported_dtypes``).
_STAGE0_DTYPE_ORDER = ("float32", "float16", "bfloat16")

#: ``MEMORY_OPT_ALLREDUCE_SIZE``: the stage-0 bucket size ``allreduce_gradients`` always uses.
STAGE0_BUCKET_ELEMENTS = 500_000_000

#: DeepSpeed's dtype names (``runtime/config.py``, ``DtypeEnum``) -> schedopt dtypes.
_DS_DTYPES = {name: dtype for dtype, names in (
    ("float16", ("fp16", "float16", "half", "torch.float16")),
    ("float32", ("fp32", "float32", "float", "torch.float32")),
    ("bfloat16", ("bf16", "bfloat16", "torch.bfloat16"))) for name in names}

#: ``get_communication_data_type``: the names ``communication_data_type`` accepts.
_DS_COMM_DTYPES = {"fp16": "float16", "fp32": "float32", "bf16": "bfloat16"}


def _ds_dtype(value: str | None, field_name: str, names: dict[str, str]) -> str | None:
    """A DeepSpeed dtype name as a schedopt dtype (None stays None)."""
    if value is None:
        return None
    dtype = names.get(value.lower()) if isinstance(value, str) else None
    if dtype is None:
        raise SchedoptError(f"must be one of {', '.join(names)}", field_name, value)
    return dtype


def uses_bf16_optimizer(zero_stage: int, bf16: bool, grad_accum_dtype: str | None) -> bool:
    """Whether DeepSpeed's engine wraps the optimizer in ``BF16_Optimizer`` (no CPU offload).

    ``_do_optimizer_sanity_check`` (``runtime/engine.py``, 0.19.8): ZeRO stage 1 with bfloat16
    parameters and fp32 gradient accumulation.

    Raises
    ------
    SchedoptError
        Stage 0 with bf16 and another accumulation dtype, which DeepSpeed refuses.
    """
    accum = _ds_dtype(grad_accum_dtype, "deepspeed.grad_accum_dtype", _DS_DTYPES)
    model = "bfloat16" if bf16 else "float32"
    if zero_stage == 0 and accum is not None and accum != model:
        raise SchedoptError(f"DeepSpeed refuses {model} parameters with {accum} gradient "
                            "accumulation without ZeRO", "deepspeed.grad_accum_dtype",
                            grad_accum_dtype)
    return zero_stage == 1 and bf16 and accum == "float32"


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
    bf16: bool = False,
    grad_accum_dtype: str | None = None,
    communication_data_type: str | None = None,
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
    bf16
        ``bf16.enabled``: bfloat16 parameters (default False).
    grad_accum_dtype
        ``data_types.grad_accum_dtype`` (a DeepSpeed dtype name such as ``fp32``); unset: the
        parameters' dtype. With ``bf16`` at stage 1, ``fp32`` selects ``BF16_Optimizer``: one
        all-reduce of every gradient after the backward.
    communication_data_type
        DeepSpeed's ``communication_data_type`` (``fp32``, ``fp16``, ``bf16``); the plan's
        ``comm_dtype`` under ``BF16_Optimizer`` (unset: bfloat16, the engine's default with
        bf16). Recorded only on the other paths.

    Returns
    -------
    Plan
        Buckets in launch order; overlapped with the backward only with ``overlap_comm`` (stage
        0 and ``BF16_Optimizer`` never overlap); the optimizer step waits for all.
    """
    if zero_stage not in (0, 1, 2):
        raise SchedoptError("must be 0, 1 or 2 (stage 3 is not modelled)",
                            "deepspeed.zero_stage", zero_stage)
    size = int(positive(reduce_bucket_size, "deepspeed.reduce_bucket_size"))
    for name, flag in (("overlap_comm", overlap_comm), ("torch_autocast", torch_autocast),
                       ("bf16", bf16)):
        if not isinstance(flag, bool):
            raise SchedoptError("must be true or false", f"deepspeed.{name}", flag)
    comm = _ds_dtype(communication_data_type, "deepspeed.communication_data_type",
                     _DS_COMM_DTYPES)
    if uses_bf16_optimizer(zero_stage, bf16, grad_accum_dtype):
        knobs = {"zero_stage": zero_stage, "reduce_bucket_size": reduce_bucket_size,
                 "overlap_comm": overlap_comm, "torch_autocast": torch_autocast, "bf16": bf16,
                 "grad_accum_dtype": grad_accum_dtype,
                 "communication_data_type": communication_data_type,
                 "optimizer": "BF16_Optimizer"}
        return new_plan("deepspeed", trace, cluster, [[t.name for t in trace.tensor_list]],
                        knobs, overlap=False, comm_dtype=comm or "bfloat16")
    buckets = deepspeed_buckets(trace, zero_stage=zero_stage, bucket_elements=size,
                                overlap_comm=overlap_comm, torch_autocast=torch_autocast)
    partition: dict[str, list[int]] = {}
    if zero_stage > 0:
        buckets, partition = _split_calls(trace, buckets, size, cluster.world_size)
    knobs = {"zero_stage": zero_stage, "reduce_bucket_size": reduce_bucket_size,
             "overlap_comm": overlap_comm, "torch_autocast": torch_autocast,
             "bucket_elements_used": STAGE0_BUCKET_ELEMENTS if zero_stage == 0 else size}
    knobs |= {k: v for k, v in (("bf16", bf16), ("grad_accum_dtype", grad_accum_dtype),
                                ("communication_data_type", communication_data_type)) if v}
    return new_plan("deepspeed", trace, cluster, buckets, knobs, partition=partition,
                    overlap=overlap_comm and zero_stage > 0)


def check_accumulate(plan: Plan, accumulate: int) -> None:
    """Refuse gradient accumulation where DeepSpeed reduces at every micro-batch.

    DeepSpeed 0.19.8 ``runtime/engine.py`` (``allreduce_gradients``): "ZeRO stage >= 2
    communicates during non gradient accumulation boundaries as well" (stage 2's hooks reduce
    whatever the boundary, ``stage_1_and_2.py``, ``reduce_ready_partitions_and_remove_grads``:
    ``partition_gradients``); stages 0 and 1 (and ``BF16_Optimizer``) communicate only at the
    boundary, after the last micro-batch, which is what a plan's ``accumulate`` means.

    Raises
    ------
    SchedoptError
        ``accumulate`` above 1 with ZeRO stage 2.
    """
    if accumulate > 1 and plan.knobs.get("zero_stage") == 2:
        raise SchedoptError("ZeRO stage 2 reduces the gradients at every micro-batch (DeepSpeed "
                            "0.19.8 engine.py, allreduce_gradients), a plan only after the last:"
                            " give zero_stage=1 or 0", "deepspeed.accumulate", accumulate)
