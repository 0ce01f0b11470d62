"""The ddp policy against PyTorch itself (torch 2.13): its bucket assignment and a real DDP run.

Both checks skip cleanly when torch (or transformers, for the model zoo) is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.policies.ddp import ddp_construction_limits, ddp_limits
from schedopt.simulate.simulator import simulate

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = pytest.mark.torch

_DTYPES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
}

CLUSTER = Cluster.model_validate({
    "name": "c", "nodes": 2, "gpus_per_node": 1,
    "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9},
})


def trace_of(model) -> tuple[Trace, list[str]]:
    """One layer per module owning parameters (zero times); names in ``parameters()`` order."""
    names: dict[int, str] = {}
    layers = []
    for mod_name, module in model.named_modules():
        tensors = []
        for p_name, p in module.named_parameters(recurse=False):
            full = names.setdefault(id(p), f"{mod_name}.{p_name}" if mod_name else p_name)
            tensors.append({"name": full, "bytes": p.numel() * p.element_size(),
                            "dtype": _DTYPES[p.dtype]})
        if tensors:
            layers.append({"name": mod_name or "root", "forward_s": 0.0, "backward_s": 0.0,
                           "tensors": tensors})
    trace = Trace.model_validate({"name": "m", "batch_size": 1, "layers": layers})
    order = [names[id(p)] for p in model.parameters()]
    assert order == [t.name for t in trace.tensor_list]
    return trace, order


def as_indices(buckets: list[list[str]], order: list[str]) -> list[list[int]]:
    index = {n: i for i, n in enumerate(order)}
    return [[index[m] for m in b] for b in buckets]


def torch_rebuild(model, limits: list[int]) -> list[list[int]]:
    """What DDP's rebuild computes when gradients arrive in reverse parameter order."""
    params = list(model.parameters())
    n = len(params)
    indices = list(range(n - 1, -1, -1))
    buckets, _ = dist._compute_bucket_assignment_by_size(
        [params[i] for i in indices], limits, [False] * n, indices)
    return [list(b) for b in buckets]


def _models():
    transformers = pytest.importorskip("transformers")
    return {
        # transformers' ResNetConfig defaults to ResNet-50 (bottleneck, depths 3-4-6-3)
        "resnet50": lambda: transformers.ResNetForImageClassification(
            transformers.ResNetConfig(num_labels=1000)),
        "bert-base": lambda: transformers.BertModel(transformers.BertConfig()),
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config()),
    }


#: (expected parameter count, tensor count) from reference/FACTS.md (GPT-2 has tied embeddings)
SIZES = {"resnet50": (25_557_032, 161), "bert-base": (109_482_240, 199),
         "gpt2": (124_439_808, 148)}

KNOBS = [
    {},
    {"bucket_cap_mb": 5},
    {"bucket_cap_mb": 50},
    {"bucket_cap_mb": 0.5},
    {"bucket_cap_mb": 25, "first_bucket_mb": 2.5},
    {"bucket_cap_mb_list": [1.5, 10, 3.25]},
]


def _mix(model, how: str) -> None:
    if how == "float32":
        return
    for i, p in enumerate(model.parameters()):
        if i % 3 == 1:
            p.data = p.data.to(torch.float16)
        elif how == "mixed3" and i % 5 == 2:
            p.data = p.data.to(torch.bfloat16)


@pytest.mark.parametrize("model_name", ["resnet50", "bert-base", "gpt2"])
@pytest.mark.parametrize("mix", ["float32", "mixed2", "mixed3"])
def test_same_buckets_as_torch(model_name: str, mix: str) -> None:
    with torch.device("meta"):  # no weights are allocated or downloaded
        model = _models()[model_name]()
    if mix == "float32":
        assert (sum(p.numel() for p in model.parameters()),
                len(list(model.parameters()))) == SIZES[model_name]
    _mix(model, mix)
    trace, order = trace_of(model)
    for knobs in KNOBS:
        limits = ddp_limits(knobs.get("bucket_cap_mb"), knobs.get("first_bucket_mb"),
                            knobs.get("bucket_cap_mb_list"))
        plan = make_plan(trace, CLUSTER, "ddp", **knobs)
        assert as_indices(plan.buckets, order) == torch_rebuild(model, limits), knobs
        plan.check_against(trace)


