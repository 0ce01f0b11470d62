"""Calibration recovers known parameters; validation reports honest errors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.files import load_cluster
from schedopt.measure.calibrate import PARAMS, calibrate, parse_fit, validate, write_calibrations
from schedopt.measure.measurements import read_measurements
from schedopt.simulate.simulator import simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from toy_measurements import (
    PRIOR,
    TRUE,
    true_family,
    write_measurements,
)


def test_recovers_known_parameters_within_intervals(tmp_path: Path) -> None:
    rows = read_measurements(write_measurements(tmp_path, (1, 2, 4), noise=0.02))
    (cal,) = calibrate(rows, list(TRUE), where="m.csv")
    for p in cal.params:
        assert p.identified, p
        assert p.low is not None and p.high is not None
        assert p.low <= TRUE[p.name] <= p.high, p
        assert p.low <= p.value <= p.high
    assert cal.mean_abs_error < 0.02
    assert all(abs(r.error) < 0.04 for r in cal.rows)
    # the written family still works at any size, and records the fit
    (path,) = write_calibrations([cal], tmp_path / "out")
    assert path.name == "toy.json"
    fitted = load_cluster(path, nodes=8)
    assert fitted.world_size == 16
    doc = json.loads(path.read_text())
    assert "base" in doc and "calibrated by `schedopt calibrate` on m.csv" in doc["source"]
    assert doc["source"].startswith("a made-up prior")
    got = {p.name: p.value for p in cal.params}
    assert fitted.overlap_slowdown == pytest.approx(got["overlap_slowdown"])
    assert fitted.inter_link is not None
    assert fitted.inter_link.bandwidth_Bps == pytest.approx(got["inter_bandwidth"])


def test_noise_free_rows_are_fitted_exactly(tmp_path: Path) -> None:
    rows = read_measurements(write_measurements(tmp_path, (1, 2, 4), noise=0.0, traces=2))
    (cal,) = calibrate(rows, list(TRUE))
    for p in cal.params:
        assert p.value == pytest.approx(TRUE[p.name], rel=2e-3), p
    assert cal.mean_abs_error < 1e-4


def test_single_node_rows_leave_the_inter_link_unidentified(tmp_path: Path) -> None:
    rows = read_measurements(write_measurements(tmp_path, (1,), noise=0.01, traces=2))
    (cal,) = calibrate(rows)
    by = {p.name: p for p in cal.params}
    assert [p.name for p in cal.params] == parse_fit(None)
    assert "compute_scale" not in parse_fit(None)  # per trace: only when asked for
    for name in ("inter_bandwidth", "inter_latency"):
        assert not by[name].identified
        assert "no effect" in by[name].note
        assert by[name].value == by[name].prior
    assert by["overlap_slowdown"].identified
    base = cal.document["base"]
    assert base["inter_link"] == PRIOR["base"]["inter_link"] | {"name": "link"}


def test_leave_one_row_out_is_a_refit_without_the_row(tmp_path: Path) -> None:
    rows = read_measurements(write_measurements(tmp_path, (2, 4), noise=0.02, traces=2))
    fit = ["inter_bandwidth", "overlap_slowdown"]
    (cal,) = calibrate(rows, fit)
    assert cal.loo_method == "exact refits"
    (without,) = calibrate(rows[1:], fit)
    folder = tmp_path / "loo"
    (path,) = write_calibrations([without], folder)
    m = rows[0]
    cl = load_cluster(path, m.row.nodes)
    pred = simulate(m.trace_obj, cl, m.plan_for(cl)).iteration_time_s
    assert cal.rows[0].loo_predicted_s == pytest.approx(pred, rel=1e-3)
    # the left-out error is never better than the residual on average
    loo = cal.loo_mean_abs_error
    assert loo is not None and loo >= cal.mean_abs_error - 1e-12


def test_validate_reports_errors_per_row_and_policy(tmp_path: Path) -> None:
    path = write_measurements(tmp_path, (1, 2), noise=0.0, traces=1)
    text = path.read_text().splitlines()
    # the prior cluster predicts these rows: errors are the prior's
    rep = validate(read_measurements(path)).to_dict()
    assert len(rep["rows"]) == len(text) - 1
    for r in rep["rows"]:
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
    errs = [abs(r["error"]) for r in rep["rows"]]
    assert rep["mean_abs_error"] == pytest.approx(np.mean(errs))
    assert rep["max_abs_error"] == pytest.approx(max(errs))
    assert set(rep["policies"]) == {"cntk", "caffe-mpi", "ddp"}
    # with the true parameters the errors vanish
    (tmp_path / "toy.json").write_text(true_family().model_dump_json())
    rep = validate(read_measurements(path)).to_dict()
    assert rep["max_abs_error"] < 1e-9


def test_cli_calibrate_and_validate(tmp_path: Path) -> None:
    path = write_measurements(tmp_path, (1, 2), noise=0.01, traces=1)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["calibrate", str(path), "--out", str(out), "--fit",
                                   "inter_bandwidth,overlap_slowdown", "--json", "--starts", "2"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (c,) = doc["clusters"]
    assert c["out"] == str(out / "toy.json") and (out / "toy.json").exists()
    assert [p["name"] for p in c["params"]] == ["inter_bandwidth", "overlap_slowdown"]
    table = CliRunner().invoke(app, ["calibrate", str(path), "--out", str(out), "--fit",
                                     "overlap_slowdown", "--starts", "1"])
    assert table.exit_code == 0 and "leave-one-row-out" in table.output
    png = tmp_path / "v.png"
    res = CliRunner().invoke(app, ["validate", str(path), "--json", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert png.stat().st_size > 1000
    rep = json.loads(res.stdout)
    assert {"rows", "mean_abs_error", "max_abs_error"} <= set(rep)
    assert {"predicted_s", "measured_s", "error"} <= set(rep["rows"][0])


@pytest.mark.parametrize(("args", "needle"), [
    (["--fit", "bandwidth"], "--fit"),          # unknown parameter
    (["--starts", "0"], "starts"),              # no start
])
def test_cli_calibrate_bad_options(tmp_path: Path, args: list[str], needle: str) -> None:
    path = write_measurements(tmp_path, (1,), noise=0.0, traces=1)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["calibrate", str(path), "--out", str(out), *args])
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_parse_fit() -> None:
    assert parse_fit(None) == [n for n in PARAMS if n not in (
        "compute_scale", "launch_overhead", "hook_overhead", "bucket_compute")]
    assert parse_fit("launch_overhead,hook_overhead") == ["launch_overhead", "hook_overhead"]
    assert parse_fit("compute_scale") == ["compute_scale"]
    assert parse_fit("overlap_slowdown, inter_latency") == ["overlap_slowdown", "inter_latency"]
    with pytest.raises(SchedoptError, match="unknown parameter"):
        parse_fit("speed")


def _scaled_rows(folder: Path) -> tuple[Path, dict[str, float]]:
    """Rows of two traces whose runs compute 1.25x and 0.8x their traces' times (the true
    cluster otherwise), and a fixed plan row bound to its trace."""
    from toy_measurements import make_trace

    from schedopt.model.trace import Trace
    from schedopt.policies import make_plan

    fam = true_family()
    (folder / "true.json").write_text(fam.model_dump_json())
    scales = {"syn0.json": 1.25, "syn1.json": 0.8}
    lines = ["trace,cluster,nodes,policy,iteration_time_s"]
    for k, (ref, c) in enumerate(scales.items()):
        tr = Trace.model_validate(make_trace(k))
        (folder / ref).write_text(tr.model_dump_json())
        cl = fam.at(2)
        plan = make_plan(tr, cl, "caffe-mpi").bind(tr, cl)
        (folder / f"plan{k}.json").write_text(plan.model_dump_json())
        run = tr.scaled(compute=c, update=True)
        for spec in ("cntk", "ddp:bucket_cap_mb=2", f"plan:plan{k}.json"):
            used = plan if spec.startswith("plan:") else make_plan(run, cl, spec)
            t = simulate(run, cl, used.model_copy(update={"trace_hash": None})).iteration_time_s
            lines.append(f"{ref},true.json,2,{spec},{t!r}")
    path = folder / "scaled.csv"
    path.write_text("\n".join(lines) + "\n")
    return path, scales


def test_compute_scale_is_fitted_per_trace_and_written_as_retimed_traces(tmp_path: Path) -> None:
    path, scales = _scaled_rows(tmp_path)
    rows = read_measurements(path)
    (plain,) = calibrate(rows, ["overlap_slowdown"])
    assert plain.mean_abs_error > 0.05  # the cluster alone cannot explain the compute
    (cal,) = calibrate(rows, ["compute_scale", "overlap_slowdown"], where="scaled.csv")
    got = {p.name: p for p in cal.params}
    assert set(got) == {"compute_scale[syn0.json]", "compute_scale[syn1.json]",
                        "overlap_slowdown"}
    for ref, c in scales.items():
        p = got[f"compute_scale[{ref}]"]
        assert p.identified and p.value == pytest.approx(c, rel=1e-3)
    assert got["overlap_slowdown"].value == pytest.approx(true_family().base.overlap_slowdown,
                                                          rel=1e-2)
    assert cal.mean_abs_error < 1e-4
    (cluster_path,) = write_calibrations([cal], tmp_path / "out")
    for ref, c in scales.items():
        written = Path(cal.trace_files[ref])
        assert written == tmp_path / "out" / "traces" / ref
        doc = json.loads(written.read_text())
        assert "fitted by `schedopt calibrate` on scaled.csv" in doc["source"]
        orig = json.loads((tmp_path / ref).read_text())
        assert [la["forward_s"] for la in doc["layers"]] == pytest.approx(
            [c * la["forward_s"] for la in orig["layers"]])
    # the re-timed traces and the calibrated cluster predict the policy rows
    lines = path.read_text().splitlines()
    again = [lines[0]] + [
        ln.replace(ln.split(",")[0], f"out/traces/{ln.split(',')[0]}", 1).replace(
            "true.json", os.path.relpath(cluster_path, tmp_path), 1)
        for ln in lines[1:] if ",plan:" not in ln]
    (tmp_path / "again.csv").write_text("\n".join(again) + "\n")
    rep = validate(read_measurements(tmp_path / "again.csv")).to_dict()
    assert rep["max_abs_error"] < 1e-3


def test_cli_calibrate_compute_scale_names_the_retimed_traces(tmp_path: Path) -> None:
    path, scales = _scaled_rows(tmp_path)
    res = CliRunner().invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "out"),
                                   "--fit", "compute_scale,overlap_slowdown"])
    assert res.exit_code == 0, res.output
    last = res.output.strip().splitlines()[-1]
    for ref in scales:
        assert str(tmp_path / "out" / "traces" / ref) in last


def test_compute_scale_leaves_the_cluster_document_alone() -> None:
    from schedopt.measure.calibrate import _with_values

    doc = {"name": "x", "overlap_slowdown": 1.0}
    assert _with_values(doc, "cluster", {"compute_scale[a.json]": 2.0}) == doc


def test_host_costs_are_fitted_with_intervals(tmp_path: Path) -> None:
    """Rows of a host-bound model (launches slower than the GPU) made with known per-call and
    per-tensor host costs: ``--fit launch_overhead,hook_overhead`` recovers both."""
    from toy_measurements import make_trace

    from schedopt.model.trace import Trace
    from schedopt.policies import make_plan

    fam = true_family()
    truth = {"launch_overhead_s": 4e-4, "hook_overhead_s": 1.5e-4}
    base = fam.base.model_copy(update={"launch_overhead_s": 1e-4, "hook_overhead_s": 1e-4})
    (tmp_path / "prior.json").write_text(fam.model_copy(update={"base": base}).model_dump_json())
    data = make_trace(0)
    for la in data["layers"]:  # the host is slower than the GPU: a host-bound step
        la["host_forward_s"] = 1.5 * la["forward_s"]
        la["host_backward_s"] = 1.5 * la["backward_s"]
    tr = Trace.model_validate(data)
    (tmp_path / "host.json").write_text(tr.model_dump_json())
    lines = ["trace,cluster,nodes,policy,iteration_time_s"]
    for nodes in (1, 2):
        cl = fam.at(nodes).model_copy(update=truth)
        for spec in ("cntk", "caffe-mpi", "ddp:bucket_cap_mb=1", "ddp:bucket_cap_mb=25"):
            t = simulate(tr, cl, make_plan(tr, cl, spec)).iteration_time_s
            lines.append(f"host.json,prior.json,{nodes},{spec},{t!r}")
    (tmp_path / "host.csv").write_text("\n".join(lines) + "\n")
    (cal,) = calibrate(read_measurements(tmp_path / "host.csv"),
                       ["launch_overhead", "hook_overhead"])
    got = {p.name: p for p in cal.params}
    for name, field in (("launch_overhead", "launch_overhead_s"),
                        ("hook_overhead", "hook_overhead_s")):
        assert got[name].identified
        assert got[name].value == pytest.approx(truth[field], rel=1e-2)
    assert cal.mean_abs_error < 1e-4


def test_bucket_compute_is_fitted(tmp_path: Path) -> None:
    """Rows made with a known per-bucket compute-stream time (plans of 3 to 40-odd buckets):
    ``--fit bucket_compute`` recovers it, and the other parameters stay as they were."""
    from toy_measurements import make_trace

    from schedopt.model.trace import Trace
    from schedopt.policies import make_plan

    fam = true_family()
    (tmp_path / "prior.json").write_text(fam.model_dump_json())
    tr = Trace.model_validate(make_trace(0))
    (tmp_path / "t.json").write_text(tr.model_dump_json())
    truth = 3e-4
    lines = ["trace,cluster,nodes,policy,iteration_time_s"]
    for nodes in (1, 2):
        cl = fam.at(nodes).model_copy(update={"bucket_compute_s": truth})
        for spec in ("cntk", "caffe-mpi", "ddp:bucket_cap_mb=1", "ddp:bucket_cap_mb=25"):
            t = simulate(tr, cl, make_plan(tr, cl, spec)).iteration_time_s
            lines.append(f"t.json,prior.json,{nodes},{spec},{t!r}")
    (tmp_path / "rows.csv").write_text("\n".join(lines) + "\n")
    (cal,) = calibrate(read_measurements(tmp_path / "rows.csv"), ["bucket_compute"])
    (got,) = cal.params
    assert got.name == "bucket_compute" and got.identified
    assert got.value == pytest.approx(truth, rel=1e-2)
    assert cal.mean_abs_error < 1e-4
