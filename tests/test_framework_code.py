"""The deepspeed policy against DeepSpeed's own engine (the ``deepspeed`` extra, 0.19.8).

tests/deepspeed_engine_buckets.py builds DeepSpeed's engine (CPU accelerator, gloo, one process,
``DS_BUILD_OPS=0``) on a model with one parameter per trace tensor and records the buckets the
engine reduces; the policy, on the same trace and one rank, must give the same buckets in the
same order. It runs in a subprocess with a timeout and ``OMP_NUM_THREADS=1``, and skips, with the
reason, when DeepSpeed is not installed (``pip install -e ".[deepspeed]"``).

By default a quick selection runs (about 15 s); ``SCHEDOPT_DEEPSPEED_FULL=1`` runs every case
of docs/policies.md (4 traces x stage 1/2 x overlap_comm x 3 sizes, stage 0 and torch_autocast).
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

from schedopt.cluster import Cluster
from schedopt.files import load_trace
from schedopt.policies import make_plan
from schedopt.trace import Trace

from .test_policies_framework_code import every_third_float16

pytestmark = pytest.mark.torch

HARNESS = Path(__file__).with_name("deepspeed_engine_buckets.py")
ONE_RANK = Cluster.model_validate({
    "name": "one", "nodes": 1, "gpus_per_node": 1,
    "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9},
})
SIZES = (500_000_000, 20_000_000, 1_000_000)


def small_mixed() -> Trace:
    """w0 float32, w1 float16, w2 float32 of 1000 elements (the stage-0 case of issue 19)."""
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


@pytest.fixture(scope="module")
def engine_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list, dict]:
    """Run the harness once on every case; return the cases, its results and the traces."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed (pip install -e '.[deepspeed]')")
    full = os.environ.get("SCHEDOPT_DEEPSPEED_FULL") == "1"
    trs, todo = traces(full), cases(full)
    folder = tmp_path_factory.mktemp("deepspeed")
    spec = {"traces": {n: [[t.name, t.numel, t.dtype] for t in tr.tensor_list]
                       for n, tr in trs.items()},
            "cases": [{"trace": n, "config": cfg} for n, _, cfg in todo]}
    (folder / "cases.json").write_text(json.dumps(spec))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0", "OMP_NUM_THREADS": "1",
           "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    proc = subprocess.run(
        [sys.executable, str(HARNESS), str(folder / "cases.json"), str(folder / "out.json")],
        capture_output=True, text=True, timeout=900 if full else 240, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads((folder / "out.json").read_text())
    assert out["version"] == "0.19.8"
    return todo, out["results"], trs


def test_deepspeed_engine_forms_the_policy_buckets(engine_results: tuple) -> None:
    todo, results, trs = engine_results
    assert len(results) == len(todo)
    for (name, spec, _), got in zip(todo, results, strict=True):
        trace = trs[name]
        # autograd readied the gradients in the trace's gradient-ready order
        assert got["ready"] == [t.name for t in trace.ready_order], name
        plan = make_plan(spec, trace, ONE_RANK)
        assert got["buckets"] == plan.buckets, (name, spec)


def test_deepspeed_engine_cases_that_differed(engine_results: tuple) -> None:
    """The issue's cases, as the engine formed them (expected buckets written out)."""
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
    from schedopt.integrations.torch import profile_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    trace = profile_model(model, torch.randn(4, 8), name="mlp", batch_size=4, repeats=1,
                          warmup=0)
    rows = {t.name: t.rows for t in trace.tensor_list}
    assert rows == {"0.weight": 6, "0.bias": None, "2.weight": 2, "2.bias": None}
    plan = make_plan("bytescheduler:partition_params=20", trace, ONE_RANK)
    # 0.weight [6, 8] = 48 elements: ceil(48 / 20) = 3 pieces of 2 rows (16 elements)
    assert plan.partition["0.weight"] == [64, 64, 64]
