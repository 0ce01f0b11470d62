"""``schedopt optimize``: the table, the JSON fields scripts rely on, the plan file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from schedopt.cli.app import app

DATA = Path(__file__).parent / "data"
T, C = str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json")
runner = CliRunner()


def test_optimize_prints_every_baseline_and_the_status() -> None:
    result = runner.invoke(app, ["optimize", T, C])
    assert result.exit_code == 0, result.output
    for word in ("optimized", "caffe-mpi", "ddp", "expressible", "status OPTIMAL", "method dp",
                 "bound", "gap"):
        assert word in result.output, word


def test_optimize_json_fields() -> None:
    result = runner.invoke(app, ["optimize", T, C, "--next-forward", "per-layer", "--reorder",
                                 "--partition", "1000000", "--time-limit", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    for key in ("status", "iteration_time_s", "objective_s", "bound_s", "gap", "solve_time_s",
                "method", "hint_policy", "baselines", "plan"):
        assert key in out, key
    assert out["plan"]["buckets"]
    assert out["plan"]["next_forward"] == "per-layer"
    assert out["bound_s"] <= out["objective_s"] * (1 + 1e-12)
    assert {b["policy"] for b in out["baselines"]} >= {"caffe-mpi", "ddp", "bytescheduler"}


def test_optimize_out_is_resimulated_by_simulate(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    result = runner.invoke(app, ["optimize", T, C, "--next-forward", "per-layer", "--out",
                                 str(plan), "--json"])
    assert result.exit_code == 0, result.output
    solved = json.loads(result.output)
    stored = json.loads(plan.read_text())
    assert stored["plan"]["trace_hash"] and stored["plan"]["cluster_hash"]
    sim = runner.invoke(app, ["simulate", T, C, "--plan", str(plan), "--json"])
    assert sim.exit_code == 0, sim.output
    assert json.loads(sim.output)["iteration_time_s"] == solved["iteration_time_s"]


def test_optimize_bad_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "never.json"
    result = runner.invoke(app, ["optimize", T, C, "--next-forward", "sideways", "--out",
                                 str(out)])
    assert result.exit_code == 2
    assert "--next-forward" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()
    result = runner.invoke(app, ["optimize", T, C, "--time-limit", "0"])
    assert result.exit_code == 2
    assert "--time-limit" in result.output
