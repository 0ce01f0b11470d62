"""Parsing OSU and nccl-tests output, fitting alpha-beta, and clusters built from fits."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from schedopt.errors import SchedoptError
from schedopt.files import load_cluster
from schedopt.measure.comm_tables import (
    OSU_MIN_BYTES,
    CommSamples,
    parse_comm_file,
    parse_comm_text,
    ranks_from_filename,
)
from schedopt.measure.commfit import (
    cluster_from_fit,
    default_min_bytes,
    fit_alpha_beta,
    residual_rms,
)
from schedopt.model.cluster import AllReduceFit, Cluster

LOGDATA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "mgwfbp-traces" / (
    "B-Caffe/logdata"
)
needs_reference = pytest.mark.skipif(
    not LOGDATA.is_dir(), reason="shared reference data (../shared/reference) not present"
)

OSU = """
# OSU MPI Allreduce Latency Test v5.4.0
# Size       Avg Latency(us)
4                      10.00
1024                   20.00
65536                 100.00
131072                200.00
262144                400.00
"""

OSU_BCAFFE = """
# OSU MPI Allreduce Latency Test v5.4.0
# Size       Avg Latency(us)
8,4                      82.28
8,8                      68.72
8,65536                1000.00
8,131072               1500.00
"""

# nccl-tests 2.x layout (root column), two ranks.
NCCL = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid   1887 on   worker-1 device  0 [0x8d] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1888 on   worker-1 device  1 [0x91] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           0             0     float     sum      -1     5.70    0.00    0.00      0     5.54    0.00    0.00      0
        1024           256     float     sum      -1    11.00    0.09    0.09      0    99.00    0.09    0.09      0
     1048576        262144     float     sum      -1    21.00   49.93   49.93      0    99.00   49.93   49.93      0
     2097152        524288     float     sum      -1    31.00   67.65   67.65      0    99.00   67.65   67.65      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 39.2
"""  # noqa: E501

# Older nccl-tests layout: no root column, `error` instead of `#wrong`, no `#` prefixes.
NCCL_OLD = """\
 nThread 1 nGpus 1 minBytes 32 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20
   Rank  0 Pid 1821213 on host device  0 [0x00] NVIDIA A100-SXM4-40GB
   Rank  1 Pid 1821214 on host device  1 [0x00] NVIDIA A100-SXM4-40GB
   Rank  2 Pid 1821215 on host device  2 [0x00] NVIDIA A100-SXM4-40GB
                                                     out-of-place                       in-place
       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
          32             8   float     sum    12.00    0.00    0.00  0e+00    50.00    0.00    0.00  0e+00
          64            16   float     sum    13.00    0.00    0.00  0e+00    50.00    0.00    0.00  0e+00
         128            32   float     sum    15.00    0.01    0.01  0e+00    50.00    0.01    0.01  0e+00
"""  # noqa: E501


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------------------------ parsing
def test_parse_osu_plain(tmp_path: Path) -> None:
    s = parse_comm_file(_write(tmp_path, "osu_allreduce16.txt", OSU))
    assert s.format == "osu"
    assert s.ranks == 16  # from the file name
    assert s.sizes.tolist() == [4, 1024, 65536, 131072, 262144]
    assert s.times[0] == pytest.approx(10e-6)
    assert len(s) == 5


def test_parse_osu_bcaffe_variant_states_ranks(tmp_path: Path) -> None:
    s = parse_comm_file(_write(tmp_path, "allreduce2.log", OSU_BCAFFE))
    assert s.format == "osu"
    assert s.ranks == 8  # the rows win over the file name
    assert s.sizes.tolist() == [4, 8, 65536, 131072]
    assert s.times[-1] == pytest.approx(1.5e-3)


def test_parse_nccl_tests_uses_out_of_place_time(tmp_path: Path) -> None:
    s = parse_comm_file(_write(tmp_path, "ar.txt", NCCL))
    assert s.format == "nccl-tests"
    assert s.ranks == 2
    assert s.sizes.tolist() == [1024, 1048576, 2097152]  # the zero-byte row is dropped
    assert s.times.tolist() == pytest.approx([11e-6, 21e-6, 31e-6])


