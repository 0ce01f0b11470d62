"""Matplotlib charts (Agg backend): Gantt chart, scaling curves, breakdown bars, tune curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from schedopt.model.plan import Schedule
from schedopt.report.aggregate import row_spans

__all__ = ["breakdown_chart", "gantt_chart", "pick_curves", "scaling_chart", "steady_window",
           "tied_curves", "tune_chart"]

_COLORS = {"io": "#9e9e9e", "h2d": "#795548", "fwd": "#4caf50", "bwd": "#2196f3",
           "comm": "#ff9800", "update": "#9c27b0", "ag": "#00bcd4", "rs": "#ff5722"}
#: Kinds that are always in the legend; the others (a sharded plan's all-gathers and
#: reduce-scatters) only when drawn.
_ALWAYS = ("io", "h2d", "fwd", "bwd", "comm", "update")


def steady_window(schedule: Schedule, iterations: int) -> tuple[float, float, list[int]]:
    """The last ``iterations`` periods of the schedule, ending where the last iteration's compute
    ends, and the iterations that have tasks in it."""
    last = max(k[1] for k in schedule.tasks if k[0] == "fwd")
    end = max(e for k, (_, e) in schedule.tasks.items()
              if k[1] == last and "compute" in schedule.resources[k])
    start = max(0.0, end - iterations * schedule.iteration_time_s)
    keep = sorted({k[1] for k, (s, e) in schedule.tasks.items() if e > start and s < end})
    return start, end, keep


def gantt_chart(schedule: Schedule, path: str | Path, *, title: str = "",
                iterations: int | None = 2, pixels: int = 1400) -> None:
    """Draw the last ``iterations`` steady-state periods, one row per resource.

    The window ends where the last simulated iteration's compute ends and spans ``iterations``
    iteration times (the cold start is left out); tasks crossing its edges are clipped. Tasks of
    one kind on one row closer together than a pixel are drawn as one bar (time and memory grow
    linearly with the tasks).

    Parameters
    ----------
    schedule
        A schedule simulated with ``record=True``.
    path
        Output file; the format follows the suffix (PNG, SVG, PDF).
    iterations
        Periods shown; None shows the whole simulation from time 0, cold start included.
    pixels
        Bars per row and kind at most (about the plot's width in pixels).
    """
    if iterations is None:
        t0 = 0.0
        t1 = max(e for _, e in schedule.tasks.values())
        spans = row_spans(schedule, budget=pixels)
    else:
        t0, t1, keep = steady_window(schedule, iterations)
        spans = row_spans(schedule, budget=pixels, keep=keep, window=(t0, t1))
    rows: dict[str, int] = {}
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for sp in spans:
        y = rows.setdefault(sp.row, len(rows))
        bars.setdefault((y, sp.kind), []).append(((sp.start - t0) * 1e3, (sp.end - sp.start) * 1e3))
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.45 * max(len(rows), 3)))
    for (y, kind), xr in bars.items():
        ax.broken_barh(xr, (y - 0.4, 0.8), facecolors=_COLORS.get(kind, "#607d8b"),
                       edgecolor="white", linewidth=0.2)
    if iterations is not None:
        for k in range(1, iterations):
            ax.axvline(k * schedule.iteration_time_s * 1e3, color="black", linewidth=0.6,
                       linestyle="--")
    ax.set_yticks(list(rows.values()), list(rows.keys()))
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) * 1e3)
    ax.set_xlabel("time (ms)" if iterations is None else
                  f"time (ms) in the last {iterations} steady-state iterations (dashed: period)")
    drawn = {kind for _, kind in bars}
    shown = [k for k in _COLORS if k in _ALWAYS or k in drawn]
    handles = [plt.Rectangle((0, 0), 1, 1, color=_COLORS[k]) for k in shown]
    ax.legend(handles, shown, ncol=8, loc="upper center", bbox_to_anchor=(0.5, -0.35),
              frameon=False)
    period = f"iteration time {schedule.iteration_time_s * 1e3:.2f} ms"
    ax.set_title(f"{title}: {period}" if title else period)
    fig.tight_layout()
    _save(fig, path)


def _save(fig: Any, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pick_curves(series: Mapping[str, Sequence[tuple[int, float]]], limit: int,
                always: Sequence[str] = ("optimal",)) -> list[str]:
    """The ``limit`` series with the highest value at their largest size, plus ``always``."""
    kept = [n for n in always if n in series]
    ranked = sorted((n for n in series if n not in kept),
                    key=lambda n: -max(series[n], key=lambda p: p[0])[1])
    chosen = set(kept + ranked[:max(limit - len(kept), 0)])
    return [n for n in series if n in chosen]


def scaling_chart(series: Mapping[str, Sequence[tuple[int, float]]], path: str | Path, *,
                  title: str = "", ylabel: str = "throughput (samples/s)",
                  limit: int | None = 5) -> None:
    """Throughput against GPUs on log-log axes, with ideal scaling from the smallest size.

    The ideal line is ``y0 * x / x0``: the best throughput ``y0`` at the smallest size ``x0``
    (one node), scaled linearly, evaluated at every size shown.

    Parameters
    ----------
    series
        Policy name -> list of ``(gpus, throughput)``.
    path
        Output file (PNG, SVG, PDF).
    limit
        Draw only this many curves: the fastest at the largest size (a series named
        ``optimal`` and the first DDP series always). Equal curves are one line whose label
        names them all (``a = b (equal)``). None draws all.
    """
    groups = {g[0]: g for g in tied_curves(series)}  # equal curves: one line, every name
    lead = {n: first for first, g in groups.items() for n in g}
    always = [lead[n] for n in series if n == "optimal" or n.split(":")[0] == "ddp"]
    names = list(groups) if limit is None else pick_curves(
        {n: series[n] for n in groups}, limit, list(dict.fromkeys(always)))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    styles = ["-", "--", "-.", ":"]
    markers = ["o", "s", "^", "v", "D", "x", "+", "*"]
    for i, group in enumerate(groups[n] for n in names):
        xs, ys = zip(*sorted(series[group[0]]), strict=True)
        label = group[0] if len(group) == 1 else " = ".join(group) + " (equal)"
        line = ax.plot(xs, ys, marker=markers[i % len(markers)],
                       linestyle=styles[i % len(styles)], label=label)[0]
        if "optimal" in group:
            line.set_color("black")
            line.set_linewidth(2.0)
    sizes = sorted({p[0] for pts in series.values() for p in pts})
    x0 = sizes[0]
    y0 = max(p[1] for pts in series.values() for p in pts if p[0] == x0)
    ax.plot(sizes, [y0 * x / x0 for x in sizes], color="grey", linewidth=0.9, linestyle=":",
            label="ideal (linear from the smallest size)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(x) for x in sizes])
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    left_out = len(series) - sum(len(groups[n]) for n in names)
    ax.legend(fontsize=8, title=f"{left_out} more not drawn" if left_out else None,
              title_fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    _save(fig, path)


def tied_curves(series: Mapping[str, Sequence[tuple[int, float]]],
                rel: float = 1e-6) -> list[list[str]]:
    """The names of ``series`` grouped by equal curves (same sizes, values within ``rel``),
    in order of first appearance: one line is drawn per group, labelled with every name."""
    groups: list[list[str]] = []
    for name, pts in series.items():
        mine = sorted(pts)
        for group in groups:
            other = sorted(series[group[0]])
            if len(other) == len(mine) and all(
                    a[0] == b[0] and abs(a[1] - b[1]) <= rel * max(abs(a[1]), abs(b[1]))
                    for a, b in zip(mine, other, strict=True)):
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


def breakdown_chart(rows: Sequence[tuple[str, dict[str, float]]], path: str | Path, *,
                    title: str = "") -> None:
    """Stacked bars of the iteration-time breakdown, one bar per policy.

    Parameters
    ----------
    rows
        ``(policy, breakdown dict)`` pairs; the breakdown keys are those of
        :meth:`schedopt.model.plan.Breakdown.as_dict`.
    path
        Output file (PNG, SVG, PDF).
    """
    parts = [("forward_s", "#4caf50"), ("backward_s", "#2196f3"), ("update_s", "#9c27b0"),
             ("exposed_comm_s", "#ff9800"), ("io_stall_s", "#9e9e9e")]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(rows) + 2), 4.2))
    names = [r[0] for r in rows]
    bottom = [0.0] * len(rows)
    for key, color in parts:
        vals = [r[1][key] * 1e3 for r in rows]
        ax.bar(names, vals, bottom=bottom, color=color,
               label=key.removesuffix("_s").replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("iteration time (ms)")
    ax.set_ylim(0, max(bottom, default=1.0) * 1.12)  # headroom above the tallest bar
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    _save(fig, path)


def tune_chart(rows: Sequence[dict[str, Any]], path: str | Path, *,
               optimum_s: float | None = None, title: str = "") -> None:
    """One panel per framework: iteration time against its knob, default, best and optimum.

    Parameters
    ----------
    rows
        ``tune --json`` objects (``framework``, ``knob``, ``unit``, ``default``,
        ``default_time_s``, ``best``, ``best_time_s``, ``curve``).
    path
        Output file (PNG, SVG, PDF).
    optimum_s
        The optimized plan's iteration time (a horizontal line).
    """
    n = max(len(rows), 1)
    fig, axes = plt.subplots(1, n, figsize=(3.4 * n + 0.6, 3.6), squeeze=False)
    for ax, r in zip(axes[0], rows, strict=False):
        xs = [p[0] for p in r["curve"]]
        ys = [p[1] * 1e3 for p in r["curve"]]
        positive = [x > 0 for x in xs]
        ax.plot([x for x, ok in zip(xs, positive, strict=True) if ok],
                [y for y, ok in zip(ys, positive, strict=True) if ok], ".-", color="#1f77b4",
                linewidth=0.8, markersize=3, label="knob value")
        ax.set_xscale("log")
        ax.axhline(r["default_time_s"] * 1e3, color="#d62728", linestyle="--", linewidth=0.8,
                   label="defaults")
        if r["best"] is not None and r["best"] > 0:
            ax.plot([r["best"]], [r["best_time_s"] * 1e3], "o", color="#2ca02c",
                    label="best setting")
        if optimum_s is not None:
            ax.axhline(optimum_s * 1e3, color="black", linewidth=1.0, label="optimum")
        ax.set_xlabel(f"{r['knob']} ({r['unit']})")
        ax.set_title(r["framework"])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("iteration time (ms)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)
