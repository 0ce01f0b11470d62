"""``estimate --ddp-copies``: DDP's reducer kernels on the compute stream (copies into and out of
the buckets, the scaling), priced from the operator model, and the bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError

pytest.importorskip("torch")

import schedopt
from schedopt.measure.estimate import ddp_copy_in_s, ddp_copy_out_s, estimate
from schedopt.measure.operators import operator_model

runner = CliRunner()


@pytest.fixture(scope="module")
def pair() -> tuple[schedopt.Trace, schedopt.Trace]:
    return (estimate("resnet50", "v100", "fp32", 32),
            estimate("resnet50", "v100", "fp32", 32, ddp_copies=True))


def test_copies_in_each_backward_and_back_in_the_update(pair) -> None:
    plain, ddp = pair
    opm = operator_model("v100", "fp32")
    assert [la.name for la in plain.layers] == [la.name for la in ddp.layers]
    for a, b in zip(plain.layers, ddp.layers, strict=True):
        assert b.forward_s == a.forward_s
        want = ddp_copy_in_s(opm, [t.bytes for t in a.tensors])
        assert b.backward_s - a.backward_s == pytest.approx(want, abs=1e-5 * b.backward_s), a.name
    out = ddp_copy_out_s(opm, [t.bytes for la in plain.layers for t in la.tensors])
    assert ddp.update_s - plain.update_s == pytest.approx(out, abs=1e-5 * ddp.update_s)
    assert ddp.name.endswith("-ddp") and "reducer.cpp" in ddp.source
    assert ddp.total_bytes == plain.total_bytes


def test_copy_costs_follow_bytes_and_the_kernel_floor() -> None:
    opm = operator_model("v100", "fp32")
    bw, floor = opm.gemm.bandwidth_Bps, opm.gemm.kernel_s
    big = 64 * 2**20
    # a large tensor: a copy reads and writes it, the scaling does it again
    assert ddp_copy_in_s(opm, [big]) == pytest.approx(4 * big / bw)
    assert ddp_copy_out_s(opm, [big]) == pytest.approx(2 * big / bw)
    # a bias: launch-bound, one kernel floor per copy (the per-bucket scaling has none)
    assert ddp_copy_out_s(opm, [256]) == floor
    assert ddp_copy_in_s(opm, [256]) == pytest.approx(floor + 512 / bw)
    assert ddp_copy_out_s(opm, [256] * 10) == pytest.approx(10 * floor)


def test_one_gpu_ddp_step_is_slower_by_the_copies(pair) -> None:
    plain, ddp = pair
    cluster = schedopt.load_cluster("dgx1-v100").with_size(1, 1)
    plan = schedopt.make_plan(plain, cluster, "ddp")
    t0 = schedopt.simulate(plain, cluster, plan).iteration_time_s
    t1 = schedopt.simulate(ddp, cluster, schedopt.make_plan(ddp, cluster, "ddp")).iteration_time_s
    added = (sum(la.backward_s for la in ddp.layers) - sum(la.backward_s for la in plain.layers)
             + ddp.update_s - plain.update_s)
    assert t1 - t0 == pytest.approx(added, rel=1e-6)
    assert 1e-3 < added < 5e-3  # ResNet-50's 97.5 MiB: 6 passes at 783 GB/s plus the floors


def test_with_accumulation_only_the_last_micro_batch_copies() -> None:
    plain = estimate("resnet50", "v100", "fp32", 8, accumulate=3)
    ddp = estimate("resnet50", "v100", "fp32", 8, accumulate=3, ddp_copies=True)
    opm = operator_model("v100", "fp32")
    assert ddp.layers[0].forward_s == plain.layers[0].forward_s  # earlier micro-batches
    for a, b in zip(plain.layers, ddp.layers, strict=True):
        want = ddp_copy_in_s(opm, [t.bytes for t in a.tensors])
        assert b.backward_s - a.backward_s == pytest.approx(want, abs=1e-5 * b.backward_s)


def test_bad_input() -> None:
    with pytest.raises(SchedoptError, match=r"--ddp-copies.*operator method"):
        estimate("resnet50", "v100", "fp32", 32, method="roofline", ddp_copies=True)
    with pytest.raises(SchedoptError, match=r"--ddp-copies.*true or false"):
        estimate("resnet50", "v100", "fp32", 32, ddp_copies=1)  # type: ignore[arg-type]


def test_cli(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", "resnet50", "--gpu", "v100", "--dtype", "fp32",
                              "--batch", "32", "--ddp-copies", "--method", "roofline",
                              "--out", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert "--ddp-copies" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["estimate", "resnet50", "--gpu", "v100", "--dtype", "fp32",
                              "--batch", "32", "--ddp-copies", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert schedopt.load_trace(out).name == "resnet50-v100-fp32-b32-ddp"
