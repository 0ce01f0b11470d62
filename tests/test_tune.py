"""``schedopt tune``: each framework's best knob setting against its defaults and the optimum."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.files import load_cluster, load_trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate
from schedopt.study.tune import FRAMEWORKS, TIE_REL, _pick, in_default_class, tune, tune_all

DATA = Path(__file__).parent / "data"
T, C = str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json")
runner = CliRunner()

INSTANCES = [  # (trace, cluster, nodes): a hand-made one and two shipped ones
    (T, C, None),
    ("resnet50-v100-b64", "10gbe-k80-family", 16),
    ("gpt2-124m-v100-fp16", "dgx1-v100-4n-ib-edr", None),
]


@pytest.fixture(scope="module", params=INSTANCES, ids=lambda p: Path(p[0]).stem)
def tuned(request: pytest.FixtureRequest) -> tuple:
    trace, cluster, nodes = request.param
    tr, cl = load_trace(trace), load_cluster(cluster, nodes)
    results, optimum = tune_all(tr, cl, list(FRAMEWORKS), time_limit_s=5.0, grid=12,
                                rounds=2)
    return tr, cl, results, optimum


def test_best_is_no_worse_than_default_and_is_what_it_says(tuned: tuple) -> None:
    tr, cl, results, _ = tuned
    for r in results:
        assert r.best_time_s <= r.default_time_s
        again = simulate(tr, cl, make_plan(tr, cl, r.best_spec)).iteration_time_s
        assert again == pytest.approx(r.best_time_s, rel=1e-12)
        assert r.default_time_s == simulate(tr, cl, make_plan(tr, cl, r.framework)).iteration_time_s


def test_in_class_best_never_beats_a_proven_optimum(tuned: tuple) -> None:
    _, _, results, optimum = tuned
    assert optimum is not None and optimum["status"] == "OPTIMAL"
    for r in results:
        assert r.optimum_time_s == optimum["iteration_time_s"]
        if r.in_class:
            assert r.best_time_s >= r.optimum_time_s * (1 - 1e-9), r.framework


def test_curve_is_sorted_finite_and_bounded_by_the_best(tuned: tuple) -> None:
    _, _, results, _ = tuned
    for r in results:
        xs = [p[0] for p in r.curve]
        assert xs == sorted(xs) and len(set(xs)) == len(xs) and len(xs) >= 12
        assert all(math.isfinite(t) for _, t in r.curve)
        assert min(t for _, t in r.curve) >= r.best_time_s / (1 + TIE_REL)
        lo, hi = r.tied_range  # the flat part: within 0.1% of the best, best inside it
        assert lo <= hi
        if r.best_spec != r.framework and r.knob in r.best_spec:
            assert lo <= r.best <= hi


def test_refinement_finds_the_dense_grid_minimum() -> None:
    """DDP on the hand-made trace: nothing on a 400-point grid beats what the search found."""
    tr, cl = load_trace(T), load_cluster(C)
    r = tune(tr, cl, "ddp", grid=12, rounds=3)
    caps = np.geomspace(1e-3, tr.total_bytes / 2**20 * 1.01, 400)
    dense = min(simulate(tr, cl, make_plan(tr, cl, f"ddp:bucket_cap_mb={c:.6g}")).iteration_time_s
                for c in caps)
    assert r.best_time_s <= dense + 1e-12


def test_tune_is_deterministic() -> None:
    tr, cl = load_trace(T), load_cluster(C)
    assert tune(tr, cl, "horovod").as_dict() == tune(tr, cl, "horovod").as_dict()


def test_class_membership() -> None:
    tr, cl = load_trace("resnet50-v100-b64"), load_cluster("10gbe-k80-family", 16)
    assert in_default_class(make_plan(tr, cl, "ddp"), tr, cl)
    assert in_default_class(make_plan(tr, cl, "mgwfbp"), tr, cl)
    assert not in_default_class(make_plan(tr, cl, "cntk"), tr, cl)  # no overlap
    assert not in_default_class(make_plan(tr, cl, "bytescheduler"), tr, cl)  # per-layer, pieces
    assert not in_default_class(make_plan(tr, cl, "ddp:prefetch=0"), tr, cl)
    reversed_plan = make_plan(tr, cl, "ddp")
    reversed_plan = reversed_plan.model_copy(update={"buckets": reversed_plan.buckets[::-1]})
    assert not in_default_class(reversed_plan, tr, cl)


def test_bad_framework_and_grid() -> None:
    tr, cl = load_trace(T), load_cluster(C)
    with pytest.raises(SchedoptError, match="framework"):
        tune(tr, cl, "cntk")
    with pytest.raises(SchedoptError, match="grid"):
        tune(tr, cl, "ddp", grid=2)


def test_cli_json_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "tune.png"
    result = runner.invoke(app, ["tune", T, C, "-f", "ddp,horovod", "--json", "--plot",
                                 str(png)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["framework"] for r in data["frameworks"]] == ["ddp", "horovod"]
    for r in data["frameworks"]:
        assert {"knob", "default", "default_time_s", "best", "best_time_s", "optimum_time_s",
                "curve", "tied_range"} <= set(r)
        assert r["optimum_time_s"] == data["optimum"]["iteration_time_s"]
    assert data["frameworks"][0]["knob"] == "bucket_cap_mb"
    assert data["frameworks"][0]["default"] == 25.0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_table_names_the_best_setting() -> None:
    result = runner.invoke(app, ["tune", T, C, "-f", "ddp"])
    assert result.exit_code == 0, result.output
    assert "ddp: bucket_cap_mb (default 25 MiB); best ddp" in result.output


def test_cli_unknown_framework_is_one_line() -> None:
    result = runner.invoke(app, ["tune", T, C, "-f", "ddp,caffe"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --framework: unknown framework (known: ddp, horovod, deepspeed, megatron, all)"
        " (got 'caffe')"]


def test_ties_go_to_the_default_side_with_the_flat_range() -> None:
    """Where the model cannot rank settings (within 0.1%), the recommended value is the tied
    one nearest the framework default (DDP: the largest tied cap under 25 MiB), never the
    degenerate end; the range is reported."""
    flat = {0.008: 1.0, 0.5: 1.0004, 5.0: 1.0009, 50.0: 1.2}
    assert _pick(flat, 25.0) == (5.0, (0.008, 5.0))
    assert _pick(flat, None) == (5.0, (0.008, 5.0))
    assert _pick({1.0: 1.0, 25.0: 1.0, 100.0: 1.0}, 25.0) == (25.0, (1.0, 100.0))
    assert _pick({1.0: 1.0, 25.0: 1.1}, 25.0) == (1.0, (1.0, 1.0))  # a real gain is kept
