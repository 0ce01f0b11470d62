"""Piecewise-linear all-reduce costs: the model, the simulator and the fit (`fit-comm`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.files import load_cluster, load_trace
from schedopt.measure.comm_tables import CommSamples, parse_comm_file
from schedopt.measure.commfit import fit_piecewise, fit_times, relative_errors
from schedopt.model.cluster import AllReduceFit, Cluster
from schedopt.model.trace import Trace
from schedopt.policies import POLICIES, make_plan
from schedopt.simulate.simulator import simulate

from .strategies import traces

LOGDATA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "mgwfbp-traces" / (
    "B-Caffe/logdata")
needs_reference = pytest.mark.skipif(not LOGDATA.is_dir(), reason="../shared/reference absent")


def with_allreduce(cluster: Cluster, allreduce: dict, **extra: float) -> Cluster:
    return Cluster.model_validate({**cluster.model_dump(), "allreduce": allreduce, **extra})


def curve(segments: list[tuple[int, float, float]]) -> dict:
    """A fit with these segments; its single line is the first segment's (policies such as
    mgwfbp size buckets with the single line)."""
    a, b = (max(segments[0][1], 0.0), segments[0][2]) if segments else (0.0, 0.0)
    return {"alpha_s": a, "beta_s_per_byte": b,
            "segments": [{"min_bytes": m, "alpha_s": a, "beta_s_per_byte": b}
                         for m, a, b in segments]}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_one_segment_equals_the_linear_cost(policy: str) -> None:
    tr, base = load_trace("resnet50-v100-b64"), load_cluster("dgx1-v100-4n-ib-edr")
    alpha, beta = 4e-5, 2.5e-10
    line = with_allreduce(base, {"alpha_s": alpha, "beta_s_per_byte": beta})
    one = with_allreduce(base, curve([(0, alpha, beta)]))
    a = simulate(tr, line, make_plan(tr, line, policy))
    b = simulate(tr, one, make_plan(tr, one, policy))
    assert b.iteration_time_s == a.iteration_time_s
    assert b.first_iteration_s == a.first_iteration_s


def test_stage_times_by_hand(fitted_cluster: Cluster) -> None:
    # 1 ms + 1 ms/MB below 1 MB, 3 ms + 0.5 ms/MB from 1 MB: a jump of 1.5 ms at 1 MB
    cl = with_allreduce(fitted_cluster, curve([(0, 1e-3, 1e-9), (1_000_000, 3e-3, 5e-10)]),
                        collective_overhead_s=1e-4)
    (stage,) = cl.comm_stages()
    got = stage.times(np.array([0.0, 500_000.0, 999_999.0, 1_000_000.0, 4_000_000.0]))
    assert got == pytest.approx([1.1e-3, 1.6e-3, 2.1e-3 - 1e-9, 3.6e-3, 5.1e-3], rel=1e-12)
    assert stage.time(4_000_000) == pytest.approx(5.1e-3, rel=1e-12)
    assert stage.time(0) == 0.0


@settings(max_examples=40, deadline=None)
@given(trace=traces(data_costs=False), jump=st.floats(0.0, 2e-3),
       switch=st.integers(1, 8_000_000), overhead=st.floats(0.0, 1e-3))
def test_caffe_mpi_closed_form_with_a_curve(trace: Trace, jump: float, switch: int,
                                            overhead: float) -> None:
    """WFBP: comm k starts at max(end of comm k-1, its readiness), with the curve's cost."""
    base = Cluster.model_validate({"name": "c", "nodes": 4, "gpus_per_node": 1,
                                   "intra_link": {"bandwidth_Bps": 1e10},
                                   "inter_link": {"bandwidth_Bps": 1e9}})
    cl = with_allreduce(base, curve([(0, 2e-4, 1e-9), (switch, 2e-4 + jump, 4e-10)]),
                        collective_overhead_s=overhead)

    def cost(n: float) -> float:
        a, b = (2e-4 + jump, 4e-10) if n >= switch else (2e-4, 1e-9)
        return overhead + a + b * n

    end, t_b = -math.inf, 0.0
    for layer in reversed(trace.layers):
        t_b += layer.backward_s
        if layer.tensors:
            end = max(end, t_b) + cost(sum(t.bytes for t in layer.tensors))
    expected = float(trace.forward.sum()) + max(end, t_b)
    got = simulate(trace, cl, make_plan(trace, cl, "caffe-mpi")).iteration_time_s
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("segments", "field"), [
    ([], "at least one segment"),                                   # empty list
    ([(8, 1e-3, 1e-9)], "segments[0].min_bytes"),                   # does not start at 0
    ([(0, 1e-3, 1e-9), (0, 2e-3, 1e-9)], "segments[1].min_bytes"),  # not increasing
    ([(0, 1e-3, 1e-9), (100, -1.0, 1e-9)], "negative cost"),        # negative at its start
])
def test_bad_segments_are_rejected(segments: list, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        AllReduceFit.model_validate(curve(segments))


def synthetic(seed: int, noise: float) -> CommSamples:
    """A two-protocol curve: 50 us + 2 us/KB below 256 KiB, 400 us + 1 us/KB above."""
    rng = np.random.default_rng(seed)
    x = np.arange(4096, 1_048_577, 8192)
    y = np.where(x < 262_144, 50e-6 + 2e-9 * x, 400e-6 + 1e-9 * x)
    return CommSamples(x, y * (1 + rng.uniform(-noise, noise, x.size)), "osu", 4, "synthetic")


def test_fit_recovers_a_known_switch() -> None:
    fit = fit_piecewise(synthetic(0, 0.01))
    assert fit.segments is not None and len(fit.segments) == 2
    sw = fit.segments[1].min_bytes
    assert 262_144 - 8192 < sw <= 262_144 + 8192
    assert fit.segments[0].beta_s_per_byte == pytest.approx(2e-9, rel=0.05)
    assert fit.segments[1].beta_s_per_byte == pytest.approx(1e-9, rel=0.1)
    assert np.median(relative_errors(synthetic(0, 0.01), fit)) < 0.01
    exact = fit_piecewise(synthetic(0, 0.0))
    x = np.array([10_000.0, 300_000.0])
    assert fit_times(exact, x) == pytest.approx([70e-6, 700e-6], rel=1e-9)


def test_fixed_segment_count_is_honoured() -> None:
    fit = fit_piecewise(synthetic(1, 0.01), segments=4)
    assert fit.segments is not None and len(fit.segments) == 4


@needs_reference
@pytest.mark.parametrize(("ranks", "switch"), [(2, 262_144), (4, 262_144), (8, 524_288)])
def test_bcaffe_osu_logs_within_two_percent(ranks: int, switch: int) -> None:
    samples = parse_comm_file(LOGDATA / f"allreduce{ranks}.log")
    fit = fit_piecewise(samples)
    assert fit.segments is not None
    assert float(np.median(relative_errors(samples, fit))) <= 0.02
    # the large-message protocol switch is found within one measured step (4 KiB)
    assert any(abs(s.min_bytes - switch) <= 6 * 1024 for s in fit.segments)


@needs_reference
def test_cli_fit_comm_segments(tmp_path: Path) -> None:
    log = LOGDATA / "allreduce8.log"
    out = tmp_path / "c.json"
    res = CliRunner().invoke(app, ["fit-comm", str(log), "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["median_rel_error"] <= 0.02
    assert any(abs(s - 524_288) <= 6 * 1024 for s in doc["switches_bytes"])
    cl = load_cluster(out)
    assert cl.allreduce is not None and cl.allreduce.segments is not None
    assert len(cl.allreduce.segments) == len(doc["segments"])
    one = CliRunner().invoke(app, ["fit-comm", str(log), "--json", "--segments", "1"])
    assert json.loads(one.stdout)["segments"] == []
    assert json.loads(one.stdout)["median_rel_error"] > 0.05  # one line: 5.9% at the median


@pytest.mark.parametrize("value", ["0", "two", "-3"])
def test_cli_fit_comm_bad_segments(tmp_path: Path, value: str) -> None:
    data = tmp_path / "osu4.txt"
    data.write_text("# Size Avg Latency(us)\n4 10\n8 11\n16 12\n32 13\n")
    res = CliRunner().invoke(app, ["fit-comm", str(data), "--segments", value])
    assert res.exit_code == 2
    assert "--segments" in res.output and "Traceback" not in res.output
