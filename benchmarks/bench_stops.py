"""Wall-clock figures of the stops: how long a solve takes against its time limit.

Usage::

    python benchmarks/bench_stops.py            # about 30 s on an idle machine
    python benchmarks/bench_stops.py --limit 2  # another time limit

The unit tests check what a stop returns (status, interrupted, the plan, the deterministic work
within its share of the limit), never seconds, so that they pass on a loaded machine. This
benchmark prints the seconds: per instance and search path, the wall time of ``solve`` under
the limit, and the time of the exact programme of the default class on 5,000 tensors (the
target: well under half a second on an idle machine). Targets: a solve ends within
``1.1 * limit + 1`` s.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from schedopt.files import load_cluster, load_trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.dp import solve_wait_for_all
from schedopt.optimize.instance import build_instance
from schedopt.optimize.robust import robust_solve
from schedopt.simulate.scenarios import corner_scenarios

PER_LAYER: dict[str, Any] = {"next_forward": "per-layer", "reorder": True}
PATHS: list[tuple[str, str, str, int | None, dict[str, Any]]] = [
    ("lns", "synthetic-5000", "10gbe-k80-family", 8, PER_LAYER),
    ("multi-stage", "synthetic-5000", "dgx-a100-4n-hierarchical", None, PER_LAYER),
    ("partition", "resnet50-v100-b64", "k80-4x4-10gbe", None,
     {**PER_LAYER, "partition_bytes": 200_000}),
    ("default", "synthetic-5000", "10gbe-k80-family", 8, {}),
]


def main() -> None:
    """Print the table: instance, method, figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=1.0, help="time limit (s)")
    args = parser.parse_args()
    rows: list[tuple[str, str, str]] = []
    for path, t, c, nodes, kw in PATHS:
        tr, cl = load_trace(t), load_cluster(c, nodes)
        t0 = time.perf_counter()
        res = solve(tr, cl, SolveOptions(time_limit_s=args.limit, **kw))
        wall = time.perf_counter() - t0
        ok = "ok" if wall <= 1.1 * args.limit + 1.0 else "OVER"
        rows.append((f"{t} {cl.name}", f"solve ({path})",
                     f"{wall:.2f} s for a {args.limit:g} s limit ({ok}; work {res.work_s:.2f} s)"))
    tr, cl = load_trace("bert-large-a100-bf16"), load_cluster("10gbe-k80-family", 8)
    t0 = time.perf_counter()
    robust_solve(corner_scenarios(tr, cl, 20), SolveOptions(time_limit_s=1.5, **PER_LAYER))
    wall = time.perf_counter() - t0
    rows.append((f"bert-large-a100-bf16 {cl.name}", "robust +-20%",
                 f"{wall:.2f} s for a 1.5 s limit ({'ok' if wall <= 2.5 else 'OVER'})"))
    tr, cl = load_trace("synthetic-5000"), load_cluster("10gbe-k80-family", 8)
    t0 = time.perf_counter()
    solve_wait_for_all(build_instance(tr, cl, SolveOptions()))
    wall = time.perf_counter() - t0
    rows.append((f"synthetic-5000 {cl.name}", "exact programme (default class)",
                 f"{wall:.3f} s ({'ok' if wall < 0.5 else 'OVER'}: target 0.5 s)"))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in [("instance", "method", "figure"), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, width, strict=True)))


if __name__ == "__main__":
    main()
