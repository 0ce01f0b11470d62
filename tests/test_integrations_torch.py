"""The PyTorch integration: measured traces, and DDP wrapped with a plan's buckets (gloo, one
rank on CPU)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schedopt.errors import SchedoptError
from schedopt.model.trace import Trace

torch = pytest.importorskip("torch")
nn = torch.nn

#: The profiles here time tiny models to check what they record, not their spread: the warning
#: that a run's iterations spread (another test process on the cores) is not what they test.
pytestmark = [pytest.mark.torch,
              pytest.mark.filterwarnings("ignore::schedopt.measure.profile.ProfileWarning")]

from schedopt.emit.ddp_torch import ddp_kwargs, model_tensors  # noqa: E402
from schedopt.measure.profile import profile_model, random_batch  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_importing_the_package_needs_no_torch() -> None:
    code = ("import sys; sys.modules['torch'] = None; import schedopt.measure.profile, "
            "schedopt.emit, schedopt.cli.app; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_profile_sequential() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    trace = profile_model(model, torch.randn(5, 8), name="mlp", batch_size=5, repeats=3,
                          warmup=1)
    assert isinstance(trace, Trace)
    assert [la.name for la in trace.layers] == ["0", "2"]
    assert [(t.name, t.bytes, t.dtype) for la in trace.layers for t in la.tensors] == [
        ("0.weight", 8 * 16 * 4, "float32"), ("0.bias", 16 * 4, "float32"),
        ("2.weight", 16 * 4 * 4, "float32"), ("2.bias", 4 * 4, "float32")]
    for la in trace.layers:
        assert la.forward_s > 0 and la.backward_s > 0
    assert trace.batch_size == 5 and trace.update_s == 0.0 and trace.h2d_s == 0.0
    assert re.fullmatch(
        re.escape("measured with schedopt.measure.profile.profile_model on cpu, "
                  f"torch {torch.__version__}, 3 repeats (median); per-layer medians "
                  "scaled to the median whole pass: forward x")
        + r"\d+\.\d{3}, backward x\d+\.\d{3}"
        + r"(; [\d,]+ minor page faults per iteration \(\d+\.\d MiB of fresh pages\))?",
        trace.source)
    # autograd's order is the default one (reverse layers, reverse tensor list)
    assert trace.grad_ready_order is None
    assert [t.name for t in trace.ready_order] == ["2.bias", "2.weight", "0.bias", "0.weight"]
    assert not any(p.grad is not None for p in model.parameters())  # left clean


class _Tied(nn.Module):
    """Embedding tied to the output head, a parameter on the root module, float64 layer."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.mid = nn.Linear(8, 8).double()
        self.head = nn.Linear(8, 50, bias=False)
        self.head.weight = self.emb.weight
        self.scale = nn.Parameter(torch.ones(8))
        self.frozen = nn.Linear(8, 8)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        h = self.mid(self.emb(x).double()).float()
        return {"logits": self.head(self.frozen(h) * self.scale)}


def test_profile_grad_copy_copies_every_gradient_once_per_iteration() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 4))
    plain = profile_model(model, torch.randn(5, 256), name="m", batch_size=5, repeats=2)
    copied = profile_model(model, torch.randn(5, 256), name="m", batch_size=5, repeats=2,
                           warmup=1, grad_copy=True)
    assert [(t.name, t.bytes) for la in copied.layers for t in la.tensors] == [
        (t.name, t.bytes) for la in plain.layers for t in la.tensors]
    total = sum(t.bytes for la in plain.layers for t in la.tensors)
    assert copied.source.startswith(plain.source.split(", 2 repeats")[0])
    assert copied.source.endswith(f"(DDP's copy into its buckets): {total / 2**20:.1f} MiB "
                                  "per iteration")
    assert "copied" not in plain.source
    # the hooks are gone: a later backward copies nothing and leaves no hook behind
    model(torch.randn(5, 256)).mean().backward()
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())


def test_grad_copies_copy_every_gradient_into_a_buffer_allocated_once() -> None:
    from schedopt.measure.profile import _GradCopies

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    params = list(model.named_parameters())
    copies = _GradCopies(params)
    homes = [b.data_ptr() for b in copies.buffers]
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        model(torch.randn(3, 16)).square().sum().backward()
        for (_, p), buf in zip(params, copies.buffers, strict=True):
            assert torch.equal(buf, p.grad)  # this step's gradient, copied
            assert buf.data_ptr() != p.grad.data_ptr()  # the gradient stays autograd's own
    assert [b.data_ptr() for b in copies.buffers] == homes  # allocated once, as DDP's buckets
    assert copies.bytes == 2 * sum(p.numel() * 4 for _, p in params)
    copies.remove()
    before = [b.clone() for b in copies.buffers]
    model(torch.randn(3, 16)).sum().backward()
    assert all(torch.equal(a, b) for a, b in zip(before, copies.buffers, strict=True))


