"""The deepspeed policy against DeepSpeed's own engine (the ``deepspeed`` extra, 0.19.8).

tests/deepspeed_engine_buckets.py builds DeepSpeed's engine (CPU accelerator, gloo,
``DS_BUILD_OPS=0``) on a model with one parameter per trace tensor and records the buckets the
engine reduces and the elements of each all-reduce call; the policy must give the same buckets
in the same order. Each run is a subprocess per rank (one rank, or several to cross ZeRO
partition boundaries) with a timeout and ``OMP_NUM_THREADS=1``; the tests skip, with the reason,
when DeepSpeed is not installed (``pip install -e ".[deepspeed]"``).

By default a quick selection runs (11 cases and 3 ``BF16_Optimizer`` ones, about 70 s of CPU);
``SCHEDOPT_DEEPSPEED_FULL=1`` runs the 62 + 4 cases of docs/policies.md (several minutes, up to
3.5 GB of memory).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from schedopt.files import load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, split_member
from schedopt.model.trace import Trace
from schedopt.policies import make_plan

from .test_policies_framework_code import every_third_float16

pytestmark = pytest.mark.torch

HARNESS = Path(__file__).with_name("deepspeed_engine_buckets.py")
ONE_RANK = Cluster.model_validate({
    "name": "one", "nodes": 1, "gpus_per_node": 1,
    "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9},
})
SIZES = (500_000_000, 20_000_000, 1_000_000)


def small_mixed() -> Trace:
    """w0 float32, w1 float16, w2 float32 of 1000 elements (the stage-0 case)."""
    return Trace.model_validate({"name": "small", "batch_size": 1, "layers": [
        {"name": f"L{i}", "forward_s": 0.0, "backward_s": 0.001,
         "tensors": [{"name": f"w{i}", "bytes": 1000 * (2 if i == 1 else 4),
                      "dtype": "float16" if i == 1 else "float32"}]}
        for i in range(3)]})


def traces(full: bool) -> dict[str, Trace]:
    """The traces of the check: the shipped ResNet-50, BERT-base, GPT-2 and a mixed variant."""
    out = {"small": small_mixed(),
           "resnet50": load_trace("resnet50-a100-b256"),
           "resnet50-f16": every_third_float16(load_trace("resnet50-a100-b256"))}
    if full:
        out["bert-base"] = load_trace("bert-base-a100-bf16")
        out["gpt2-124m"] = load_trace("gpt2-124m-a100-bf16")
    return out


def cases(full: bool) -> list[tuple[str, str, dict]]:
    """(trace, policy spec, DeepSpeed config) of every case; torch_autocast ones come last
    (DeepSpeed keeps its autocast switch in a module global)."""
    out: list[tuple[str, str, dict]] = []
    names = list(traces(full))
    big = [n for n in names if n != "small"]
    for name in big if full else ["resnet50-f16"]:
        for stage in (1, 2):
            for overlap in (False, True):
                for size in SIZES if full else (1_000_000,):
                    spec = (f"deepspeed:zero_stage={stage},reduce_bucket_size={size},"
                            f"overlap_comm={str(overlap).lower()}")
                    cfg = {"zero_optimization": {"stage": stage, "reduce_bucket_size": size,
                                                 "overlap_comm": overlap}}
                    out.append((name, spec, cfg))
    for name in names if full else ["small", "resnet50-f16"]:
        # stage 0 with a configured size the engine ignores
        out.append((name, "deepspeed:zero_stage=0,reduce_bucket_size=500",
                    {"zero_optimization": {"stage": 0, "reduce_bucket_size": 500}}))
    for size in SIZES if full else (1_000_000,):
        out.append(("resnet50-f16", f"deepspeed:reduce_bucket_size={size},torch_autocast=true",
                    {"zero_optimization": {"stage": 2, "reduce_bucket_size": size},
                     "torch_autocast": {"enabled": True, "dtype": "float16"}}))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_engine(folder: Path, trs: dict[str, Trace], todo: list[tuple[str, str, dict]],
               ranks: int, timeout: float) -> list[dict]:
    """Run the harness on ``ranks`` processes (gloo, one per rank); rank 0's results."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed (pip install -e '.[deepspeed]')")
    spec = {"traces": {n: [[t.name, t.numel, t.dtype] for t in tr.tensor_list]
                       for n, tr in trs.items()},
            "cases": [{"trace": n, "config": cfg} for n, _, cfg in todo]}
    (folder / "cases.json").write_text(json.dumps(spec))
    base = {**os.environ, "DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0", "OMP_NUM_THREADS": "1",
            "WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    args = [sys.executable, str(HARNESS), str(folder / "cases.json"), str(folder / "out.json")]
    procs = [subprocess.Popen(args, env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    try:
        errors = [p.communicate(timeout=timeout)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, err in zip(procs, errors, strict=True):
        assert p.returncode == 0, err[-4000:]
    out = json.loads((folder / "out.json").read_text())
    assert out["version"] == "0.19.8"
    return list(out["results"])


@pytest.fixture(scope="module")
def engine_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list, dict]:
    """Run the harness once (one rank) on every case; return the cases, results, traces."""
    full = os.environ.get("SCHEDOPT_DEEPSPEED_FULL") == "1"
    trs, todo = traces(full), cases(full)
    results: dict[int, dict] = {}
    # one process per trace, so that memory is returned between the large models
    for name in trs:
        mine = [k for k, case in enumerate(todo) if case[0] == name]
        if mine:
            got = run_engine(tmp_path_factory.mktemp("deepspeed"), {name: trs[name]},
                             [todo[k] for k in mine], 1, 600 if full else 240)
            results.update(zip(mine, got, strict=True))
    return todo, [results[k] for k in range(len(todo))], trs


def expected_calls(plan: Plan, trace: Trace) -> list[list[int]]:
    """Elements of every all-reduce call per whole-tensor bucket of a deepspeed plan."""
    numel = {t.name: t.numel for t in trace.tensor_list}
    item = {t.name: t.bytes // t.numel for t in trace.tensor_list}
    out: list[list[int]] = []
    for bucket in plan.buckets:
        tensor, piece = split_member(bucket[0])
        if piece is None:
            out.append([sum(numel[m] for m in bucket)])
        elif piece == 0:
            out.append([n // item[tensor] for n in plan.partition[tensor]])
    return out


def whole(plan: Plan) -> list[list[str]]:
    """The plan's buckets with the pieces of a split tensor as one bucket."""
    out: list[list[str]] = []
    for bucket in plan.buckets:
        tensor, piece = split_member(bucket[0])
        if piece is None:
            out.append(bucket)
        elif piece == 0:
            out.append([tensor])
    return out


def test_deepspeed_engine_forms_the_policy_buckets(engine_results: tuple) -> None:
    todo, results, trs = engine_results
    assert len(results) == len(todo)
    for (name, spec, _), got in zip(todo, results, strict=True):
        trace = trs[name]
        # autograd readied the gradients in the trace's gradient-ready order
        assert got["ready"] == [t.name for t in trace.ready_order], name
        plan = make_plan(trace, ONE_RANK, spec)
        assert got["buckets"] == plan.buckets, (name, spec)
        if "zero_stage=0" not in spec:  # one all-reduce call per bucket on one rank
            assert got["calls"] == expected_calls(plan, trace), (name, spec)


def multi_rank_cases(full: bool) -> list[tuple[int, str, str]]:
    """(ranks, trace, policy spec) of the multi-rank check: partition-crossing calls."""
    out = [(2, "abc", f"deepspeed:zero_stage={stage},reduce_bucket_size={size}")
           for stage in (1, 2) for size in (250, 350)]
    if full:
        out += [(3, "resnet50", "deepspeed:reduce_bucket_size=1000000"),
                (4, "bert-base", "deepspeed:reduce_bucket_size=1000000")]
    return out


def test_deepspeed_engine_splits_calls_at_partition_boundaries(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Several ranks: a tensor above the size across a ZeRO partition boundary takes one call
    per group of slices (a 300, b 500, c 400 elements on 2 ranks: partitions of 600)."""
    full = os.environ.get("SCHEDOPT_DEEPSPEED_FULL") == "1"
    trs = {"abc": Trace.model_validate({"name": "abc", "batch_size": 1, "layers": [
        {"name": n, "forward_s": 0.0, "backward_s": 0.001,
         "tensors": [{"name": n, "bytes": 4 * k}]} for n, k in (("a", 300), ("b", 500),
                                                                ("c", 400))]})}
    if full:
        trs |= {"resnet50": load_trace("resnet50-a100-b256"),
                "bert-base": load_trace("bert-base-a100-bf16")}
    splits = 0
    for ranks in sorted({r for r, _, _ in multi_rank_cases(full)}):
        todo = [(n, spec, {"zero_optimization": {
                    "stage": int(spec.split("zero_stage=")[1][0]) if "zero_stage" in spec else 2,
                    "reduce_bucket_size": int(spec.rsplit("=", 1)[1])}})
                for r, n, spec in multi_rank_cases(full) if r == ranks]
        results = run_engine(tmp_path_factory.mktemp(f"ranks{ranks}"), trs, todo, ranks,
                             900 if full else 240)
        cluster = Cluster.model_validate({**ONE_RANK.model_dump(), "nodes": ranks})
        for (name, spec, _), got in zip(todo, results, strict=True):
            plan = make_plan(trs[name], cluster, spec)
            assert got["buckets"] == whole(plan), (ranks, name, spec)
            assert got["calls"] == expected_calls(plan, trs[name]), (ranks, name, spec)
            splits += bool(plan.partition)
    # b (300 + 200 elements across the boundary at 600) takes two calls at size 250, one at 350
    assert splits == (2 if not full else 4)


BF16_CONFIGS = [
    # (policy knobs, DeepSpeed config): BF16_Optimizer twice, then the ZeRO optimizer
    ("zero_stage=1,bf16=true,grad_accum_dtype=fp32",
     {"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"},
      "zero_optimization": {"stage": 1}}),
    ("zero_stage=1,bf16=true,grad_accum_dtype=fp32,communication_data_type=fp32,"
     "reduce_bucket_size=100,overlap_comm=true",
     {"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"},
      "communication_data_type": "fp32",
      "zero_optimization": {"stage": 1, "reduce_bucket_size": 100, "overlap_comm": True}}),
    ("zero_stage=1,bf16=true,reduce_bucket_size=100",
     {"bf16": {"enabled": True}, "zero_optimization": {"stage": 1, "reduce_bucket_size": 100}}),
]


def test_deepspeed_bf16_optimizer_reduces_one_flat_buffer(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stage 1 with bf16 and fp32 gradient accumulation: the engine picks BF16_Optimizer, which
    all-reduces its whole flat gradient buffer once, after the backward, in the communication
    dtype; the plan is that one bucket (2 ranks; 1,201 elements padded to 1,204)."""
    full = os.environ.get("SCHEDOPT_DEEPSPEED_FULL") == "1"
    trs = {"abc": Trace.model_validate({"name": "abc", "batch_size": 1, "layers": [
        {"name": n, "forward_s": 0.0, "backward_s": 0.001,
         "tensors": [{"name": n, "bytes": 2 * k, "dtype": "bfloat16"}]}
        for n, k in (("a", 301), ("b", 500), ("c", 400))]})}
    todo = [("abc", f"deepspeed:{spec}", cfg) for spec, cfg in BF16_CONFIGS]
    runs = [(2, trs, todo)]
    if full:
        gpt2 = {"gpt2-124m": load_trace("gpt2-124m-a100-bf16")}
        runs.append((1, gpt2, [("gpt2-124m", f"deepspeed:{spec}", cfg)
                               for spec, cfg in BF16_CONFIGS[:1]]))
    for ranks, these, cases_ in runs:
        results = run_engine(tmp_path_factory.mktemp(f"bf16-{ranks}"), these, cases_, ranks,
                             600 if full else 240)
        cluster = Cluster.model_validate({**ONE_RANK.model_dump(), "nodes": ranks})
        for (name, spec, cfg), got in zip(cases_, results, strict=True):
            trace = these[name]
            plan = make_plan(trace, cluster, spec)
            numel = sum(t.numel for t in trace.tensor_list)
            if "grad_accum_dtype" not in cfg.get("data_types", {}):
                assert got["optimizer"] == "DeepSpeedZeroOptimizer"
                assert got["buckets"] == whole(plan), spec
                continue
            assert got["optimizer"] == "BF16_Optimizer"
            assert got["buckets"] == plan.buckets == [[t.name for t in trace.tensor_list]]
            assert not got["calls"] and not plan.overlap
            # one all-reduce of the padded buffer, in the plan's communication dtype
            [[elements, dtype]] = got["wire"]
            assert dtype == plan.comm_dtype, spec
            assert elements == -(-numel // (2 * ranks)) * 2 * ranks, spec
            assert name != "abc" or elements == 1204


def test_deepspeed_engine_cases_that_differed(engine_results: tuple) -> None:
    """The pinned cases, as the engine formed them (expected buckets written out)."""
    todo, results, _ = engine_results
    got = {(n, spec): r["buckets"] for (n, spec, _), r in zip(todo, results, strict=True)}
    # stage 0 ignores the configured size and reduces float32 before float16
    assert got["small", "deepspeed:zero_stage=0,reduce_bucket_size=500"] == [["w0", "w2"], ["w1"]]
    # mixed dtypes without torch_autocast: one bucket sequence (32 buckets at 1e6, not 33)
    spec = "deepspeed:zero_stage=2,reduce_bucket_size=1000000,overlap_comm=false"
    assert len(got["resnet50-f16", spec]) == 32
    assert len(got["resnet50-f16", "deepspeed:reduce_bucket_size=1000000,torch_autocast=true"]) \
        == 33


def test_profiler_records_the_leading_dimension() -> None:
    """profile_model writes ``rows`` for parameters of two or more dimensions."""
    torch = pytest.importorskip("torch")
    from schedopt.measure.profile import profile_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    trace = profile_model(model, torch.randn(4, 8), name="mlp", batch_size=4, repeats=1,
                          warmup=0)
    rows = {t.name: t.rows for t in trace.tensor_list}
    assert rows == {"0.weight": 6, "0.bias": None, "2.weight": 2, "2.bias": None}
    plan = make_plan(trace, ONE_RANK, "bytescheduler:partition_params=20")
    # 0.weight [6, 8] = 48 elements: ceil(48 / 20) = 3 pieces of 2 rows (16 elements)
    assert plan.partition["0.weight"] == [64, 64, 64]
