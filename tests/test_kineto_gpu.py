"""torch.profiler (Kineto) import of GPU traces: NCCL DDP on two ranks, against known truth.

The traces are synthetic (:mod:`tests.kineto_synth`), in the format torch 2.13 writes with CUDA
activities: kernels linked to the ops that launched them by ``correlation`` ids, DDP's
``record_param_comms`` all-reduces with their NCCL kernels on a stream of their own, ranks
whose files have different ``baseTimeNanoseconds``. Two variants: GPU-bound (long kernels, the
host runs ahead) and host-bound (short kernels, long host ops between the launches), the latter
in bfloat16 with NCCL kernels launched through the driver API. The first profiled step
(``ProfilerStep#10``) is slow: its kernels take 1.5 times longer.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from schedopt.cli.app import run
from schedopt.errors import SchedoptError
from schedopt.measure.kineto import HOST_BOUND_IDLE, import_kineto
from tests.kineto_synth import Config, Truth, write

STEADY = [11, 12, 13, 14]
HOST_BOUND = Config(host_bound=True, dtype="bfloat16", nccl_driver=True)


def close(x: float) -> object:
    """Equal up to the nanosecond rounding of the trace's timestamps."""
    return pytest.approx(x, rel=1e-6, abs=2e-8)


@pytest.fixture(scope="module")
def gpu_bound(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Truth]:
    """Rank 0 (gzipped) and rank 1 of the GPU-bound run."""
    return write(Config(), tmp_path_factory.mktemp("gpu_bound"))


@pytest.fixture(scope="module")
def host_bound(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Truth]:
    """Rank 0 (gzipped) and rank 1 of the host-bound run."""
    return write(HOST_BOUND, tmp_path_factory.mktemp("host_bound"))


@pytest.fixture(params=["gpu_bound", "host_bound"])
def variant(request: pytest.FixtureRequest) -> tuple[list[Path], Truth]:
    """Both runs."""
    return request.getfixturevalue(request.param)


def test_layer_times_are_the_kernels_the_layer_launched(
        variant: tuple[list[Path], Truth]) -> None:
    paths, truth = variant
    imp = import_kineto(paths, steps="11:")
    s = imp.summary
    assert (s["device"], s["grouping"], s["ranks"]) == ("gpu", "nn.Module", 2)
    assert s["steps"] == STEADY and s["steps_dropped"] == 0
    # the input's .to(device) (a memcpy, no kernel) is a layer of its own, without gradients
    assert [la.name for la in imp.trace.layers] == truth.layers
    fwd, bwd = truth.mean("fwd", STEADY), truth.mean("bwd", STEADY)
    for la in imp.trace.layers:
        assert la.forward_s == close(fwd[la.name]), la.name
        assert la.backward_s == close(bwd[la.name]), la.name
    assert imp.trace.layers[0].forward_s == 0 and imp.trace.layers[0].backward_s == 0
    # the ranks' GPUs differ (a slower kernel each): the times are means over both
    per_rank = [statistics.fmean(truth.per[(r, n)].bwd_us["Linear_1"] for n in STEADY)
                for r in (0, 1)]
    assert per_rank[0] != per_rank[1]
    # the optimizer step is its kernels, not the host's wait for the GPU at loss.item()
    assert imp.trace.io_s == 0
    assert imp.trace.update_s == close(statistics.fmean(
        v.update_us for v in truth.steps_of(STEADY)) * 1e-6)
    # every compute kernel of a step belongs to a layer or to the update
    assert imp.trace.compute_s + imp.trace.update_s == close(s["busy_s"])


def test_gradients_and_buckets_are_ddps(variant: tuple[list[Path], Truth]) -> None:
    paths, truth = variant
    imp = import_kineto(paths, names=truth.params)
    s = imp.summary
    assert imp.buckets == truth.buckets
    assert [b["bytes"] for b in s["buckets"]] == truth.bucket_bytes()
    assert {b["dtype"] for b in s["buckets"]} == {truth.dtype}
    assert [b["tensors"] for b in s["buckets"]] == [len(b) for b in truth.buckets]
    assert s["process_group_size"] == imp.ranks == 2
    assert [(t.name, t.numel, t.dtype) for t in imp.trace.ready_order] == truth.grads_ready
    assert [t.name for t in imp.trace.tensor_list] == truth.params
    owners = {t.name: la.name for la in imp.trace.layers for t in la.tensors}
    assert owners == {"0.weight": "Linear_0", "0.bias": "Linear_0", "2.weight": "Linear_1",
                      "2.bias": "Linear_1", "4.weight": "Linear_2", "4.bias": "Linear_2"}
    # each bucket starts on the NCCL stream once launched and its gradients are computed
    starts = [[(v.nccl[k][0] - v.s0) * 1e-6 for v in truth.steps_of()]
              for k in range(len(truth.buckets))]
    for b, expect in zip(s["buckets"], starts, strict=True):
        assert b["start_s"] == close(statistics.median(expect))
        assert b["launch_s"] < b["start_s"]


