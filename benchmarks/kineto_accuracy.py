"""Import -> simulate against the measured step, on fresh torch.profiler traces of 2 gloo DDP
ranks (the end-to-end test's run: a 3-layer MLP, ``bucket_cap_mb=1``, 30 profiled steps), and
on the two public GPU traces in instances/samples/.

Each run profiles both ranks, imports them, fits the cluster to the measured collectives and
simulates the imported buckets with one call at a time (``comm_concurrency`` 1, the model
before gloo's two worker threads were modelled) and with the import's concurrency (2 on gloo).
The public traces (ResNet-50 DDP: rank 0 of 2 A100s on NCCL, host-bound; one V100, GPU-bound)
are simulated on the A100 trace's imported cluster and on one DGX-1 GPU. Prints one row per
run and method: instance, method, predicted ms, measured median ms, error.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kineto_accuracy.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedopt.files import instances_dir, load_cluster
from schedopt.measure import kineto
from schedopt.measure.comm_tables import parse_comm_text
from schedopt.measure.commfit import cluster_from_fit, table_curve
from schedopt.measure.kineto import import_kineto
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate
from tests.test_kineto import WORKER
from tests.test_kineto_real_gpu import one_gpu_cluster, without_host


def _profile(tmp: Path) -> list[Path]:
    script = tmp / "worker.py"
    script.write_text(WORKER)
    outs = [tmp / "rank0.json", tmp / "rank1.json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp / "rdv"),
                               str(outs[r]), "1" if r == 0 else "0"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for r in range(2)]
    for p in procs:
        if p.wait(timeout=300) != 0:
            raise SystemExit("a rank failed")
    return outs


def _rows(run: int, files: list[Path]) -> list[tuple[str, str, float, float, float]]:
    imp = import_kineto(files)
    measured = imp.summary["step_time_s"]
    fit = table_curve(parse_comm_text("bytes,time_s,ranks\n" + "".join(
        f"{n},{t},2\n" for n, t in imp.points)))
    rows = []
    for k in sorted({1, imp.concurrency}):
        cluster = cluster_from_fit(fit, name="measured", ranks=2).model_copy(
            update={"comm_concurrency": k})
        plan = make_plan(imp.trace, cluster, "ddp:bucket_cap_mb=1,first_bucket_mb=1")
        predicted = simulate(imp.trace, cluster, plan).iteration_time_s
        rows.append((f"mlp3 gloo run {run}", f"comm_concurrency {k}", predicted * 1e3,
                     measured * 1e3, predicted / measured - 1))
    return rows


def _public_rows() -> list[tuple[str, str, float, float, float]]:
    """The public GPU traces (instances/samples/), each simulated with DDP's buckets; and two
    ablations: without the host times, and with the threads' waits on the device counted as
    host time."""
    waits = kineto._Rank._waits
    rows = []
    for sample, cluster, label in (
            ("kineto-resnet50-a100-nccl-rank0", load_cluster("kineto-a100-2gpu-nccl-measured"),
             "imported cluster"),
            ("kineto-resnet50-v100-rank0", one_gpu_cluster(), "one DGX-1 GPU")):
        path = instances_dir() / "samples" / f"{sample}.json.gz"
        imp = import_kineto([path])
        kineto._Rank._waits = lambda self, tid, t0, t1: 0.0  # type: ignore[method-assign]
        try:
            with_waits = import_kineto([path])
        finally:
            kineto._Rank._waits = waits  # type: ignore[method-assign]
        measured = imp.summary["step_time_s"]
        for trace, how in ((imp.trace, label), (without_host(imp.trace), "no host times"),
                           (with_waits.trace, "waits as host time")):
            predicted = simulate(trace, cluster, make_plan(trace, cluster, "ddp")
                                 ).iteration_time_s
            rows.append((sample.removeprefix("kineto-"), how, predicted * 1e3, measured * 1e3,
                         predicted / measured - 1))
    return rows


def main() -> None:
    """Print the table and the mean |error| per method."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    args = ap.parse_args()
    print(f"{'instance':<26} {'method':<20} {'predicted ms':>12} {'median ms':>10} {'error':>8}")
    errors: dict[str, list[float]] = {}
    for inst, method, pred, meas, err in _public_rows():
        print(f"{inst:<26} {method:<20} {pred:>12.3f} {meas:>10.3f} {err:>+8.1%}")
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            for inst, method, pred, meas, err in _rows(run, _profile(Path(tmp))):
                errors.setdefault(method, []).append(abs(err))
                print(f"{inst:<26} {method:<20} {pred:>12.3f} {meas:>10.3f} {err:>+8.1%}")
    for method, errs in errors.items():
        print(f"{'all runs':<26} {method:<20} mean |error| {statistics.fmean(errs):.1%},"
              f" largest {max(errs):.1%}")


if __name__ == "__main__":
    main()
