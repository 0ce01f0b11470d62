"""Regenerate the stored optimized plans of the benchmark matrix (offline).

Usage::

    python solutions/generate.py                   # the benchmark's limits, one worker, seed 0
    python solutions/generate.py --time-limit 300 --workers 2

Every one-stage case of ``benchmarks/bench_optimize.py`` (ResNet-50, GPT-2 1.5B, synthetic-5000:
:func:`stored_cases`; its several-stage cases run on clusters derived in the benchmark, which a
stored recipe cannot name) is solved with its limit (10 s for ResNet-50, 60 s for the others;
``--time-limit`` overrides) and written to
``solutions/<instance>__<options>.json``: how to rebuild the instance (shipped trace, compute
scale, cluster, nodes), the options, status, objective, bound, gap, the simulated iteration
time, the schedopt version, and the plan (bound to the trace and cluster by their hashes).
``tests/test_solutions.py`` only re-simulates these plans.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from schedopt import __version__
from schedopt.files import write_json_atomic
from schedopt.optimize import SolveOptions, solve

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks" / "bench_optimize.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_optimize", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_optimize"] = mod
    spec.loader.exec_module(mod)
    return mod


def recipe(case: Any) -> dict[str, Any]:
    """How to rebuild the case's trace and cluster from shipped instances."""
    name = case.name
    if name.startswith("resnet50-f"):
        base, fwd_ms = "resnet50-v100-b64", float(name.removeprefix("resnet50-f")[:-2])
        from schedopt.files import load_trace

        scale = fwd_ms * 1e-3 / float(load_trace(base).forward.sum())
    elif name.startswith("gpt2-1.5b-r"):
        base = "gpt2-1.5b-v100-fp16"
        from schedopt.files import load_cluster, load_trace

        tr = load_trace(base)
        _, beta = load_cluster("dgx1-v100-4n-ib-edr").alpha_beta()
        scale = float(name.removeprefix("gpt2-1.5b-r")) * beta * tr.total_bytes / tr.compute_s
    else:
        base, scale = name, None
    cluster_name = "dgx1-v100-4n-ib-edr" if name.startswith("gpt2") else "10gbe-k80-family"
    nodes = None if name.startswith("gpt2") else 8
    return {"trace": base, "compute_scale": scale, "trace_name": name,
            "cluster": cluster_name, "nodes": nodes}


def stored_cases(bench: Any) -> list[Any]:
    """The cases whose plans are stored: the benchmark's one-stage matrix, each rebuilt from
    shipped instances by :func:`recipe`."""
    return bench.resnet50_cases() + bench.gpt2_cases() + bench.synthetic_cases()


def file_name(case: Any) -> str:
    """The stored file of ``case``: ``<instance>__<options>.json``."""
    return f"{case.name}__{case.label.replace('+', '_').replace(' ', '')}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per case (default: the benchmark's)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="substring of the instance names to solve")
    args = ap.parse_args(argv)
    bench = _bench()
    for case in stored_cases(bench):
        if args.only and args.only not in case.name:
            continue
        limit = args.time_limit or case.time_limit_s
        opts = SolveOptions(time_limit_s=limit, workers=args.workers, seed=args.seed,
                            **case.options)
        res = solve(case.trace, case.cluster, opts)
        data = {
            "instance": recipe(case),
            "options": opts.model_dump(mode="json"),
            "status": str(res.status),
            "objective_s": res.objective_s,
            "bound_s": res.bound_s,
            "gap": res.gap,
            "iteration_time_s": res.iteration_time_s,
            "solve_time_s": res.solve_time_s,
            "method": res.method,
            "hint_policy": res.hint_policy,
            "hint_iteration_time_s": res.hint_iteration_time_s,
            "baselines": [b.as_dict() for b in res.baselines],
            "notes": res.notes,
            "schedopt_version": __version__,
            "plan": res.plan.model_dump(mode="json"),
        }
        out = HERE / file_name(case)
        write_json_atomic(out, data)
        print(f"{out.name}: {res.status} {res.iteration_time_s * 1e3:.3f} ms, gap "
              f"{res.gap * 100:.3f}%, {res.solve_time_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
