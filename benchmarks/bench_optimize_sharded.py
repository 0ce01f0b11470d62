"""Benchmark of the sharded search (``optimize --sharding``): a 70B-shaped trace under a memory cap.

Usage::

    python benchmarks/bench_optimize_sharded.py     # 5 rows, at most 60 s each
    python benchmarks/bench_optimize_sharded.py --time-limit 10 --synthetic
    python benchmarks/bench_optimize_sharded.py --json out.json
    python benchmarks/bench_optimize_sharded.py --exact     # the exact programme's times
    python benchmarks/bench_optimize_sharded.py --cpsat --work-limit 30   # with / without CP-SAT

Instance: the shipped ``instances/traces/llama*-70b*`` trace when there is one, else a
synthetic trace of the same shape (Llama-2/3 70B: hidden 8192, 80 blocks, 64 query and 8
key-value heads, MLP 28672, vocabulary 128256, bfloat16; a block is one layer holding its nine
tensors; compute from 2 x parameters x 4096 tokens plus attention at 450 TFLOP/s, backward twice
the forward; Adam step 0.37 s for all parameters on one GPU) on ``dgx-h100-4n`` (32 GPUs).
Rows (one worker, seed 0): full sharding without a cap, then under a cap (for the shipped and
the synthetic traces the fixed caps of :data:`SHIPPED_CAPS` and :data:`SYNTHETIC_CAP`, 3/4 of
the peaks of the uncapped plans this benchmark first found; for ``--trace`` 3/4 of the
uncapped plan's peak, so that plan does not fit),
and grad-op without a cap; the same two full
rows for the A100 trace (``llama*-70b-a100*``, else the same synthetic one) on ``dgx-a100-4n``. The
table prints instance, mode, cap, method, the objective, the bound, the gap, the solve time, the
peak and the number of units; the target is a gap within 1% in 60 s. The load average before
and after is printed (the searches stop on deterministic work, so the plans and bounds do not
depend on it; the times do).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.sharding import solve as sharded_solve
from schedopt.optimize.sharding.evaluate import build_sharded, config_of_plan, step_time
from schedopt.optimize.sharding.exact import best_units, separable_classes

ROOT = Path(__file__).resolve().parents[1]
HIDDEN, BLOCKS, KV, MLP, VOCAB, TOKENS = 8192, 80, 1024, 28672, 128256, 4096
FLOPS = 450e12

#: Caps (bytes) of the capped rows on the shipped traces, by GPU: 3/4 of the peaks (3.27 GB
#: and 1.88 GB) of the uncapped plans of commit 37b8612. Fixed, because the uncapped search
#: may return another optimal plan with another peak.
SHIPPED_CAPS = {"h100": 2_453_716_992, "a100": 1_409_310_720}

#: Cap (bytes) of the capped rows on the synthetic trace (both GPUs): 3/4 of the 7.24 GB peak
#: of its uncapped plan on H100.
SYNTHETIC_CAP = 5_426_454_528


def synthetic_70b(blocks: int = BLOCKS) -> Trace:
    """The 70B-shaped trace (see the module) with ``blocks`` blocks."""

    def tensors(prefix: str, shapes: dict[str, int]) -> list[dict[str, Any]]:
        return [{"name": f"{prefix}.{k}", "bytes": 2 * v, "dtype": "bfloat16"}
                for k, v in shapes.items()]

    block = {"q": HIDDEN * HIDDEN, "k": HIDDEN * KV, "v": HIDDEN * KV, "o": HIDDEN * HIDDEN,
             "gate": HIDDEN * MLP, "up": HIDDEN * MLP, "down": MLP * HIDDEN,
             "ln1": HIDDEN, "ln2": HIDDEN}
    params = sum(block.values())
    fwd = (2 * params * TOKENS + 2 * TOKENS * TOKENS * HIDDEN) / FLOPS
    head = 2 * VOCAB * HIDDEN * TOKENS / FLOPS
    layers = [{"name": "embed", "forward_s": 2e-4, "backward_s": 4e-4,
               "tensors": tensors("embed", {"w": VOCAB * HIDDEN})}]
    layers += [{"name": f"block.{i}", "forward_s": fwd, "backward_s": 2 * fwd,
                "tensors": tensors(f"block.{i}", block)} for i in range(blocks)]
    layers += [{"name": "norm", "forward_s": 1e-4, "backward_s": 2e-4,
                "tensors": tensors("norm", {"w": HIDDEN})},
               {"name": "lm_head", "forward_s": head, "backward_s": 2 * head,
                "tensors": tensors("lm_head", {"w": VOCAB * HIDDEN})}]
    return Trace.model_validate({"name": "synthetic-70b", "batch_size": 1, "update_s": 0.37,
                                 "source": "bench_optimize_sharded.py: Llama 70B shapes",
                                 "layers": layers})


def the_trace(path: Path | None = None, gpu: str = "h100", synthetic: bool = False) -> Trace:
    """``path``, else the shipped ``llama*-70b-<gpu>*`` trace if any (and not
    ``synthetic``), else :func:`synthetic_70b`."""
    if path is not None:
        return load_trace(str(path))
    if synthetic:
        return synthetic_70b()
    shipped = sorted((ROOT / "instances" / "traces").glob(f"llama*-70b-{gpu}*.json"))
    return load_trace(str(shipped[0])) if shipped else synthetic_70b()


def run(trace: Trace, cluster: Cluster, mode: str, cap: int | None,
        time_limit_s: float) -> dict[str, Any]:
    """Solve one row and print it."""
    inst = build_sharded(trace, cluster, mode)
    res = solve(trace, cluster, SolveOptions(sharding=mode, memory_cap_bytes=cap,
                                             time_limit_s=time_limit_s, baselines=False))
    config = config_of_plan(inst, res.plan)
    assert config is not None
    peak = step_time(inst, config).peak_bytes
    assert cap is None or peak <= cap
    row = {"instance": f"{trace.name} on {cluster.name}", "mode": mode, "cap": cap,
           "method": str(res.method), "objective_s": res.objective_s,
           "iteration_time_s": res.iteration_time_s, "bound_s": res.bound_s, "gap": res.gap,
           "time_s": res.solve_time_s, "peak_bytes": peak, "units": len(config.starts),
           "status": str(res.status)}
    print(f"{row['instance']:<36} {mode:<8} {'-' if cap is None else f'{cap / 1e9:.2f}':>7} "
          f"{row['method']:<13} {res.objective_s * 1e3:>12.3f} {res.bound_s * 1e3:>9.3f} "
          f"{res.gap:>7.3%} {res.solve_time_s:>7.1f} {peak / 1e9:>8.2f} {len(config.starts):>5}",
          flush=True)
    return row


def exact_sizes(sizes: tuple[int, ...] = (40, 80, 120)) -> None:
    """Time the exact programme (:mod:`schedopt.optimize.sharding.exact`) on the synthetic
    70B-shaped trace with ``n - 3`` blocks (``n`` layers) on ``dgx-h100-4n``, every separable
    class: one row per size and class (layers, class, seconds, the class optimum, units)."""
    cluster = load_cluster(str(ROOT / "instances" / "clusters" / "dgx-h100-4n.json"))
    print(f"{'layers':>6} {'depths/streams':<15} {'time s':>7} {'step ms':>10} {'units':>5}")
    for n in sizes:
        trace = synthetic_70b(n - 3)
        inst = build_sharded(trace, cluster, "full")
        for k in separable_classes(inst):
            t0 = time.perf_counter()
            found = best_units(inst, k)
            dt = time.perf_counter() - t0
            assert found is not None
            label = f"{k.forward_prefetch}/{k.backward_prefetch}/{k.streams}"
            print(f"{n:>6} {label:<15} {dt:>7.3f} {found[0] * 1e3:>10.3f} "
                  f"{len(found[1].starts):>5}", flush=True)


def cpsat_rows(work_limit_s: float, blocks: tuple[int, ...] = (8, 12),
               nics: int | None = None) -> list[dict[str, Any]]:
    """The sharded solve with and without its CP-SAT model (``--cpsat``), on the synthetic
    70B-shaped trace cut to ``blocks`` blocks (``blocks + 3`` layers, within
    :data:`~schedopt.optimize.sharding.cpsat.CPSAT_LAYERS`) on ``dgx-h100-4n`` (``nics`` NICs
    per node when given): full sharding without a cap and under 3/4 of the uncapped plan's
    peak, grad-op without; ``work_limit_s`` deterministic seconds each (wall clock 20 times
    that as a safety stop). One row per instance, cap and setting: status, method, the
    objective, the bound, the gap, the solve time and the peak."""
    cluster = load_cluster(str(ROOT / "instances" / "clusters" / "dgx-h100-4n.json"))
    if nics is not None:
        cluster = cluster.model_copy(update={"nics_per_node": nics})
    print(f"{'instance':<24} {'mode':<8} {'cap GB':>7} {'cp-sat':<6} {'status':<9} "
          f"{'method':<13} {'bound by':<9} {'objective ms':>12} {'bound ms':>9} {'gap':>7} "
          f"{'time s':>7} {'peak GB':>8}")
    rows = []
    for b in blocks:
        trace = synthetic_70b(b)
        inst = build_sharded(trace, cluster, "full")
        cap = None
        for mode, capped in (("full", False), ("full", True), ("grad-op", False)):
            for use in (False, True):
                with_cap = cap if capped else None
                row = _cpsat_row(trace, cluster, mode, with_cap, work_limit_s, use)
                rows.append(row)
                if mode == "full" and not capped and use:
                    cap = int(0.75 * step_time(inst, config_of_plan(inst, row["plan"])
                                               ).peak_bytes)  # type: ignore[arg-type]
                row.pop("plan")
    return rows


def _cpsat_row(trace: Trace, cluster: Cluster, mode: str, cap: int | None, work: float,
               use: bool) -> dict[str, Any]:
    """One row of :func:`cpsat_rows` (``use``: with the CP-SAT model)."""
    layers = sharded_solve.CPSAT_LAYERS
    sharded_solve.CPSAT_LAYERS = layers if use else 0
    try:
        res = solve(trace, cluster, SolveOptions(sharding=mode, memory_cap_bytes=cap,
                                                 work_limit_s=work, time_limit_s=20 * work,
                                                 baselines=False))
    finally:
        sharded_solve.CPSAT_LAYERS = layers
    inst = build_sharded(trace, cluster, mode)
    config = config_of_plan(inst, res.plan)
    assert config is not None
    peak = step_time(inst, config).peak_bytes
    assert cap is None or peak <= cap
    name = f"{trace.name}-{len(trace.layers)}"
    print(f"{name:<24} {mode:<8} {'-' if cap is None else f'{cap / 1e9:.2f}':>7} "
          f"{'yes' if use else 'no':<6} {res.status!s:<9} {res.method!s:<13} "
          f"{res.bound_method!s:<9} {res.objective_s * 1e3:>12.3f} {res.bound_s * 1e3:>9.3f} "
          f"{res.gap:>7.3%} {res.solve_time_s:>7.1f} {peak / 1e9:>8.2f}", flush=True)
    return {"instance": name, "mode": mode, "cap": cap, "cpsat": use, "status": str(res.status),
            "method": str(res.method), "bound_method": str(res.bound_method),
            "objective_s": res.objective_s, "bound_s": res.bound_s, "gap": res.gap,
            "time_s": res.solve_time_s, "peak_bytes": peak, "wall_stop": res.wall_stop,
            "plan": res.plan}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--trace", type=Path, default=None, help="Another trace (all rows).")
    ap.add_argument("--synthetic", action="store_true", help="The synthetic 70B-shaped trace.")
    ap.add_argument("--exact", action="store_true", help="Time the exact programme only.")
    ap.add_argument("--cpsat", action="store_true",
                    help="The solve with and without its CP-SAT model on short cuts of the "
                         "synthetic trace (--work-limit deterministic seconds each).")
    ap.add_argument("--work-limit", type=float, default=30.0)
    ap.add_argument("--nics", type=int, default=None, help="NICs per node (--cpsat).")
    ap.add_argument("--blocks", type=str, default="8,12",
                    help="Blocks of the cut traces (--cpsat), comma-separated.")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.cpsat:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        blocks = tuple(int(x) for x in args.blocks.split(","))
        out = cpsat_rows(args.work_limit, blocks, nics=args.nics)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.json is not None:
            args.json.write_text(json.dumps(out, indent=1))
        return
    if args.exact:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        exact_sizes()
        return
    clusters = ROOT / "instances" / "clusters"
    h100 = load_cluster(str(clusters / "dgx-h100-4n.json"))
    a100 = load_cluster(str(clusters / "dgx-a100-4n.json"))
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'instance':<36} {'mode':<8} {'cap GB':>7} {'method':<13} {'objective ms':>12} "
          f"{'bound ms':>9} {'gap':>7} {'time s':>7} {'peak GB':>8} {'units':>5}")
    rows = []
    for gpu, cluster in (("h100", h100), ("a100", a100)):
        trace = the_trace(args.trace, gpu, args.synthetic)
        free = run(trace, cluster, "full", None, args.time_limit)
        cap = int(0.75 * free["peak_bytes"])
        if args.trace is None:
            cap = SYNTHETIC_CAP if trace.name == "synthetic-70b" else SHIPPED_CAPS[gpu]
        rows += [free, run(trace, cluster, "full", cap, args.time_limit)]
        if cluster is h100:
            rows.append(run(trace, cluster, "grad-op", None, args.time_limit))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
