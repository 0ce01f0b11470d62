"""How much the same all-reduce's time moves on this machine from one minute to the next.

The DDP evidence (docs/validation.md) predicts from one ``bench-comm`` run and measures DDP
runs minutes later. This script runs ``bench-comm``'s own measurement (:func:`bench_comm`,
2 processes, gloo over loopback, one thread each) again and again, and prints every round's
all-reduce times of 1 MiB and 64 MiB with the wall-clock time, then the spread: the median,
the range and the largest ratio between two rounds. ``--pattern`` is bench-comm's
(``queued``, the default here: calls back to back, the only pattern before ``isolated``
existed; ``isolated``: each call alone); ``--pattern both`` alternates the two, round by
round, and adds the ratio isolated / queued of each pair of rounds and its median. Usage::

    python benchmarks/comm_drift.py [--rounds 30] [--iters 5] [--pattern queued|isolated|both]
        [--sizes 1M,64M]

Run it on an otherwise idle machine (it prints the 1-minute load average before and after).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from schedopt.measure.bench_comm import bench_comm, parse_sizes
from schedopt.measure.launch import Launch

MIB = 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--iters", type=int, default=5, help="timed all-reduces per size and round")
    ap.add_argument("--pattern", choices=("queued", "isolated", "both"), default="queued")
    ap.add_argument("--sizes", default="1M,64M", help="sizes to print (powers of two apart)")
    args = ap.parse_args(argv)
    sizes = [parse_sizes(f"{x}:{x}")[0] for x in args.sizes.split(",")]
    patterns = ["queued", "isolated"] if args.pattern == "both" else [args.pattern]
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}")
    print("| round | time (UTC) | pattern | " + " | ".join(f"{s / MIB:g} MiB (ms)" for s in sizes)
          + " |\n|---|---|---|" + "---|" * len(sizes))
    series: dict[tuple[str, int], list[float]] = {(p, s): [] for p in patterns for s in sizes}
    for i in range(args.rounds):
        for pattern in patterns:
            res = bench_comm(Launch(procs=2, backend="gloo", threads=1, timeout_s=120.0),
                             min_bytes=min(sizes), max_bytes=max(sizes), iters=args.iters,
                             warmup=2, overlap_repeats=0, pattern=pattern)
            times = dict(zip(res.sizes, res.times, strict=True))
            for s in sizes:
                series[pattern, s].append(times[s])
            print(f"| {i + 1} | {time.strftime('%H:%M:%S', time.gmtime())} | {pattern} | "
                  + " | ".join(f"{times[s] * 1e3:.2f}" for s in sizes) + " |", flush=True)
    print("\n| size | pattern | median (ms) | min (ms) | max (ms) | max / min |")
    print("|---|---|---|---|---|---|")
    for (pattern, s), v in series.items():
        print(f"| {s / MIB:g} MiB | {pattern} | {statistics.median(v) * 1e3:.2f} | "
              f"{min(v) * 1e3:.2f} | {max(v) * 1e3:.2f} | {max(v) / min(v):.2f} |")
    if len(patterns) == 2:
        print("\n| size | isolated / queued, per pair of rounds | median |\n|---|---|---|")
        for s in sizes:
            ratios = [b / a for a, b in zip(series["queued", s], series["isolated", s],
                                            strict=True)]
            print(f"| {s / MIB:g} MiB | {', '.join(f'{r:.3f}' for r in ratios)} | "
                  f"{statistics.median(ratios):.3f} |")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
