"""DDP's cost per bucket on a GPU, measured and predicted: one prepared run for a lent device.

PyTorch's public DDP benchmark (``benchmarks/host_side_evidence.py``) shows every extra bucket
costing 10-59 us on ONE V100 (world size 1, no communication) and 34-132 us at 2-16 GPUs, where
the host-side model prices 5 us (DDP's scaling kernel) plus hidden launches
(docs/validation.md, "Host side and bucket caps"). This script measures the same difference on
the machine it runs on, with today's torch: for each model, ``schedopt profile`` (the measured
trace), then ``schedopt bench-ddp`` at two bucket caps, alternately, and prints the cost per
extra bucket beside the prediction of the host-side model on that trace (``reducer``: the
shipped launch cost, 15 us per hook, 5 us per bucket on the compute stream).

Usage (a CUDA device; one process per GPU, NCCL)::

    python benchmarks/gpu_ddp_buckets.py --out DIR [--procs 1] [--models resnet50,resnext50_32x4d]
        [--batch 32] [--caps 1 25] [--iters 20] [--rounds 3]
    python benchmarks/gpu_ddp_buckets.py --smoke --out DIR     # the same path on the CPU (gloo)

The models are torchvision's, built without torchvision (:mod:`schedopt.measure.cnns`), in
float32, NCHW, with synthetic inputs, as in the public benchmark. ``DIR`` receives each model's
trace (``<model>.json``) and rows (``<model>-rows.csv``); the printed table is what to quote.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import schedopt
from schedopt.model.cluster import Cluster

#: The reducer method's host side (benchmarks/host_side_evidence.py): hook cost per tensor and
#: the scaling kernel per bucket on the compute stream (s).
HOOK_S = 15e-6
BUCKET_COMPUTE_S = 5e-6
#: The factories of ``schedopt profile`` / ``bench-ddp`` (``MODULE:FACTORY``).
FACTORY = "benchmarks.ddp_models:{model}"


def _run(cmd: list[str], timeout: float) -> None:
    """Run one schedopt command; stop with its output when it fails."""
    res = subprocess.run([sys.executable, "-m", "schedopt", *cmd], capture_output=True,
                         text=True, timeout=timeout, cwd=Path(__file__).resolve().parents[1])
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:2])} failed ({res.returncode}): "
                         f"{(res.stderr or res.stdout).strip()[-600:]}")


def cluster(procs: int) -> Cluster:
    """The ranks' cluster: the shipped DGX H100 node cut to ``procs`` GPUs (NCCL launch cost as
    shipped), with the reducer method's hook and per-bucket costs (the smoke run uses it too:
    its figures say nothing of a GPU)."""
    base = schedopt.load_cluster("dgx-h100").with_size(1, procs)
    return base.model_copy(update={"hook_overhead_s": HOOK_S,
                                   "bucket_compute_s": BUCKET_COMPUTE_S})


def measure(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """Profile one model, run DDP at every cap, and return the medians and predictions."""
    out: Path = args.out
    shape = f"{args.batch},3,{args.size},{args.size}"
    trace_path, rows_path = out / f"{model}.json", out / f"{model}-rows.csv"
    device = ["--device", "cpu"] if args.smoke else ["--device", "cuda"]
    _run(["profile", FACTORY.format(model=model), "--input-shape", shape, "--name", model,
          "--out", str(trace_path), "--repeats", str(args.iters), *device], args.timeout)
    clus = cluster(args.procs)
    clus_path = out / "cluster.json"
    clus_path.write_text(clus.model_dump_json(indent=1))
    policies = [x for cap in args.caps for x in ("-p", f"ddp:bucket_cap_mb={cap:g}")]
    _run(["bench-ddp", FACTORY.format(model=model), "--input-shape", shape,
          "--trace", str(trace_path), "--cluster", str(clus_path), "--out", str(rows_path),
          "--procs", str(args.procs), "--backend", "gloo" if args.smoke else "nccl",
          "--iters", str(args.iters), "--rounds", str(args.rounds), *policies],
         args.timeout)
    with rows_path.open() as fh:
        rows = list(csv.DictReader(fh))
    trace = schedopt.load_trace(str(trace_path))
    result: dict[str, Any] = {"model": model, "caps": {}}
    for cap in args.caps:
        spec = f"ddp:bucket_cap_mb={cap:g}"
        times = [float(r["iteration_time_s"]) for r in rows if r["policy"] == spec]
        plan = schedopt.make_plan(trace, clus, spec)
        result["caps"][cap] = {
            "measured_s": statistics.median(times), "rounds": len(times),
            "buckets": len(plan.buckets),
            "predicted_s": schedopt.simulate(trace, clus, plan).iteration_time_s}
    return result


def report(results: list[dict[str, Any]], caps: list[float]) -> None:
    """The table: per model and cap, buckets, measured and predicted step; per extra bucket."""
    small, large = min(caps), max(caps)
    print("| model | cap (MiB) | buckets | measured ms (median of rounds) | predicted ms |")
    print("| --- | --- | --- | --- | --- |")
    for res in results:
        for cap, c in sorted(res["caps"].items()):
            print(f"| {res['model']} | {cap:g} | {c['buckets']} | {c['measured_s'] * 1e3:.2f}"
                  f" ({c['rounds']} rounds) | {c['predicted_s'] * 1e3:.2f} |")
    print()
    for res in results:
        lo, hi = res["caps"][small], res["caps"][large]
        extra = lo["buckets"] - hi["buckets"]
        if extra <= 0:
            print(f"{res['model']}: {small:g} and {large:g} MiB give the same buckets")
            continue
        per_m = (lo["measured_s"] - hi["measured_s"]) / extra * 1e6
        per_p = (lo["predicted_s"] - hi["predicted_s"]) / extra * 1e6
        print(f"{res['model']}: {extra} extra buckets at {small:g} MiB; per extra bucket"
              f" measured {per_m:.1f} us, predicted {per_p:.1f} us")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for traces and rows")
    ap.add_argument("--models", default="resnet50,resnext50_32x4d")
    ap.add_argument("--procs", type=int, default=1, help="GPUs (one process each)")
    ap.add_argument("--batch", type=int, default=32, help="images per GPU")
    ap.add_argument("--size", type=int, default=224, help="image side")
    ap.add_argument("--caps", type=float, nargs="+", default=[1.0, 25.0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    ap.add_argument("--smoke", action="store_true",
                    help="the CPU and gloo, batch 2 of 32x32 images, 3 iterations, 1 round")
    args = ap.parse_args(argv)
    if args.smoke:
        args.batch, args.size, args.iters, args.rounds = 2, 32, 3, 1
    args.out.mkdir(parents=True, exist_ok=True)
    results = [measure(m, args) for m in args.models.split(",")]
    report(results, args.caps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
