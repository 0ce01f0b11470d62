"""bench-comm, bench-ddp and validate on real local processes (gloo, 2 ranks, tiny model).

The end-to-end test checks structure, not speed: rows land in the measurements format, DDP built
the planned buckets, fit-comm carries the measured overlap slowdown into the cluster, validate
predicts every row. The failure tests check that a rank that dies or hangs is one line of error
and leaves no CSV.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.files import load_trace
from schedopt.measure.bench_comm import CommBench, bench_comm, format_nccl_tests, parse_sizes
from schedopt.measure.bench_ddp import ddp_configs
from schedopt.measure.comm_tables import read_pattern, read_slowdowns
from schedopt.measure.launch import ENV_VARS, Launch
from schedopt.measure.measurements import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, read_measurements
from schedopt.model.cluster import Cluster
from schedopt.policies import make_plan

from .hostile import refused
from .processes import finish
from .test_framework_code import free_port

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]

MODELS = textwrap.dedent("""
    import os, time
    import torch.nn as nn

    def tiny():
        return nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 8))

    def dies():
        if _rank() == 1:
            os._exit(3)
        return tiny()

    def hangs():
        if _rank() == 1:
            time.sleep(3600)
        return tiny()

    def _rank():
        import torch.distributed as dist
        return dist.get_rank()
