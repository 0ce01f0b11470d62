"""Speed of the sharded simulator (the optimizer judges many plans with it).

Run: ``python benchmarks/bench_sharded.py``. Prints a table (instance, method, figure): the time
to evaluate one sharded plan (best of 5) for the sharded baselines and for one unit per layer
on synthetic traces of 100 to 2,000 layers, and exits non-zero when a plan of 1,000 units
takes 0.5 s or more.
"""

from __future__ import annotations

import sys
import time

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, Sharding
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_simulate import best_of, synthetic

CLUSTER = Cluster.model_validate({
    "name": "ib-8x8", "nodes": 8, "gpus_per_node": 8,
    "intra_link": {"bandwidth_Bps": 1.5e11, "latency_s": 3e-6},
    "inter_link": {"bandwidth_Bps": 2.5e10, "latency_s": 5e-6}, "nics_per_node": 8,
})
TARGET_S = 0.5  # one evaluation of a 1,000-unit plan


def per_layer(trace: Trace, accumulate: int = 1) -> Plan:
    """One unit per layer, full mode, prefetch 1 and 1, two streams."""
    units = [[la.name] for la in trace.layers]
    sharding = Sharding(mode="full", units=units)
    buckets = [list(t) for t in reversed(sharding.check_against(trace))]
    return Plan(policy="per-layer", buckets=buckets, sharding=sharding, accumulate=accumulate)


def main() -> int:
    rows = []
    worst = 0.0
    for n in (100, 1000, 2000):
        trace = synthetic(n)
        plans = {"per-layer units": per_layer(trace),
                 "per-layer units, accumulate 4": per_layer(trace, 4),
                 "zero3": make_plan(trace, CLUSTER,
                                    "zero3:stage3_param_persistence_threshold=0"),
                 "megatron-distopt": make_plan(trace, CLUSTER, "megatron-distopt")}
        for name, plan in plans.items():
            t = best_of(lambda plan=plan, trace=trace: simulate(trace, CLUSTER, plan))
            rows.append((trace.name, name, f"{t * 1e3:.1f} ms"))
            if n == 1000 and name == "per-layer units":
                worst = t
    width = max(len(r[1]) for r in rows)
    print(f"{'instance':<16}{'method':<{width + 2}}figure")
    for inst, method, fig in rows:
        print(f"{inst:<16}{method:<{width + 2}}{fig}")
    if worst >= TARGET_S:
        print(f"FAIL: 1,000 units took {worst:.3f} s (target {TARGET_S} s)")
        return 1
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"total {time.perf_counter() - t0:.1f} s")
    sys.exit(code)
