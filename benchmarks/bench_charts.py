"""Time and peak memory of ``simulate`` with and without its pictures, on large synthetic traces.

Run: ``python benchmarks/bench_charts.py [--tensors 200000 ...]``.

Each row runs one ``schedopt simulate`` command in a fresh process (the trace written to a
temporary folder first: 4 tensors per layer, seeded sizes) and prints the instance, the command,
the wall and CPU time (the command, not the interpreter's start) and the peak resident memory
of that process. The Gantt chart and the Chrome trace
aggregate what a picture cannot show (``schedopt.report.aggregate``), so both should grow about
linearly with the tensors, like the simulation itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

CLUSTER = "dgx-a100-4n"
POLICY = "caffe-mpi"

_CHILD = """
import resource, sys, time
from schedopt.cli.app import main
sys.argv = ["schedopt", *sys.argv[1:]]
t = time.perf_counter()
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
else:
    code = 0
wall = time.perf_counter() - t
use = resource.getrusage(resource.RUSAGE_SELF)
print(f"@@ {code} {wall:.2f} {use.ru_utime + use.ru_stime:.2f} {use.ru_maxrss / 1024:.0f}",
      file=sys.stderr)
"""


def write_trace(path: Path, tensors: int, seed: int = 0) -> None:
    """A synthetic trace of ``tensors`` float32 tensors, four per layer."""
    rng = random.Random(seed)
    layers = [{"name": f"l{i}", "forward_s": 2e-5, "backward_s": 4e-5,
               "tensors": [{"name": f"l{i}.t{j}", "bytes": 4 * rng.randint(250, 100_000)}
                           for j in range(4)]}
              for i in range(tensors // 4)]
    path.write_text(json.dumps({"name": f"synthetic-{tensors}", "batch_size": 32, "io_s": 0.01,
                                "h2d_s": 0.002, "update_s": 0.01, "layers": layers}))


def measure(args: list[str], cwd: Path) -> tuple[int, float, float, float]:
    """Exit status, wall and CPU seconds, and peak MiB of ``schedopt ARGS`` in a fresh process."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("@@ "))
    code, wall, cpu, peak = line.split()[1:]
    return int(code), float(wall), float(cpu), float(peak)


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, nargs="+", default=[20_000, 200_000])
    opts = ap.parse_args(argv)
    print(f"{'instance':<18} {'method':<34} {'wall s':>7} {'cpu s':>7} {'peak MiB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in opts.tensors:
            trace = folder / f"synthetic-{n}.json"
            write_trace(trace, n)
            runs = {
                "simulate": [],
                "simulate --gantt": ["--gantt", "g.png"],
                "simulate --chrome-trace": ["--chrome-trace", "t.json"],
                "simulate --gantt --chrome-trace": ["--gantt", "g.png", "--chrome-trace",
                                                    "t.json"],
            }
            for name, extra in runs.items():
                code, wall, cpu, peak = measure(["simulate", str(trace), CLUSTER, "-p", POLICY,
                                            "--json", *extra], folder)
                status = "" if code == 0 else f" (exit {code})"
                print(f"{trace.stem:<18} {name + status:<34} {wall:7.1f} {cpu:7.1f} {peak:9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
