"""What commands print: full-width tables off a terminal, --csv, units, charts, progress,
warnings, option choices and the error naming a missing extra."""

from __future__ import annotations

import csv
import io
import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import typer
from rich.table import Table
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.cli.output import WideConsole, csv_text, flatten, progress

DATA = Path(__file__).parent / "data"
T, C = str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json")
runner = CliRunner()


def _csv(*args: str) -> list[dict[str, str]]:
    result = runner.invoke(app, [*args, "--csv"])
    assert result.exit_code == 0, result.output
    return list(csv.DictReader(io.StringIO(result.output)))


# ----------------------------------------------------------------------------- tables
def _wide_table() -> Table:
    table = Table(title="wide")
    for k in range(12):
        table.add_column(f"column number {k:02d}")
    table.add_row(*(f"cell value {k:02d}" for k in range(12)))
    return table


def test_a_table_off_a_terminal_keeps_every_column_on_one_line(monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    WideConsole(file=out).print(_wide_table())
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if "column number 00" in line)
    assert all(f"column number {k:02d}" in header for k in range(12))
    row = next(line for line in lines if "cell value 00" in line)
    assert "cell value 11" in row


def test_columns_and_an_explicit_width_are_still_honoured(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    out = io.StringIO()
    console = WideConsole(file=out)
    assert console.width == 60
    console.width = 100
    assert console.width == 100


def test_the_command_console_is_wide_when_piped() -> None:
    from schedopt.cli import common, sweep

    assert isinstance(common.console, WideConsole)
    assert isinstance(sweep.console, WideConsole)


# ----------------------------------------------------------------------------- csv
def test_flatten_nests_objects_and_leaves_out_plans_and_nested_lists() -> None:
    row = {"a": 1, "b": {"c": 2.5, "d": None}, "plan": {"x": 1}, "l": [1, 2],
           "curve": [[1, 2]]}
    assert flatten(row) == {"a": 1, "b.c": 2.5, "b.d": None, "l": "1;2"}
    text = csv_text([row, {"a": 3, "e": True}])
    assert text.splitlines() == ["a,b.c,b.d,l,e", "1,2.5,,1;2,", "3,,,,true"]


def test_simulate_csv_is_the_json_flattened() -> None:
    rows = _csv("simulate", T, C, "-p", "caffe-mpi")
    result = runner.invoke(app, ["simulate", T, C, "-p", "caffe-mpi", "--json"])
    data = json.loads(result.output)
    assert len(rows) == 1
    assert float(rows[0]["iteration_time_s"]) == pytest.approx(data["iteration_time_s"])
    assert float(rows[0]["breakdown.forward_s"]) == pytest.approx(
        data["breakdown"]["forward_s"])
    assert "plan" not in rows[0]


def test_compare_scale_tune_optimize_and_validate_print_csv() -> None:
    from schedopt.policies import POLICIES

    rows = _csv("compare", T, C)
    assert [r["label"] for r in rows] == list(POLICIES)
    assert all(float(r["scaling_efficiency"]) > 0 for r in rows)
    rows = _csv("scale", T, C, "--nodes", "1,2", "-p", "ddp")
    assert [(r["nodes"], r["label"]) for r in rows] == [("1", "ddp"), ("2", "ddp")]
    rows = _csv("tune", T, C, "-f", "ddp", "--time-limit", "1")
    assert rows[0]["framework"] == "ddp" and float(rows[0]["best_time_s"]) > 0
    rows = _csv("optimize", T, C, "--time-limit", "1")
    assert rows[0]["plan"] == "optimized" and float(rows[0]["vs_optimized"]) == 1.0
    assert len(rows) > 3 and all(float(r["vs_optimized"]) >= 1 - 1e-9 for r in rows)
    rows = _csv("validate", "toy-measurements.csv")
    assert len(rows) == 27 and {"measured_s", "predicted_s", "error"} <= set(rows[0])


def test_calibrate_prints_units_and_csv(tmp_path: Path) -> None:
    result = runner.invoke(app, ["calibrate", "toy-measurements.csv", "--out",
                                 str(tmp_path / "a"), "--fit",
                                 "inter_bandwidth,inter_latency,overlap_slowdown", "--starts", "1"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "inter_bandwidth" in x)
    assert "GB/s" in line and "1.25" in line  # the prior, 1.25e9 B/s
    assert "us" in next(x for x in result.output.splitlines() if "inter_latency" in x)
    assert "ratio" in next(x for x in result.output.splitlines() if "overlap_slowdown" in x)
    rows = _csv("calibrate", "toy-measurements.csv", "--out", str(tmp_path / "b"), "--fit",
                "inter_bandwidth", "--starts", "1")
    assert rows[0]["name"] == "inter_bandwidth" and rows[0]["unit"] == "B/s"
    assert float(rows[0]["prior"]) == pytest.approx(1.25e9)


def test_display_units() -> None:
    from schedopt.cli.calibrate import display_unit

    assert display_unit("intra_bandwidth") == ("GB/s", 1e-9)
    assert display_unit("inter_latency") == ("us", 1e6)
    assert display_unit("collective_overhead") == ("us", 1e6)
    assert display_unit("compute_scale[a.json]") == ("ratio", 1.0)


def test_json_and_csv_together_are_refused() -> None:
    result = runner.invoke(app, ["compare", T, C, "--json", "--csv"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --csv: give one of --json and --csv (got True)"


def test_info_list_and_fit_comm_print_csv() -> None:
    info = json.loads(runner.invoke(app, ["info", "k80-4x4-10gbe", "--json"]).output)
    (row,) = _csv("info", "k80-4x4-10gbe")
    assert row["name"] == "k80-4x4-10gbe" and int(row["world_size"]) == info["world_size"]
    assert float(row["alpha_s"]) == info["alpha_s"] and "stages" not in row
    listed = json.loads(runner.invoke(app, ["list", "--json"]).output)["instances"]
    rows = _csv("list")
    assert [r["name"] for r in rows] == [r["name"] for r in listed]
    assert {r["kind"] for r in rows} == {r["kind"] for r in listed}
    fit = json.loads(runner.invoke(app, ["fit-comm", "osu_allreduce8.log", "--json"]).output)
    rows = _csv("fit-comm", "osu_allreduce8.log")
    assert [int(r["segment.min_bytes"]) for r in rows] == [
        s["min_bytes"] for s in fit["segments"]]
    assert all(float(r["alpha_s"]) == fit["alpha_s"] for r in rows)
    for args in (["info", "k80-4x4-10gbe"], ["list"], ["fit-comm", "osu_allreduce8.log"]):
        result = runner.invoke(app, [*args, "--json", "--csv"])
        assert result.exit_code == 2 and result.output.startswith("error: --csv:")


# ----------------------------------------------------------------------------- charts
def test_equal_curves_are_one_line_named_by_all() -> None:
    from schedopt.report.charts import tied_curves

    series = {"a": [(1, 1.0), (2, 2.0)], "b": [(2, 2.0), (1, 1.0)], "c": [(1, 1.0), (2, 1.5)],
              "d": [(1, 1.0), (2, 2.0 * (1 + 1e-9))]}
    assert tied_curves(series) == [["a", "b", "d"], ["c"]]


def _capture_figures(monkeypatch, module) -> list:
    figures = []
    monkeypatch.setattr(module.plt, "close", figures.append)
    return figures


def test_scale_chart_names_ties_and_always_draws_ddp(monkeypatch, tmp_path: Path) -> None:
    from schedopt.report import charts

    figures = _capture_figures(monkeypatch, charts)
    series = {f"p{k}": [(1, 100.0), (8, 700.0 + k)] for k in range(6)}
    series["mxnet"] = series["tensorflow"] = [(1, 100.0), (8, 790.0)]
    series["ddp"] = [(1, 100.0), (8, 300.0)]  # the slowest: only kept because it is DDP
    charts.scaling_chart(series, tmp_path / "s.png", limit=3)
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    assert "mxnet = tensorflow (equal)" in labels
    assert "ddp" in labels
    lines = [ln for ln in figures[0].axes[0].get_lines() if not ln.get_label().startswith("ideal")]
    assert len({(ln.get_marker(), ln.get_linestyle()) for ln in lines}) == len(lines)


def test_scale_plot_adds_ddp_when_not_asked(monkeypatch, tmp_path: Path) -> None:
    from schedopt.report import charts

    figures = _capture_figures(monkeypatch, charts)
    result = runner.invoke(app, ["scale", T, C, "--nodes", "1,2", "-p", "caffe-mpi",
                                 "--plot", str(tmp_path / "s.png")])
    assert result.exit_code == 0, result.output
    labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
    names = [n for label in labels for n in label.removesuffix(" (equal)").split(" = ")]
    assert "ddp" in names and "caffe-mpi" in names, labels
    assert "ddp" not in result.output.split("wrote")[0]  # the table keeps what was asked


def test_gantt_title_names_the_knobs(monkeypatch, tmp_path: Path) -> None:
    from schedopt.report import charts

    figures = _capture_figures(monkeypatch, charts)
    result = runner.invoke(app, ["simulate", T, C, "-p", "ddp:bucket_cap_mb=50",
                                 "--gantt", str(tmp_path / "g.png")])
    assert result.exit_code == 0, result.output
    assert "ddp bucket_cap_mb=50" in figures[0].axes[0].get_title()


def test_validate_plot_is_in_ms_with_a_colour_per_configuration(monkeypatch,
                                                                 tmp_path: Path) -> None:
    from schedopt.report import validation_chart as vc

    figures = _capture_figures(monkeypatch, vc)
    result = runner.invoke(app, ["validate", "toy-measurements.csv", "--plot",
                                 str(tmp_path / "v.png")])
    assert result.exit_code == 0, result.output
    ax = figures[0].axes[0]
    assert "(ms)" in ax.get_xlabel() and "(ms)" in ax.get_ylabel()
    offsets = [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
    assert min(float(o[:, 0].min()) for o in offsets[1:]) > 1.0  # ms, not s
    labels = [t.get_text() for t in ax.get_legend().get_texts()][2:]
    assert len(labels) == len(set(labels)) and any("ddp:bucket_cap_mb" in la for la in labels)
    colours = {tuple(c.get_facecolor()[0]) for c in ax.collections[1:]}
    assert len(colours) == len(labels)


# ----------------------------------------------------------------------------- progress
def test_progress_logs_its_steps_under_verbose(caplog) -> None:
    caplog.set_level(logging.INFO, logger="schedopt")
    with progress("work") as step:
        step("half way")
    text = caplog.text
    assert "work ..." in text and "half way" in text and "work: done in" in text


def test_verbose_compare_logs_each_policy() -> None:
    result = runner.invoke(app, ["-v", "compare", T, C, "-p", "ddp,horovod"])
    assert result.exit_code == 0
    # the log goes to stderr, which CliRunner mixes in
    assert "ddp:" in result.output and "ms per iteration" in result.output


def test_profile_warnings_before_and_after() -> None:
    from schedopt.measure.profile import ProfileWarning, spread_warning, start_warnings

    notes = start_warnings(0, load=(9.0, 0.0, 0.0), cpus=4)
    assert len(notes) == 2 and "loaded" in notes[0] and "--warmup 0" in notes[1]
    assert start_warnings(2, load=(1.0, 0.0, 0.0), cpus=4) == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert spread_warning([1.0, 1.2, 1.1]) == pytest.approx(1.2)
        assert not caught
        assert spread_warning([1.0, 2.0]) == pytest.approx(2.0)
    assert len(caught) == 1 and issubclass(caught[0].category, ProfileWarning)


def test_profile_prints_warning_lines(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    mod = tmp_path / "tinymodel.py"
    mod.write_text("import torch\n\ndef make():\n    return torch.nn.Linear(4, 2)\n")
    code = ("import os, sys; os.getloadavg = lambda: (1e6, 0.0, 0.0);"
            f" sys.path.insert(0, {str(tmp_path)!r});"
            " from schedopt.cli.app import run; sys.exit(run(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "profile", "tinymodel:make",
                           "--input-shape", "2,4", "--name", "t", "--out",
                           str(tmp_path / "t.json"), "--warmup", "0", "--repeats", "2"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert any(x.startswith("warning: the machine is loaded") for x in lines), proc.stderr
    assert any(x.startswith("warning: --warmup 0") for x in lines), proc.stderr


# ----------------------------------------------------------------------------- choices
def _option(command: str, name: str):
    cmd = typer.main.get_command(app)
    sub = cmd.commands[command]  # type: ignore[attr-defined]
    return sub, next(p for p in sub.params if name in p.opts)


@pytest.mark.parametrize(("command", "option", "prefix", "expected"), [
    ("optimize", "--target", "b", ["bytescheduler"]),
    ("optimize", "--next-forward", "", ["wait-for-all", "per-layer"]),
    ("optimize", "--sharding", "g", ["grad-op"]),
    ("compare", "--sharding", "", ["full", "grad-op"]),
    ("tune", "--framework", "m", ["megatron"]),
    ("emit", "--target", "d", ["ddp", "deepspeed"]),
    ("bench-comm", "--backend", "n", ["nccl"]),
    ("bench-comm", "--pattern", "", ["isolated", "queued"]),
    ("bench-ddp", "--backend", "", ["gloo", "nccl"]),
    ("bench-ddp", "--launcher", "", ["auto", "local", "env"]),
    ("profile", "--backend", "g", ["gloo"]),
])
def test_choices_are_completed_and_listed(command: str, option: str, prefix: str,
                                          expected: list[str]) -> None:
    import click

    sub, param = _option(command, option)
    ctx = click.Context(sub)
    assert [c.value for c in param.shell_complete(ctx, prefix)] == expected
    assert all(e in (param.metavar or "") for e in expected)


def test_choice_lists_match_the_registries() -> None:
    from schedopt.cli.emit import EMIT_TARGETS
    from schedopt.cli.optimize import FRAMEWORK_CHOICES, TARGET_CHOICES
    from schedopt.emit.registry import EMITTERS
    from schedopt.study.targets import TARGETS
    from schedopt.study.tune import FRAMEWORKS

    assert set(EMIT_TARGETS) == set(EMITTERS)
    assert TARGETS == TARGET_CHOICES
    assert (*FRAMEWORKS, "all") == FRAMEWORK_CHOICES


def test_a_wrong_choice_is_still_one_error_line() -> None:
    result = runner.invoke(app, ["optimize", T, C, "--next-forward", "sometimes"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --next-forward: must be wait-for-all or per-layer (got 'sometimes')"]


# ----------------------------------------------------------------------------- no torch
@pytest.mark.parametrize("argv", [
    ["profile", "m:f", "--input-shape", "1,2", "--name", "x", "--out", "OUT"],
    ["bench-comm", "--out", "OUT"],
    ["bench-ddp", "m:f", "--input-shape", "1,2", "--trace", "resnet50-v100-b64", "--cluster",
     "dgx-a100", "--out", "OUT"],
])
def test_without_torch_the_extra_is_named(argv: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out.file"
    argv = [str(out) if a == "OUT" else a for a in argv]
    code = ("import sys; sys.modules['torch'] = None; from schedopt.cli.app import run;"
            " sys.exit(run(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {argv[0]} needs PyTorch: pip install 'schedopt[torch]'\n"
    assert proc.stdout == "" and not out.exists()


def test_bench_ddp_takes_shipped_names() -> None:
    from schedopt.cli.measure import _ref, instance_path

    path = instance_path("resnet50-v100-b64", "trace")
    assert path.is_file() and path.name == "resnet50-v100-b64.json"
    assert _ref("resnet50-v100-b64", path, Path("x/out.csv")) == "resnet50-v100-b64"
    local = DATA / "tiny_trace.json"
    assert _ref(str(local), local, DATA / "out.csv") == "tiny_trace.json"