def test_limits_match_ddp_config() -> None:
    config = getattr(torch.nn.parallel.distributed, "_BucketCapacityConfig", None)
    if config is None:
        pytest.skip("this torch has no _BucketCapacityConfig")
    for cap, caps in [(None, None), (5, None), (0.5, None), (25, None), (None, [1.5, 10, 3.25])]:
        c = config.create(cap, caps, False)
        expected = (list(c.per_bucket_bytes_caps) if caps
                    else [c.first_bucket_bytes_cap, c.bucket_bytes_cap])
        assert ddp_limits(cap, None, caps) == expected


# ---------------------------------------------------------------------------- a real DDP run

#: Linear layers (in, out, dtype) of the model the real run trains; float64 layers make
#: buckets of a second dtype (gloo reduces float64 on CPU).
LAYERS = [(64, 512, "float32"), (512, 512, "float64"), (512, 256, "float32"),
          (256, 300, "float64"), (300, 128, "float32"), (128, 10, "float32")]

RUN = textwrap.dedent("""
    import json, sys, tempfile, os
    import torch, torch.nn as nn, torch.distributed as dist
    layers, configs = json.loads(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0,
                            world_size=1)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.ModuleList(nn.Linear(i, o).to(getattr(torch, d)) for i, o, d in layers)

        def forward(self, x):
            for f in self.fc:
                x = f(x.to(f.weight.dtype))
            return x.float()

    out = []
    for knobs in configs:
        torch.manual_seed(0)
        net = Net()
        order = []
        for i, p in enumerate(net.parameters()):
            p.register_post_accumulate_grad_hook(lambda p, i=i: order.append(i))
        ddp = nn.parallel.DistributedDataParallel(net, **knobs)
        for _ in range(3):
            order.clear()
            ddp(torch.randn(4, layers[0][0])).sum().backward()
        data = ddp._get_ddp_logging_data()
        text = data["rebuilt_per_bucket_param_indices"]
        out.append({"buckets": [[int(x) for x in b.split()] for b in text.split(",")],
                    "ready": order, "rebuilt": data.get("has_rebuilt_buckets")})
    dist.barrier()
    print(json.dumps(out), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no teardown: gloo may abort there ("terminate called without an active ...")
""")

RUN_KNOBS = [{}, {"bucket_cap_mb": 0.5}, {"bucket_cap_mb": 1}, {"bucket_cap_mb": 0.05},
             {"bucket_cap_mb_list": [0.2, 1.5, 0.6]}]


def _layers_trace() -> Trace:
    itemsize = {"float32": 4, "float64": 8}
    layers = [
        {"name": f"fc{k}", "forward_s": 0.001, "backward_s": 0.002, "tensors": [
            {"name": f"fc.{k}.weight", "bytes": i * o * itemsize[d], "dtype": d},
            {"name": f"fc.{k}.bias", "bytes": o * itemsize[d], "dtype": d}]}
        for k, (i, o, d) in enumerate(LAYERS)
    ]
    return Trace.model_validate({"name": "mlp", "batch_size": 4, "layers": layers})


@pytest.mark.slow
def test_real_ddp_rebuilt_buckets(tmp_path: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps([LAYERS, RUN_KNOBS])],
        capture_output=True, text=True, timeout=240, env=env, check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"DDP run failed:\n{proc.stderr[-3000:]}")
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    trace = _layers_trace()
    order = [t.name for t in trace.tensor_list]
    for knobs, run in zip(RUN_KNOBS, runs, strict=True):
        assert run["rebuilt"] == 1
        # autograd produced exactly the trace's gradient-ready order
        assert [order[i] for i in run["ready"]] == [t.name for t in trace.ready_order]
        plan = make_plan(trace, CLUSTER, "ddp", **knobs)
        assert as_indices(plan.buckets, order) == run["buckets"], knobs
        simulate(trace, CLUSTER, plan)
    # the mixed dtypes really produce buckets that are not contiguous in ready order
    assert any(sorted(b) != list(range(min(b), max(b) + 1))
               for run in runs for b in run["buckets"])