def test_parse_nccl_tests_old_layout() -> None:
    s = parse_comm_text(NCCL_OLD)
    assert s.format == "nccl-tests"
    assert s.ranks == 3
    assert s.times.tolist() == pytest.approx([12e-6, 13e-6, 15e-6])


def test_parse_nccl_tests_rows_without_header() -> None:
    rows = "\n".join(NCCL.splitlines()[9:13])
    s = parse_comm_text(rows)
    assert s.format == "nccl-tests"
    assert s.times.tolist() == pytest.approx([11e-6, 21e-6, 31e-6])


@pytest.mark.parametrize(
    ("name", "ranks"),
    [
        ("allreduce8.log", 8),  # B-Caffe naming
        ("osu_16ranks.txt", 16),
        ("nccl-4n.out", 4),
        ("results.txt", None),  # no number: unknown
    ],
)
def test_ranks_from_filename(name: str, ranks: int | None) -> None:
    assert ranks_from_filename(name) == ranks


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("# Size Avg Latency(us)\n4 1.0\n8 abc\n", ":3"),  # non-numeric latency on line 3
        ("# Size Avg Latency(us)\n4 1.0\n8\n", ":3"),  # missing latency
        ("# Size Avg Latency(us)\n4 -1.0\n", ":2"),  # negative time
        (NCCL.replace("    21.00   49.93", "      N/A   49.93"), ":12"),  # bad nccl time
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, text: str, where: str) -> None:
    path = _write(tmp_path, "bad.txt", text)
    with pytest.raises(SchedoptError) as err:
        parse_comm_file(path)
    assert f"{path}{where}" in str(err.value)


def test_file_without_data_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SchedoptError, match="no osu data rows"):
        parse_comm_file(_write(tmp_path, "empty.txt", "# OSU MPI Allreduce\n# Size\n"))


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SchedoptError, match="cannot read file"):
        parse_comm_file(tmp_path / "nope.txt")


def test_rows_with_different_rank_counts_are_an_error() -> None:
    with pytest.raises(SchedoptError, match="disagree"):
        parse_comm_text("2,4 1.0\n4,8 2.0\n")


# ------------------------------------------------------------------------------------ fitting
def _samples(sizes: list[int], times: list[float], fmt: str = "osu") -> CommSamples:
    return CommSamples(np.array(sizes, dtype=np.int64), np.array(times, dtype=float), fmt)


