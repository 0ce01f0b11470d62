"""The figure pipeline (benchmarks/figures.py) on small instances: valid PNGs, true numbers."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.files import load_trace
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
T, C = str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json")
runner = CliRunner()


def _load_figures() -> ModuleType:
    return load_script("benchmarks/figures.py", "schedopt_figures")


figures = _load_figures()


def cli_json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def assert_png(path: Path) -> tuple[int, int]:
    """The file is a PNG of a sensible size; returns (width, height) from its IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert 200 <= width <= 2000 and 200 <= height <= 1200
    assert 1_000 < len(data) < 150 * 1024
    assert data.endswith(b"IEND\xaeB`\x82")
    return width, height


def fake_optimal(trace: str, cluster: str, plan_out: Path, time_limit_s: float) -> dict:
    """Stand-in for ``schedopt optimize``: saves mgwfbp's plan where the optimized one would go."""
    result = figures.run_json(["simulate", trace, cluster, "-p", "mgwfbp"])
    plan_out.write_text(json.dumps(result["plan"]))
    return {"status": "FAKE", "iteration_time_s": result["iteration_time_s"]}


def test_breakdown_figure_plots_what_compare_reports(tmp_path: Path) -> None:
    fig = figures.breakdown_figure(tmp_path, "b.png", T, C)
    assert fig.file == tmp_path / "b.png"
    assert_png(fig.file)
    rows = cli_json("compare", T, C)
    assert fig.data["rows"] == rows
    bars = fig.data["bars"]
    by = {r["policy"]: r for r in rows}
    assert [p for p, _ in bars] == sorted(by, key=lambda p: by[p]["iteration_time_s"])
    for policy, parts in bars:
        assert sum(parts.values()) == pytest.approx(by[policy]["iteration_time_s"])
    best = bars[0][0]
    assert fig.key.startswith(f"best {best} {by[best]['iteration_time_s'] * 1e3:,.1f} ms")
    rel = "tests/data"  # paths inside the repository are shown relative to its root
    assert fig.commands == [f"schedopt compare {rel}/tiny_trace.json {rel}/fitted_cluster.json "
                            f"--plot {tmp_path / 'b.png'}"]


def test_scaling_figure_points_equal_compare_per_size(tmp_path: Path) -> None:
    policies = ("caffe-mpi", "ddp", "sync-easgd")
    fig = figures.scaling_figure(tmp_path, "s.png", "googlenet-k80-10gbe-8n", "10gbe-k80-family",
                                 nodes=(1, 8), policies=policies)
    assert_png(fig.file)
    series = fig.data["series"]
    assert list(series) == list(policies)
    for n in (1, 8):
        rows = cli_json("compare", "googlenet-k80-10gbe-8n", "10gbe-k80-family", "--nodes", str(n),
                        *[a for p in policies for a in ("-p", p)])
        for r in rows:
            assert dict(series[r["policy"]])[n] == pytest.approx(r["throughput_samples_s"])
    assert fig.key.startswith("8 GPUs: ")


