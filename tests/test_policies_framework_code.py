"""The baselines against their frameworks' own code: the six cases where the code was found to
differ from the earlier rules (expected buckets written out), and the rules those cases pin.

Sources (docs/policies.md, "Checked against the frameworks' code"): DeepSpeed 0.19.8
(``runtime/engine.py``, ``runtime/zero/stage_1_and_2.py``), ByteScheduler (bytedance/byteps,
``bytescheduler/``, ``_partition_tensor``), Horovod 0.28.1 (``horovod/common/operations.cc``,
``horovod/torch/optimizer.py``), MG-WFBP (HKBU-HPML/MG-WFBP, ``distributed_optimizer.py``,
``_generate_groups_mgwfbp``).
"""

from __future__ import annotations

import pytest

from schedopt.errors import SchedoptError
from schedopt.files import load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.policies.bytescheduler import split_sizes
from schedopt.policies.deepspeed import zero_slices

from .test_policies_frameworks import CLUSTER, MB, fitted, make_trace


def world(n: int) -> Cluster:
    """A ring of ``n`` single-GPU nodes (the world size sets ZeRO's partitions)."""
    return Cluster.model_validate({
        "name": f"w{n}", "nodes": n, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9},
    })


def every_third_float16(trace: Trace) -> Trace:
    """``trace`` with the 3rd, 6th, ... tensor (forward order) made float16."""
    data = trace.model_dump()
    k = 0
    for layer in data["layers"]:
        for t in layer["tensors"]:
            if k % 3 == 2:
                t["bytes"], t["dtype"] = t["bytes"] // 2, "float16"
            k += 1
    return Trace.model_validate(data)


# ---------------------------------------------------------------- 1. DeepSpeed, mixed dtypes

def test_deepspeed_mixed_dtypes_share_one_bucket_sequence() -> None:
    tr = every_third_float16(load_trace("resnet50-a100-b256"))
    assert {t.dtype for t in tr.tensor_list} == {"float32", "float16"}
    # one communication dtype without torch_autocast: 1 bucket at the default 5e8 elements
    # (the per-dtype rule gave 2) and 32 at 1e6 (it gave 33)
    assert make_plan(tr, world(1), "deepspeed").num_buckets == 1
    assert make_plan(tr, world(1), "deepspeed:reduce_bucket_size=1000000").num_buckets == 32
    # with torch_autocast DeepSpeed keeps one bucket per dtype
    assert make_plan(tr, world(1), "deepspeed:torch_autocast=true").num_buckets == 2
    plan = make_plan(tr, world(1), "deepspeed:reduce_bucket_size=1000000,torch_autocast=true")
    assert plan.num_buckets == 33


def test_deepspeed_one_sequence_by_hand() -> None:
    # w0 f32 1000, w1 f16 1000, w2 f32 1000 elements; ready order w2, w1, w0
    tr = make_trace([(0, 0.001, [("w0", 4000)]), (0, 0.001, [("w1", 2000, "float16")]),
                     (0, 0.001, [("w2", 4000)])])
    # 1500 elements: w2; w1 would make 2000 > 1500; w1; w0 would make 2000: w0
    assert make_plan(tr, CLUSTER, "deepspeed:reduce_bucket_size=1500").buckets == [
        ["w2"], ["w1"], ["w0"]]
    # 2000 elements: w2 + w1 = 2000 fits; w0 opens the next
    assert make_plan(tr, CLUSTER, "deepspeed:reduce_bucket_size=2000").buckets == [
        ["w2", "w1"], ["w0"]]
    # torch_autocast: w1 in its own float16 bucket, reduced first at the end (sort_dtypes)
    assert make_plan(tr, CLUSTER, "deepspeed:reduce_bucket_size=2000,torch_autocast=true"
                     ).buckets == [["w1"], ["w2", "w0"]]


# ------------------------------------------------------------------- 2. DeepSpeed stage 0

def stage0_trace() -> Trace:
    # w0 float32 4000 B, w1 float16 2000 B, w2 float32 4000 B (1000 elements each)
    return make_trace([(0, 0.001, [("w0", 4000)]), (0, 0.001, [("w1", 2000, "float16")]),
                       (0, 0.001, [("w2", 4000)])])


