"""Hostile options, table-driven: counts, limits, percentages and output paths of the commands
that fit, tune, perturb, search robustly and measure.

Each row runs a command line in-process through :func:`schedopt.cli.app.run`, in a folder
holding a small trace, a cluster, a measurements table, a file and a folder. The promise checked
for every row: exit status 2, exactly one line on stderr (``error: ...`` naming the option or
field), nothing on stdout, no traceback, and the folder unchanged (no output, no temporary file,
no folder made for an output). The measuring commands are checked with every way of starting a
rank replaced by a failure: their options are refused before any rank starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from schedopt.cli.app import run
from tests.hostile import refused, snapshot
from tests.interrupt import cli_interrupted_at

DATA = Path(__file__).parent / "data"
SAMPLES = Path(__file__).parent.parent / "instances" / "samples"
T, C, M = "t.json", "c.json", "toy-measurements.csv"
FOUR_RANKS = ["--trace", T, "--cluster", C, "--procs", "4"]  # fitted_cluster: 4 ranks
DDP = ["bench-ddp", "m:f", "--input-shape", "2,3", "--out", "x.csv", *FOUR_RANKS]
DDP_AT = ["bench-ddp", "m:f", "--input-shape", "2,3", *FOUR_RANKS]
COMM = ["bench-comm", "--out", "x.txt"]
PROFILE = ["profile", "m:f", "--input-shape", "2,3", "--name", "n", "--out", "x.json"]
SIM = ["simulate", T, C, "-p", "cntk"]
OPT = ["optimize", T, C]
TUNE = ["tune", T, C, "-f", "ddp"]
OSU = "# OSU MPI Allreduce Latency Test\n# Size Avg Latency(us)\n" + "\n".join(
    f"{2**k} {10 + 2**k / 1e3:.3f}" for k in range(16, 22)) + "\n"

#: id -> (command line, text the error line must contain)
CASES: dict[str, tuple[list[str], str]] = {
    # calibrate
    "calibrate-starts-0": (["calibrate", M, "--out", "o", "--starts", "0"], "--starts"),
    "calibrate-starts-huge": (["calibrate", M, "--out", "o", "--starts", str(10**9)],
                              "--starts"),
    "calibrate-seed-negative": (["calibrate", M, "--out", "o", "--seed", "-1"], "--seed"),
    "calibrate-out-empty": (["calibrate", M, "--out", ""], "--out"),
    "calibrate-out-a-file": (["calibrate", M, "--out", "afile"], "--out"),
    "calibrate-fit-unknown": (["calibrate", M, "--out", "o", "--fit", "bogus"], "bogus"),
    # validate
    "validate-plot-suffix": (["validate", M, "--plot", "x.txt"], "--plot"),
    "validate-plot-under-a-file": (["validate", M, "--plot", "afile/x.png"], "--plot"),
    "validate-plot-a-folder": (["validate", M, "--plot", "d.png"], "--plot"),
    # tune
    "tune-time-limit-0": ([*TUNE, "--time-limit", "0"], "--time-limit"),
    "tune-time-limit-negative": ([*TUNE, "--time-limit", "-1"], "--time-limit"),
    "tune-time-limit-nan": ([*TUNE, "--time-limit", "nan"], "--time-limit"),
    "tune-time-limit-inf": ([*TUNE, "--time-limit", "inf"], "--time-limit"),
    "tune-time-limit-huge": ([*TUNE, "--time-limit", "1e30"], "--time-limit"),
    "tune-framework-empty": (["tune", T, C, "-f", ""], "--framework"),
    "tune-framework-commas": (["tune", T, C, "-f", " , "], "--framework"),
    "tune-framework-unknown": (["tune", T, C, "-f", "ddp,caffe"], "--framework"),
    "tune-nodes-0": ([*TUNE, "--nodes", "0"], "nodes"),
    "tune-plot-suffix": ([*TUNE, "--plot", "x.txt"], "--plot"),
    "tune-plot-under-a-file": ([*TUNE, "--plot", "afile/x.png"], "--plot"),
    # simulate --perturb / --samples / --seed / --vary
    "perturb-text": ([*SIM, "--perturb", "abc"], "--perturb"),
    "perturb-negative": ([*SIM, "--perturb", "-1"], "--perturb"),
    "perturb-100": ([*SIM, "--perturb", "100"], "--perturb"),
    "perturb-nan": ([*SIM, "--perturb", "nan"], "--perturb"),
    "perturb-empty": ([*SIM, "--perturb", ""], "--perturb"),
    "samples-negative": ([*SIM, "--perturb", "10", "--samples", "-1"], "--samples"),
    "samples-huge": ([*SIM, "--perturb", "10", "--samples", str(10**9)], "--samples"),
    "samples-without-perturb": ([*SIM, "--samples", "5"], "--samples"),
    "perturb-seed-negative": ([*SIM, "--perturb", "10", "--seed", "-1"], "--seed"),
    "perturb-seed-huge": ([*SIM, "--perturb", "10", "--seed", str(10**30)], "--seed"),
    "vary-unknown": ([*SIM, "--perturb", "10", "--vary", "bogus"], "--vary"),
    "vary-empty": ([*SIM, "--perturb", "10", "--vary", ""], "--vary"),
    "vary-twice": ([*SIM, "--perturb", "10", "--vary", "alpha,alpha"], "--vary"),
    "gantt-under-a-file": ([*SIM, "--gantt", "afile/x.png"], "--gantt"),
    "gantt-a-folder": ([*SIM, "--gantt", "d.png"], "--gantt"),
    "chrome-trace-a-folder": ([*SIM, "--chrome-trace", "d.png"], "--chrome-trace"),
    "chrome-trace-under-a-file": ([*SIM, "--chrome-trace", "afile/x.json"], "--chrome-trace"),
    # optimize --robust / --workers / --time-limit
    "robust-text": ([*OPT, "--robust", "abc"], "--robust"),
    "robust-100": ([*OPT, "--robust", "100"], "--robust"),
    "robust-negative": ([*OPT, "--robust", "-5"], "--robust"),
    "robust-inf": ([*OPT, "--robust", "inf"], "--robust"),
    "robust-empty": ([*OPT, "--robust", ""], "--robust"),
    "robust-vary-unknown": ([*OPT, "--robust", "10", "--vary", "bogus"], "--vary"),
    "robust-clusters-empty": ([*OPT, "--robust-clusters", ""], "--robust-clusters"),
    "robust-clusters-unknown": ([*OPT, "--robust-clusters", "nothere"], "--robust-clusters"),
    "robust-time-limit-0": ([*OPT, "--robust", "10", "--time-limit", "0"], "--time-limit"),
    "robust-workers-0": ([*OPT, "--robust", "10", "--workers", "0"], "--workers"),
    "workers-0": ([*OPT, "--workers", "0"], "--workers"),
    "workers-huge": ([*OPT, "--workers", "100000"], "--workers"),
    "optimize-time-limit-0": ([*OPT, "--time-limit", "0"], "--time-limit"),
    "optimize-time-limit-nan": ([*OPT, "--time-limit", "nan"], "--time-limit"),
    "optimize-target-unknown": ([*OPT, "--target", "bogus"], "--target"),
    "optimize-next-forward-unknown": ([*OPT, "--next-forward", "bogus"], "--next-forward"),
    "optimize-out-under-a-file": ([*OPT, "--out", "afile/x.json"], "--out"),
    # bench-comm
    "bench-comm-procs-1": ([*COMM, "--procs", "1"], "--procs"),
    "bench-comm-procs-huge": ([*COMM, "--procs", "1000000"], "--procs"),
    "bench-comm-threads-0": ([*COMM, "--threads", "0"], "--threads"),
    "bench-comm-threads-huge": ([*COMM, "--threads", "5000"], "--threads"),
    "bench-comm-timeout-0": ([*COMM, "--timeout", "0"], "--timeout"),
    "bench-comm-timeout-nan": ([*COMM, "--timeout", "nan"], "--timeout"),
    "bench-comm-timeout-huge": ([*COMM, "--timeout", "1e9"], "--timeout"),
    "bench-comm-iters-0": ([*COMM, "--iters", "0"], "--iters"),
    "bench-comm-iters-huge": ([*COMM, "--iters", str(10**9)], "--iters"),
    "bench-comm-warmup-negative": ([*COMM, "--warmup", "-1"], "--warmup"),
    "bench-comm-overlap-repeats-negative": ([*COMM, "--overlap-repeats", "-1"],
                                            "--overlap-repeats"),
    "bench-comm-overlap-bytes-small": ([*COMM, "--overlap-bytes", "2"], "--overlap-bytes"),
    "bench-comm-overlap-bytes-huge": ([*COMM, "--overlap-bytes", str(10**14)],
                                      "--overlap-bytes"),
    "bench-comm-sizes-huge": ([*COMM, "--sizes", "4:1000G"], "--sizes"),
    "bench-comm-sizes-digits": ([*COMM, "--sizes", "9" * 5000 + ":4"], "--sizes"),
    "bench-comm-backend": ([*COMM, "--backend", "mpi"], "--backend"),
    "bench-comm-out-empty": (["bench-comm", "--out", ""], "--out"),
    "bench-comm-out-a-folder": (["bench-comm", "--out", "d"], "--out"),
    "bench-comm-out-under-a-file": (["bench-comm", "--out", "afile/x.txt"], "--out"),
    # bench-ddp
    "bench-ddp-procs-0": ([*DDP, "--procs", "0"], "--procs"),
    "bench-ddp-procs-huge": ([*DDP, "--procs", "100"], "--procs"),
    "bench-ddp-iters-1": ([*DDP, "--iters", "1"], "--iters"),
    "bench-ddp-warmup-1": ([*DDP, "--warmup", "1"], "--warmup"),
    "bench-ddp-rounds-0": ([*DDP, "--rounds", "0"], "--rounds"),
    "bench-ddp-rounds-huge": ([*DDP, "--rounds", "100000"], "--rounds"),
    "bench-ddp-threads-0": ([*DDP, "--threads", "0"], "--threads"),
    "bench-ddp-timeout-negative": ([*DDP, "--timeout", "-1"], "--timeout"),
    "bench-ddp-out-empty": ([*DDP_AT, "--out", ""], "--out"),
    "bench-ddp-out-a-folder": ([*DDP_AT, "--out", "d"], "--out"),
    "bench-ddp-out-under-a-file": ([*DDP_AT, "--out", "afile/x.csv"], "--out"),
    # profile
    "profile-procs-0": ([*PROFILE, "--procs", "0"], "--procs"),
    "profile-procs-huge": ([*PROFILE, "--procs", "100"], "--procs"),
    "profile-threads-0": ([*PROFILE, "--procs", "2", "--threads", "0"], "--threads"),
    "profile-threads-alone": ([*PROFILE, "--threads", "0"], "--threads"),
    "profile-timeout-inf": ([*PROFILE, "--procs", "2", "--timeout", "inf"], "--timeout"),
    "profile-repeats-0": ([*PROFILE, "--repeats", "0"], "--repeats"),
    "profile-warmup-negative": ([*PROFILE, "--warmup", "-1"], "--warmup"),
    "profile-out-a-folder": (["profile", "m:f", "--input-shape", "2,3", "--name", "n",
                              "--out", "d"], "--out"),
    # fit-comm
    "fit-comm-ranks-0": (["fit-comm", "osu8.txt", "--ranks", "0"], "--ranks"),
    "fit-comm-ranks-huge": (["fit-comm", "osu8.txt", "--ranks", str(10**12)], "--ranks"),
    "fit-comm-min-bytes-negative": (["fit-comm", "osu8.txt", "--min-bytes", "-1"],
                                    "--min-bytes"),
    "fit-comm-segments-0": (["fit-comm", "osu8.txt", "--segments", "0"], "--segments"),
    "fit-comm-segments-text": (["fit-comm", "osu8.txt", "--segments", "many"], "--segments"),
    "fit-comm-tolerance-0": (["fit-comm", "osu8.txt", "--tolerance", "0"], "--tolerance"),
    "fit-comm-tolerance-nan": (["fit-comm", "osu8.txt", "--tolerance", "nan"], "--tolerance"),
    "fit-comm-out-empty": (["fit-comm", "osu8.txt", "--out", ""], "--out"),
    "fit-comm-out-a-folder": (["fit-comm", "osu8.txt", "--out", "d"], "--out"),
    "fit-comm-out-under-a-file": (["fit-comm", "osu8.txt", "--out", "afile/x.json"], "--out"),
}


def _folder(path: Path) -> None:
    """The inputs every row may use: a trace, a 4-rank cluster, the toy measurements (with
    their trace and cluster files), an OSU file, a plain file and two folders."""
    shutil.copy(DATA / "tiny_trace.json", path / T)
    shutil.copy(DATA / "fitted_cluster.json", path / C)
    for sample in SAMPLES.glob("toy-*"):
        shutil.copy(sample, path / sample.name)
    (path / "osu8.txt").write_text(OSU)
    (path / "afile").write_text("not a folder\n")
    (path / "d").mkdir()
    (path / "d.png").mkdir()


def _no_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way of starting a rank, or of profiling in this process, fails the test."""
    def started(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a rank was started")

    import schedopt.measure.launch as launch
    import schedopt.measure.profile as profile

    for name in ("launch", "run_joined"):  # what run_ranks calls
        monkeypatch.setattr(launch, name, started)
    monkeypatch.setattr(launch.subprocess, "Popen", started)
    monkeypatch.setattr(profile, "profile_model", started)
    monkeypatch.setattr(profile, "build_model", started)


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_hostile_option(case_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    argv, needle = CASES[case_id]
    _folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    _no_ranks(monkeypatch)
    refused(argv, needle, tmp_path, capsys)


@pytest.mark.parametrize("name", ["../x", "/abs/x", "..", "a/../../b"])
def test_calibrate_writes_only_under_out(name: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster named like a path is written under ``--out``, under a safe name."""
    _folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    prior = json.loads((tmp_path / "toy-prior.json").read_text())
    prior["name"] = name
    (tmp_path / "toy-prior.json").write_text(json.dumps(prior))
    before = snapshot(tmp_path)
    rc = run(["calibrate", M, "--out", "o", "--starts", "1", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    written = [Path(c["out"]) for c in json.loads(out)["clusters"]]
    after = snapshot(tmp_path)
    new = sorted(str(p) for p in set(after) - set(before))
    assert new and all(p == "o" or p.startswith("o/") for p in new), new
    assert all(p.resolve().parent == (tmp_path / "o").resolve() for p in written), written
    assert {k: v for k, v in after.items() if k in before} == before  # inputs untouched
    assert not Path("/abs/x.json").exists()


def test_fit_comm_on_a_million_points(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A table of 1,000,000 measurements is read in one pass and fitted, whole and by
    segments (the breakpoints searched between distinct sizes), to the line it was drawn
    from."""
    rng = np.random.default_rng(0)
    n = 1_000_000
    sizes = 2 ** rng.integers(12, 27, n)
    times = (2e-5 + sizes * 1e-10) * (1 + 0.01 * rng.standard_normal(n))
    path = tmp_path / "points.csv"
    body = "\n".join(f"{s},{t:.9g},8" for s, t in zip(sizes.tolist(), times.tolist(),
                                                      strict=True))
    path.write_text("bytes,time_s,ranks\n" + body + "\n")
    del body
    for segments in ("1", "auto"):
        assert run(["fit-comm", str(path), "--json", "--segments", segments]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["points"] == n and data["ranks"] == 8 and data["format"] == "csv"
        assert data["alpha_s"] == pytest.approx(2e-5, rel=0.01)
        assert data["beta_s_per_byte"] == pytest.approx(1e-10, rel=0.01)
        assert data["median_rel_error"] < 0.01
    out = tmp_path / "fit.json"
    assert run(["fit-comm", str(path), "--segments", "auto", "--out", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["nodes"] == 8


def test_fit_comm_bad_row_at_the_end_of_a_long_table(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """One bad row after many good ones is named by its line."""
    rows = "\n".join(f"{4096 * (1 + i % 9)},{1e-5 * (1 + i % 9):.6g}" for i in range(20_000))
    path = tmp_path / "points.csv"
    path.write_text("bytes,time_s\n" + rows + "\n4096,-1\n")
    assert run(["fit-comm", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"points.csv:{20_002}" in err[0], err


def test_ctrl_c_while_loading_a_trace(tmp_path: Path) -> None:
    """Ctrl-C while a trace is read and checked: exit 130, one line, no traceback, nothing
    written."""
    out = tmp_path / "r.json"
    proc = cli_interrupted_at("schedopt.files", "parse_json", [
        "optimize", str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json"),
        "--robust", "10", "--out", str(out)])
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_measuring_entry_point_refuses_before_torch(tmp_path: Path) -> None:
    """The installed entry point refuses a bad count without importing torch."""
    code = ("import sys\nfrom schedopt.cli.app import run\n"
            "rc = run(['bench-comm', '--out', sys.argv[1], '--procs', '0'])\n"
            "assert 'torch' not in sys.modules\nsys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.txt")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --procs: ")
    assert list(tmp_path.iterdir()) == []
