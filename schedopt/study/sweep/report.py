"""Reports over a sweep database: speedups, near-optimal policies, best knobs, and plots.

An *instance* is one trace on one cluster at one size. Its *optimum* is the fastest plan any
optimizer setting of the sweep found for it (proven optimal where the row's status says so).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from schedopt.errors import SchedoptError

__all__ = [
    "best_knobs",
    "efficiency_rows",
    "instance_label",
    "near_optimal",
    "speedup_grid",
    "speedup_rows",
    "write_plots",
]

#: A policy is "within 1%" of the optimum when its iteration time is at most this factor of it.
NEAR = 1.01


def instance_label(row: dict[str, Any]) -> tuple[str, str]:
    """``(trace, cluster@nodes)`` of a row."""
    where = row["cluster"] if row["nodes"] is None else f"{row['cluster']}@{row['nodes']}"
    return row["trace"], where


def bandwidth_label(row: dict[str, Any]) -> str:
    """The bottleneck link of a row's cluster in GB/s (inter-node when nodes > 1)."""
    bw = row["inter_bw_Bps"] if row["inter_bw_Bps"] is not None else row["intra_bw_Bps"]
    return f"{bw / 1e9:g} GB/s" if bw else "?"


def setting_label(options: dict[str, Any]) -> str:
    """Short name of an optimizer setting (``optimize`` plus its non-default model options)."""
    skip = ("time_limit_s", "workers", "seed", "cp_sat", "relative_gap", "baselines")
    parts = [f"{k}={v}" for k, v in sorted(options.items()) if k not in skip]
    return "optimize" + (":" + ",".join(parts) if parts else "")


def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["error"] is None and r["iteration_time_s"] is not None]