def test_optimal_series_plumbing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an optimizer, its plans are re-simulated and drawn as the ``optimal`` series."""
    monkeypatch.setattr(figures, "optimal_plan", fake_optimal)
    fig = figures.scaling_figure(tmp_path, "s.png", T, C, nodes=(1, 4),
                                 policies=("mgwfbp", "cntk"), optimal=True)
    assert_png(fig.file)
    assert fig.data["series"]["optimal"] == fig.data["series"]["mgwfbp"]
    assert any(c.startswith("schedopt optimize ") for c in fig.commands)

    cross = figures.crossover_figure(tmp_path, "x.png", T, C, ratios=(0.25, 4.0), optimal=True)
    assert_png(cross.file)
    series = cross.data["series"]
    assert set(series) == {*figures.SWEEP_POLICIES, "optimal"}
    assert series["optimal"] == pytest.approx(series["mgwfbp"])

    ddp, best = figures.gantt_figures(tmp_path, T, C, optimal=True)
    for f in (ddp, best):
        assert_png(f.file)
    assert best.data["result"]["policy"] == "mgwfbp"
    assert ddp.data["result"]["iteration_time_s"] == pytest.approx(
        cli_json("simulate", T, C, "-p", "ddp")["iteration_time_s"])


def test_crossover_ratios_and_scales(tmp_path: Path) -> None:
    fig = figures.crossover_figure(tmp_path, "x.png", T, C, ratios=(0.5, 2.0))
    assert_png(fig.file)
    # fitted cluster: all 12,004,000 bytes in one bucket take 1 ms + 12.004 ms; compute 12 ms
    assert fig.data["comm_s"] == pytest.approx(0.013004)
    assert fig.data["scales"] == pytest.approx([0.5 * 0.013004 / 0.012, 2 * 0.013004 / 0.012])
    for i, c in enumerate(fig.data["scales"]):
        # sync-easgd: compute plus one all-reduce of every byte (docs/model.md, closed forms)
        assert fig.data["series"]["sync-easgd"][i] == pytest.approx(0.012 * c + 0.013004)


def test_crossing_is_log_interpolated() -> None:
    assert figures._crossing([1, 4], [2, 1], [1, 2]) == pytest.approx(2.0)
    assert figures._crossing([1, 2], [1, 1], [2, 2]) is None


def test_main_lists_and_rejects_unknown_names(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    assert figures.main(["--list", "--no-optimal"]) == 0
    names = capsys.readouterr().out.split()
    assert "crossover-resnet50" in names and "gantt" in names
    assert figures.main(["--out", str(tmp_path), "--only", "nope", "--no-optimal"]) == 2
    assert "unknown figure 'nope'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_optimizer_detection_matches_the_package() -> None:
    import typer

    import schedopt.optimize

    assert figures.optimizer_available() == hasattr(schedopt.optimize, "solve")
    assert figures.optimize_command_available() == (
        "optimize" in typer.main.get_command(app).commands)


def test_real_optimizer_is_never_beaten_by_its_class(tmp_path: Path) -> None:
    """The optimal curve is at least as fast as every FIFO wait-for-all baseline it plots."""
    if not figures.optimizer_available():
        pytest.skip("schedopt.optimize.solve is not installed")
    cross = figures.crossover_figure(tmp_path, "x.png", T, C, ratios=(0.25, 4.0), optimal=True,
                                     time_limit_s=5)
    assert cross.notes == []
    series = cross.data["series"]
    for i in range(2):
        assert series["optimal"][i] <= min(series[p][i] for p in figures.SWEEP_POLICIES) + 1e-9


def test_a_failing_optimizer_only_drops_its_series(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: object) -> dict:
        raise figures.CommandFailed("`schedopt optimize ...` exited with 2: error: ...")

    monkeypatch.setattr(figures, "optimal_plan", failing)
    cross = figures.crossover_figure(tmp_path, "x.png", T, C, ratios=(0.5, 2.0), optimal=True)
    assert "optimal" not in cross.data["series"] and "optimize failed" in cross.notes[0]
    _, best = figures.gantt_figures(tmp_path, T, C, optimal=True)
    assert best.data["result"]["policy"] != "optimal" and len(best.notes) == 2
    for f in (cross, best):
        assert_png(f.file)


# ------------------------------------------------------------------- the pictures themselves
def _recorded(trace: Any, cluster: str, spec: str) -> Any:
    from schedopt.files import load_cluster
    from schedopt.policies import make_plan
    from schedopt.simulate.simulator import simulate

    cl = load_cluster(cluster)
    return simulate(trace, cl, make_plan(trace, cl, spec), record=True)


def _synthetic(layers: int) -> Any:
    from schedopt.model.trace import Trace

    return Trace.model_validate({
        "name": f"synthetic-{layers}", "batch_size": 8, "io_s": 1e-3, "h2d_s": 1e-4,
        "update_s": 1e-3,
        "layers": [{"name": f"l{i}", "forward_s": 1e-5, "backward_s": 2e-5,
                    "tensors": [{"name": f"l{i}.w", "bytes": 4 * (1000 + 37 * (i % 11))}]}
                   for i in range(layers)]})


def test_spans_are_bounded_and_cover_every_task() -> None:
    from schedopt.report.aggregate import row_spans

    sched = _recorded(_synthetic(3000), C, "caffe-mpi")
    for chunks in (False, True):
        spans = row_spans(sched, budget=50, chunks=chunks)
        per_group: dict[tuple[str, str], list[Any]] = {}
        for sp in spans:
            per_group.setdefault((sp.row, sp.kind), []).append(sp)
        tasks = sum(len(sched.resources[k]) for k, (s, e) in sched.tasks.items() if e > s)
        assert sum(sp.count for sp in spans) == tasks
        for (row, kind), group in per_group.items():
            assert len(group) <= 50, (row, kind, chunks)
            for key, (s, e) in sched.tasks.items():  # each task lies inside a span of its row
                if key[0] == kind and row in sched.resources[key] and e > s:
                    assert any(sp.start <= s and e <= sp.end for sp in group)
    small = row_spans(_recorded(load_trace(T), C, "ddp"),
                      budget=50)
    assert all(sp.count == 1 for sp in small)  # within budget: never merged


def test_chrome_trace_stays_bounded_on_many_tensors() -> None:
    from schedopt.report.chrome import chrome_trace_events

    sched = _recorded(_synthetic(3000), C, "caffe-mpi")
    doc = chrome_trace_events(sched, budget=100)
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    lanes = {e["tid"] for e in events}
    assert len(events) <= 100 * 6 * len(lanes)
    merged = [e for e in events if e["args"].get("tasks", 1) > 1]
    assert merged and all(e["name"] == f"{e['cat']} x{e['args']['tasks']}" for e in merged)
    full = chrome_trace_events(sched, budget=10**9)
    assert len([e for e in full["traceEvents"] if e["ph"] == "X"]) == sum(
        len(sched.resources[k]) for k, (s, e) in sched.tasks.items() if e > s)


def test_gantt_window_is_steady_state() -> None:
    from schedopt.report.charts import steady_window

    sched = _recorded(load_trace("resnet50-v100-b64"),
                      "k80-4x4-10gbe", "ddp")
    start, end, keep = steady_window(sched, 2)
    assert end - start == pytest.approx(2 * sched.iteration_time_s)
    assert start > sched.first_iteration_s * 0.5  # the cold start is left out
    assert 0 not in keep


def test_scaling_chart_keeps_the_fastest_and_the_optimum() -> None:
    from schedopt.report.charts import pick_curves

    series = {"a": [(1, 10.0), (4, 30.0)], "b": [(1, 10.0), (4, 38.0)],
              "c": [(1, 10.0), (4, 20.0)], "optimal": [(1, 10.0), (4, 39.0)]}
    assert pick_curves(series, 3) == ["a", "b", "optimal"]
    assert pick_curves(series, 1) == ["optimal"]


def test_scaling_chart_draws_ideal_scaling_on_log_axes(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    from schedopt.report.charts import scaling_chart

    drawn: dict[str, Any] = {}
    real_close = plt.close

    def keep(fig: Any) -> None:
        ax = fig.axes[0]
        drawn.update(xscale=ax.get_xscale(), yscale=ax.get_yscale(),
                     lines={ln.get_label(): ln.get_xydata().tolist() for ln in ax.lines})
        real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    scaling_chart({"p": [(4, 100.0), (8, 150.0), (32, 400.0)]}, tmp_path / "s.png")
    assert (drawn["xscale"], drawn["yscale"]) == ("log", "log")
    ideal = drawn["lines"]["ideal (linear from the smallest size)"]
    assert ideal == [[4, 100.0], [8, 200.0], [32, 800.0]]


def test_breakdown_chart_leaves_headroom(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    from schedopt.report.charts import breakdown_chart

    top: list[float] = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (top.append(fig.axes[0].get_ylim()[1]),
                                                   real_close(fig)))
    parts = {"forward_s": 0.01, "backward_s": 0.02, "update_s": 0.0, "exposed_comm_s": 0.01,
             "io_stall_s": 0.0}
    breakdown_chart([("x", parts)], tmp_path / "b.png")
    assert top[0] >= 40.0 * 1.1