@pytest.mark.parametrize("size", [None, 500, 1500, 10**9])
def test_deepspeed_stage0_ignores_the_size_and_orders_dtypes_like_the_accelerator(
        size: int | None) -> None:
    spec = "deepspeed:zero_stage=0" + (f",reduce_bucket_size={size}" if size else "")
    plan = make_plan(stage0_trace(), CLUSTER, spec)
    # the engine: float32 (w0, w2) then float16 (w1), at any configured size
    assert plan.buckets == [["w0", "w2"], ["w1"]]
    assert not plan.overlap and plan.knobs["bucket_elements_used"] == 500_000_000


def test_deepspeed_stage0_refuses_dtypes_the_fallback_cannot_reduce() -> None:
    tr = make_trace([(0, 0.001, [("w0", 4000)]), (0, 0.001, [("w1", 8000, "float64")])])
    with pytest.raises(SchedoptError, match=r"tensors\[1\]\.dtype.*float64"):
        make_plan(tr, CLUSTER, "deepspeed:zero_stage=0")
    assert make_plan(tr, CLUSTER, "deepspeed:zero_stage=2").buckets == [["w1", "w0"]]


# ---------------------------------------------- 3. ZeRO: a tensor across a partition boundary

def test_deepspeed_bf16_optimizer_plan() -> None:
    """Stage 1, bf16, fp32 gradient accumulation: BF16_Optimizer's one all-reduce of the whole
    flat buffer after the backward, in bfloat16 unless ``communication_data_type`` says."""
    from schedopt.simulate.simulator import simulate

    tr = load_trace("gpt2-124m-a100-bf16")
    plan = make_plan(tr, world(4), "deepspeed:zero_stage=1,bf16=true,grad_accum_dtype=fp32,"
                     "reduce_bucket_size=1000000,overlap_comm=true")
    assert plan.buckets == [[t.name for t in tr.tensor_list]]
    assert not plan.overlap and plan.comm_dtype == "bfloat16" and not plan.partition
    wide = make_plan(tr, world(4), "deepspeed:zero_stage=1,bf16=true,grad_accum_dtype=float32,"
                     "communication_data_type=fp32")
    assert wide.comm_dtype == "float32"
    # twice the bytes on the wire: a longer iteration
    assert (simulate(tr, world(4), wide).iteration_time_s
            > simulate(tr, world(4), plan).iteration_time_s)
    # the ZeRO optimizer otherwise (stage 2, or bf16 gradient accumulation)
    for spec in ("deepspeed:zero_stage=2,bf16=true,grad_accum_dtype=fp32",
                 "deepspeed:zero_stage=1,bf16=true,grad_accum_dtype=bf16",
                 "deepspeed:zero_stage=1,grad_accum_dtype=fp32"):
        assert make_plan(tr, world(4), spec).num_buckets == 1  # 124M < 5e8 elements
        assert make_plan(tr, world(4), spec).comm_dtype is None
    with pytest.raises(SchedoptError, match="grad_accum_dtype"):
        make_plan(tr, world(4), "deepspeed:zero_stage=0,bf16=true,grad_accum_dtype=fp32")
    with pytest.raises(SchedoptError, match="communication_data_type"):
        make_plan(tr, world(4), "deepspeed:zero_stage=1,bf16=true,communication_data_type=fp8")


def test_deepspeed_zero_counts_the_calls_of_a_tensor_across_partitions() -> None:
    tr = load_trace("bert-base-a100-bf16")
    plan = make_plan(tr, world(4), "deepspeed:reduce_bucket_size=1000000")
    # 86 buckets, 87 collectives: the one oversized tensor that crosses a partition boundary
    # (at 27,370,560 elements) is reduced in two calls of 1,169,472 and 1,189,824 elements
    name = "encoder.layer.0.intermediate.dense.weight"
    assert plan.partition == {name: [2 * 1_169_472, 2 * 1_189_824]}
    assert plan.num_buckets == 87
    assert [f"{name}#0"] in plan.buckets and [f"{name}#1"] in plan.buckets
    assert plan.buckets.index([f"{name}#1"]) == plan.buckets.index([f"{name}#0"]) + 1
    # one rank: no boundary, 86 buckets; stage 1 walks the same partitions
    assert make_plan(tr, world(1), "deepspeed:reduce_bucket_size=1000000").num_buckets == 86
    stage1 = make_plan(tr, world(4), "deepspeed:zero_stage=1,reduce_bucket_size=1000000")
    assert stage1.partition == plan.partition