def test_grad_view_makes_each_copy_the_gradient_as_gradient_as_bucket_view() -> None:
    from schedopt.measure.profile import _GradCopies

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    params = list(model.named_parameters())
    copies = _GradCopies(params, view=True)
    homes = [b.data_ptr() for b in copies.buffers]
    for step in range(2):
        model.zero_grad(set_to_none=True)
        x = torch.randn(3, 16)
        model(x).square().sum().backward()
        reference = torch.autograd.grad(model(x).square().sum(), [p for _, p in params])
        for (_, p), buf, ref in zip(params, copies.buffers, reference, strict=True):
            assert p.grad.data_ptr() == buf.data_ptr(), step  # the bucket's copy is the gradient
            assert torch.allclose(p.grad, ref)  # holding this step's values
    assert [b.data_ptr() for b in copies.buffers] == homes
    copies.remove()


def test_profile_grad_view_says_so_and_leaves_no_gradient_behind() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
    viewed = profile_model(model, torch.randn(5, 64), name="m", batch_size=5, repeats=2,
                           warmup=1, grad_view=True)
    total = sum(t.bytes for la in viewed.layers for t in la.tensors)
    assert viewed.source.endswith(
        f"(DDP's copy into its buckets): {total / 2**20:.1f} MiB per iteration; the copies then "
        "made the gradients (gradient_as_bucket_view)")
    assert all(p.grad is None for p in model.parameters())
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())


def test_profile_tied_root_and_frozen_parameters() -> None:
    torch.manual_seed(0)
    model = _Tied()
    trace = profile_model(model, torch.randint(0, 50, (4, 3)), name="tied", batch_size=4,
                          repeats=2, warmup=1, optimizer="sgd")
    names = [t.name for t in trace.tensor_list]
    assert sorted(names) == sorted(["emb.weight", "mid.weight", "mid.bias", "scale"])
    assert trace.tensor_layer_by_name["emb.weight"] == 0  # tied: the earliest layer, once
    assert [la.name for la in trace.layers] == ["emb", "mid", "head"]
    assert trace.layers[2].tensors == []  # head's weight belongs to emb
    by = {t.name: t for t in trace.tensor_list}
    assert by["mid.weight"].dtype == "float64" and by["mid.weight"].bytes == 8 * 8 * 8
    # the root's parameter joins the layer whose backward readies it (before mid's)
    assert trace.ready_index["scale"] < trace.ready_index["mid.weight"]
    assert trace.update_s > 0
    assert model_tensors(model) == {n: (by[n].bytes, by[n].dtype) for n in
                                    [n for n, _ in model.named_parameters() if n in by]}


def test_profile_inputs_and_errors() -> None:
    model = nn.Sequential(nn.Linear(4, 4))
    trace = profile_model(model, (torch.randn(2, 4),), name="t", batch_size=2, repeats=1,
                          warmup=0, loss_fn=lambda out: out.pow(2).sum())
    assert trace.num_tensors == 2
    with pytest.raises(SchedoptError, match="repeats"):
        profile_model(model, torch.randn(2, 4), name="t", batch_size=2, repeats=0)
    frozen = nn.Sequential(nn.Linear(4, 4)).requires_grad_(False)
    with pytest.raises(SchedoptError, match="no parameters"):
        profile_model(frozen, torch.randn(2, 4), name="t", batch_size=2)
    with pytest.raises(SchedoptError, match="input_shape"):
        random_batch("3,x")
    assert random_batch("2,3", "int64").dtype == torch.int64


def test_ddp_kwargs_match_the_emitter() -> None:
    from schedopt.emit import emit_ddp
    from schedopt.model.plan import Plan

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    trace = profile_model(model, torch.randn(5, 8), name="mlp", batch_size=5, repeats=1,
                          warmup=0)
    order = [t.name for t in trace.ready_order]
    plan = Plan(policy="hand", buckets=[order[:1], order[1:]])
    kwargs = ddp_kwargs(trace, None, plan)
    assert kwargs == emit_ddp(trace, None, plan).config
    assert len(kwargs["bucket_cap_mb_list"]) == 2
    with pytest.raises(SchedoptError, match="exactly"):
        ddp_kwargs(trace, None, plan.model_copy(update={"buckets": plan.buckets[::-1]}),
                   require_exact=True)