def test_transfer_is_the_duration_on_the_rank_that_started_last(
        gpu_bound: tuple[list[Path], Truth]) -> None:
    paths, truth = gpu_bound
    cfg = Config()
    # the setting: rank 1 starts bucket 0 last, rank 0 buckets 1 and 2; the early rank's
    # kernel lasts longer (it waits); rank 1's file counts from a base time 5 s later
    for n in STEADY:
        v0, v1 = truth.per[(0, n)], truth.per[(1, n)]
        latest = [0 if a[0] > b[0] else 1 for a, b in zip(v0.nccl, v1.nccl, strict=True)]
        assert latest == [1, 0, 0]
        for k, r in enumerate(latest):
            early = (v1 if r == 0 else v0).nccl[k]
            assert early[1] - early[0] > truth.transfer_us[k] + 40
    assert cfg.bases_ns[1] - cfg.bases_ns[0] == 5 * 10**9
    raw = [json.loads(gzip.decompress(paths[0].read_bytes())), json.loads(paths[1].read_text())]
    first = [next(e["ts"] for e in d["traceEvents"] if e.get("cat") == "kernel"
                  and e["name"].startswith("ncclDevKernel_AllReduce")) for d in raw]
    assert first[1] < first[0] - 4e6  # raw timestamps would put rank 1 first

    imp = import_kineto(paths, steps="11:")
    assert "latest start across 2 rank files" in imp.summary["transfer_method"]
    for b, t in zip(imp.summary["buckets"], truth.transfer_us, strict=True):
        assert b["transfer_s"] == close(t * 1e-6)
    assert len(imp.points) == len(STEADY) * len(truth.transfer_us)
    sizes = dict(zip(truth.bucket_bytes(), truth.transfer_us, strict=True))
    for nbytes, t in imp.points:
        assert t == close(sizes[nbytes] * 1e-6)

    # one file: its own durations, an upper bound
    one = import_kineto(paths[:1], steps="11:")
    assert "upper bound" in one.summary["transfer_method"]
    for k, b in enumerate(one.summary["buckets"]):
        own = statistics.median(truth.per[(0, n)].nccl[k][1] - truth.per[(0, n)].nccl[k][0]
                                for n in STEADY)
        assert b["transfer_s"] == close(own * 1e-6)
    assert one.summary["buckets"][0]["transfer_s"] > 2 * truth.transfer_us[0] * 1e-6


@pytest.mark.parametrize("name, bound", [("gpu_bound", False), ("host_bound", True)])
def test_busy_idle_and_host_bound(name: str, bound: bool, request: pytest.FixtureRequest
                                  ) -> None:
    paths, truth = request.getfixturevalue(name)
    s = import_kineto(paths, steps="11:").summary
    chosen = truth.steps_of(STEADY)
    assert s["step_times_s"] == [close(v.step_us * 1e-6) for v in
                                 [truth.per[(r, n)] for r in (0, 1) for n in STEADY]]
    assert s["step_time_s"] == close(statistics.median(v.step_us for v in chosen) * 1e-6)
    # busy: the compute kernels (the NCCL ones are communication), summed over the stream
    assert s["busy_s"] == close(statistics.median(v.busy_us for v in chosen) * 1e-6)
    assert s["idle_s"] == close(s["step_time_s"] - s["busy_s"])
    idle = [(v.step_us - v.busy_us) / v.step_us for v in chosen]
    assert all((f > HOST_BOUND_IDLE) == bound for f in idle)
    assert s["host_bound"] is bound
    assert s["host_bound_steps"] == (len(chosen) if bound else 0)
    # the last bucket runs after the backward with nothing to hide behind: all exposed
    last = statistics.median(v.nccl[-1][1] - v.nccl[-1][0] for v in chosen)
    assert s["buckets"][-1]["exposed_s"] == close(last * 1e-6)
    if not bound:  # the first bucket runs under the next layers' backward kernels
        assert s["buckets"][0]["exposed_s"] == close(0.0)
    assert s["exposed_comm_s"] >= s["buckets"][-1]["exposed_s"]


