"""The sharded baselines (fsdp, zero3, megatron-distopt): units, prefetch, knobs, errors."""

from __future__ import annotations

import pytest

from schedopt.errors import SchedoptError
from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import POLICIES, SHARDED_POLICIES, make_plan
from schedopt.policies.units import block_key, prefetch_depth, size_units
from schedopt.simulate.simulator import simulate


def _trace(numels: list[int], names: list[str] | None = None) -> Trace:
    names = names or [f"l{i}" for i in range(len(numels))]
    return Trace.model_validate({
        "name": "t", "batch_size": 1,
        "layers": [{"name": name, "forward_s": 1e-3, "backward_s": 2e-3,
                    "tensors": ([{"name": f"{name}.w", "bytes": 4 * n}] if n else [])}
                   for name, n in zip(names, numels, strict=True)]})


def _cluster() -> Cluster:
    return Cluster.model_validate({"name": "c", "nodes": 1, "gpus_per_node": 4,
                                   "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 1e-5}})


def test_sharded_baselines_stay_out_of_the_allreduce_registry() -> None:
    assert set(SHARDED_POLICIES) == {"fsdp", "zero3", "megatron-distopt"}
    assert not set(SHARDED_POLICIES) & set(POLICIES)
    for name in POLICIES:
        assert make_plan(_trace([8, 8]), _cluster(), name).sharding is None


def test_block_key() -> None:
    assert block_key("transformer.h.3.attn.c_attn") == "transformer.h.3"
    assert block_key("layer1.0.conv1") == "layer1.0"
    assert block_key("lm_head") is None and block_key("transformer.wte") is None


def test_fsdp_units_are_blocks_and_the_root_group() -> None:
    tr = load_trace("gpt2-124m-a100-bf16")
    plan = make_plan(tr, _cluster(), "fsdp")
    sh = plan.sharding
    assert sh is not None
    assert (sh.mode, sh.forward_prefetch, sh.backward_prefetch, sh.streams) == ("full", 1, 1, 2)
    blocks = {block_key(la.name) for la in tr.layers} - {None}
    assert len(sh.units) == len(blocks)  # 12 blocks; the root's layers are the root group
    assert sh.root == ["transformer.wte", "transformer.wpe", "transformer.ln_f", "lm_head"]
    assert {block_key(n) for n in sh.units[0]} == {"transformer.h.0"}
    # the root group is reduce-scattered last: its bucket (with the tied embedding) is last
    assert "transformer.wte.weight" in plan.buckets[-1]
    assert all("transformer.wte.weight" not in b for b in plan.buckets[:-1])
    assert simulate(tr, _cluster(), plan).iteration_time_s > 0


def test_fsdp_without_blocks_keeps_root_runs_as_units() -> None:
    plan = make_plan(_trace([8, 8]), _cluster(), "fsdp")
    assert plan.sharding is not None and plan.sharding.root is None
    assert plan.sharding.units == [["l0", "l1"]]


def test_fsdp_knobs() -> None:
    tr = load_trace("resnet50-v100-b64")
    plan = make_plan(tr, _cluster(), "fsdp:wrap=child,reshard_after_forward=false,"
                     "forward_prefetch=2,reduce_dtype=float16")
    sh = plan.sharding
    assert sh is not None
    assert [u[0] for u in sh.units] == ["conv1", "bn1", "layer1.0.conv1", "layer2.0.conv1",
                                        "layer3.0.conv1", "layer4.0.conv1", "fc"]
    assert (sh.mode, sh.forward_prefetch, plan.comm_dtype) == ("grad-op", 2, "float16")


@pytest.mark.parametrize(("spec", "field"), [
    ("fsdp:forward_prefetch=-1", "fsdp.forward_prefetch"),  # negative depth
    ("fsdp:wrap=layer", "fsdp.wrap"),  # not a wrapping rule
    ("fsdp:reduce_dtype=float7", "fsdp.reduce_dtype"),  # unknown dtype
    ("zero3:stage3_prefetch_bucket_size=-5", "zero3.stage3_prefetch_bucket_size"),
    ("zero3:reduce_bucket_size=0", "zero3.reduce_bucket_size"),
    ("megatron-distopt:bucket_size=0", "megatron-distopt.bucket_size"),
    ("megatron-distopt:overlap_param_gather=2", "megatron-distopt.overlap_param_gather"),
])
def test_bad_knobs_are_named(spec: str, field: str) -> None:
    with pytest.raises(SchedoptError) as err:
        make_plan(_trace([8, 8]), _cluster(), spec)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_prefetch_depth_by_hand() -> None:
    # limit 15 over units of 10: two queued from units 0 and 1; unit 2 reaches the end first
    assert prefetch_depth([10, 10, 10, 10], 15) == 2
    assert prefetch_depth([10, 10, 10, 10], 100) == 3  # the end always first: all ahead
    assert prefetch_depth([10, 30, 10, 30, 10], 15) == 1  # counts 1, 2, 1 (unit 3: the end)
    assert prefetch_depth([10, 10, 10, 10], 0) == 0
    assert prefetch_depth([10, 40, 10, 10], 5) == 1
    assert prefetch_depth([10], 100) == 0


def test_zero3_units_and_prefetch() -> None:
    # layers of 50, 5 (below the threshold of 10), 50, 0 (no tensor), 50 elements
    tr = _trace([50, 5, 50, 0, 50])
    plan = make_plan(tr, _cluster(), "zero3:stage3_prefetch_bucket_size=60,"
                     "stage3_param_persistence_threshold=10")
    sh = plan.sharding
    assert sh is not None
    assert sh.units == [["l0"], ["l1", "l2"], ["l3", "l4"]]
    # sizes 50, 55, 50 with limit 60: two queued from unit 0 (the limit reached), unit 1
    # reaches the end first
    assert (sh.forward_prefetch, sh.backward_prefetch, sh.mode) == (2, 2, "full")
    # max_live_parameters bounds the prefetch: 100 - 55 leaves 45 (< one unit: one queued)
    small = "stage3_param_persistence_threshold=10"
    capped = make_plan(tr, _cluster(), "zero3:stage3_prefetch_bucket_size=200,"
                       f"stage3_max_live_parameters=100,{small}")
    assert capped.sharding is not None and capped.sharding.forward_prefetch == 1
    wide = make_plan(tr, _cluster(), f"zero3:stage3_prefetch_bucket_size=200,{small}")
    assert wide.sharding is not None and wide.sharding.forward_prefetch == 2
    # the default threshold (1e5 elements) leaves nothing to gather on its own: one unit
    one = make_plan(tr, _cluster(), "zero3")
    assert one.sharding is not None and len(one.sharding.units) == 1


def test_megatron_distopt_buckets_rounded_to_layers() -> None:
    # backward walk: l3 (30) + l2 (30) reaches 50 -> unit; l1 (30) + l0 (30) -> unit
    tr = _trace([30, 30, 30, 30])
    assert size_units(tr, 50) == [[0, 1], [2, 3]]
    plan = make_plan(tr, _cluster(), "megatron-distopt:bucket_size=50")
    sh = plan.sharding
    assert sh is not None
    assert sh.units == [["l0", "l1"], ["l2", "l3"]]
    assert (sh.mode, sh.forward_prefetch, sh.backward_prefetch, sh.streams) == (
        "grad-op", 1, 0, 1)
    assert plan.knobs["bucket_size_used"] == 50
    off = make_plan(tr, _cluster(), "megatron-distopt:bucket_size=50,overlap_param_gather=false")
    assert off.sharding is not None and off.sharding.forward_prefetch == 0


@pytest.mark.parametrize("name", sorted(SHARDED_POLICIES))
def test_baselines_simulate_on_a_shipped_instance(name: str) -> None:
    tr, cl = load_trace("bert-large-a100-bf16"), load_cluster("dgx-a100", None)
    sched = simulate(tr, cl, make_plan(tr, cl, name))
    largest = max(t.bytes for t in tr.tensor_list)
    assert sched.peak_memory_bytes is not None and sched.peak_memory_bytes >= largest
    assert sched.peak_memory_bytes <= 2 * tr.total_bytes
    assert sched.iteration_time_s >= tr.compute_s + tr.update_s / cl.world_size
    assert sched.shard_bytes == pytest.approx(tr.total_bytes / cl.world_size)
