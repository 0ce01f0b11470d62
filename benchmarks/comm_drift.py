"""How much the same all-reduce's time moves on this machine from one minute to the next.

The DDP evidence (docs/validation.md) predicts from one ``bench-comm`` run and measures DDP
runs minutes later. This script runs ``bench-comm``'s own measurement (:func:`bench_comm`,
2 processes, gloo over loopback, one thread each) again and again, and prints every round's
all-reduce times of 1 MiB and 64 MiB with the wall-clock time, then the spread: the median,
the range and the largest ratio between two rounds. Usage::

    python benchmarks/comm_drift.py [--rounds 30] [--iters 5]

Run it on an otherwise idle machine (it prints the 1-minute load average before and after).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from schedopt.integrations.bench import Launch, bench_comm

MIB = 2**20
SIZES = (1 * MIB, 64 * MIB)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--iters", type=int, default=5, help="timed all-reduces per size and round")
    args = ap.parse_args(argv)
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}")
    print("| round | time (UTC) | 1 MiB (ms) | 64 MiB (ms) |")
    print("|---|---|---|---|")
    series: dict[int, list[float]] = {s: [] for s in SIZES}
    for i in range(args.rounds):
        res = bench_comm(Launch(procs=2, backend="gloo", threads=1, timeout_s=120.0),
                         min_bytes=SIZES[0], max_bytes=SIZES[1], iters=args.iters,
                         warmup=2, overlap_repeats=0)
        times = dict(zip(res.sizes, res.times, strict=True))
        for s in SIZES:
            series[s].append(times[s])
        print(f"| {i + 1} | {time.strftime('%H:%M:%S', time.gmtime())} | "
              f"{times[SIZES[0]] * 1e3:.2f} | {times[SIZES[1]] * 1e3:.2f} |", flush=True)
    print()
    print("| size | median (ms) | min (ms) | max (ms) | max / min |")
    print("|---|---|---|---|---|")
    for s in SIZES:
        v = series[s]
        print(f"| {s // MIB} MiB | {statistics.median(v) * 1e3:.2f} | {min(v) * 1e3:.2f} | "
              f"{max(v) * 1e3:.2f} | {max(v) / min(v):.2f} |")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