def test_steps_select_the_profiled_steps(gpu_bound: tuple[list[Path], Truth]) -> None:
    paths, truth = gpu_bound
    every = import_kineto(paths)
    assert every.summary["steps"] == [10, *STEADY]
    some = import_kineto(paths, steps="11:13")
    assert some.summary["steps"] == [11, 12] and len(some.summary["step_times_s"]) == 4
    warm = import_kineto(paths, steps=":11")
    assert warm.summary["steps"] == [10]
    for imp, steps in ((every, None), (some, [11, 12]), (warm, [10])):
        fwd, bwd = truth.mean("fwd", steps), truth.mean("bwd", steps)
        for la in imp.trace.layers:
            assert (la.forward_s, la.backward_s) == (close(fwd[la.name]), close(bwd[la.name]))
    assert warm.trace.layers[3].forward_s == close(1.5 * some.trace.layers[3].forward_s)
    with pytest.raises(SchedoptError, match="--steps"):
        import_kineto(paths, steps="20:")


def test_gzip_and_plain_files_read_alike(gpu_bound: tuple[list[Path], Truth],
                                         tmp_path: Path) -> None:
    paths, _ = gpu_bound
    assert paths[0].read_bytes()[:2] == b"\x1f\x8b"
    plain = tmp_path / "rank0.pt.trace.json"
    plain.write_bytes(gzip.decompress(paths[0].read_bytes()))
    a = import_kineto(paths, steps="11:")
    b = import_kineto([plain, paths[1]], steps="11:")
    assert a.trace.model_dump(exclude={"source"}) == b.trace.model_dump(exclude={"source"})
    assert a.points == b.points
    assert {**a.summary, "files": []} == {**b.summary, "files": []}


def test_cli_import_then_simulate_emit_and_explain(gpu_bound: tuple[list[Path], Truth],
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    paths, truth = gpu_bound
    t, c, p = tmp_path / "T.json", tmp_path / "C.json", tmp_path / "P.csv"
    names = tmp_path / "names.txt"
    names.write_text("\n".join(truth.params) + "\n")
    files = [str(f) for f in paths]
    out = ["--out-trace", str(t), "--out-cluster", str(c), "--out-points", str(p)]
    assert run(["import", "kineto", *files, *out, "--names", str(names), "--steps", "11:",
                "--batch-size", "64"]) == 0
    text = capsys.readouterr().out
    assert "(gpu, layers by nn.Module)" in text and "6 tensors in 3 buckets" in text
    assert run(["import", "kineto", *files, *out, "--names", str(names), "--steps", "11:",
                "--batch-size", "64", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["buckets_tensors"] == truth.buckets and summary["device"] == "gpu"
    trace = json.loads(t.read_text())
    assert trace["batch_size"] == 64 and "GPU kernel times" in trace["source"]
    rows = p.read_text().splitlines()
    assert rows[0] == "bytes,time_s,ranks" and len(rows) == 1 + 3 * len(STEADY)
    assert {int(r.split(",")[0]) for r in rows[1:]} == set(truth.bucket_bytes())

    assert run(["simulate", str(t), str(c), "-p", "ddp:bucket_cap_mb=4", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["iteration_time_s"] > summary["compute_s"]
    assert run(["emit", "-t", "ddp", str(t), str(c), "-p", "ddp:bucket_cap_mb=4"]) == 0
    emitted = capsys.readouterr().out
    assert "bucket_cap_mb" in emitted

    measured = [arg for f in files for arg in ("--measured", f)]
    assert run(["explain", str(t), str(c), *measured, "--steps", "11:", "--json"]) == 0
    exp = json.loads(capsys.readouterr().out)
    assert len(exp["buckets"]) == 3 and exp["host_bound"] is False
    assert exp["measured_step_s"] == close(summary["step_time_s"])
    d = exp["difference"]
    assert d["compute_s"] + d["communication_s"] + d["host_s"] == pytest.approx(
        exp["difference_s"])