# ------------------------------------------------- find_unused_parameters: no bucket rebuild

def torch_construction(model, limits: list[int]) -> list[list[int]]:
    """The buckets DDP hands its reducer at construction (``_ddp_init_helper``)."""
    params = list(model.parameters())
    buckets, _ = dist._compute_bucket_assignment_by_size(params, limits, [False] * len(params))
    return [list(b) for b in reversed(buckets)]


def _construction_limits(knobs: dict) -> list[int]:
    return ddp_construction_limits(
        ddp_limits(knobs.get("bucket_cap_mb"), knobs.get("first_bucket_mb"),
                   knobs.get("bucket_cap_mb_list")),
        knobs.get("bucket_cap_mb_list") is not None)


def test_construction_limits_match_ddp_config() -> None:
    config = getattr(torch.nn.parallel.distributed, "_BucketCapacityConfig", None)
    if config is None:
        pytest.skip("this torch has no _BucketCapacityConfig")
    for cap, caps in [(None, None), (5, None), (0.5, None), (25, None), (None, [1.5, 10, 3.25])]:
        limits, _ = config.create(cap, caps, False).compute_bucket_size_limits(
            static_graph=False, find_unused_parameters=True)
        assert _construction_limits({"bucket_cap_mb": cap, "bucket_cap_mb_list": caps}) == limits


@pytest.mark.parametrize("model_name", ["resnet50", "bert-base", "gpt2"])
@pytest.mark.parametrize("mix", ["float32", "mixed3"])
def test_same_construction_buckets_as_torch(model_name: str, mix: str) -> None:
    with torch.device("meta"):
        model = _models()[model_name]()
    _mix(model, mix)
    trace, order = trace_of(model)
    for knobs in KNOBS:
        plan = make_plan(trace, CLUSTER, "ddp", find_unused_parameters=True, **knobs)
        expected = torch_construction(model, _construction_limits(knobs))
        assert as_indices(plan.buckets, order) == expected, knobs
        # static_graph rebuilds whatever find_unused_parameters says
        rebuilt = make_plan(trace, CLUSTER, "ddp", find_unused_parameters=True,
                            static_graph=True, **knobs)
        assert rebuilt.buckets == make_plan(trace, CLUSTER, "ddp", **knobs).buckets


RUN_UNUSED = textwrap.dedent("""
    import json, sys, os
    import torch, torch.nn as nn, torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    layers, configs, rank, init = json.loads(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=2)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.ModuleList(nn.Linear(i, o).to(getattr(torch, d)) for i, o, d in layers)

        def forward(self, x):
            for f in self.fc:
                x = f(x.to(f.weight.dtype))
            return x.float()

    out = []
    for knobs in configs:
        torch.manual_seed(0)
        net = Net()
        index = {id(p): i for i, p in enumerate(net.parameters())}
        ddp = nn.parallel.DistributedDataParallel(net, **knobs)
        launched = []

        def hook(state, bucket):
            launched.append([bucket.index(), [index[id(p)] for p in bucket.parameters()]])
            return allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, hook)
        iterations = []
        for _ in range(4):
            launched.clear()
            ddp(torch.randn(4, layers[0][0])).sum().backward()
            iterations.append(list(launched))
        data = ddp._get_ddp_logging_data()
        out.append({"iterations": iterations, "rebuilt": data.get("has_rebuilt_buckets")})
    dist.barrier()
    if rank == 0:
        print(json.dumps(out), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no teardown: gloo may abort there ("terminate called without an active ...")
""")

RUN_UNUSED_KNOBS = [{}, {"bucket_cap_mb": 0.5}, {"bucket_cap_mb": 1},
                    {"bucket_cap_mb": 0.05}, {"bucket_cap_mb_list": [0.2, 1.5, 0.6]},
                    {"bucket_cap_mb": 0.5, "static_graph": True}]