# ---------------------------------------------------------------------------- real DDP

RUN = textwrap.dedent("""
    import json, os, sys, tempfile
    import torch, torch.nn as nn, torch.distributed as dist
    from schedopt.model.cluster import Cluster
    from schedopt.errors import SchedoptError
    from schedopt.emit.ddp_torch import apply_plan, rebuilt_buckets
    from schedopt.measure.profile import profile_model
    from schedopt.model.plan import Plan
    from schedopt.policies import make_plan

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    cluster = Cluster.model_validate({"name": "c", "nodes": 2, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9}})

    def net(mixed):
        torch.manual_seed(0)
        layers = [nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 96), nn.ReLU(),
                  nn.Linear(96, 64), nn.Linear(64, 8)]
        if mixed:  # float64 layers: a second dtype accumulator in DDP
            layers[2].double(); layers[5].double()
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.ModuleList(layers)
            def forward(self, x):
                for m in self.body:
                    x = m(x.to(m.weight.dtype) if hasattr(m, "weight") else x)
                return x.float()
        return Net()

    out = []
    for mixed in (False, True):
        model = net(mixed)
        x = torch.randn(4, 32)
        trace = profile_model(model, x, name="mlp", batch_size=4, repeats=2, warmup=1)
        order = [t.name for t in trace.ready_order]
        plans = [Plan(policy="hand", buckets=[order[:1], order[1:4], order[4:5], order[5:]])]
        if mixed:  # the hand plan now mixes dtypes (refused); DDP's own plans do not
            plans += [make_plan(trace, cluster, "ddp", bucket_cap_mb=cap) for cap in (0.02, 0.05)]
        for plan in plans:
            try:
                ddp = apply_plan(model, trace, plan)
            except SchedoptError as exc:
                out.append({"error": str(exc)})
                continue
            before = rebuilt_buckets(ddp)
            for _ in range(3):
                ddp(x).sum().backward()
            out.append({"plan": plan.buckets, "built": rebuilt_buckets(ddp),
                        "before": before})
            del ddp
    try:
        apply_plan(net(False), trace, plans[-1])
    except SchedoptError as exc:
        out.append({"error": str(exc)})
    print(json.dumps(out), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no teardown: gloo may abort there ("terminate called without an active ...")
""")


