"""Sharded units against FSDP's per-block default: iteration time and peak memory, 8-256 GPUs.

Run: ``python benchmarks/sharding_study.py [--markdown] [--work-limit S --time-limit T]``.
For GPT-2 1.5B, Llama-style 7B and the 70B-shaped trace on the DGX A100 and DGX H100 families
(1 to 32 nodes of 8 GPUs), it simulates

- ``fsdp``: the fsdp baseline with its defaults (FSDP2: a unit per transformer block or
  top-level child, reshard after forward, prefetch 1);
- ``blocks=k``: the same plan with ``k`` consecutive transformer blocks per unit (the layers
  before the first block one unit, those after the last one unit), full mode, prefetch 1, two
  streams, for k = 2, 4, 8;
- ``best``: the fastest of those (what tuning the unit size by hand finds);
- ``optimized``: the optimizer's plan (``optimize --sharding full``, one worker, seed 0,
  ``--time-limit`` seconds), without a cap and under the ``fsdp`` plan's peak memory as the cap,
  when this checkout has the optimizer,

and prints one row per instance and method: iteration time (ms), the speed-up over ``fsdp`` and
the simulator's peak memory per rank (GiB, unsharded parameters and gradients). ``--nics 1``
reruns it with one NIC per node instead of eight (a communication-bound what-if).
docs/sharding.md holds its output.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, Sharding
from schedopt.model.trace import Trace
from schedopt.policies import POLICIES, make_plan
from schedopt.simulate.simulator import simulate

TRACES = {"a100": ["gpt2-1.5b-a100-bf16", "llama-7b-a100-bf16", "llama-70b-a100-bf16"],
          "h100": ["gpt2-1.5b-h100-bf16", "llama-7b-h100-bf16", "llama-70b-h100-bf16"]}
FAMILIES = {"a100": "dgx-a100-family", "h100": "dgx-h100-family"}
NODES = (1, 4, 32)
BLOCKS_PER_UNIT = (2, 4, 8)
GIB = 2**30

_BLOCK = re.compile(r"^(.*?\.\d+)\.")


def block_units(trace: Trace, per_unit: int) -> list[list[str]]:
    """Units of ``per_unit`` consecutive transformer blocks (``<list>.<i>.``-named layers); the
    layers before the first block form one unit, those after the last one unit."""
    head: list[str] = []
    blocks: list[list[str]] = []
    tail: list[str] = []
    last = None
    for layer in trace.layers:
        m = _BLOCK.match(layer.name)
        if m is None:
            (tail if blocks else head).append(layer.name)
            continue
        if tail:
            raise ValueError(f"{trace.name}: layer {layer.name} after the blocks ended")
        if m.group(1) != last:
            blocks.append([])
            last = m.group(1)
        blocks[-1].append(layer.name)
    merged = [[n for b in blocks[i: i + per_unit] for n in b]
              for i in range(0, len(blocks), per_unit)]
    return [u for u in (head, *merged, tail) if u]


def units_plan(trace: Trace, units: list[list[str]], **sharding: object) -> Plan:
    """A sharded plan over ``units``: buckets are the units' tensors in backward order."""
    sh = Sharding.model_validate({"mode": "full", "units": units, **sharding})
    tensors = sh.check_against(trace)
    return Plan(policy=f"units:{len(units)}", buckets=[list(t) for t in reversed(tensors)],
                sharding=sh)


@dataclass
class Row:
    instance: str
    method: str
    time_s: float
    peak_bytes: float
    units: int


def _peak(schedule: object) -> float:
    for name in ("peak_memory_bytes",):
        value = getattr(schedule, name, None)
        if value is not None:
            return float(value)
    return float("nan")


def _measure(instance: str, method: str, trace: Trace, cluster: Cluster, plan: Plan) -> Row:
    sched = simulate(trace, cluster, plan)
    assert plan.sharding is not None
    return Row(instance, method, sched.iteration_time_s, _peak(sched), len(plan.sharding.units))


