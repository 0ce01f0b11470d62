"""Sweep throughput: rows per minute, local process pool against Ray in local mode.

Two sweeps: cheap simulations (policy rows) and CP-SAT solves that run to their time limit.
For each executor the table gives the start-up time (``ray.init`` of a local Ray with
``--workers`` CPUs, run before the timed call; the local pool's spawned workers start inside it),
the wall time of ``run_sweep``, rows per minute, the mean time a row spends in its worker, and
the overhead per row: ``wall * slots / rows - mean row time`` (slots = rows in flight).

    OMP_NUM_THREADS=1 python benchmarks/bench_sweep.py [--workers 2] [--solve-s 10]

Ray rows are skipped when ray is not installed (``pip install -e ".[ray]"``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from schedopt.study.sweep import Store, SweepSpec, run_sweep

CHEAP: dict[str, Any] = {
    "traces": ["alexnet-k80-b128", "resnet50-k80-b32", "vgg16-k80-b32"],
    "clusters": [{"cluster": "10gbe-k80-family", "nodes": [2, 4, 8, 16]}],
    "policies": ["cntk", "caffe-mpi", "mxnet", "tensorflow", "ddp", "ddp:bucket_cap_mb=5",
                 "horovod", "mgwfbp", "bytescheduler", "sync-easgd"],
}


def solve_spec(rows: int, seconds: float) -> dict[str, Any]:
    """``rows`` CP-SAT solves (one worker, no LNS) that use their whole time limit."""
    return {
        "traces": ["resnet50-v100-b64"],
        "clusters": [{"cluster": "10gbe-k80-family", "nodes": [4]}],
        "optimize": [{"next_forward": "per-layer", "reorder": True, "method": "cp-sat",
                      "lns": False, "workers": 1, "seed": s, "time_limit_s": seconds}
                     for s in range(rows)],
    }


def measure(name: str, spec: dict[str, Any], executor: str, workers: int) -> dict[str, Any]:
    """Run ``spec`` into a fresh database and return the figures of one table row."""
    start = 0.0
    if executor == "ray":
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        start = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "r.sqlite"
        t0 = time.perf_counter()
        summary = run_sweep(SweepSpec.model_validate(spec), db, executor=executor,  # type: ignore[arg-type]
                            workers=workers, progress=False)
        wall = time.perf_counter() - t0
        with Store(db) as s:
            rows = s.rows()
    if executor == "ray":
        ray.shutdown()
    assert summary.failed == 0 and len(rows) == summary.total, summary
    mean_row = sum(r["wall_s"] for r in rows) / len(rows)
    return {"sweep": name, "executor": executor, "rows": len(rows), "start_s": start,
            "wall_s": wall,
            "rows_min": 60.0 * len(rows) / wall, "row_s": mean_row,
            "overhead_s": wall * workers / len(rows) - mean_row}


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="rows in flight (and Ray CPUs)")
    ap.add_argument("--solve-s", type=float, default=10.0, help="time limit of each solve")
    ap.add_argument("--solve-rows", type=int, default=4, help="solves in the second sweep")
    args = ap.parse_args()
    try:
        import ray  # noqa: F401

        executors = ["local", "ray"]
    except ImportError:
        executors = ["local"]
    sweeps = [("simulate", CHEAP), (f"solve {args.solve_s:g} s",
                                    solve_spec(args.solve_rows, args.solve_s))]
    out = [measure(name, spec, ex, args.workers) for name, spec in sweeps for ex in executors]
    head = (f"{'sweep':<12} {'executor':<8} {'rows':>5} {'start s':>8} {'wall s':>8} "
            f"{'rows/min':>9} {'row s':>8} {'overhead/row s':>15}")
    print(head)
    print("-" * len(head))
    for r in out:
        print(f"{r['sweep']:<12} {r['executor']:<8} {r['rows']:>5} {r['start_s']:>8.2f} "
              f"{r['wall_s']:>8.2f} "
              f"{r['rows_min']:>9.1f} {r['row_s']:>8.3f} {r['overhead_s']:>15.3f}")


if __name__ == "__main__":
    main()
