"""The command line: outputs that users and scripts rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app

DATA = Path(__file__).parent / "data"
T, C = str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json")
runner = CliRunner()


def run_json(*args: str) -> object:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_simulate_json_fields() -> None:
    out = run_json("simulate", T, C, "--policy", "caffe-mpi")
    assert isinstance(out, dict)
    assert out["policy"] == "caffe-mpi"
    # hand-computed in test_closed_forms: 4 ms forward + 16.004 ms to the end of the last comm
    assert out["iteration_time_s"] == pytest.approx(0.020004)
    assert out["throughput_samples_s"] == pytest.approx(4 * 32 / 0.020004)
    assert sum(out["breakdown"].values()) == pytest.approx(out["iteration_time_s"])
    assert out["plan"]["buckets"] == [["c.w"], ["a.b", "a.w"]]


def test_compare_lists_every_policy_with_efficiency() -> None:
    from schedopt.policies import POLICIES

    rows = run_json("compare", T, C)
    assert isinstance(rows, list)
    assert [r["policy"] for r in rows] == list(POLICIES)
    by = {r["policy"]: r for r in rows}
    # one GPU: 8 ms compute + 4 ms forward... throughput 32 / 12 ms; cntk on 4 GPUs: 26.004 ms
    assert by["cntk"]["scaling_efficiency"] == pytest.approx(0.012 / 0.026004)
    for r in rows:
        assert 0 < r["scaling_efficiency"] <= 1 + 1e-12


def test_compare_plot_and_table(tmp_path: Path) -> None:
    png = tmp_path / "b.png"
    result = runner.invoke(app, ["compare", T, C, "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "caffe-mpi" in result.output and png.stat().st_size > 1000


def test_simulate_visuals(tmp_path: Path) -> None:
    gantt, chrome = tmp_path / "g.png", tmp_path / "t.json"
    result = runner.invoke(app, ["simulate", T, C, "-p", "mxnet", "--gantt", str(gantt),
                                 "--chrome-trace", str(chrome)])
    assert result.exit_code == 0, result.output
    events = json.loads(chrome.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"compute", "ps-up", "ps-down"} <= names
    assert gantt.read_bytes()[:4] == b"\x89PNG"


def test_scale_efficiency_falls_with_size() -> None:
    rows = run_json("scale", T, C, "--nodes", "1,2,4", "-p", "cntk")
    assert isinstance(rows, list)
    eff = [r["scaling_efficiency"] for r in rows]
    assert [r["gpus"] for r in rows] == [1, 2, 4]
    assert eff[0] == pytest.approx(1.0)
    assert eff[0] >= eff[1] >= eff[2]


def test_info_trace_and_cluster() -> None:
    t = run_json("info", T)
    assert isinstance(t, dict)
    assert (t["kind"], t["tensors"], t["gradient_bytes"]) == ("trace", 3, 12_004_000)
    c = run_json("info", C)
    assert isinstance(c, dict)
    assert (c["kind"], c["world_size"], c["alpha_s"]) == ("cluster", 4, 1e-3)
    host = run_json("info", "dgx1-v100")
    assert isinstance(host, dict)
    assert (host["launch_overhead_s"], host["hook_overhead_s"], host["bucket_compute_s"]) == (
        1e-5, 0.0, 0.0)


@pytest.mark.parametrize("kind", ["trace", "cluster", "cluster-family", "plan", "gpu-profile"])
def test_schema_describes_each_kind(kind: str) -> None:
    result = runner.invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    required = {"trace": "layers", "cluster": "nodes", "cluster-family": "base",
                "plan": "buckets", "gpu-profile": "peak_flops"}[kind]
    assert required in schema["properties"] and required in schema["required"]


def test_trace_schema_fields() -> None:
    schema = json.loads(runner.invoke(app, ["schema", "trace"]).output)
    assert "layers" in schema["properties"] and "layers" in schema["required"]


def test_python_dash_m() -> None:
    proc = subprocess.run([sys.executable, "-m", "schedopt", "simulate", T, C, "-p", "cntk",
                           "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["iteration_time_s"] == pytest.approx(0.026004)


# ---------------------------------------------------------------- conventions of a first hour
ENV = {"OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_version() -> None:
    from schedopt import __version__

    assert invoke("--version").strip() == f"schedopt {__version__}"


def test_help_shows_no_bool_metavar_and_says_repeat() -> None:
    for command in ("simulate", "compare", "scale", "optimize", "list", "tune"):
        out = runner.invoke(app, [command, "--help"], terminal_width=100).output
        assert "<bool>" not in out and "list[str]" not in out, command
    assert "repeat -p" in runner.invoke(app, ["compare", "--help"], terminal_width=100).output


def test_list_is_compact_and_long_shows_sources() -> None:
    short = runner.invoke(app, ["list"], terminal_width=100).output
    long = runner.invoke(app, ["list", "--long"], terminal_width=100).output
    names = len(json.loads(invoke("list", "--json"))["instances"])
    # one line per instance plus the frame, the policies and the hint
    assert len(short.splitlines()) <= names + 10
    assert "ESTIMATE" not in short and "ESTIMATE" in long
    assert "--long" in short


@pytest.mark.parametrize(("given", "labels"), [
    (["-p", "ddp,mgwfbp"], ["ddp", "mgwfbp"]),
    (["-p", "ddp", "-p", "mgwfbp"], ["ddp", "mgwfbp"]),
    (["-p", "ddp:bucket_cap_mb=5,first_bucket_mb=1,mgwfbp"],
     ["ddp:bucket_cap_mb=5,first_bucket_mb=1", "mgwfbp"]),
    (["-p", "horovod:groups=[[\"a.w\",\"a.b\"],[\"c.w\"]],cntk"],
     ["horovod:groups=[[\"a.w\",\"a.b\"],[\"c.w\"]]", "cntk"]),
])
def test_policy_lists(given: list[str], labels: list[str]) -> None:
    rows = run_json("compare", T, C, *given)
    assert isinstance(rows, list)
    assert [r["label"] for r in rows] == labels


def test_compare_table_explains_itself_and_points_further() -> None:
    out = " ".join(runner.invoke(app, ["compare", T, C]).output.split())  # unwrapped
    assert "scaling eff." in out and "exposed ms" in out
    assert "throughput / (GPUs x the same policy's throughput on one GPU)" in out
    assert f"schedopt optimize {T} {C}" in out and f"schedopt tune {T} {C}" in out


def test_info_cluster_has_units_not_reprs() -> None:
    out = runner.invoke(app, ["info", "k80-4x4-10gbe"], terminal_width=100).output
    assert "('" not in out and "e-09" not in out.split("beta")[0]
    assert "240.000 us" in out  # alpha of the hierarchical all-reduce
    assert "allreduce on pcie + inter" in out
    out = runner.invoke(app, ["info", T], terminal_width=100).output
    assert "11.4 MiB (12,004,000 B)" in out and "8.000 ms" in out  # gradients, backward sum


def test_visual_outputs_say_wrote(tmp_path: Path) -> None:
    gantt, chrome, plot = tmp_path / "g.png", tmp_path / "t.json", tmp_path / "b.png"
    out = invoke("simulate", T, C, "-p", "ddp", "--gantt", str(gantt), "--chrome-trace",
                 str(chrome))
    assert f"wrote {gantt}" in out and f"wrote {chrome}" in out
    assert f"wrote {plot}" in invoke("compare", T, C, "--plot", str(plot))
    # under --json stdout is the JSON document only
    json.loads(invoke("simulate", T, C, "-p", "ddp", "--gantt", str(gantt), "--json"))


def test_emit_cuts_a_long_spec() -> None:
    out = runner.invoke(app, ["emit", "gpt2-124m-v100-fp16", "dgx-a100-4n", "-t", "horovod",
                              "-p", "caffe-mpi"]).output
    first = out.splitlines()[0]
    assert len(first) < 220 and "characters; the full spec is in the files" in first


def test_fit_comm_reads_the_shipped_sample(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = run_json("fit-comm", "osu_allreduce8.log")
    assert isinstance(data, dict)
    assert (data["format"], data["ranks"], data["points"]) == ("osu", 8, 266)
    assert data["file"] == "osu_allreduce8.log"


def test_verbose_logs_progress_on_stderr() -> None:
    proc = subprocess.run([sys.executable, "-m", "schedopt", "-v", "compare", T, C, "-p", "ddp",
                           "--json"], capture_output=True, text=True, timeout=60, check=False,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "trace tiny: 3 layers, 3 tensors" in proc.stderr and "ddp: " in proc.stderr
    json.loads(proc.stdout)
    quiet = subprocess.run([sys.executable, "-m", "schedopt", "compare", T, C, "-p", "ddp",
                            "--json"], capture_output=True, text=True, timeout=60, check=False,
                           env=ENV)
    assert quiet.stderr == ""


def test_optimize_names_faster_baselines_outside_its_class(tmp_path: Path) -> None:
    from schedopt.files import load_trace, write_json_atomic

    tr = load_trace("resnet50-v100-b64").scaled(compute=0.3)
    path = tmp_path / "r03.json"
    write_json_atomic(path, tr.model_dump(mode="json", exclude_none=True))
    out = runner.invoke(app, ["optimize", str(path), "k80-4x4-10gbe"], terminal_width=100).output
    notes = [line for line in out.splitlines() if line.startswith("note: bytescheduler")]
    assert len(notes) == 1 and "`--target bytescheduler`" in notes[0]
    assert "uses another collective (ps)" in out  # tensorflow: no option reaches it


def test_optimize_target_is_checked() -> None:
    result = runner.invoke(app, ["optimize", T, C, "--target", "pytorch"])
    assert result.exit_code == 2
    assert "target: unknown target (known: ddp, horovod, bytescheduler, any)" in result.output


def test_gap_is_never_shown_as_zero_unless_zero() -> None:
    from schedopt.report.tables import fmt_gap

    assert fmt_gap(0.0) == "0%"
    assert fmt_gap(2e-7) == "2.0e-05%"
    assert fmt_gap(0.0123) == "1.230%"


def test_solve_progress_shows_only_long_solves_on_a_terminal() -> None:
    from schedopt.report.tables import SolveProgress

    quiet = SolveProgress(enabled=False, after_s=0.0)
    quiet(5.0, 0.2, 0.1)
    assert quiet._live is None
    short = SolveProgress(enabled=True, after_s=2.0)
    short(1.5, 0.2, 0.1)
    assert short._live is None
    line = SolveProgress.line(12.34, 0.185642, 0.1856).plain
    assert line == "solving 12.3 s  best 185.642 ms  bound 185.600 ms  gap 0.023%"
    assert SolveProgress.line(0.5, None, None).plain == "solving 0.5 s"