def test_exact_line_is_recovered() -> None:
    sizes = [65536 * k for k in range(1, 9)]
    s = _samples(sizes, [50e-6 + 2e-9 * n for n in sizes])
    fit = fit_alpha_beta(s)
    assert fit.alpha_s == pytest.approx(50e-6)
    assert fit.beta_s_per_byte == pytest.approx(2e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert (fit.min_bytes, fit.max_bytes) == (65536, 8 * 65536)


def test_default_min_bytes_skips_small_osu_messages() -> None:
    s = parse_comm_text(OSU)
    assert default_min_bytes(s) == OSU_MIN_BYTES
    fit = fit_alpha_beta(s)
    # 100, 200, 400 us at 64, 128, 256 KiB: the small rows would pull the line up
    assert fit.min_bytes == 65536
    assert fit.beta_s_per_byte == pytest.approx(300e-6 / (3 * 65536), rel=0.05)
    everything = fit_alpha_beta(s, min_bytes=0)
    assert everything.min_bytes == 4


def test_default_min_bytes_is_zero_for_nccl_tests() -> None:
    s = parse_comm_text(NCCL)
    assert default_min_bytes(s) == 0
    fit = fit_alpha_beta(s)
    assert fit.min_bytes == 1024


def test_negative_intercept_is_clamped_to_zero() -> None:
    s = _samples([1000, 2000, 3000], [0.5e-6, 2.0e-6, 3.0e-6], "nccl-tests")
    fit = fit_alpha_beta(s)
    assert fit.alpha_s == 0.0
    assert fit.beta_s_per_byte > 0


def test_decreasing_times_give_flat_line() -> None:
    fit = fit_alpha_beta(_samples([1000, 2000], [2e-6, 1e-6], "nccl-tests"))
    assert fit.beta_s_per_byte == 0.0
    assert fit.alpha_s == pytest.approx(1.5e-6)


def test_fit_needs_two_sizes() -> None:
    with pytest.raises(SchedoptError, match="min_bytes"):
        fit_alpha_beta(parse_comm_text(OSU), min_bytes=200_000)


def test_residual_rms_matches_r2() -> None:
    rng = np.random.default_rng(1)
    sizes = np.arange(1, 41) * 65536
    times = 1e-4 + 3e-9 * sizes + rng.normal(0, 2e-5, sizes.size)
    s = CommSamples(sizes, times, "osu")
    fit = fit_alpha_beta(s)
    rms = residual_rms(s, fit)
    assert rms == pytest.approx(math.sqrt((1 - fit.r2) * times.var()), rel=1e-9)


# ------------------------------------------------------------------------------------ clusters
def test_cluster_from_fit_default_link_reproduces_fit() -> None:
    fit = AllReduceFit(alpha_s=8e-4, beta_s_per_byte=3e-9, r2=0.99)
    c = cluster_from_fit(fit, name="f", ranks=8)
    assert (c.nodes, c.gpus_per_node, c.collective) == (8, 1, "ring")
    assert c.allreduce == fit
    assert c.alpha_beta() == (8e-4, 3e-9)
    # the derived link gives the same cost through the ring formula
    ring = c.model_copy(update={"allreduce": None})
    alpha, beta = ring.alpha_beta()
    assert alpha == pytest.approx(8e-4)
    assert beta == pytest.approx(3e-9)
    assert "R^2 = 0.9900" in c.source


def test_cluster_from_fit_with_base(fitted_cluster: Cluster) -> None:
    fit = AllReduceFit(alpha_s=1e-5, beta_s_per_byte=1e-10)
    base = fitted_cluster.model_copy(update={"gpus_per_node": 2, "allreduce": None})
    c = cluster_from_fit(fit, name="g", ranks=16, base=base)
    assert (c.nodes, c.gpus_per_node, c.world_size) == (8, 2, 16)
    assert c.allreduce == fit
    with pytest.raises(SchedoptError, match="multiple"):
        cluster_from_fit(fit, name="g", ranks=5, base=base)


@pytest.mark.parametrize(
    ("fit", "ranks", "match"),
    [
        (AllReduceFit(alpha_s=1e-5, beta_s_per_byte=1e-9), 1, "at least 2"),
        (AllReduceFit(alpha_s=1e-5, beta_s_per_byte=0.0), 4, "positive"),
    ],
)
def test_cluster_from_fit_errors(fit: AllReduceFit, ranks: int, match: str) -> None:
    with pytest.raises(SchedoptError, match=match):
        cluster_from_fit(fit, name="x", ranks=ranks)


# ------------------------------------------------------------------------------------ B-Caffe OSU
#: The README's fits over sizes >= 64 KB: a in us, b in us per 1e6 bytes.
README_FITS = {2: (116, 1640), 4: (276, 1992), 8: (817, 3356)}


@needs_reference
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_bcaffe_osu_fit_agrees_with_readme(ranks: int) -> None:
    s = parse_comm_file(LOGDATA / f"allreduce{ranks}.log")
    assert (s.format, s.ranks, len(s)) == ("osu", ranks, 266)
    assert (s.sizes.min(), s.sizes.max()) == (4, 1_048_576)
    fit = fit_alpha_beta(s)
    assert fit.min_bytes == 65536
    a_us, b_us_per_mb = README_FITS[ranks]
    assert fit.alpha_s * 1e6 == pytest.approx(a_us, abs=0.5)
    assert fit.beta_s_per_byte * 1e12 == pytest.approx(b_us_per_mb, abs=0.5)
    assert fit.r2 is not None
    assert fit.r2 > 0.93


@needs_reference
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_bcaffe_osu_fit_reproduces_latencies_as_r2_says(ranks: int) -> None:
    s = parse_comm_file(LOGDATA / f"allreduce{ranks}.log")
    fit = fit_alpha_beta(s)
    used = s.sizes >= fit.min_bytes
    y = s.times[used]
    rms = residual_rms(s, fit)
    assert fit.r2 is not None
    assert rms == pytest.approx(math.sqrt((1 - fit.r2) * y.var()), rel=1e-9)
    # the typical point is well predicted: median relative error under 10%
    pred = fit.alpha_s + fit.beta_s_per_byte * s.sizes[used]
    assert float(np.median(np.abs(pred - y) / y)) < 0.10


@needs_reference
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_shipped_bcaffe_osu_clusters_hold_the_fit(ranks: int) -> None:
    fit = fit_alpha_beta(parse_comm_file(LOGDATA / f"allreduce{ranks}.log"))
    c = load_cluster(f"bcaffe-osu-{ranks}n")
    assert c.world_size == ranks
    assert c.allreduce is not None
    assert c.allreduce.alpha_s == pytest.approx(fit.alpha_s, rel=1e-12)
    assert c.allreduce.beta_s_per_byte == pytest.approx(fit.beta_s_per_byte, rel=1e-12)
    assert c.allreduce.r2 == pytest.approx(fit.r2, rel=1e-12)


# ------------------------------------------------------------------------------------ CLI
def _cli_app() -> Any:
    cli = pytest.importorskip("schedopt.cli.app")
    if "fit-comm" not in [c.name for c in cli.app.registered_commands]:
        pytest.skip("the CLI has no fit-comm command")
    return cli.app


def test_cli_fit_comm_json_and_out(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    app = _cli_app()
    data = _write(tmp_path, "osu8.txt", OSU)
    out = tmp_path / "fitted.json"
    res = CliRunner().invoke(app, ["fit-comm", str(data), "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["min_bytes"] == 65536
    assert doc["points"] == 3
    assert doc["ranks"] == 8
    c = load_cluster(out)
    assert c.world_size == 8
    assert c.allreduce is not None
    assert c.allreduce.alpha_s == pytest.approx(doc["alpha_s"])


def test_cli_fit_comm_table_and_options(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    app = _cli_app()
    data = _write(tmp_path, "osu.txt", OSU)
    res = CliRunner().invoke(app, ["fit-comm", str(data), "--min-bytes", "0", "--ranks", "4"])
    assert res.exit_code == 0, res.output
    assert "alpha" in res.output
    assert "R²" in res.output or "R^2" in res.output


def test_cli_fit_comm_bad_file_is_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    app = _cli_app()
    data = _write(tmp_path, "bad.txt", "# Size Avg Latency(us)\n4 1.0\n8 abc\n")
    out = tmp_path / "never.json"
    res = CliRunner().invoke(app, ["fit-comm", str(data), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert f"{data}:3" in res.output
    assert "Traceback" not in res.output
    assert not out.exists()


def test_cli_fit_comm_without_ranks_cannot_write_cluster(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    app = _cli_app()
    data = _write(tmp_path, "osu.txt", OSU)
    out = tmp_path / "c.json"
    res = CliRunner().invoke(app, ["fit-comm", str(data), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "--ranks" in res.output
    assert not out.exists()


# ------------------------------------------------------------------------- pooled runs
def _nccl_run(times_us: dict[int, float], slowdowns: tuple[float, float] | None = None) -> str:
    """A bench-comm file (nccl-tests layout, 2 ranks) with these times per size."""
    head = ["# schedopt bench-comm", "#  Rank  0 Group  0 Pid 0 on localhost device  0 [gloo]",
            "#  Rank  1 Group  0 Pid 0 on localhost device  1 [gloo]"]
    if slowdowns is not None:
        head += [f"# schedopt overlap_slowdown {slowdowns[0]}",
                 f"# schedopt comm_slowdown {slowdowns[1]}"]
    head += ["#       size    count   type  redop     time  algbw  busbw #wrong     time  algbw"
             "  busbw #wrong"]
    rows = [f"{n:12d} {n // 4:10d}  float    sum {t:10.1f} 0 0 0 {t:10.1f} 0 0 0"
            for n, t in times_us.items()]
    return "\n".join(head + rows) + "\n"


def test_pool_samples_takes_the_median_per_size(tmp_path: Path) -> None:
    from schedopt.measure.comm_tables import pool_samples

    sizes = [4096 * 4**k for k in range(5)]
    runs = [parse_comm_file(_write(tmp_path, f"r{i}.txt", _nccl_run(
        {n: (n * 1e-3 + 50) * f for n in sizes}))) for i, f in enumerate((1.0, 3.0, 1.2))]
    pooled = pool_samples(runs)
    assert pooled.ranks == 2 and pooled.format == "nccl-tests"
    assert pooled.sizes.tolist() == sizes
    np.testing.assert_allclose(pooled.times, runs[2].times)  # the middle run of three
    assert "median of 3 runs" in pooled.source
    assert pool_samples(runs[:1]) is runs[0]
    # a size only some runs measured keeps the median of those
    extra = parse_comm_file(_write(tmp_path, "r3.txt", _nccl_run({2**26: 9000.0, 2**27: 1e4})))
    both = pool_samples([runs[0], extra])
    assert both.sizes.tolist() == [*sizes, 2**26, 2**27]
    assert both.times[-1] == pytest.approx(1e4 * 1e-6)


def test_pool_samples_refuses_different_rank_counts(tmp_path: Path) -> None:
    from schedopt.measure.comm_tables import pool_samples

    two = parse_comm_file(_write(tmp_path, "a.txt", _nccl_run({4096: 10.0, 8192: 20.0})))
    eight = parse_comm_file(_write(tmp_path, "osu8.txt", OSU))
    with pytest.raises(SchedoptError, match="different rank counts") as err:
        pool_samples([two, eight])
    assert "a.txt: 2" in str(err.value) and "osu8.txt: 8" in str(err.value)
    with pytest.raises(SchedoptError, match="no measurements"):
        pool_samples([])


def test_cli_fit_comm_pools_runs_and_slowdowns(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    app = _cli_app()
    sizes = [4096 * 4**k for k in range(6)]
    files = [str(_write(tmp_path, f"comm{i}.txt", _nccl_run(
        {n: n * 1e-3 * f + 100 for n in sizes}, (s, sc))))
        for i, (f, s, sc) in enumerate(((1.0, 1.5, 2.5), (2.0, 2.0, 1.5), (5.0, 1.75, 2.0)))]
    out = tmp_path / "pooled.json"
    res = CliRunner().invoke(app, ["fit-comm", *files, "--json", "--out", str(out),
                                   "--segments", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["files"] == files and doc["ranks"] == 2
    # the pooled times are those of the middle run: beta 2e-3 us/B
    assert doc["beta_s_per_byte"] == pytest.approx(2e-9, rel=1e-3)
    c = load_cluster(out)
    assert (c.overlap_slowdown, c.comm_slowdown) == (1.75, 2.0)  # each the median of three
    assert "median of 3 runs" in (c.source or "")
    one = CliRunner().invoke(app, ["fit-comm", files[0], "--json", "--segments", "1"])
    assert json.loads(one.stdout)["beta_s_per_byte"] == pytest.approx(1e-9, rel=1e-3)


def test_cli_fit_comm_pooling_mismatched_files_is_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    app = _cli_app()
    two = _write(tmp_path, "comm.txt", _nccl_run({4096: 10.0, 8192: 20.0, 16384: 40.0}))
    eight = _write(tmp_path, "osu8.txt", OSU)
    out = tmp_path / "never.json"
    res = CliRunner().invoke(app, ["fit-comm", str(two), str(eight), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "different rank counts" in res.output and "Traceback" not in res.output
    assert not out.exists()
    missing = CliRunner().invoke(app, ["fit-comm", str(two), str(tmp_path / "nope.txt")])
    assert missing.exit_code == 2 and "nope.txt" in missing.output
