"""Large inputs of ``fit-comm`` and ``optimize --robust``: time and memory.

Run: ``python benchmarks/bench_fit_comm.py``. Each row runs the installed command line in a
child process (``/usr/bin/time``-free: the peak resident memory is the child's ``ru_maxrss``):

- ``fit-comm`` on a generated table of 1,000,000 measurements (``bytes,time_s,ranks``, sizes
  4 KiB to 64 MiB, times of a line with 1% noise), with one line, the automatic segments and
  the measured table;
- ``optimize --robust 10 --time-limit 2`` on a generated trace of 200,000 tensors (20,000
  layers of 10 tensors) on the 4-rank test cluster: the search stops at the time limit with a
  plan; the row reports the wall time of the whole command (loading, the eight corner
  scenarios, the search) and the status.

Prints a table (instance, method, figure).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "tests" / "data" / "fitted_cluster.json"


def _run(args: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak resident MiB of the child, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "schedopt", *args], capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode not in (0, 130):
        raise SystemExit(f"schedopt {' '.join(args)} failed: {proc.stderr.strip()}")
    return wall, max(peak, before) / 1024, proc.stdout


def _points(path: Path, n: int = 1_000_000) -> None:
    rng = np.random.default_rng(0)
    sizes = 2 ** rng.integers(12, 27, n)
    times = (2e-5 + sizes * 1e-10) * (1 + 0.01 * rng.standard_normal(n))
    with path.open("w") as fh:
        fh.write("bytes,time_s,ranks\n")
        fh.writelines(f"{s},{t:.9g},8\n" for s, t in zip(sizes.tolist(), times.tolist(),
                                                          strict=True))


def _trace(path: Path, layers: int = 20_000, per_layer: int = 10) -> None:
    doc = {"name": "big", "batch_size": 32, "layers": [
        {"name": f"l{i}", "forward_s": 1e-5, "backward_s": 2e-5,
         "tensors": [{"name": f"l{i}.p{k}", "bytes": 4096 * (1 + (i + k) % 7)}
                     for k in range(per_layer)]} for i in range(layers)]}
    path.write_text(json.dumps(doc))


def main() -> None:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        points = Path(tmp) / "points.csv"
        _points(points)
        for segments in ("1", "auto", "table"):
            wall, mib, out = _run(["fit-comm", str(points), "--json", "--segments", segments])
            data = json.loads(out)
            rows.append(("1,000,000 points", f"fit-comm --segments {segments}",
                         f"{wall:.1f} s, peak {mib:.0f} MiB, {data['points']:,} points fitted"))
        trace = Path(tmp) / "big_trace.json"
        _trace(trace)
        wall, mib, out = _run(["optimize", str(trace), str(CLUSTER), "--robust", "10",
                               "--time-limit", "2", "--json"])
        data = json.loads(out)
        rows.append(("200,000 tensors", "optimize --robust 10 --time-limit 2",
                     f"{wall:.1f} s, peak {mib:.0f} MiB, status {data['status']}, search "
                     f"{data['solve_time_s']:.1f} s"))
    width = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    print(f"{'instance':<{width[0]}}  {'method':<{width[1]}}  figure")
    for inst, method, figure in rows:
        print(f"{inst:<{width[0]}}  {method:<{width[1]}}  {figure}")


if __name__ == "__main__":
    main()
