"""Emitters: exact plans come back unchanged through the frameworks' policies; others are
approximated with notes; files parse; the CLI writes all files or none."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.emit import (
    EMITTERS,
    SHARDED_ONLY_TARGETS,
    emit,
    emit_ddp,
    emit_deepspeed,
    emit_horovod,
    emit_megatron,
)
from schedopt.emit.common import round_int_in, same_buckets, whole_tensor_buckets
from schedopt.emit.ddp import cap_mb_in, ddp_caps
from schedopt.errors import SchedoptError
from schedopt.files import load_plan
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies import make_plan

from .strategies import traces

MIB = 2**20
DATA = Path(__file__).parent / "data"
runner = CliRunner()


def _trace(dtypes: tuple[str, ...] = ("float32",) * 5, *, zero_backward: bool = False) -> Trace:
    """Five layers (the third without tensors), a weight and a bias each; sizes in elements."""
    sizes = [(100_000, 100), (300_000, 300), None, (500_000, 500), (10_000, 10)]
    item = {"float32": 4, "float16": 2, "float64": 8}
    layers = []
    for i, (size, dtype) in enumerate(zip(sizes, dtypes, strict=True)):
        tensors = [] if size is None else [
            {"name": f"l{i}.w", "bytes": size[0] * item[dtype], "dtype": dtype},
            {"name": f"l{i}.b", "bytes": size[1] * item[dtype], "dtype": dtype},
        ]
        layers.append({"name": f"l{i}", "forward_s": 0.001 * (i + 1),
                       "backward_s": 0.0 if zero_backward else 0.002 * (i + 1),
                       "tensors": tensors})
    return Trace.model_validate({"name": "five", "batch_size": 8, "layers": layers})


CLUSTER = Cluster.model_validate({
    "name": "c", "nodes": 4, "gpus_per_node": 2,
    "intra_link": {"bandwidth_Bps": 5e10, "latency_s": 1e-6},
    "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 2e-5},
})


def _cut(trace: Trace, cuts: list[int]) -> Plan:
    """A FIFO plan cutting the gradient-ready order before the given positions."""
    names = [t.name for t in trace.ready_order]
    bounds = [0, *cuts, len(names)]
    return Plan(policy="hand", buckets=[names[a:b] for a, b in itertools.pairwise(bounds)])


# ---------------------------------------------------------------------------- DDP


@pytest.mark.parametrize("cuts", [[], [1], [2], [1, 2, 3, 4, 5, 6, 7], [3, 5], [4]])
def test_ddp_exact_caps_reproduce_the_plan(cuts: list[int]) -> None:
    trace = _trace()
    plan = _cut(trace, cuts)
    out = emit_ddp(trace, CLUSTER, plan)
    assert out.exact and not out.notes
    caps = out.config["bucket_cap_mb_list"]
    assert len(caps) == plan.num_buckets
    back = make_plan(trace, CLUSTER, "ddp", bucket_cap_mb_list=caps)
    assert same_buckets(back.buckets, plan.buckets)
    assert out.plan_time_s == out.emitted_time_s
    # every limit lies strictly inside (B - b_last, B] with a byte to spare
    size = {t.name: t.bytes for t in trace.tensor_list}
    for cap, bucket in zip(caps, plan.buckets, strict=True):
        total = sum(size[m] for m in bucket)
        limit = int(cap * MIB)
        assert total - size[bucket[-1]] + 1 < limit <= total


def test_ddp_spec_round_trips_through_the_policy_parser() -> None:
    trace = _trace()
    plan = _cut(trace, [2, 5])
    out = emit_ddp(trace, CLUSTER, plan)
    assert out.spec is not None
    assert same_buckets(make_plan(trace, CLUSTER, out.spec).buckets, plan.buckets)


@settings(max_examples=60, deadline=None)
@given(trace=traces(max_layers=6, data_costs=False), data=st.data())
def test_ddp_any_contiguous_fifo_plan_is_exact(trace: Trace, data: st.DataObject) -> None:
    n = trace.num_tensors
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=n - 1))) if n > 1 \
        else []
    plan = _cut(trace, cuts)
    caps = ddp_caps(trace, plan)
    assert caps.exact, caps.notes
    back = make_plan(trace, CLUSTER, "ddp", bucket_cap_mb_list=caps.caps_mb)
    assert same_buckets(back.buckets, plan.buckets)


def test_ddp_mixed_dtypes_exact_when_ddp_made_the_plan() -> None:
    trace = _trace(("float32", "float16", "float32", "float16", "float32"))
    for knobs in ({"bucket_cap_mb": 0.5}, {"bucket_cap_mb": 1.5}, {"bucket_cap_mb": 100},
                  {"bucket_cap_mb_list": [0.01, 2.0]}):
        plan = make_plan(trace, CLUSTER, "ddp", **knobs)
        out = emit_ddp(trace, CLUSTER, plan)
        assert out.exact, (knobs, out.notes)
        back = make_plan(trace, CLUSTER, "ddp", **{"bucket_cap_mb_list":
                                                   out.config["bucket_cap_mb_list"]})
        assert same_buckets(back.buckets, plan.buckets)


def test_ddp_bucket_mixing_dtypes_is_approximated() -> None:
    trace = _trace(("float32", "float16", "float32", "float16", "float32"))
    plan = _cut(trace, [])  # one bucket holding both dtypes
    out = emit_ddp(trace, CLUSTER, plan)
    assert not out.exact
    assert any("mix dtypes" in n for n in out.notes)


def test_ddp_reordered_plan_gets_closest_config_with_times() -> None:
    trace = _trace()
    fifo = _cut(trace, [2, 4])
    plan = fifo.model_copy(update={"buckets": fifo.buckets[::-1]})
    out = emit_ddp(trace, CLUSTER, plan)
    assert not out.exact
    assert any("out of gradient-ready order" in n for n in out.notes)
    assert out.plan_time_s is not None and out.emitted_time_s is not None
    assert any("simulates to" in n for n in out.notes)
    assert out.spec is not None
    # the chosen setting is the closest of those tried, e.g. at least as close as the default
    from schedopt.simulate.simulator import simulate

    default = simulate(trace, CLUSTER, make_plan(trace, CLUSTER, "ddp")).iteration_time_s
    assert abs(out.emitted_time_s - out.plan_time_s) <= abs(default - out.plan_time_s) + 1e-12


def test_ddp_without_cluster_chooses_by_structure() -> None:
    trace = _trace()
    plan = _cut(trace, [2, 4]).model_copy(update={"next_forward": "per-layer"})
    out = emit_ddp(trace, None, plan)
    assert not out.exact and out.plan_time_s is None
    assert any("per-layer" in n for n in out.notes)
    assert any("give a cluster" in n for n in out.notes)
    assert "bucket_cap_mb_list" in out.config  # the plan's own grouping, wait-for-all


def test_partitioned_plan_goes_whole_to_the_bucket_with_most_bytes() -> None:
    trace = _trace()
    plan = Plan(policy="hand", partition={"l3.w": [1_500_000, 500_000]},
                buckets=[["l4.b", "l4.w", "l3.b", "l3.w#0"],
                         ["l3.w#1", "l1.b", "l1.w", "l0.b", "l0.w"]])
    assert whole_tensor_buckets(trace, plan) == [["l4.b", "l4.w", "l3.b", "l3.w"],
                                                 ["l1.b", "l1.w", "l0.b", "l0.w"]]
    out = emit_ddp(trace, CLUSTER, plan)
    assert not out.exact and "partitioned" in out.notes[0]


def test_cap_in_interval_is_round_and_safe() -> None:
    assert cap_mb_in(int(1.2 * MIB), int(2.1 * MIB)) == 2.0
    assert cap_mb_in(24 * MIB, math.inf) > 24
    for lo, hi in [(0, 4), (1000, 1004), (3, 4), (10**9, 10**9 + 2), (123_456_789, 123_456_791)]:
        limit = int(cap_mb_in(lo, hi) * MIB)
        assert lo < limit <= hi
        if hi - lo >= 3:
            assert lo + 1 < limit <= hi - 1


def test_round_int_in() -> None:
    assert round_int_in(1_234, 5_678) in (2_000, 3_000, 4_000, 5_000)
    assert round_int_in(7, 7) == 7
    assert round_int_in(19_512_000, 19_513_000) % 100 == 0
    with pytest.raises(SchedoptError):
        round_int_in(5, 4)


def test_ddp_caps_against_torch_bucket_assignment() -> None:
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    dtypes = {"float32": torch.float32, "float16": torch.float16}
    for trace, plan in [
        (_trace(), _cut(_trace(), [1, 3, 6])),
        (mixed := _trace(("float32", "float16", "float32", "float16", "float32")),
         make_plan(mixed, CLUSTER, "ddp", bucket_cap_mb=0.5)),
    ]:
        caps = emit_ddp(trace, CLUSTER, plan).config["bucket_cap_mb_list"]
        order = trace.ready_order
        tensors = [torch.empty(t.numel, dtype=dtypes[t.dtype], device="meta") for t in order]
        limits = [int(c * 2**20) for c in caps]  # torch's conversion
        buckets, _ = dist._compute_bucket_assignment_by_size(
            tensors, limits, [False] * len(order), list(range(len(order))))
        got = [[order[i].name for i in b] for b in buckets]
        assert same_buckets(got, plan.buckets)


# ---------------------------------------------------------------------------- Horovod


def test_horovod_exact_for_its_own_plans() -> None:
    trace = _trace()
    for knobs in ({}, {"fusion_threshold_mb": 1}, {"cycle_time_ms": 5}):
        plan = make_plan(trace, CLUSTER, "horovod", **knobs)
        out = emit_horovod(trace, CLUSTER, plan)
        assert out.exact, (knobs, out.notes)
        threshold = int(out.config["env"]["HOROVOD_FUSION_THRESHOLD"])
        assert threshold % (2 * 8 * 64) == 0
        if "groups" in out.config:  # explicit groups, none split by the threshold
            assert out.config["groups"] == plan.buckets
            assert max(plan.bucket_bytes(trace)) <= threshold
        else:  # Horovod's own fusion at the plan's threshold
            assert knobs == {"fusion_threshold_mb": 1}
            assert threshold == plan.knobs["threshold_bytes"]
        assert same_buckets(make_plan(trace, CLUSTER, out.spec).buckets, plan.buckets)


def test_horovod_groups_completing_together_are_kept_apart_by_env() -> None:
    trace = _trace(zero_backward=True)  # every tensor ready at once: one cycle
    plan = make_plan(trace, CLUSTER, "caffe-mpi")
    out = emit_horovod(trace, CLUSTER, plan)
    assert not out.exact
    assert out.config["env"]["HOROVOD_DISABLE_GROUP_FUSION"] == "1"
    assert out.config["groups"] == plan.buckets


def test_horovod_overlap_false_is_approximated() -> None:
    trace = _trace()
    out = emit_horovod(trace, CLUSTER, make_plan(trace, CLUSTER, "cntk"))
    assert not out.exact and "overlap is false" in out.notes[0]


# ---------------------------------------------------------------------------- DeepSpeed


@pytest.mark.parametrize("size", [50_000, 200_000, 400_000, 1_000_000, 10**9])
@pytest.mark.parametrize("overlap", [True, False])
def test_deepspeed_exact_for_uniform_sizes(size: int, overlap: bool) -> None:
    trace = _trace()
    plan = make_plan(trace, CLUSTER, "deepspeed", reduce_bucket_size=size, overlap_comm=overlap)
    out = emit_deepspeed(trace, CLUSTER, plan)
    assert out.exact, out.notes
    zero = out.config["zero_optimization"]
    assert zero["overlap_comm"] is overlap
    back = make_plan(trace, CLUSTER, "deepspeed", zero_stage=zero["stage"],
                     reduce_bucket_size=zero["reduce_bucket_size"], overlap_comm=overlap)
    assert same_buckets(back.buckets, plan.buckets)


def test_deepspeed_non_uniform_plan_reports_both_times() -> None:
    trace = _trace()
    plan = _cut(trace, [1, 2, 6])  # sizes no single bucket size gives
    out = emit_deepspeed(trace, CLUSTER, plan)
    assert not out.exact
    assert "uniform reduce_bucket_size" in out.notes[0]
    note = out.notes[-1]
    assert f"{out.emitted_time_s * 1e3:.4f} ms" in note and f"{out.plan_time_s * 1e3:.4f} ms" \
        in note


# ---------------------------------------------------------------------------- Megatron


@pytest.mark.parametrize("size", [100, 150_000, 400_000, 800_000, 10**8])
def test_megatron_exact_for_uniform_sizes(size: int) -> None:
    trace = _trace()
    plan = make_plan(trace, CLUSTER, "megatron", overlap_grad_reduce=True, bucket_size=size)
    out = emit_megatron(trace, CLUSTER, plan)
    assert out.exact, out.notes
    assert out.config["overlap_grad_reduce"] is True
    back = make_plan(trace, CLUSTER, "megatron", overlap_grad_reduce=True,
                     bucket_size=out.config["bucket_size"])
    assert same_buckets(back.buckets, plan.buckets)


def test_megatron_without_overlap() -> None:
    trace = _trace()
    out = emit_megatron(trace, CLUSTER, make_plan(trace, CLUSTER, "megatron"))
    assert out.exact and out.config == {"overlap_grad_reduce": False}
    out = emit_megatron(trace, CLUSTER, make_plan(trace, CLUSTER, "mxnet"))
    assert not out.exact and any("ps collective" in n for n in out.notes)


# ---------------------------------------------------------------------------- JSON, all


def test_json_is_the_plan_bound_to_its_instance(tmp_path: Path) -> None:
    trace = _trace()
    plan = _cut(trace, [3])
    out = emit(trace, CLUSTER, plan, "json")
    assert out.exact
    (tmp_path / "plan.json").write_text(out.files["plan.json"])
    back = load_plan(tmp_path / "plan.json")
    assert back.buckets == plan.buckets
    assert back.trace_hash == trace.fingerprint() and back.cluster_hash == CLUSTER.fingerprint()
    other = trace.scaled(compute=2.0)
    with pytest.raises(SchedoptError, match="another trace"):
        emit(other, CLUSTER, back, "json")


@pytest.mark.parametrize("target", [t for t in EMITTERS if t not in SHARDED_ONLY_TARGETS])
@pytest.mark.parametrize("policy", ["ddp", "cntk", "horovod", "bytescheduler", "mgwfbp"])
def test_every_target_writes_parseable_files(target: str, policy: str) -> None:
    trace = _trace()
    plan = make_plan(trace, CLUSTER, policy)
    out = emit(trace, CLUSTER, plan, target)
    assert out.target == target and out.files
    for name, text in out.files.items():
        if name.endswith(".json"):
            assert json.loads(text) == (out.config if target != "json" else json.loads(text))
        else:
            compile(text, name, "exec")
    assert out.exact or out.notes


def test_unknown_target() -> None:
    trace = _trace()
    with pytest.raises(SchedoptError, match="unknown target"):
        emit(trace, None, _cut(trace, []), "jax")


def test_plan_for_another_trace_is_refused() -> None:
    trace = _trace()
    plan = make_plan(trace, CLUSTER, "ddp")
    with pytest.raises(SchedoptError, match="another trace"):
        emit_ddp(trace.scaled(compute=3.0), CLUSTER, plan)


# ---------------------------------------------------------------------------- CLI

T, C = str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json")


def test_cli_emit_writes_files(tmp_path: Path) -> None:
    out = tmp_path / "cfg"
    result = runner.invoke(app, ["emit", T, C, "-p", "ddp:bucket_cap_mb=5", "--target", "ddp",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["ddp.json", "ddp_snippet.py"]
    assert "exact" in result.output
    caps = json.loads((out / "ddp.json").read_text())["bucket_cap_mb_list"]
    tr = Trace.model_validate_json(Path(T).read_text())
    cl = Cluster.model_validate_json(Path(C).read_text())
    assert same_buckets(make_plan(tr, cl, "ddp", bucket_cap_mb_list=caps).buckets,
                        make_plan(tr, cl, "ddp:bucket_cap_mb=5").buckets)


def test_cli_emit_json_and_saved_plan(tmp_path: Path) -> None:
    result = runner.invoke(app, ["emit", T, C, "-p", "caffe-mpi", "-t", "json", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["target"] == "json" and data["exact"] is True
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(data["files"]["plan.json"])
    result = runner.invoke(app, ["emit", T, C, "--plan", str(plan_file), "-t", "deepspeed",
                                 "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert "zero_optimization" in data["config"]
    assert data["plan_time_s"] is not None


@pytest.mark.parametrize("args", [
    ["-p", "ddp", "-t", "tensorflow"],            # unknown target
    ["-t", "ddp"],                                # neither --policy nor --plan
    ["-p", "ddp", "--plan", "x.json", "-t", "ddp"],  # both
    ["-p", "nope", "-t", "ddp"],                  # unknown policy
])
def test_cli_emit_errors_are_one_line_and_write_nothing(args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "cfg"
    result = runner.invoke(app, ["emit", T, C, *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error:")
    assert not out.exists()
