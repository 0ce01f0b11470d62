"""Accuracy of the communication model against the B-Caffe logs (docs/validation.md).

The building blocks are checked on hand-made data; the figures of docs/validation.md are
recomputed from the shared reference data (skipped where it is absent) and pinned: they are
deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bcaffe_study import (
    BCAFFE_LOGS,
    ValidationReport,
    comm_groups,
    error_stats,
    group_buckets,
    group_samples,
    predicted_times,
    reference_clusters,
    relative_fit,
    validate_bcaffe,
    wfbp_replay,
)

from schedopt.errors import SchedoptError
from schedopt.measure.bcaffe import load_bcaffe_log, read_bcaffe_log
from schedopt.model.plan import Plan
from schedopt.simulate.simulator import simulate

LOGDATA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "mgwfbp-traces" / (
    "B-Caffe/logdata"
)
needs_reference = pytest.mark.skipif(
    not LOGDATA.is_dir(), reason="shared reference data (../shared/reference) not present"
)

#: Pinned fractions are printed to 4 decimals in the docs; this tolerance covers the rounding.
TOL = 2e-4


# ------------------------------------------------------------------------- building blocks
def test_comm_groups_first_carrier() -> None:
    t = [5.0, 0.0, 3.0, 0.0, 0.0, 2.0]
    assert comm_groups(t) == [slice(0, 2), slice(2, 5), slice(5, 6)]
    # a leading zero row has no carrier before it: it joins the first group
    assert comm_groups([0.0, 1.0, 0.0]) == [slice(0, 3)]


def test_comm_groups_last_carrier() -> None:
    t = [5.0, 0.0, 3.0, 0.0, 0.0, 2.0]
    assert comm_groups(t, carrier="last") == [slice(0, 1), slice(1, 3), slice(3, 6)]
    assert comm_groups([1.0, 0.0, 2.0, 0.0], carrier="last") == [slice(0, 1), slice(1, 4)]


def test_comm_groups_errors() -> None:
    with pytest.raises(SchedoptError, match="non-zero"):
        comm_groups([0.0, 0.0])
    with pytest.raises(SchedoptError, match="carrier"):
        comm_groups([1.0], carrier="middle")  # type: ignore[arg-type]


def test_error_stats_by_hand() -> None:
    s = error_stats([110.0, 50.0, 300.0], [100.0, 100.0, 200.0])
    assert s.n == 3
    assert s.mape == pytest.approx((0.1 + 0.5 + 0.5) / 3)
    assert s.median_ape == pytest.approx(0.5)
    assert s.total_error == pytest.approx(460 / 400 - 1)
    assert "MAPE 36.7%" in s.describe() and "total +15.0%" in s.describe()
    with pytest.raises(SchedoptError):
        error_stats([1.0], [0.0])
    with pytest.raises(SchedoptError):
        error_stats([1.0, 2.0], [1.0])


def test_relative_fit_recovers_a_line_and_clamps() -> None:
    x = np.array([1e3, 1e4, 1e5, 1e6])
    a, b = relative_fit(x, 1e-4 + 2e-9 * x)
    assert a == pytest.approx(1e-4) and b == pytest.approx(2e-9)
    a, b = relative_fit(x, 3e-9 * x)
    assert a == pytest.approx(0.0, abs=1e-15) and b == pytest.approx(3e-9)
    a, b = relative_fit(x, np.array([4.0, 3.0, 2.0, 1.0]))  # decreasing: beta fixed at 0
    assert b == 0.0 and a > 0


def _tiny_log(tmp_path: Path) -> Path:
    """Three layers, five blobs; column 4 sends every layer as one message (bias rows 0)."""
    rows = [
        [0, 1000, 30.0, 40, 90], [1, 10, 30.0, 0, 0],  # layer 0 (w, b)
        [2, 50_000, 20.0, 100, 0],                    # layer 1 (w)
        [3, 2000, 10.0, 60, 70], [4, 20, 10.0, 0, 0],  # layer 2 (w, b)
    ]
    p = tmp_path / "tmp3comm.log"
    p.write_text("".join(
        f"I0214 23:25:29.141575 37187 distributed.cpp:112] [{', '.join(map(str, r))}]\n"
        for r in rows
    ))
    return p


def test_wfbp_replay_by_hand(tmp_path: Path) -> None:
    log = read_bcaffe_log(_tiny_log(tmp_path))
    groups, smp = group_samples(log)
    assert groups == [slice(0, 2), slice(2, 3), slice(3, 5)]
    assert smp.sizes.tolist() == [4040, 200_000, 8080]
    # backward 10 (layer 2), 20 (layer 1), 30 (layer 0) µs: ready at 10, 30, 60 µs
    # messages: layer 2 at 10..70, layer 1 at 70..170, layer 0 at 170..210
    r = wfbp_replay(log, groups, smp.times)
    assert r.backward_s == pytest.approx(60e-6)
    assert r.last_end_s == pytest.approx(210e-6)
    assert r.exposed_s == pytest.approx(150e-6)
    # merged column: layer 2 (70 µs) at 10..80, then layers 1 and 0 (90 µs, ready at 60)
    g5, s5 = group_samples(log, merged=True)
    assert g5 == [slice(0, 3), slice(3, 5)]
    assert wfbp_replay(log, g5, s5.times).last_end_s == pytest.approx(170e-6)
    with pytest.raises(SchedoptError):
        wfbp_replay(log, groups, [1.0])


def test_replay_matches_the_simulator(tmp_path: Path, fitted_cluster) -> None:
    path = _tiny_log(tmp_path)
    log, trace = read_bcaffe_log(path), load_bcaffe_log(path)
    for merged in (False, True):
        groups, smp = group_samples(log, merged=merged)
        buckets = group_buckets(trace, groups)
        assert [len(b) for b in buckets] == [g.stop - g.start for g in reversed(groups)]
        sched = simulate(trace, fitted_cluster,
                         Plan(policy="caffe-mpi", buckets=buckets).bind(trace, fitted_cluster))
        replay = wfbp_replay(log, groups, predicted_times(fitted_cluster, smp.sizes))
        assert sched.breakdown.exposed_comm_s == pytest.approx(replay.exposed_s, abs=1e-12)
    with pytest.raises(SchedoptError, match="cover"):
        group_buckets(trace, [slice(0, 2)])


def test_reference_clusters() -> None:
    eight = reference_clusters(8)
    assert set(eight) == {"osu", "mgwfbp", "link"}
    assert eight["mgwfbp"].alpha_beta() == (5.23e-4, 8.57e-10)
    # the MG-WFBP 10GbE fit, read as a ring, moves 2(p-1)/p / b = 2.04 GB/s: above the
    # 1.25 GB/s line rate of 10GbE
    assert 2 * 7 / 8 / 8.57e-10 > 1.25e9
    # link model: a ring over 10GbE, 35 µs per step, 1.1 GB/s
    a, b = eight["link"].alpha_beta()
    assert a == pytest.approx(14 * 35e-6) and b == pytest.approx(2 * 7 / 8 / 1.1e9)
    assert set(reference_clusters(2)) == {"osu", "link"}
    assert set(reference_clusters(3)) == {"link"}


# ---------------------------------------------------------------- figures on the real logs
@pytest.fixture(scope="module")
def report() -> ValidationReport:
    if not LOGDATA.is_dir():
        pytest.skip("shared reference data (../shared/reference) not present")
    return validate_bcaffe(LOGDATA)


#: (section, log, model, subset) -> (MAPE, median APE, total error, messages)
PINNED = {
    ("layer-wise", "tmp2comm", "osu", "all"): (0.3186, 0.2607, -0.3335, 128),
    ("layer-wise", "tmp2comm", "osu", ">= 64 KB"): (0.3630, 0.3174, -0.3101, 54),
    ("layer-wise", "tmp2comm", "link", ">= 64 KB"): (0.6414, 0.6106, -0.6154, 54),
    ("layer-wise", "tmp4comm", "osu", "all"): (0.4313, 0.3878, -0.4571, 128),
    ("layer-wise", "tmp4comm", "osu", ">= 64 KB"): (0.4379, 0.3878, -0.4249, 54),
    ("layer-wise", "tmp4comm", "link", ">= 64 KB"): (0.6030, 0.5784, -0.6010, 54),
    ("layer-wise", "tmp4ocomm", "osu", ">= 64 KB"): (0.4258, 0.3662, -0.4676, 54),
    ("layer-wise", "tmp8comm", "osu", "all"): (0.6187, 0.2631, -0.2512, 65),
    ("layer-wise", "tmp8comm", "osu", ">= 64 KB"): (0.2712, 0.2156, -0.2327, 54),
    ("layer-wise", "tmp8comm", "mgwfbp", ">= 64 KB"): (0.7053, 0.7253, -0.7455, 54),
    ("layer-wise", "tmp8comm", "link", ">= 64 KB"): (0.6186, 0.6052, -0.6171, 54),
    ("layer-wise", "tmp8comm", "fit", ">= 64 KB"): (0.1730, 0.1236, -0.0728, 54),
    ("layer-wise", "tmp8comm", "repeat", ">= 64 KB"): (0.1764, 0.0923, -0.0221, 54),
    ("layer-wise", "tmp8ocomm", "osu", ">= 64 KB"): (0.2969, 0.2822, -0.2681, 54),
    ("layer-wise", "tmp8ocomm", "mgwfbp", ">= 64 KB"): (0.7131, 0.7261, -0.7572, 54),
    ("layer-wise", "tmp8ocomm", "repeat", ">= 64 KB"): (0.2377, 0.1046, -0.0461, 54),
    ("merged", "tmp4ocomm", "osu", "all"): (0.3669, 0.3554, -0.3185, 50),
    ("merged", "tmp4ocomm", "link", "all"): (0.5545, 0.5477, -0.5276, 50),
    ("merged", "tmp8ocomm", "osu", "all"): (0.3919, 0.2771, -0.2636, 30),
    ("merged", "tmp8ocomm", "mgwfbp", "all"): (0.7652, 0.7759, -0.7779, 30),
    ("merged", "tmp8ocomm", "link", "all"): (0.6669, 0.6408, -0.6398, 30),
    ("merged", "tmp8comm", "osu", "all"): (0.5014, 0.2331, -0.2182, 65),
}


@needs_reference
@pytest.mark.parametrize("key", sorted(PINNED), ids=lambda k: "-".join(k))
def test_pinned_errors(report: ValidationReport, key: tuple[str, str, str, str]) -> None:
    mape, median, total, n = PINNED[key]
    s = report.get(*key)
    assert s.n == n
    assert s.mape == pytest.approx(mape, abs=TOL)
    assert s.median_ape == pytest.approx(median, abs=TOL)
    assert s.total_error == pytest.approx(total, abs=TOL)


#: (section, log, model, quantity) -> figure in ms
PINNED_MS = {
    ("merged", "tmp4ocomm", "measured", "merging saves"): 80.839,
    ("merged", "tmp4ocomm", "osu", "merging saves"): 4.144,
    ("merged", "tmp8ocomm", "measured", "merging saves"): 42.273,
    ("merged", "tmp8ocomm", "osu", "merging saves"): 28.596,
    ("merged", "tmp8ocomm", "mgwfbp", "merging saves"): 18.305,
    ("exposed", "tmp2comm", "measured", "backward + exposed comm, layer-wise groups"): 200.733,
    ("exposed", "tmp2comm", "osu", "backward + exposed comm, layer-wise groups"): 200.624,
    ("exposed", "tmp4comm", "measured", "exposed comm, layer-wise groups"): 55.207,
    ("exposed", "tmp4comm", "osu", "exposed comm, layer-wise groups"): 0.628,
    ("exposed", "tmp4ocomm", "measured", "exposed comm, merged groups"): 0.641,
    ("exposed", "tmp8comm", "measured", "exposed comm, layer-wise groups"): 105.865,
    ("exposed", "tmp8comm", "osu", "exposed comm, layer-wise groups"): 27.819,
    ("exposed", "tmp8comm", "measured", "backward + exposed comm, layer-wise groups"): 311.199,
    ("exposed", "tmp8comm", "osu", "backward + exposed comm, layer-wise groups"): 233.154,
    ("exposed", "tmp8ocomm", "measured", "exposed comm, merged groups"): 75.326,
    ("exposed", "tmp8ocomm", "osu", "exposed comm, merged groups"): 2.268,
    ("exposed", "tmp8ocomm", "measured", "backward + exposed comm, merged groups"): 277.629,
    ("exposed", "tmp8ocomm", "osu", "backward + exposed comm, merged groups"): 204.571,
}


@needs_reference
def test_pinned_scalars(report: ValidationReport) -> None:
    for key, ms in PINNED_MS.items():
        assert report.scalar(*key).value_s * 1e3 == pytest.approx(ms, abs=2e-3), key
    # tmp8comm merged nothing (its column 5 is a second layer-wise measurement): no saving row
    with pytest.raises(KeyError):
        report.scalar("merged", "tmp8comm", "measured", "merging saves")


@needs_reference
def test_group_structure_of_the_logs() -> None:
    counts = {}
    for name in BCAFFE_LOGS:
        log = read_bcaffe_log(LOGDATA / name)
        counts[name] = [len(group_samples(log)[0])]
        if log.merged_us is not None:
            g5, s5 = group_samples(log, merged=True)
            counts[name].append(len(g5))
            assert int(s5.sizes.sum()) == int(log.bytes.sum())  # groups cover every blob
    # layer-wise: every blob in the four-column files; 64 layers + blob 37 in the others.
    # merged: 50 and 30 groups in the "o" runs (FACTS.md: 30 of 128 blobs at 8 nodes);
    # tmp8comm's column 5 has the layer-wise grouping again
    assert counts == {"tmp2comm.log": [128], "tmp4comm.log": [128], "tmp4ocomm.log": [65, 50],
                      "tmp8comm.log": [65, 65], "tmp8ocomm.log": [65, 30]}


@needs_reference
def test_replay_matches_the_simulator_on_the_logs(report: ValidationReport) -> None:
    # the closed-form replay fed with modelled durations is the simulator's schedule
    for name, nodes in BCAFFE_LOGS.items():
        log, trace = read_bcaffe_log(LOGDATA / name), load_bcaffe_log(LOGDATA / name)
        groups, smp = group_samples(log, merged=log.merged_us is not None)
        cl = reference_clusters(nodes)["osu"]
        replay = wfbp_replay(log, groups, predicted_times(cl, smp.sizes))
        section = "merged" if log.merged_us is not None else "layer-wise"
        sim = report.scalar("exposed", Path(name).stem, "osu", f"exposed comm, {section} groups")
        assert sim.value_s == pytest.approx(replay.exposed_s, abs=1e-12)
    plan = Plan(policy="caffe-mpi", buckets=group_buckets(trace, groups)).bind(trace, cl)
    assert simulate(trace, cl, plan).breakdown.backward_s == pytest.approx(replay.backward_s)


@needs_reference
def test_qualitative_findings(report: ValidationReport) -> None:
    # every alpha-beta model under-predicts the in-situ times (negative total error)
    for c in report.comparisons:
        if c.model in ("osu", "mgwfbp", "link") and c.subset in ("all", ">= 64 KB"):
            assert c.stats.total_error < 0, c
    # the shipped OSU fit and the OSU curve itself agree on 64 KB-1 MB messages (within 3
    # points of median signed error): the gap to the logs is not an artefact of the fit
    for name in BCAFFE_LOGS:
        stem = Path(name).stem
        fit = report.get("layer-wise", stem, "osu", "64 KB-1 MB").median_pe
        curve = report.get("layer-wise", stem, "osu-curve", "64 KB-1 MB").median_pe
        assert abs(fit - curve) < 0.03 and fit < -0.2
    # the OSU fit of the same size is the best shipped model on large messages, everywhere, and
    # the MG-WFBP fit the worst
    for name in BCAFFE_LOGS:
        stem = Path(name).stem
        osu = report.get("layer-wise", stem, "osu", ">= 64 KB").mape
        assert osu < report.get("layer-wise", stem, "link", ">= 64 KB").mape
        if BCAFFE_LOGS[name] == 8:
            link = report.get("layer-wise", stem, "link", ">= 64 KB").mape
            assert link < report.get("layer-wise", stem, "mgwfbp", ">= 64 KB").mape
    # at 8 nodes the linear form fitted in-sample reaches the repeat-measurement noise floor
    fit = report.get("layer-wise", "tmp8comm", "fit", ">= 64 KB").mape
    assert fit <= report.get("layer-wise", "tmp8comm", "repeat", ">= 64 KB").mape + 0.01


@needs_reference
def test_grouping_convention_evidence(report: ValidationReport) -> None:
    # carrier = first blob keeps every layer whole except the split at blob 37 that both columns
    # share; carrier = last would cut almost every layer (weight and bias are ready together)
    got = {(i.split()[0], sec, car): (n, cuts) for i, sec, car, n, cuts in report.groupings}
    assert got[("tmp8ocomm", "merged", "first")] == (30, 1)
    assert got[("tmp8ocomm", "merged", "last")] == (30, 28)
    assert got[("tmp4ocomm", "merged", "first")] == (50, 1)
    assert got[("tmp4ocomm", "merged", "last")] == (50, 48)
    assert got[("tmp8comm", "layer-wise", "first")] == (65, 1)
    assert got[("tmp8comm", "layer-wise", "last")] == (65, 63)


#: (log, subset) -> median signed error of the OSU fit and of the OSU curve itself
PINNED_CLASSES = {
    ("tmp2comm", "< 4 KB"): (-0.1677, -0.7503),
    ("tmp4comm", "< 4 KB"): (0.0623, -0.8011),
    ("tmp2comm", "64 KB-1 MB"): (-0.3428, -0.3318),
    ("tmp8comm", "64 KB-1 MB"): (-0.2667, -0.2473),
}


@needs_reference
def test_pinned_size_classes(report: ValidationReport) -> None:
    for (stem, subset), (fit, curve) in PINNED_CLASSES.items():
        assert report.get("layer-wise", stem, "osu", subset).median_pe == pytest.approx(
            fit, abs=TOL)
        assert report.get("layer-wise", stem, "osu-curve", subset).median_pe == pytest.approx(
            curve, abs=TOL)