def optima(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per instance, its fastest optimize row."""
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in _ok(rows):
        key = instance_label(r)
        if r["kind"] == "optimize" and (
            key not in best or r["iteration_time_s"] < best[key]["iteration_time_s"]
        ):
            best[key] = r
    return best


def speedup_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per instance and policy: the optimum's speedup over the policy (policy time / optimum)."""
    best = optima(rows)
    out = []
    for r in _ok(rows):
        key = instance_label(r)
        if r["kind"] != "policy" or key not in best:
            continue
        opt = best[key]
        out.append({
            "trace": key[0], "cluster": key[1], "world_size": r["world_size"],
            "bandwidth": bandwidth_label(r), "policy": r["policy"],
            "policy_s": r["iteration_time_s"], "optimum_s": opt["iteration_time_s"],
            "optimum_status": opt["status"],
            "speedup": r["iteration_time_s"] / opt["iteration_time_s"],
        })
    out.sort(key=lambda d: (d["trace"], d["cluster"], d["policy"]))
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def speedup_grid(rows: list[dict[str, Any]]) -> dict[str, dict[tuple[str, int], float]]:
    """Per policy spec, per (bandwidth, world size): geometric mean speedup over the traces."""
    acc: dict[str, dict[tuple[str, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in speedup_rows(rows):
        acc[s["policy"]][(s["bandwidth"], s["world_size"])].append(s["speedup"])
    return {p: {k: _geomean(v) for k, v in cells.items()} for p, cells in acc.items()}


def near_optimal(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy spec: on how many instances it is within 1% of the optimum, and which."""
    acc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in speedup_rows(rows):
        acc[s["policy"]].append(s)
    out = []
    for pol, items in sorted(acc.items()):
        near = [f"{s['trace']} / {s['cluster']}" for s in items if s["speedup"] <= NEAR]
        out.append({"policy": pol, "instances": len(items), "within_1pct": len(near),
                    "where": near})
    return out


def best_knobs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per framework and cluster: the spec with the lowest geometric-mean time over traces.

    Each time is first divided by the best policy time of its instance, so that every trace
    weighs the same; only specs present for every trace of the cluster compete.
    """
    ok = [r for r in _ok(rows) if r["kind"] == "policy"]
    fastest: dict[tuple[str, str], float] = {}
    for r in ok:
        key = instance_label(r)
        fastest[key] = min(fastest.get(key, math.inf), r["iteration_time_s"])
    rel: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict))
    for r in ok:
        trace, where = instance_label(r)
        framework = r["policy"].partition(":")[0]
        rel[(framework, where)][r["policy"]][trace] = (
            r["iteration_time_s"] / fastest[(trace, where)])
    out = []
    for (framework, where), specs in sorted(rel.items()):
        n = max(len(v) for v in specs.values())
        scored = sorted((_geomean(list(v.values())), spec) for spec, v in specs.items()
                        if len(v) == n)
        score, spec = scored[0]
        out.append({"framework": framework, "cluster": where, "best": spec,
                    "relative_time": score, "candidates": len(specs), "traces": n})
    return out


def efficiency_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row: scaling efficiency, exposed communication, and how much communication hides.

    ``efficiency`` is (forward + backward + update) / iteration time (the single-GPU iteration
    without I/O over the distributed one); ``hidden`` is 1 - exposed / total communication time.
    """
    out = []
    for r in _ok(rows):
        bd = r["breakdown"] or {}
        compute = bd.get("forward_s", 0.0) + bd.get("backward_s", 0.0) + bd.get("update_s", 0.0)
        comm = r["comm_busy_s"] or 0.0
        exposed = bd.get("exposed_comm_s", 0.0)
        trace, where = instance_label(r)
        tail = r["tail"] or {}
        out.append({
            "trace": trace, "cluster": where, "world_size": r["world_size"],
            "bandwidth": bandwidth_label(r),
            "what": r["policy"] or setting_label(r["options"] or {}),
            "iteration_s": r["iteration_time_s"], "efficiency": compute / r["iteration_time_s"],
            "comm_s": comm, "exposed_s": exposed,
            "hidden": (1.0 - exposed / comm) if comm > 0 else 1.0,
            "tail_layer": tail.get("heaviest_layer"), "tail_exposed_s": tail.get("exposed_s"),
        })
    out.sort(key=lambda d: (d["trace"], d["cluster"], d["what"]))
    return out


def write_plots(rows: list[dict[str, Any]], folder: str | Path) -> list[Path]:
    """Write ``speedup.png`` (per bandwidth, speedup against world size, one line per policy)
    and ``efficiency.png`` (per trace, scaling efficiency against world size); returns the paths.
    """
    from matplotlib.figure import Figure

    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SchedoptError(f"cannot create folder: {exc.strerror or exc}", "--plot",
                            str(folder)) from None
    grid = speedup_grid(rows)
    bands = sorted({bw for cells in grid.values() for bw, _ in cells})
    paths = []
    if bands:
        fig = Figure(figsize=(4.0 * len(bands), 3.4), layout="constrained")
        axes = fig.subplots(1, len(bands), squeeze=False)[0]
        for ax, bw in zip(axes, bands, strict=True):
            for pol, cells in sorted(grid.items()):
                pts = sorted((ws, v) for (b, ws), v in cells.items() if b == bw)
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", label=pol)
            ax.set_title(bw)
            ax.set_xlabel("GPUs")
            ax.set_ylabel("speedup of the optimum")
            ax.set_xscale("log", base=2)
        axes[-1].legend(fontsize=7)
        paths.append(out / "speedup.png")
        fig.savefig(paths[-1], dpi=110)
    paths.append(_efficiency_plot(rows, out / "efficiency.png"))
    return paths


def _efficiency_plot(rows: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.figure import Figure

    eff = [e for e in efficiency_rows(rows) if not e["what"].startswith("optimize")]
    fig = Figure(figsize=(5.0, 3.4), layout="constrained")
    ax = fig.subplots()
    series: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for e in eff:
        series[(e["trace"], e["bandwidth"])].append((e["world_size"], e["efficiency"]))
    for (trace, bw), pts in sorted(series.items()):
        best: dict[int, float] = {}
        for ws, v in pts:
            best[ws] = max(best.get(ws, 0.0), v)
        xs = sorted(best)
        ax.plot(xs, [best[x] for x in xs], marker="o", label=f"{trace} ({bw})")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("scaling efficiency (best policy)")
    ax.set_xscale("log", base=2)
    if series:
        ax.legend(fontsize=6)
    fig.savefig(path, dpi=110)
    return path