def study(gpus: str, trace_name: str, nodes: int, time_limit_s: float = 10.0,
          nics: int | None = None, work_limit_s: float | None = None) -> list[Row]:
    """Every method on one trace and cluster size (``nics``: NICs per node instead of the
    family's)."""
    trace = load_trace(trace_name)
    cluster = load_cluster(FAMILIES[gpus], nodes=nodes)
    if nics is not None:
        cluster = Cluster.model_validate({**cluster.model_dump(), "nics_per_node": nics,
                                          "name": f"{cluster.name}-{nics}nic"})
    instance = f"{trace_name} x{cluster.world_size}"
    default = (make_plan(trace, cluster, "fsdp") if "fsdp" in POLICIES
               else units_plan(trace, block_units(trace, 1)))
    rows = [_measure(instance, "fsdp", trace, cluster, default)]
    sized = [_measure(instance, f"blocks={k}", trace, cluster,
                      units_plan(trace, block_units(trace, k))) for k in BLOCKS_PER_UNIT]
    rows += sized
    best = min(rows, key=lambda r: r.time_s)  # ties: fsdp
    rows.append(Row(instance, f"best ({best.method})", best.time_s, best.peak_bytes, best.units))
    if optimizer_available():
        for label, cap in (("optimized", None), ("optimized, cap=fsdp", rows[0].peak_bytes)):
            plan = optimized_plan(trace, cluster, cap, time_limit_s, work_limit_s)
            rows.append(_measure(instance, label, trace, cluster, plan))
    return rows


def optimizer_available() -> bool:
    """Whether this checkout has ``optimize --sharding`` (SolveOptions.sharding)."""
    from schedopt.optimize import SolveOptions

    return "sharding" in SolveOptions.model_fields


def optimized_plan(trace: Trace, cluster: Cluster, cap: float | None,
                   time_limit_s: float, work_limit_s: float | None = None) -> Plan:
    """The optimizer's full-mode sharded plan (one worker, seed 0), under ``cap`` bytes; with
    ``work_limit_s`` the search stops on deterministic work (the same plan at any load) and
    ``time_limit_s`` is only a safety stop."""
    from schedopt.optimize import SolveOptions, solve

    opts = SolveOptions.model_validate({
        "sharding": "full", "memory_cap_bytes": None if cap is None else int(cap),
        "time_limit_s": time_limit_s, "work_limit_s": work_limit_s, "workers": 1, "seed": 0,
        "baselines": False})
    return solve(trace, cluster, opts).plan


def _pivot(rows: list[Row], base: dict[str, float]) -> str:
    """A markdown table, one row per instance: every method's time, speed-up and peak."""
    methods = list(dict.fromkeys(r.method.split(" (")[0] for r in rows))
    out = ["| instance (ms / GiB) | " + " | ".join(methods) + " |",
           "|" + " --- |" * (len(methods) + 1)]
    by = {(r.instance, r.method.split(" (")[0]): r for r in rows}
    for instance in dict.fromkeys(r.instance for r in rows):
        cells = []
        for m in methods:
            r = by[(instance, m)]
            pick = f"{r.method.split(' (')[1][:-1]}: " if " (" in r.method else ""
            cells.append(f"{pick}{r.time_s * 1e3:.1f} / {r.peak_bytes / GIB:.2f}"
                         + ("" if m == "fsdp" else f" ({base[instance] / r.time_s:.3f}x)"))
        out.append(f"| {instance} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true",
                    help="print a markdown table (one row per instance)")
    ap.add_argument("--time-limit", type=float, default=10.0,
                    help="seconds per optimizer run (when the optimizer is available)")
    ap.add_argument("--work-limit", type=float, default=None,
                    help="deterministic seconds per optimizer run (--time-limit is then a "
                    "safety stop): the same figures at any load")
    ap.add_argument("--nics", type=int, default=None,
                    help="NICs per node instead of the family's 8 (a what-if)")
    args = ap.parse_args(argv)
    rows: list[Row] = []
    for gpus, names in TRACES.items():
        for name in names:
            for nodes in NODES:
                rows += study(gpus, name, nodes, args.time_limit, args.nics, args.work_limit)
    base = {r.instance: r.time_s for r in rows if r.method == "fsdp"}
    if args.markdown:
        sys.stdout.write(_pivot(rows, base))
        return 0
    header = ("instance", "method", "units", "time (ms)", "vs fsdp", "peak (GiB)")
    lines = [header] + [(r.instance, r.method, str(r.units), f"{r.time_s * 1e3:.1f}",
                         f"{base[r.instance] / r.time_s:.3f}x", f"{r.peak_bytes / GIB:.2f}")
                        for r in rows]
    widths = [max(len(x[i]) for x in lines) for i in range(len(header))]
    for line in lines:
        sys.stdout.write("  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
