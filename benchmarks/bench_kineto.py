"""Streaming memory of `import kineto`: peak RSS and seconds on a large synthetic trace.

Writes a Kineto-shaped trace of about ``--mb`` MB (steps of a 3-layer DDP model on gloo, padded
with python_function events as ``with_stack=True`` produces them), then reads it in a fresh
process with the streaming importer and, for comparison, with ``json.load``. Prints one row per
method: instance, method, peak RSS (MB), seconds.

    .venv/bin/python benchmarks/bench_kineto.py --mb 200
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _step(n: int, t0: float, pad: int) -> list[dict]:
    ev: list[dict] = []

    def x(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args: object) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                   "dur": dur, "args": args})

    x(f"ProfilerStep#{n}", "user_annotation", t0, 1000.0)
    t = t0 + 10
    for seq in (1, 2, 3):
        x("aten::linear", "cpu_op", t, 50.0, **{"Sequence number": seq,
                                                "Input Dims": [[8, 64], [64, 64], [64]]})
        t += 60
    t += 20
    for k, seq in enumerate((3, 2, 1)):
        x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", t, 80.0,
          **{"Sequence number": seq})
        t += 90
        for dims in ([64], [64, 64]):
            x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "cpu_op",
              t, 20.0)
            x("torch::autograd::AccumulateGrad", "cpu_op", t + 1, 5.0, **{
                "Input Dims": [dims], "Input type": ["float"]})
            t += 25
        if k == 1:
            x("c10d::allreduce_", "cpu_op", t - 5, 3.0, **{"Input Dims": [[[2 * 4160]]]})
            x("gloo:all_reduce", "user_annotation", t, 60.0, tid=2,
              **{"Input Dims": [[2 * 4160]], "Input type": ["float"]})
    x("c10d::allreduce_", "cpu_op", t, 3.0, **{"Input Dims": [[[4160]]]})
    x("gloo:all_reduce", "user_annotation", t + 5, 60.0, tid=3,
      **{"Input Dims": [[4160]], "Input type": ["float"]})
    x("Optimizer.step#SGD.step", "user_annotation", t0 + 900, 50.0)
    for i in range(pad):
        ev.append({"ph": "X", "cat": "python_function", "name": f"train.py(42): forward_{i}",
                   "pid": 1, "tid": 1, "ts": t0 + 10 + i * 1e-3, "dur": 1.0,
                   "args": {"Python parent id": i, "Python id": i + 1, "Ev Idx": i}})
    return ev


def write_trace(path: Path, mb: float) -> int:
    """Write a trace of about ``mb`` MB; return the number of steps."""
    with path.open("w") as fh:
        fh.write('{"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0,'
                 ' "world_size": 2}, "traceEvents": [\n')
        n, first = 0, True
        while fh.tell() < mb * 1e6:
            for e in _step(n, n * 1000.0, 400):
                fh.write(("" if first else ",\n") + json.dumps(e))
                first = False
            n += 1
        fh.write("\n]}\n")
    return n


def _child(method: str, path: str) -> None:
    t = time.perf_counter()
    if method == "stream":
        from schedopt.measure.kineto import import_kineto

        imp = import_kineto([path])
        assert len(imp.buckets) == 2
    else:
        with open(path) as fh:
            json.load(fh)
    print(time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0, help="size of the synthetic trace (MB)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json"
        steps = write_trace(path, args.mb)
        size = path.stat().st_size / 1e6
        print(f"{'instance':<28} {'method':<22} {'peak RSS MB':>12} {'seconds':>8}")
        for method, label in (("stream", "import kineto (stream)"), ("load", "json.load (whole)")):
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            out = subprocess.run([sys.executable, __file__, "--child", method, str(path)],
                                 check=True, capture_output=True, text=True)
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            rss = f"{peak / 1024:.0f}" if peak > before else f"<= {before / 1024:.0f}"
            print(f"{f'synthetic {size:.0f} MB, {steps} steps':<28} {label:<22} {rss:>12}"
                  f" {float(out.stdout.strip()):>8.1f}")


if __name__ == "__main__":
    main()
