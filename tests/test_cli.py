"""The command line: outputs that users and scripts rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli import app

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


@pytest.mark.parametrize("kind", ["trace", "cluster", "cluster-family", "plan"])
def test_schema_describes_each_kind(kind: str) -> None:
    result = runner.invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    required = {"trace": "layers", "cluster": "nodes", "cluster-family": "base",
                "plan": "buckets"}[kind]
    assert required in schema["properties"] and required in schema["required"]


def test_trace_schema_fields() -> None:
    schema = json.loads(runner.invoke(app, ["schema", "trace"]).output)
    assert "layers" in schema["properties"] and "layers" in schema["required"]


def test_python_dash_m() -> None:
    proc = subprocess.run([sys.executable, "-m", "schedopt", "simulate", T, C, "-p", "cntk",
                           "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["iteration_time_s"] == pytest.approx(0.026004)