@pytest.mark.slow
def test_apply_plan_rebuilds_the_plans_buckets(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    env = dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", RUN, str(tmp_path / "rendezvous")],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    if proc.returncode != 0:
        pytest.fail(f"DDP run failed:\n{proc.stderr[-3000:]}")
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(runs) == 5
    fine = [runs[0], runs[2], runs[3]]
    for run in fine:
        assert "error" not in run, run
        assert run["before"] is None  # nothing rebuilt before the first iteration
        assert [sorted(b) for b in run["built"]] == [sorted(b) for b in run["plan"]]
    assert "mix dtypes" in runs[1]["error"]
    # the mixed-dtype plans have buckets that are not contiguous in gradient-ready order
    order = [m for b in runs[0]["plan"] for m in b]
    assert any([order.index(m) for m in b] != list(range(order.index(b[0]),
                                                         order.index(b[0]) + len(b)))
               for run in runs[2:4] for b in run["plan"])
    # a float32 model against the trace of its mixed-dtype twin
    assert "body.2.weight" in runs[4]["error"] and "float64" in runs[4]["error"]


def test_apply_plan_needs_a_process_group() -> None:
    from schedopt.emit.ddp_torch import apply_plan
    from schedopt.model.plan import Plan

    dist = pytest.importorskip("torch.distributed")
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised")
    model = nn.Sequential(nn.Linear(2, 2))
    trace = Trace.model_validate({"name": "t", "batch_size": 1, "layers": [
        {"name": "0", "forward_s": 0.0, "backward_s": 0.0, "tensors": [
            {"name": "0.weight", "bytes": 16}, {"name": "0.bias", "bytes": 8}]}]})
    plan = Plan(policy="hand", buckets=[["0.bias", "0.weight"]])
    with pytest.raises(SchedoptError, match="process group"):
        apply_plan(model, trace, plan)


def test_cli_profile_writes_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from schedopt.cli.app import app

    (tmp_path / "tinynet.py").write_text(textwrap.dedent("""
        import torch.nn as nn

        def make():
            return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(4 * 6 * 6, 5))
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "t.json"
    runner = CliRunner()
    result = runner.invoke(app, ["profile", "tinynet:make", "--input-shape", "2,3,8,8",
                                 "--name", "tiny", "--out", str(out), "--repeats", "2"])
    assert result.exit_code == 0, result.output
    trace = Trace.model_validate_json(out.read_text())
    assert trace.batch_size == 2 and [la.name for la in trace.layers] == ["0", "3"]
    result = runner.invoke(app, ["profile", "tinynet:nothing", "--input-shape", "2,3,8,8",
                                 "--name", "tiny", "--out", str(tmp_path / "u.json")])
    said = [line for line in result.output.splitlines() if not line.startswith("warning:")]
    assert result.exit_code == 2 and len(said) == 1 and said[0].startswith("error: factory")
    assert not (tmp_path / "u.json").exists()


def test_pass_scale_makes_the_layers_sum_to_the_median_whole_pass() -> None:
    from schedopt.measure.profile import _pass_scale

    # two layers, three iterations: each layer is slow once, never both in one iteration
    times = [[1.0, 1.0, 5.0], [1.0, 5.0, 1.0]]
    scale = _pass_scale(times)
    assert scale == pytest.approx(3.0)  # medians 1 + 1, whole passes 2, 6, 6: median 6
    assert sum(statistics.median(t) * scale for t in times) == pytest.approx(6.0)
    assert _pass_scale([[2.0, 2.0], [3.0, 3.0]]) == pytest.approx(1.0)  # no spread: unchanged
    assert _pass_scale([[0.0, 0.0]]) == 1.0 and _pass_scale([]) == 1.0


def test_faults_note_is_the_median_of_the_iterations_on_a_cpu_only() -> None:
    import mmap

    from schedopt.measure.profile import _faults_note

    runs = [{"faults": 10}, {"faults": 2560}, {"faults": 9000}]
    mib = 2560 * mmap.PAGESIZE / 2**20
    assert _faults_note(runs, torch.device("cpu")) == (
        f"; 2,560 minor page faults per iteration ({mib:.1f} MiB of fresh pages)")
    assert _faults_note(runs, torch.device("cuda")) == ""  # host faults say nothing there
    assert _faults_note([*runs, {"faults": None}], torch.device("cpu")) == ""


FAULTS_SCRIPT = textwrap.dedent("""
    import re, torch
    from schedopt.measure.profile import profile_model
    torch.manual_seed(0)
    model = torch.nn.Linear(3000, 3000, bias=False)  # a 36 MB gradient: above glibc's mmap limit
    tr = profile_model(model, torch.randn(2, 3000), name="big", batch_size=2, repeats=3)
    print(re.search(r"; ([\\d,]+) minor page faults per iteration", tr.source).group(1))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_profile_counts_the_page_faults_that_freed_gradients_cost() -> None:
    def faults(**env: str) -> int:
        out = subprocess.run([sys.executable, "-c", FAULTS_SCRIPT], capture_output=True,
                             text=True, timeout=120, check=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1", **env})
        return int(out.stdout.strip().replace(",", ""))

    pages = 3000 * 3000 * 4 // os.sysconf("SC_PAGE_SIZE")
    fresh = faults()  # glibc's defaults: the gradient is mapped and zeroed every iteration
    # glibc asked to keep freed memory: most processes then take no faults, but some still
    # fault every page (1 of 4 processes in one check), so only "never more" holds always
    kept = faults(MALLOC_TRIM_THRESHOLD_="4000000000", MALLOC_MMAP_THRESHOLD_="4000000000")
    assert fresh >= 0.9 * pages
    assert kept <= fresh


def test_profile_records_the_launching_threads_time() -> None:
    """Host time per layer (CPU time of the thread that runs the passes), when asked for, is
    present, positive and, on CPU where that thread also runs the kernels, at most the layer's
    wall time; by default a CPU profile records none (no launch precedes the compute there)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 4))
    plain = profile_model(model, torch.randn(64, 256), name="m", batch_size=64, repeats=2,
                          warmup=1)
    assert not plain.has_host and "host_forward_s" not in plain.model_dump_json()
    trace = profile_model(model, torch.randn(64, 256), name="m", batch_size=64, repeats=3,
                          warmup=1, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                          host=True)
    assert trace.has_host and trace.host_update_s > 0
    for la in trace.layers:
        assert 0 < la.host_forward_s <= la.forward_s
        assert 0 < la.host_backward_s <= la.backward_s
    assert "host_forward_s" in trace.model_dump_json()
