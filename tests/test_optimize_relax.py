"""The optimizer on clusters beyond its model: judged by the simulator, with a valid bound."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from schedopt.files import instances_dir, load_trace
from schedopt.model.cluster import Cluster, CommStage
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.relax import curve_ratio, relaxation
from schedopt.simulate.simulator import simulate


def test_curve_ratio_by_hand() -> None:
    """Line 1 + n; curve 0.5 + n below 10 bytes, 2 + 0.5 n from 10: the infimum of the ratio is
    the last segment's slope ratio, 0.5."""
    st = CommStage("allreduce", ("inter",), 1.0, 1.0, ((0.0, 0.5, 1.0), (10.0, 2.0, 0.5)))
    assert curve_ratio(st) == pytest.approx(0.5)
    n = np.geomspace(1, 1e12, 2000)
    assert (st.times(n) >= curve_ratio(st) * (1.0 + n) * (1 - 1e-12)).all()
    # one segment equal to the line: nothing is relaxed
    assert curve_ratio(CommStage("allreduce", ("inter",), 1.0, 1.0, ((0.0, 1.0, 1.0),))) == 1.0


def test_curve_ratio_is_the_tightest_over_sizes() -> None:
    st = CommStage("allreduce", ("inter",), 1e-4, 2e-9,
                   ((0.0, 5e-5, 4e-9), (1e4, 3e-4, 1.5e-9), (5e5, 1e-3, 1.9e-9)))
    n = np.concatenate([np.arange(1, 2e6, 97.0), [1e4 - 1e-9, 5e5 - 1e-9, 1e15]])
    ratios = st.times(n) / (1e-4 + 2e-9 * n)
    assert curve_ratio(st) <= ratios.min() * (1 + 1e-9)
    assert curve_ratio(st) == pytest.approx(min(ratios.min(), 1.5e-9 / 2e-9), rel=1e-6)


def _cluster(**extra: object) -> Cluster:
    doc = json.loads((instances_dir() / "clusters" / "bcaffe-osu-8n.json").read_text())
    doc.update(extra)
    return Cluster.model_validate(doc)


def test_exact_model_has_no_relaxation() -> None:
    assert relaxation(_cluster()) is None
    slow = relaxation(_cluster(overlap_slowdown=1.3))
    assert slow is not None and slow.factor == 1.0 and "slowdown" in slow.note


@pytest.mark.parametrize("extra", [
    {"overlap_slowdown": 1.4},
    {"allreduce": {"alpha_s": 8.17e-4, "beta_s_per_byte": 3.356e-9, "segments": [
        {"min_bytes": 0, "alpha_s": 7.4e-5, "beta_s_per_byte": 1.71e-8},
        {"min_bytes": 10241, "alpha_s": 9.56e-4, "beta_s_per_byte": 2.45e-9},
        {"min_bytes": 522241, "alpha_s": 2.17e-3, "beta_s_per_byte": 1.76e-9}]}},
])
def test_solve_beyond_the_model_is_judged_by_the_simulator(extra: dict) -> None:
    tr = load_trace("googlenet-k80-10gbe-8n")
    cl = _cluster(**extra)
    res = solve(tr, cl, SolveOptions(time_limit_s=5, workers=1, seed=0))
    assert res.iteration_time_s == pytest.approx(simulate(tr, cl, res.plan).iteration_time_s)
    assert res.objective_s == res.iteration_time_s
    assert any("leaves out" in note for note in res.notes)
    # never worse than an expressible baseline, and the bound below every feasible plan
    expressible = [b.iteration_time_s for b in res.baselines if b.expressible]
    assert res.iteration_time_s <= min(expressible) * (1 + 1e-9)
    assert res.bound_s <= min(expressible) * (1 + 1e-9)
    assert 0 < res.bound_s <= res.iteration_time_s
    assert res.gap == pytest.approx(1 - res.bound_s / res.iteration_time_s)
    assert math.isfinite(res.gap)
    assert (str(res.status) == "OPTIMAL") == (res.gap == 0)
