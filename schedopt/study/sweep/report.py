"""Reports over a sweep database: speedups, near-optimal policies, best knobs, and plots.

An *instance* is one trace on one cluster at one size. Its *optimum* is the fastest plan any
optimizer setting of the sweep found for it (proven optimal where the row's status says so).

Rows come from a file anyone may have written: :func:`check_rows` turns a row with an odd cell
(a NaN, infinite, zero or negative time, a value of the wrong type, stored JSON that does not
decode) into a failed row with a note, so that every figure is computed from sound rows only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.model.limits import MAX_SECONDS
from schedopt.study.sweep.store import COLUMNS

__all__ = [
    "best_knobs",
    "check_rows",
    "efficiency_rows",
    "instance_label",
    "near_optimal",
    "speedup_grid",
    "speedup_rows",
    "write_plots",
]

#: A policy is "within 1%" of the optimum when its iteration time is at most this factor of it.
NEAR = 1.01
#: Shortest iteration time a report takes (seconds): ratios of times stay finite.
MIN_ITERATION_S = 1e-12

_DESCRIBE = ("key", "trace", "cluster", "nodes", "kind", "policy", "version", "host",
             "finished_at")


def _number(value: Any, low: float, high: float) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and low <= value <= high)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a stored row, or None."""
    for name in ("key", "trace", "cluster"):
        if not isinstance(row.get(name), str) or not row[name]:
            return f"{name} is not text (got {row.get(name)!r:.60})"
    if row.get("kind") not in ("policy", "optimize"):
        return f"kind is neither policy nor optimize (got {row.get('kind')!r:.60})"
    if row.get("nodes") is not None and not _count(row["nodes"]):
        return f"nodes is not a positive integer (got {row['nodes']!r:.60})"
    for name in ("options", "breakdown", "tail"):
        value = row.get(name)
        if value is not None and not isinstance(value, dict):
            what = "not valid JSON" if isinstance(value, str | bytes) else "not a mapping"
            return f"{name} is {what} (got {value!r:.60})"
    for name in ("policy", "status", "method", "version", "host", "finished_at"):
        if row.get(name) is not None and not isinstance(row[name], str):
            return f"{name} is not text (got {row[name]!r:.60})"
    if row.get("error") is not None:
        return None if isinstance(row["error"], str) else (
            f"error is not text (got {row['error']!r:.60})")
    if row["kind"] == "policy" and not row.get("policy"):
        return "policy row without a policy"
    if not _number(row.get("iteration_time_s"), MIN_ITERATION_S, MAX_SECONDS):
        return (f"iteration_time_s is not a time between {MIN_ITERATION_S:g} and "
                f"{MAX_SECONDS:g} s (got {row.get('iteration_time_s')!r:.60})")
    if not _count(row.get("world_size")):
        return f"world_size is not a positive integer (got {row.get('world_size')!r:.60})"
    for name in ("intra_bw_Bps", "inter_bw_Bps"):
        if row.get(name) is not None and not _number(row[name], 1e-300, math.inf):
            return f"{name} is not a positive bandwidth (got {row[name]!r:.60})"
    for name in ("first_iteration_s", "comm_busy_s", "objective_s", "bound_s", "gap",
                 "solve_time_s", "wall_s"):
        if row.get(name) is not None and not _number(row[name], 0.0, MAX_SECONDS):
            return (f"{name} is not a finite number from 0 to {MAX_SECONDS:g} "
                    f"(got {row[name]!r:.60})")
    for name, value in (row.get("breakdown") or {}).items():
        if not _number(value, 0.0, MAX_SECONDS):
            return f"breakdown.{name} is not a time from 0 to {MAX_SECONDS:g} s (got {value!r:.60})"
    tail = row.get("tail") or {}
    if tail.get("heaviest_layer") is not None and not isinstance(tail["heaviest_layer"], str):
        return f"tail.heaviest_layer is not text (got {tail['heaviest_layer']!r:.60})"
    if tail.get("exposed_s") is not None and not _number(tail["exposed_s"], 0.0, MAX_SECONDS):
        return (f"tail.exposed_s is not a time from 0 to {MAX_SECONDS:g} s "
                f"(got {tail['exposed_s']!r:.60})")
    return None


def check_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows a report can use, and one note per row it cannot.

    Parameters
    ----------
    rows
        Rows as :meth:`~schedopt.study.sweep.store.Store.rows` gives them.

    Returns
    -------
    rows : list of dict
        Every row; one with an odd cell becomes a failed row (its figures cleared, its ``error``
        saying what is wrong), so it is counted as failed and left out of every figure, and
        the rows hold only JSON values (no NaN or infinity).
    notes : list of str
        ``row KEY: what is wrong``, one line per such row.
    """
    out, notes = [], []
    for row in rows:
        why = _problem(row)
        if why is None:
            out.append(row)
            continue
        why = " ".join(why.split())
        plain = dict.fromkeys(COLUMNS)
        for name in _DESCRIBE:
            value = row.get(name)
            plain_value = value is None or (isinstance(value, str | int)
                                            and not isinstance(value, bool))
            plain[name] = value if plain_value else repr(value)[:60]
        plain["error"] = f"unreadable stored row: {why}"
        out.append(plain)
        key = row.get("key")
        notes.append(f"row {key if isinstance(key, str) else repr(key)!s:.60}: {why}; left out "
                     "of the figures")
    return out, notes


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