""")

CLUSTER = {"name": "two", "nodes": 2, "gpus_per_node": 1,
           "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9}}


def _ok(result) -> None:
    assert result.exit_code == 0, result.output


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "benchmodels.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


# ---------------------------------------------------------------------- without processes
@pytest.mark.parametrize("text", [
    "4K",        # no MAX
    "1M:4K",     # MIN > MAX
    "2:64",      # below one float
    "4X:8K",     # unknown suffix
])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(SchedoptError, match="sizes"):
        parse_sizes(text)


def test_sizes_units() -> None:
    assert parse_sizes("4K:64M") == (4096, 64 * 2**20)


def test_overlap_line_bad_value(tmp_path: Path) -> None:
    f = tmp_path / "comm2.txt"
    f.write_text("# schedopt overlap_slowdown 0.5\n")
    with pytest.raises(SchedoptError, match="overlap_slowdown"):
        read_slowdowns(f)
    f.write_text("# schedopt overlap_slowdown 1.5\n# schedopt comm_slowdown nan\n")
    with pytest.raises(SchedoptError, match="comm_slowdown"):
        read_slowdowns(f)


@pytest.mark.parametrize("value", ["-1e-6", "nan", "inf", "2", "1e308", "true"])
def test_launch_line_bad_value(tmp_path: Path, value: str) -> None:
    f = tmp_path / "comm2.txt"
    f.write_text(f"# schedopt launch_overhead_s {value}\n")
    with pytest.raises(SchedoptError, match=f"launch_overhead_s.*{value}|{value}.*launch"):
        read_slowdowns(f)
    # fit-comm: one line naming the field, exit 2, no cluster written
    rows = [f"{n:12d} {n // 4:10d}  float    sum {n * 1e-3 + 50:10.1f} 0 0 0"
            f" {n * 1e-3 + 50:10.1f} 0 0 0" for n in (4096 * 2**k for k in range(8))]
    f.write_text(f"# schedopt launch_overhead_s {value}\n" + "\n".join(rows))
    res = runner.invoke(app, ["fit-comm", str(f), "--out", str(tmp_path / "c.json")])
    assert res.exit_code == 2 and "launch_overhead_s" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "c.json").exists()


def test_fit_comm_pools_the_launch_cost(tmp_path: Path) -> None:
    rows = [f"{n:12d} {n // 4:10d}  float    sum {n * 1e-3 + 50:10.1f} 0 0 0"
            f" {n * 1e-3 + 50:10.1f} 0 0 0" for n in (4096 * 2**k for k in range(8))]
    files = []
    for i, launch in enumerate(("4e-05", "6e-05", "1e-04")):
        f = tmp_path / f"comm{i}-2.txt"
        f.write_text(f"# schedopt launch_overhead_s {launch}\n" + "\n".join(rows))
        files.append(str(f))
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["fit-comm", *files, "--out", str(out), "--json"])
    _ok(res)
    assert json.loads(res.output)["launch_overhead_s"] == pytest.approx(6e-05)
    assert Cluster.model_validate_json(out.read_text()).launch_overhead_s == pytest.approx(6e-5)
    # a file without the line leaves the cluster's launch cost at 0 (the model without a host)
    f = tmp_path / "plain-2.txt"
    f.write_text("\n".join(rows))
    _ok(runner.invoke(app, ["fit-comm", str(f), "--out", str(out)]))
    assert Cluster.model_validate_json(out.read_text()).launch_overhead_s == 0.0


def test_fit_comm_writes_overlap_slowdown(tmp_path: Path) -> None:
    rows = [f"{n:12d} {n // 4:10d}  float    sum {n * 1e-3 + 50:10.1f} 0 0 0"
            f" {n * 1e-3 + 50:10.1f} 0 0 0" for n in (4096 * 2**k for k in range(8))]
    f = tmp_path / "comm2.txt"
    f.write_text("# nccl-tests layout\n# schedopt overlap_slowdown 1.375\n"
                 "# schedopt comm_slowdown 1.75\n" + "\n".join(rows))
    out = tmp_path / "c.json"
    _ok(runner.invoke(app, ["fit-comm", str(f), "--out", str(out)]))
    cluster = Cluster.model_validate_json(out.read_text())
    assert (cluster.overlap_slowdown, cluster.comm_slowdown) == (1.375, 1.75)


def _bench_file(path: Path, pattern: str) -> Path:
    """A bench-comm file of made-up times (alpha 50 us, beta 1 ns/B) timed with ``pattern``."""
    sizes = [4096 * 2**k for k in range(8)]
    res = CommBench(sizes, [50e-6 + n * 1e-9 for n in sizes], 1.5, [(1.0, 1.5)], Launch(),
                    4096, (8, 1), 2.0, ((1.0, 2.0),), pattern)
    path.write_text(format_nccl_tests(res))
    return path


@pytest.mark.parametrize("pattern", ["isolated", "queued"])
def test_pattern_written_and_read(tmp_path: Path, pattern: str) -> None:
    f = _bench_file(tmp_path / "comm2.txt", pattern)
    assert read_pattern(f) == pattern
    assert read_slowdowns(f) == {"overlap_slowdown": 1.5, "comm_slowdown": 2.0}
    out = tmp_path / "c.json"
    _ok(runner.invoke(app, ["fit-comm", str(f), "--out", str(out)]))
    source = Cluster.model_validate_json(out.read_text()).source
    assert f"bench-comm calls {pattern}" in source


def test_pattern_line_bad_or_absent(tmp_path: Path) -> None:
    f = tmp_path / "comm2.txt"
    assert read_pattern(f) is None  # no file: nothing stated
    f.write_text("# nccl-tests\n# schedopt overlap_slowdown 1.5\n")
    assert read_pattern(f) is None  # files from before the line
    f.write_text("# schedopt pattern sideways\n")
    with pytest.raises(SchedoptError, match="pattern"):
        read_pattern(f)
    with pytest.raises(SchedoptError, match=r"pattern.*sideways"):
        bench_comm(Launch(), pattern="sideways")  # refused before any process starts


def test_fit_comm_refuses_mixed_patterns(tmp_path: Path) -> None:
    a = _bench_file(tmp_path / "a2.txt", "isolated")
    b = _bench_file(tmp_path / "b2.txt", "queued")
    out = tmp_path / "c.json"
    result = runner.invoke(app, ["fit-comm", str(a), str(b), "--out", str(out)])
    assert result.exit_code == 2
    assert "a2.txt: isolated, b2.txt: queued" in result.output
    assert "Traceback" not in result.output and not out.exists()
    _ok(runner.invoke(app, ["fit-comm", str(a), str(_bench_file(tmp_path / "c2.txt",
                                                                  "isolated")), "--out", str(out)]))


def test_configs_reject_other_policies(tiny_trace) -> None:
    cl = Cluster.model_validate(CLUSTER)
    with pytest.raises(SchedoptError, match="bench-ddp runs"):
        ddp_configs(tiny_trace, cl, ["horovod"], [], Path())
    with pytest.raises(SchedoptError, match="first_bucket_mb"):
        ddp_configs(tiny_trace, cl, ["ddp:bucket_cap_mb=5,first_bucket_mb=1"], [], Path())
    cfg = ddp_configs(tiny_trace, cl, ["cntk", "ddp:first_bucket_mb=2"], [], Path())
    assert [c.mode for c in cfg] == ["manual", "ddp"]
    assert cfg[0].buckets == make_plan(tiny_trace, cl, "cntk").buckets
    assert cfg[1].first_bucket_bytes == 2 * 2**20 and cfg[1].kwargs == {}


# ---------------------------------------------------------------------- real processes
def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def _profile(name: str, *extra: str) -> None:
    """``profile`` of the tiny model into ``NAME.json`` (2 repeats, 1 warm-up)."""
    _ok(runner.invoke(app, ["profile", "benchmodels:tiny", "--input-shape", "8,32", "--name",
                            name, "--out", f"{name}.json", "--repeats", "2", "--warmup", "1",
                            *extra]))


@pytest.mark.torch
@pytest.mark.slow
def test_end_to_end(workdir: Path) -> None:
    pytest.importorskip("torch")
    _profile("tiny")
    _ok(runner.invoke(app, ["bench-comm", "--procs", "2", "--sizes", "256K:16M", "--iters", "3",
                            "--warmup", "1", "--overlap-repeats", "1", "--overlap-bytes",
                            "4194304", "--out", "comm2.txt", "--timeout", "120"]))
    slowdowns = read_slowdowns("comm2.txt")
    assert set(slowdowns) == {"overlap_slowdown", "comm_slowdown", "launch_overhead_s"}
    assert read_pattern("comm2.txt") == "isolated"  # the default: each call alone
    assert slowdowns["overlap_slowdown"] >= 1.0 and slowdowns["comm_slowdown"] >= 1.0
    # the host's enqueue of one call: microseconds, not the transfer of milliseconds
    fastest = min(float(line.split()[4]) for line in Path("comm2.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#")) * 1e-6
    assert 0.0 < slowdowns["launch_overhead_s"] < fastest
    _ok(runner.invoke(app, ["fit-comm", "comm2.txt", "--out", "two.json"]))
    cluster = Cluster.model_validate_json(Path("two.json").read_text())
    assert cluster.world_size == 2
    assert cluster.overlap_slowdown == pytest.approx(slowdowns["overlap_slowdown"], abs=1e-4)
    assert cluster.comm_slowdown == pytest.approx(slowdowns["comm_slowdown"], abs=1e-4)
    assert cluster.launch_overhead_s == pytest.approx(slowdowns["launch_overhead_s"], rel=1e-3)
    trace = load_trace("tiny.json")
    plan = make_plan(trace, cluster, "caffe-mpi")  # one bucket per layer: DDP expresses it
    Path("plans").mkdir()
    Path("plans/layerwise.json").write_text(plan.model_dump_json())
    Path("out").mkdir()
    result = runner.invoke(app, [
        "bench-ddp", "benchmodels:tiny", "--input-shape", "8,32", "--trace", "tiny.json",
        "--cluster", "two.json", "-p", "ddp:bucket_cap_mb=0.1", "-p", "sync-easgd", "--plan",
        "plans/layerwise.json", "--iters", "3", "--warmup", "2", "--out", "out/runs.csv",
        "--timeout", "120"])
    _ok(result)
    rows = _read_csv(Path("out/runs.csv"))
    assert list(rows[0]) == [*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS]
    assert [r["policy"] for r in rows] == ["ddp:bucket_cap_mb=0.1", "sync-easgd",
                                           "plan:../plans/layerwise.json"]
    assert all(int(r["samples"]) == 3 * 2 for r in rows)  # iterations x ranks
    # DDP built the planned buckets: 0.1 MiB splits the 257 KiB layer from the rest
    cap_buckets = len(make_plan(trace, cluster, "ddp:bucket_cap_mb=0.1").buckets)
    assert cap_buckets >= 2
    assert f"DDP built the {cap_buckets} planned buckets" in rows[0]["source"]
    assert "no overlap: 1 all-reduces" in rows[1]["source"]
    assert f"DDP built the {len(trace.layers)} planned buckets" in rows[2]["source"]
    if sys.platform.startswith("linux"):  # CPU ranks count the page faults of an iteration
        assert all(re.search(r"; [\d,]+ minor page faults per iteration$", r["source"])
                   for r in rows)
    assert "MISMATCH" not in result.output
    measured = read_measurements("out/runs.csv")  # the format calibrate and validate read
    assert [m.row.iteration_time_s for m in measured] == [float(r["iteration_time_s"])
                                                          for r in rows]
    result = runner.invoke(app, ["validate", "out/runs.csv", "--json"])
    _ok(result)
    report = json.loads(result.output)
    assert len(report["rows"]) == 3
    assert all(math.isfinite(r["predicted_s"]) and r["predicted_s"] > 0 for r in report["rows"])


@pytest.mark.torch
def test_one_rank_runs_ddp_alone(workdir: Path) -> None:
    """``--procs 1``: DDP of one process (what a single GPU can measure, and what the public
    DDP benchmark's "1 GPU" rows ran): the reducer's work, no communication; each cap its own
    buckets, every iteration of the one rank timed."""
    pytest.importorskip("torch")
    _profile("tiny")
    one = {**CLUSTER, "name": "one", "nodes": 1}
    Path("one.json").write_text(json.dumps(one))
    trace, cluster = load_trace("tiny.json"), Cluster.model_validate(one)
    result = runner.invoke(app, [
        "bench-ddp", "benchmodels:tiny", "--input-shape", "8,32", "--trace", "tiny.json",
        "--cluster", "one.json", "--procs", "1", "-p", "ddp:bucket_cap_mb=0.1", "-p", "ddp",
        "--iters", "3", "--warmup", "2", "--out", "runs.csv", "--timeout", "120"])
    _ok(result)
    rows = _read_csv(Path("runs.csv"))
    assert [r["policy"] for r in rows] == ["ddp:bucket_cap_mb=0.1", "ddp"]
    assert all(int(r["samples"]) == 3 for r in rows)  # iterations x one rank
    for row in rows:
        built = len(make_plan(trace, cluster, row["policy"]).buckets)
        assert f"DDP built the {built} planned buckets" in row["source"]
    assert "MISMATCH" not in result.output


def _bench_fails(factory: str, timeout: str) -> str:
    Path("two.json").write_text(json.dumps(CLUSTER))
    _ok(runner.invoke(app, ["profile", "benchmodels:tiny", "--input-shape", "8,32",
                                "--name", "tiny", "--out", "tiny.json", "--repeats", "1",
                            "--warmup", "0"]))
    result = runner.invoke(app, [
        "bench-ddp", factory, "--input-shape", "8,32", "--trace", "tiny.json", "--cluster",
        "two.json", "-p", "ddp", "--iters", "2", "--warmup", "2", "--out", "runs.csv",
        "--timeout", timeout])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not Path("runs.csv").exists()
    assert not list(Path().glob(".runs.csv*"))
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    return lines[0]


@pytest.mark.torch
@pytest.mark.slow
def test_dying_rank_is_one_line(workdir: Path) -> None:
    pytest.importorskip("torch")
    line = _bench_fails("benchmodels:dies", "120")
    assert line.startswith("error: procs: rank 1 exited with status 3")


@pytest.mark.torch
@pytest.mark.slow
def test_hanging_rank_is_one_line(workdir: Path) -> None:
    pytest.importorskip("torch")
    line = _bench_fails("benchmodels:hangs", "10")
    assert line.startswith("error: timeout: rank(s) ") and "did not finish" in line


# ------------------------------------------------------------------- profile on co-running ranks
@pytest.mark.torch
@pytest.mark.slow
def test_profile_on_ranks(workdir: Path) -> None:
    pytest.importorskip("torch")
    _profile("alone")
    _profile("ranks", "--procs", "2", "--timeout", "120", "--grad-view")
    alone, ranks = load_trace("alone.json"), load_trace("ranks.json")
    # every rank made its copies the gradients (the option reaches the ranks)
    assert "the copies then made the gradients (gradient_as_bucket_view)" in ranks.source
    assert "copied" not in alone.source
    assert [(lay.name, [(t.name, t.bytes) for t in lay.tensors]) for lay in ranks.layers] == [
        (lay.name, [(t.name, t.bytes) for t in lay.tensors]) for lay in alone.layers]
    assert ranks.batch_size == 8
    assert "2 ranks computing at once (gloo" in ranks.source
    assert all(lay.forward_s > 0 and lay.backward_s > 0 for lay in ranks.layers)


@pytest.mark.torch
@pytest.mark.slow
def test_profile_on_ranks_dying_rank(workdir: Path) -> None:
    pytest.importorskip("torch")
    result = runner.invoke(app, ["profile", "benchmodels:dies", "--input-shape", "8,32",
                                 "--name", "x", "--out", "x.json", "--procs", "2",
                                 "--timeout", "120"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert result.output.startswith("error: procs: rank 1 exited with status 3")
    assert not Path("x.json").exists()


def test_profile_on_ranks_refuses_device(workdir: Path) -> None:
    result = runner.invoke(app, ["profile", "benchmodels:tiny", "--input-shape", "8,32",
                                 "--name", "x", "--out", "x.json", "--procs", "2",
                                 "--device", "cpu"])
    assert result.exit_code == 2
    assert result.output.startswith("error: --device: ")
    assert not Path("x.json").exists()


def test_manual_buckets_divide_while_copying_as_ddp() -> None:
    torch = pytest.importorskip("torch")
    from schedopt.measure.bench_ddp import _scale_into, _view_grads

    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    for p in params:
        p.grad = torch.randn_like(p)
    grads = [p.grad.clone() for p in params]
    flat = torch.full((17,), float("nan"))
    _scale_into(params, flat, 0.5)
    assert torch.equal(flat, torch.cat([g.reshape(-1) * 0.5 for g in grads]))
    _view_grads(params, flat)
    for p, g in zip(params, grads, strict=True):
        assert p.grad.shape == p.shape and torch.equal(p.grad, g * 0.5)
        assert p.grad.data_ptr() >= flat.data_ptr()  # a view of the bucket, no copy


# ------------------------------------------------------------ under torchrun (--launcher env)
#: bench-ddp of the tiny model, the least work that still builds DDP's buckets.
DDP_TINY = ["bench-ddp", "benchmodels:tiny", "--input-shape", "8,32", "--trace", "tiny.json",
            "--cluster", "two.json", "--iters", "2", "--warmup", "2", "--timeout", "60"]


def _torchrun(port: int, nodes: int, procs: int, node: int, *args: str) -> subprocess.Popen:
    """``python -m torch.distributed.run ... -m schedopt ARGS`` (gloo over loopback)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if p)}
    for name in ENV_VARS:  # only torchrun's own
        env.pop(name, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
           "--nproc-per-node", str(procs), "--node-rank", str(node), "--master-addr",
           "127.0.0.1", "--master-port", str(port), "-m", "schedopt", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _on_two_torchrun_nodes(args: list[str]) -> list[tuple[str, str]]:
    """Run ``schedopt ARGS`` as two torchrun nodes of one rank each; every node must exit with
    0. Returns each node's (stdout, stderr)."""
    port = free_port()
    done = finish([_torchrun(port, 2, 1, node, *args) for node in (0, 1)], 90)
    for code, _, err in done:
        assert code == 0, err[-3000:]
    return [(out, err) for _, out, err in done]


def _tiny_inputs() -> None:
    Path("two.json").write_text(json.dumps(CLUSTER))
    _profile("tiny")


def _same_shape(source: str) -> str:
    """A row's ``source`` without how the ranks were started and the page-fault count."""
    source = re.sub(r"2 ranks on \d+ nodes? \(launcher env\)", "2 procs", source)
    return re.sub(r"[\d,]+ minor page faults", "N minor page faults", source)


@pytest.mark.torch
@pytest.mark.slow
def test_torchrun_one_node_rank0_writes_the_local_rows(workdir: Path) -> None:
    pytest.importorskip("torch")
    _tiny_inputs()
    policies = ["-p", "ddp:bucket_cap_mb=0.1", "-p", "sync-easgd"]
    [(code, out, err)] = finish([_torchrun(free_port(), 1, 2, 0, *DDP_TINY, *policies,
                                            "--out", "env.csv", "--launcher", "env")], 90)
    assert code == 0, err[-3000:]
    assert out.count("wrote env.csv: 2 rows (gloo, 2 ranks on 1 node (launcher env),") == 1
    assert "Traceback" not in err and "note: WORLD_SIZE" not in err  # --launcher env given
    _ok(runner.invoke(app, [*DDP_TINY, *policies, "--out", "local.csv"]))
    env_rows, local_rows = _read_csv(Path("env.csv")), _read_csv(Path("local.csv"))
    assert [list(r) for r in env_rows] == [list(r) for r in local_rows]
    assert [(r["policy"], r["samples"], r["nodes"], _same_shape(r["source"])) for r in env_rows
            ] == [(r["policy"], r["samples"], r["nodes"], _same_shape(r["source"]))
                  for r in local_rows]
    assert all("2 ranks on 1 node (launcher env)" in r["source"] for r in env_rows)
    assert "DDP built the 2 planned buckets" in env_rows[0]["source"]
    assert len(read_measurements("env.csv")) == 2  # what calibrate and validate read
    assert sorted(p.name for p in Path().glob("*.csv")) == ["env.csv", "local.csv"]


@pytest.mark.torch
@pytest.mark.slow
def test_torchrun_two_nodes_auto_detected(workdir: Path) -> None:
    pytest.importorskip("torch")
    _tiny_inputs()
    args = [*DDP_TINY, "-p", "ddp:bucket_cap_mb=0.1", "--out", "runs.csv"]  # --launcher auto
    (out0, err0), (out1, _) = _on_two_torchrun_nodes(args)
    assert "note: WORLD_SIZE is set: bench-ddp runs as one of the 2 ranks" in err0
    assert "wrote runs.csv: 1 rows (gloo, 2 ranks on 2 nodes (launcher env)," in out0
    assert "wrote" not in out1  # rank 1 (node 1) writes nothing
    [row] = _read_csv(Path("runs.csv"))
    assert row["source"].startswith("bench-ddp gloo 2 ranks on 2 nodes (launcher env) ")
    assert int(row["samples"]) == 2 * 2 and "DDP built the 2 planned buckets" in row["source"]


@pytest.mark.torch
@pytest.mark.slow
def test_bench_comm_under_torchrun_on_two_nodes(workdir: Path) -> None:
    """bench-comm as the ranks of torchrun: rank 0 writes the file, with one ``Rank`` line per
    rank of the launch, and fit-comm reads it as a two-rank table."""
    pytest.importorskip("torch")
    args = ["bench-comm", "--sizes", "256K:4M", "--iters", "9", "--warmup", "2",
            "--overlap-repeats", "0", "--launch-calls", "5", "--timeout", "60",
            "--out", "comm.txt"]
    (out0, err0), (out1, err1) = _on_two_torchrun_nodes(args)
    assert "note: WORLD_SIZE is set: bench-comm runs as one of the 2 ranks" in err0
    assert "wrote comm.txt (gloo, 2 ranks on 2 nodes (launcher env), OMP_NUM_THREADS=1" in out0
    assert out1 == "" and "note:" not in err1  # rank 1 prints and writes nothing
    text = Path("comm.txt").read_text()
    assert "backend gloo, 2 ranks on 2 nodes (launcher env)," in text.splitlines()[0]
    ranks = [line for line in text.splitlines() if line.startswith("#  Rank")]
    assert [line.split()[2] for line in ranks] == ["0", "1"]
    assert [line.split()[-2] for line in ranks] == ["0", "0"]  # LOCAL_RANK of each node
    assert [int(line.split()[0]) for line in text.splitlines() if not line.startswith("#")
            ] == [2**k for k in range(18, 23)]
    assert read_slowdowns("comm.txt")["launch_overhead_s"] > 0
    _ok(runner.invoke(app, ["fit-comm", "comm.txt", "--out", "fitted.json"]))
    assert Cluster.model_validate_json(Path("fitted.json").read_text()).world_size == 2
    assert sorted(p.name for p in workdir.iterdir() if not p.name.startswith("__")) == [
        "benchmodels.py", "comm.txt", "fitted.json"]


HOSTILE_ENV = {
    "world-not-a-number": ({"WORLD_SIZE": "abc"}, [], "error: WORLD_SIZE: "),
    "world-of-one": ({"WORLD_SIZE": "1"}, [], "error: WORLD_SIZE: "),
    "rank-not-below-world": ({"RANK": "2"}, [], "error: RANK: "),
    "rank-negative": ({"RANK": "-1"}, [], "error: RANK: "),
    "local-rank-missing": ({"LOCAL_RANK": None}, [], "error: LOCAL_RANK: not set"),
    "addr-missing": ({"MASTER_ADDR": None}, [], "error: MASTER_ADDR: not set"),
    "addr-blank": ({"MASTER_ADDR": " "}, [], "error: MASTER_ADDR: "),
    "port-out-of-range": ({"MASTER_PORT": "70000"}, [], "error: MASTER_PORT: "),
    "procs-not-world": ({}, ["--procs", "4"], "error: --procs: the launcher started"),
    "launcher-without-env": ({name: None for name in ENV_VARS}, ["--launcher", "env"],
                             "error: WORLD_SIZE: not set"),
}


#: The command lines the launcher's variables are refused for (each with its --out).
LAUNCHED = {"bench-ddp": [*DDP_TINY, "-p", "ddp", "--out", "runs.csv"],
            "bench-comm": ["bench-comm", "--sizes", "4K:8K", "--out", "comm.txt"]}


@pytest.mark.parametrize("command", sorted(LAUNCHED))
@pytest.mark.parametrize("case_id", sorted(HOSTILE_ENV))
def test_hostile_launcher_env(case_id: str, command: str, workdir: Path,
                              monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    changes, extra, needle = HOSTILE_ENV[case_id]
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29500"}
    for name, value in {**env, **changes}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    line = refused([*LAUNCHED[command], *extra], needle, workdir, capsys)
    assert line.startswith(needle)


def test_module_entry_refuses_a_bad_launcher_variable(workdir: Path) -> None:
    """``python -m schedopt`` (what ``torchrun -m schedopt`` runs) ends in one line, exit 2."""
    env = {**os.environ, "WORLD_SIZE": "abc", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "schedopt", *DDP_TINY, "-p", "ddp", "--out",
                           "runs.csv"], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "error: WORLD_SIZE: must be an integer from 2 to 1048576 (got 'abc')\n"
    assert not list(workdir.glob("*.csv")) and not list(workdir.glob(".runs.csv*"))