def test_deepspeed_zero_calls_by_hand() -> None:
    # a 300, b 500, c 400 elements: 1200 in all, 2 ranks -> partitions of 600 (padded to 4)
    tr = make_trace([(0, 0.001, [("a", 1200)]), (0, 0.001, [("b", 2000)]),
                     (0, 0.001, [("c", 1600)])])
    assert zero_slices(tr, 2) == {"a": [300], "b": [300, 200], "c": [400]}
    # size 250: every tensor is oversized; b's slices 300 (> 250: one call) and 200
    plan = make_plan(tr, world(2), "deepspeed:reduce_bucket_size=250")
    assert plan.buckets == [["c"], ["b#0"], ["b#1"], ["a"]]
    assert plan.partition == {"b": [1200, 800]}
    # size 350: b's first slice 300 does not exceed it, so both slices go in one call
    assert make_plan(tr, world(2), "deepspeed:reduce_bucket_size=350").partition == {}


# ----------------------------------------------------------- 4. ByteScheduler's partitions

def test_bytescheduler_cuts_nearly_equal_pieces_along_rows() -> None:
    # fc.weight [1000, 2048] at unit 1e6: 333, 333 and 334 rows
    assert split_sizes(2_048_000, 1_000_000, rows=1000) == [681_984, 681_984, 684_032]
    # without rows: the same count of pieces, split by elements
    assert split_sizes(2_048_000, 1_000_000) == [682_666, 682_667, 682_667]
    # no more pieces than rows; one piece when the tensor fits
    assert split_sizes(3_000_000, 1_000_000, rows=2) == [1_500_000, 1_500_000]
    assert split_sizes(1_000_000, 1_000_000, rows=1000) == [1_000_000]
    tr = make_trace([(0, 0.001, [("conv.weight", 4 * 9408)]),
                     (0, 0.001, [("fc.weight", 4 * 2_048_000), ("fc.bias", 4000)])])
    with_rows = Trace.model_validate(
        {**tr.model_dump(), "layers": [
            tr.layers[0].model_dump(),
            {**tr.layers[1].model_dump(), "tensors": [
                {"name": "fc.weight", "bytes": 4 * 2_048_000, "rows": 1000},
                {"name": "fc.bias", "bytes": 4000}]}]})
    plan = make_plan(with_rows, CLUSTER, "bytescheduler")
    assert plan.partition == {"fc.weight": [4 * 681_984, 4 * 681_984, 4 * 684_032]}
    plan = make_plan(tr, CLUSTER, "bytescheduler")
    assert plan.partition == {"fc.weight": [4 * 682_666, 4 * 682_667, 4 * 682_667]}


