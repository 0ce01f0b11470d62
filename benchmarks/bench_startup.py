"""Start-up time of the command line: ``schedopt --help`` and ``--version``.

Run: ``python benchmarks/bench_startup.py [--runs N]``. Each command runs N times as a whole
process (default 15); the table gives the median and the ratio to a bare ``python -c pass``
measured in the same run. Target: ``--help`` and ``--version`` under 0.5 s on an idle machine
(the script exits non-zero when the median misses it; on a loaded machine read the ratio).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

TARGET_S = 0.5


def _median_s(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    exe = shutil.which("schedopt") or sys.executable
    prefix = [exe] if exe != sys.executable else [sys.executable, "-m", "schedopt"]
    bare = _median_s([sys.executable, "-c", "pass"], args.runs)
    rows = [("python -c pass", bare)]
    for flag in ("--help", "--version"):
        rows.append((f"schedopt {flag}", _median_s([*prefix, flag], args.runs)))
    print(f"{'instance':<22} {'method':<14} {'figure':>24}")
    missed = False
    for name, sec in rows:
        ok = name.startswith("python") or sec < TARGET_S
        missed |= not ok
        print(f"{name:<22} {'median of ' + str(args.runs):<14} "
              f"{sec * 1e3:9.1f} ms ({sec / bare:4.1f}x bare)" + ("" if ok else "  MISSED"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
