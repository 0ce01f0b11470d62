"""torch.profiler import of real GPU traces that were not made here (instances/samples/).

``kineto-resnet50-a100-nccl-rank0.json.gz``: rank 0 of a 2-GPU DDP run of ResNet-50 on A100s
(NCCL 2.17.1, three steps, no ``record_shapes``), host-bound.
``kineto-resnet50-v100-rank0.json.gz``: a 1-GPU DDP run of ResNet-50 on a V100 (five steps),
GPU-bound. Both are test data of Holistic Trace Analysis (instances/README.md gives the
source). The import reads them with no setting of its own: gradient sizes from DDP's copies
back into the gradients, GPU kernel times, the launching threads' host times without their
waits on the device.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from schedopt.cli.app import run
from schedopt.errors import SchedoptError
from schedopt.files import instances_dir, load_cluster, load_trace
from schedopt.measure import kineto
from schedopt.measure.kineto import import_kineto
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

SAMPLES = instances_dir() / "samples"
A100 = SAMPLES / "kineto-resnet50-a100-nccl-rank0.json.gz"
V100 = SAMPLES / "kineto-resnet50-v100-rank0.json.gz"
#: DDP's buckets in the A100 trace, as its ``record_param_comms`` ranges give them (elements)
A100_BUCKETS = [2_049_000, 7_875_584, 6_563_840, 6_637_568, 2_431_040]
#: torchvision resnet50(): parameters and tensors (reference/FACTS.md, "Parameter counts")
RESNET50 = (25_557_032, 161)
#: the runs' per-GPU batch (test_the_batch_is_32)
BATCH = 32


def one_gpu_cluster() -> Cluster:
    """The V100 run's cluster: one GPU of a DGX-1, no collective to pay for, no host costs
    beyond the trace's own (the measured host times include DDP's hooks and launches)."""
    c = load_cluster("dgx1-v100")
    return Cluster.model_validate({**c.model_dump(), "gpus_per_node": 1, "nodes": 1,
                                   "launch_overhead_s": 0.0, "hook_overhead_s": 0.0})


def without_host(trace: Trace) -> Trace:
    """``trace`` without its host times (the model before they were imported)."""
    data = trace.model_dump()
    data["host_update_s"] = 0.0
    for la in data["layers"]:
        la["host_forward_s"] = la["host_backward_s"] = 0.0
    return Trace.model_validate(data)


def _predicted(imp: kineto.KinetoImport, cluster: Cluster) -> float:
    plan = make_plan(imp.trace, cluster, "ddp")
    assert plan.buckets == imp.buckets  # DDP's policy builds the measured buckets again
    return simulate(imp.trace, cluster, plan).iteration_time_s


@pytest.fixture(scope="module")
def a100() -> kineto.KinetoImport:
    return import_kineto([A100])


@pytest.fixture(scope="module")
def v100() -> kineto.KinetoImport:
    return import_kineto([V100])


def test_gradient_sizes_without_record_shapes(a100: kineto.KinetoImport,
                                              v100: kineto.KinetoImport) -> None:
    for imp in (a100, v100):
        s = imp.summary
        assert s["device"] == "gpu" and s["backend"] == "nccl"
        assert "copies back" in s["gradient_sizes"]
        assert [b["bytes"] for b in s["buckets"]] == [4 * n for n in A100_BUCKETS]
        tensors = imp.trace.tensor_list
        assert (sum(t.bytes for t in tensors) // 4, len(tensors)) == RESNET50
        assert [len(b) for b in imp.buckets] == [b["tensors"] for b in s["buckets"]]
    assert a100.summary["process_group_size"] == 2 and a100.summary["steps"] == [4, 5, 6]
    assert v100.summary["steps"] == [101, 102, 103, 104, 105]


def test_host_bound_verdicts(a100: kineto.KinetoImport, v100: kineto.KinetoImport) -> None:
    # the A100 step: 222 ms, of which the GPU computes 38 ms; the V100 step is the GPU's
    assert a100.summary["host_bound"] and a100.summary["busy_s"] < 0.2 * a100.summary[
        "step_time_s"]
    assert not v100.summary["host_bound"]
    assert v100.summary["busy_s"] > 0.9 * v100.summary["step_time_s"]
    for imp in (a100, v100):
        assert imp.trace.has_host and imp.trace.host_update_s > 0


def test_import_then_simulate_predicts_both_steps(a100: kineto.KinetoImport,
                                                  v100: kineto.KinetoImport) -> None:
    measured_cluster = load_cluster("kineto-a100-2gpu-nccl-measured")
    for imp, cluster in ((a100, measured_cluster), (v100, one_gpu_cluster())):
        predicted = _predicted(imp, cluster)
        assert predicted == pytest.approx(imp.summary["step_time_s"], rel=0.05), (
            predicted, imp.summary["step_time_s"])
    # the host-bound step is the host's: what the model adds beyond the GPU is the host stall,
    # and without the imported host times the step would be the GPU's
    r = simulate(a100.trace, measured_cluster, make_plan(a100.trace, measured_cluster, "ddp"))
    assert r.breakdown.host_stall_s > 3 * a100.trace.compute_s
    no_host = without_host(a100.trace)
    no_host_step = simulate(no_host, measured_cluster,
                            make_plan(no_host, measured_cluster, "ddp")).iteration_time_s
    assert no_host_step < 0.25 * r.iteration_time_s


def test_the_devices_waits_are_not_host_time(monkeypatch: pytest.MonkeyPatch,
                                             v100: kineto.KinetoImport) -> None:
    # on the GPU-bound V100 run the launching thread waits in its launches (the device's queue
    # is full); counted as host time they make the step look host-bound
    monkeypatch.setattr(kineto._Rank, "_waits", lambda self, tid, t0, t1: 0.0)
    with_waits = import_kineto([V100])
    assert sum(with_waits.trace.host_forward) > 1.5 * sum(v100.trace.host_forward)
    predicted = _predicted(with_waits, one_gpu_cluster())
    assert predicted > 1.08 * with_waits.summary["step_time_s"]


def test_shipped_instances_are_the_import(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    t, c = tmp_path / "kineto-resnet50-a100-nccl-measured.json", tmp_path / "C.json"
    assert run(["import", "kineto", str(A100), "--out-trace", str(t), "--out-cluster",
                str(c), "--batch-size", str(BATCH)]) == 0
    capsys.readouterr()
    shipped = load_trace("kineto-resnet50-a100-nccl-measured")
    assert json.loads(t.read_text()) == shipped.model_dump(mode="json", exclude_none=True)
    written = (instances_dir() / "clusters" / "kineto-a100-2gpu-nccl-measured.json").read_text()
    assert json.loads(c.read_text()) == {**json.loads(written), "name": "C"}


@pytest.mark.parametrize("sample", [A100, V100])
def test_the_batch_is_32(sample: Path) -> None:
    # the traces do not record shapes; the batch is read off the stem's kernels: the max-pool
    # kernel runs one thread per output element, B x 64 x 56 x 56 (docs/instances.md)
    events = json.loads(gzip.decompress(sample.read_bytes()))["traceEvents"]
    pools = {(e["args"]["grid"][0], e["args"]["block"][0]) for e in events
             if e.get("cat") == "kernel" and "max_pool_forward" in e.get("name", "")}
    assert {g * b for g, b in pools} == {BATCH * 64 * 56 * 56}


def _rewrite(tmp_path: Path, change: Any) -> Path:
    data = json.loads(gzip.decompress(A100.read_bytes()))
    data["traceEvents"] = change(data["traceEvents"])
    out = tmp_path / "changed.json"
    out.write_text(json.dumps(data))
    return out


def test_without_shapes_or_copies_one_line_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    no_copies = _rewrite(tmp_path, lambda evs: [e for e in evs
                                                if e.get("name") != kineto._COPY_BACK])
    out = tmp_path / "T.json"
    assert run(["import", "kineto", str(no_copies), "--out-trace", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "record_shapes" in err and "gradient_as_bucket_view" in err
    assert len(err.splitlines()) == 1 and not out.exists()


def test_copies_that_do_not_add_up_are_refused(tmp_path: Path) -> None:
    def shrink_first_copy(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = min((e for e in evs if e.get("cat") == "gpu_memcpy"
                     and e.get("args", {}).get("bytes") == 8_192_000), key=lambda e: e["ts"])
        first["args"]["bytes"] -= 4
        return evs

    with pytest.raises(SchedoptError, match="do not add up"):
        import_kineto([_rewrite(tmp_path, shrink_first_copy)])