def test_bytescheduler_pieces_on_a_shipped_trace() -> None:
    tr = load_trace("bert-base-a100-bf16")
    plan = make_plan(tr, world(4), "bytescheduler")
    numel = {t.name: t.numel for t in tr.tensor_list}
    cut = {n for n, k in numel.items() if k > 1_000_000}
    assert set(plan.partition) == cut
    for name, sizes in plan.partition.items():
        # ceil(numel / 1e6) pieces differing by at most one element (bfloat16: 2 bytes)
        assert len(sizes) == -(-numel[name] // 1_000_000)
        assert max(sizes) - min(sizes) <= 2 and sum(sizes) == 2 * numel[name]
    # the word embeddings (30522 x 768 = 23,440,896) in 24 equal pieces of 976,704 elements;
    # the pooler (768 x 768 = 589,824) is not cut; the embeddings' LayerNorm is not cut
    assert plan.partition["embeddings.word_embeddings.weight"] == [2 * 976_704] * 24
    # an intermediate weight (3072 x 768 = 2,359,296): 786,432 each, not 1e6 + 1e6 + 359,296
    assert plan.partition["encoder.layer.0.intermediate.dense.weight"] == [2 * 786_432] * 3
    # the first credit window of embedding pieces holds 5 of them: after 4 pieces (3,906,816
    # parameters) the 4M credit is still positive (4 pieces of the unit-sized cut used it up)
    emb = "embeddings.word_embeddings.weight"
    first = next(b for b in plan.buckets if any(m.startswith(emb) for m in b))
    assert first == [f"{emb}#{i}" for i in range(5)]


def test_rows_must_divide_the_elements() -> None:
    with pytest.raises(ValueError, match="rows 3 does not divide the 2000 elements"):
        Trace.model_validate({
            "name": "t", "batch_size": 1, "layers": [{
                "name": "l", "forward_s": 0, "backward_s": 0,
                "tensors": [{"name": "x", "bytes": 8000, "rows": 3}]}]})


# ------------------------------------------------------------------------------- 5. Horovod

def test_horovod_default_threshold_and_group_order() -> None:
    # a, b, c of 30 MiB; ready order c, b, a
    tr = make_trace([(0, 0.001, [("a", 30 * MB)]), (0, 0.001, [("b", 30 * MB)]),
                     (0, 0.001, [("c", 30 * MB)])])
    # groups=1 at 64 MiB: the completed group is submitted in parameter order a, b, c
    assert make_plan(tr, CLUSTER, "horovod:groups=1,fusion_threshold_mb=64").buckets == [
        ["a", "b"], ["c"]]
    # a listed group keeps the listed order
    assert make_plan(tr, CLUSTER, 'horovod:groups=[["b","c","a"]],fusion_threshold_mb=64'
                     ).buckets == [["b", "c"], ["a"]]
    # without groups, readiness order (one 5 ms cycle)
    assert make_plan(tr, CLUSTER, "horovod:cycle_time_ms=5,fusion_threshold_mb=64").buckets == [
        ["c", "b"], ["a"]]
    # the default threshold is 128 MiB: all three (90 MiB) fuse
    plan = make_plan(tr, CLUSTER, "horovod:groups=1")
    assert plan.buckets == [["a", "b", "c"]] and plan.knobs["threshold_bytes"] == 128 * MB


# ------------------------------------------------------------------------------- 6. MG-WFBP

def test_mgwfbp_alpha_zero_works_per_tensor() -> None:
    # conv (1 MB) then fc (weight 1 MB, bias 4 KB); ready order fc.bias, fc.weight, conv.weight
    tr = make_trace([(0, 0.004, [("conv.weight", 1_000_000)]),
                     (0, 0.004, [("fc.weight", 1_000_000), ("fc.bias", 4000)])])
    # alpha = 0: nothing is saved by merging and the link is idle when fc.weight is ready
    assert make_plan(tr, fitted(0.0, 1e-9), "mgwfbp").buckets == [
        ["fc.bias"], ["fc.weight"], ["conv.weight"]]
    # alpha > 0: a layer's tensors always merge (the earlier layer-wise result)
    assert make_plan(tr, fitted(1e-6, 1e-9), "mgwfbp").buckets == [
        ["fc.bias", "fc.weight"], ["conv.weight"]]


def test_mgwfbp_alpha_zero_merges_while_the_link_is_busy() -> None:
    # T(M) = 1 ms/MB. From the backward start: head.w (8 MB) ready at 1 ms, on the link until
    # 9 ms; fc.bias and fc.weight ready at 2 ms, while the link is busy: merged (waiting costs
    # nothing); head.w stays alone (the link was free when it was ready: nothing to save at
    # alpha = 0); conv.weight, ready at 22 ms, after the link is free, stays alone
    tr = make_trace([(0, 0.020, [("conv.weight", 1_000_000)]),
                     (0, 0.001, [("fc.weight", 1_000_000), ("fc.bias", 4000)]),
                     (0, 0.001, [("head.w", 8_000_000)])])
    plan = make_plan(tr, fitted(1e-3, 1e-9), "mgwfbp:alpha_s=0")
    assert plan.buckets == [["head.w"], ["fc.bias", "fc.weight"], ["conv.weight"]]


def test_deepspeed_emitter_rebuilds_the_engine_plans() -> None:
    # the partition-crossing calls and the one bucket sequence of mixed dtypes are DeepSpeed's
    # own behaviour: the emitter gives the size back, exactly
    from schedopt.emit.deepspeed import emit_deepspeed

    for trace in (load_trace("bert-base-a100-bf16"),
                  every_third_float16(load_trace("resnet50-a100-b256"))):
        plan = make_plan(trace, world(4), "deepspeed:reduce_bucket_size=1000000")
        out = emit_deepspeed(trace, world(4), plan)
        assert out.exact, out.notes
        assert out.config["zero_optimization"]["reduce_bucket_size"] == 1_000_000
