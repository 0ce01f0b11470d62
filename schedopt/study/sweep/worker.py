"""Running one sweep row: load, plan or solve, simulate; never raises, returns a record."""

from __future__ import annotations

import math
import socket
import time
from datetime import UTC, datetime
from typing import Any

from schedopt.errors import SchedoptError

__all__ = ["run_row"]


def _finite(name: str, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise SchedoptError("is not finite", name, value)
    return value


def _policy_fields(row: dict[str, Any], trace: Any, cluster: Any) -> dict[str, Any]:
    from schedopt.policies import make_plan
    from schedopt.simulate.simulator import simulate

    plan = make_plan(trace, cluster, row["policy"])
    sched = simulate(trace, cluster, plan, record=True)
    return {"plan": plan, "sched": sched}


def _optimize_fields(row: dict[str, Any], trace: Any, cluster: Any) -> dict[str, Any]:
    from schedopt.optimize import SolveOptions, solve
    from schedopt.simulate.simulator import simulate

    res = solve(trace, cluster, SolveOptions.model_validate(row["options"]))
    if res.interrupted:  # a truncated solve is not this row's result: stop, store nothing
        raise KeyboardInterrupt
    sched = simulate(trace, cluster, res.plan, record=True)
    return {
        "plan": res.plan,
        "sched": sched,
        "status": str(res.status),
        "objective_s": _finite("objective_s", res.objective_s),
        "bound_s": _finite("bound_s", res.bound_s),
        "gap": _finite("gap", res.gap),
        "solve_time_s": res.solve_time_s,
        "method": res.method,
    }


def _tail(trace: Any, plan: Any, sched: Any) -> dict[str, Any] | None:
    """The bucket whose communication is exposed longest after the last backward ends.

    Looks at the last simulated iteration: ``exposed_s`` is the part of that bucket's
    communication after the end of the backward; ``num_layers`` counts the layers its members
    hold, ``heaviest_layer`` the one with the most gradient bytes. None when no communication
    outlasts the backward.
    """
    from schedopt.model.plan import split_member

    last = sched.iterations - 1
    bwd_end = max((end for key, (_, end) in sched.tasks.items()
                   if key[0] == "bwd" and key[1] == last), default=None)
    if bwd_end is None:
        return None
    best: tuple[float, int] | None = None
    for key, (start, end) in sched.tasks.items():
        if key[0] == "comm" and key[1] == last and end > bwd_end:
            exposed = end - max(start, bwd_end)
            if best is None or exposed > best[0]:
                best = (exposed, key[2])
    if best is None:
        return None
    layer_of: dict[str, int] = {}  # a tied weight belongs to its earliest layer
    layer_bytes: dict[int, int] = {}
    for i, la in enumerate(trace.layers):
        layer_bytes[i] = sum(t.bytes for t in la.tensors)
        for t in la.tensors:
            layer_of.setdefault(t.name, i)
    layers = {layer_of[split_member(m)[0]] for m in plan.buckets[best[1]]}
    heaviest = max(sorted(layers), key=lambda i: layer_bytes[i])
    return {"bucket": best[1], "exposed_s": best[0],
            "bytes": int(plan.bucket_bytes(trace)[best[1]]), "num_layers": len(layers),
            "heaviest_layer": trace.layers[heaviest].name}


def _describe(row: dict[str, Any], cluster: Any | None) -> dict[str, Any]:
    from schedopt import __version__

    out: dict[str, Any] = {
        "key": row["key"], "trace": row["trace"], "cluster": row["cluster"],
        "nodes": row["nodes"], "kind": row["kind"], "policy": row["policy"],
        "options": row["options"], "version": __version__, "host": socket.gethostname(),
    }
    if cluster is not None:
        inter = cluster.inter_link if cluster.nodes > 1 else None
        out.update(world_size=cluster.world_size, gpus_per_node=cluster.gpus_per_node,
                   intra_bw_Bps=cluster.intra_link.bandwidth_Bps,
                   inter_bw_Bps=inter.bandwidth_Bps if inter is not None else None)
    return out


def run_row(row: dict[str, Any]) -> dict[str, Any]:
    """Run one row (as :meth:`Row.as_dict` gives it) and return its record for the store.

    Any exception becomes the record's ``error`` (``Type: message``); the other result fields
    are then empty. A NaN or infinite result is an error.
    """
    from schedopt.files import load_cluster, load_trace

    t0 = time.perf_counter()
    cluster = None
    try:
        trace = load_trace(row["trace"])
        cluster = load_cluster(row["cluster"], row["nodes"])
        if row["kind"] == "policy":
            got = _policy_fields(row, trace, cluster)
        else:
            got = _optimize_fields(row, trace, cluster)
        sched = got.pop("sched")
        plan = got.pop("plan")
        got.update(
            iteration_time_s=_finite("iteration_time_s", sched.iteration_time_s),
            first_iteration_s=_finite("first_iteration_s", sched.first_iteration_s),
            breakdown=sched.breakdown.as_dict(),
            comm_busy_s=sched.comm_busy_s,
            tail=_tail(trace, plan, sched),
            buckets=plan.num_buckets,
        )
        got.setdefault("status", "SIMULATED")
        got.setdefault("method", "simulate")
        error = None
    except Exception as exc:  # a failed row is stored, never fatal to the sweep
        got = {}
        error = (f"{type(exc).__name__}: {exc}".splitlines() or ["error"])[0]
    record = _describe(row, cluster)
    record.update(got)
    record["error"] = error
    record["wall_s"] = time.perf_counter() - t0
    record["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return record