@pytest.mark.slow
def test_real_ddp_find_unused_parameters_keeps_construction_buckets(tmp_path: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    configs = [dict(k, find_unused_parameters=True) for k in RUN_UNUSED_KNOBS]
    init = str(tmp_path / "rendezvous")
    procs = [subprocess.Popen(
        [sys.executable, "-c", RUN_UNUSED, json.dumps([LAYERS, configs, rank, init])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for rank in range(2)]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=240))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            pytest.fail(f"DDP run failed:\n{err[-3000:]}")
    runs = json.loads(outputs[0][0].strip().splitlines()[-1])
    trace = _layers_trace()
    order = [t.name for t in trace.tensor_list]
    for knobs, run in zip(RUN_UNUSED_KNOBS, runs, strict=True):
        plan = make_plan(trace, CLUSTER, "ddp", find_unused_parameters=True, **knobs)
        expected = [[k, b] for k, b in enumerate(as_indices(plan.buckets, order))]
        if knobs.get("static_graph"):
            # rebuilt after the first iterations; the steady state is the rebuilt one
            assert run["iterations"][-1] == expected, knobs
            continue
        assert run["rebuilt"] == 0
        # the same buckets, launched in index order, at every iteration
        assert run["iterations"] == [expected] * 4, knobs
        simulate(trace, CLUSTER, plan)
    # parameter-order buckets differ from the rebuilt ones
    assert (make_plan(trace, CLUSTER, "ddp", find_unused_parameters=True).buckets
            != make_plan(trace, CLUSTER, "ddp").buckets)


# ------------------------------------------------- accumulate=K: the emitted no_sync step

ACCUMULATE_RUN = textwrap.dedent("""
    import json, os, sys, tempfile, torch, torch.distributed as dist
    from torch import nn
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0,
                            world_size=1)
    snippet = {}
    exec(open(sys.argv[1]).read(), snippet)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 8))
    ddp = snippet["wrap"](net)
    calls = []

    def hook(state, bucket):
        calls.append(bucket.index())
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(
            lambda f: f.value()[0])

    ddp.register_comm_hook(None, hook)
    seen = []

    def loss_fn(model, batch):
        seen.append(len(calls))  # all-reduces issued before this micro-batch's forward
        return model(batch).sum()

    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    steps = []
    for _ in range(3):
        seen.clear()
        before = len(calls)
        snippet["train_step"](ddp, [torch.randn(4, 64) for _ in range(snippet["ACCUMULATE"])],
                              loss_fn, opt)
        steps.append({"seen": [s - before for s in seen], "calls": len(calls) - before})
    print(json.dumps(steps), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no teardown: gloo may abort there ("terminate called without an active ...")
""")


@pytest.mark.slow
def test_emitted_accumulation_reduces_in_the_last_backward_only(tmp_path: Path) -> None:
    """The ddp emitter's ``train_step`` for ``accumulate=3`` (``no_sync`` on the first two
    micro-batches), run by real DDP: no all-reduce before the last micro-batch's backward, and
    then one per bucket of the plan."""
    from schedopt.emit import emit

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    trace, _ = trace_of(net)
    plan = make_plan(trace, CLUSTER, "ddp:bucket_cap_mb=0.2,first_bucket_mb=0.2,accumulate=3")
    out = emit(trace, CLUSTER, plan, "ddp")
    assert out.exact and out.spec is not None and "accumulate=3" in out.spec
    snippet = tmp_path / "ddp_snippet.py"
    snippet.write_text(out.files["ddp_snippet.py"])
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", ACCUMULATE_RUN, str(snippet)],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    if proc.returncode != 0:
        pytest.fail(f"DDP run failed:\n{proc.stderr[-3000:]}")
    steps = json.loads(proc.stdout.strip().splitlines()[-1])
    assert plan.num_buckets >= 2
    for step in steps[1:]:  # after DDP's bucket rebuild
        assert step["seen"] == [0, 0, 0] and step["calls"] == plan.num_buckets
