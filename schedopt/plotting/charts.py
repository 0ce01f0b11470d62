"""Matplotlib charts (Agg backend): Gantt chart of a schedule, scaling curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ..plan import Schedule

__all__ = ["breakdown_chart", "gantt_chart", "scaling_chart"]

_COLORS = {"io": "#9e9e9e", "h2d": "#795548", "fwd": "#4caf50", "bwd": "#2196f3",
           "comm": "#ff9800", "update": "#9c27b0"}


def gantt_chart(schedule: Schedule, path: str | Path, *, title: str = "",
                iterations: int | None = 2) -> None:
    """Draw the recorded tasks of the last ``iterations`` iterations, one row per resource.

    Parameters
    ----------
    schedule
        A schedule simulated with ``record=True``.
    path
        Output file; the format follows the suffix (PNG, SVG, PDF).
    """
    last = max(k[1] for k in schedule.tasks if k[0] == "fwd")
    first = 0 if iterations is None else max(0, last - iterations + 1)
    rows: dict[str, int] = {}
    fig, ax = plt.subplots(figsize=(12, 3.5))
    for key, (start, end) in schedule.tasks.items():
        if not first <= key[1] <= last or end <= start:
            continue
        for res in schedule.resources[key]:
            y = rows.setdefault(res, len(rows))
            ax.barh(y, (end - start) * 1e3, left=start * 1e3, height=0.8,
                    color=_COLORS[key[0]], edgecolor="white", linewidth=0.2)
    ax.set_yticks(list(rows.values()), list(rows.keys()))
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _COLORS.values()]
    ax.legend(handles, list(_COLORS), ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.25),
              frameon=False)
    ax.set_title(title or f"iteration time {schedule.iteration_time_s * 1e3:.2f} ms")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def scaling_chart(series: Mapping[str, Sequence[tuple[int, float]]], path: str | Path, *,
                  title: str = "", ylabel: str = "throughput (samples/s)") -> None:
    """Plot one curve per policy: ``(GPUs, value)`` points, with the linear-scaling line.

    Parameters
    ----------
    series
        Policy name -> list of ``(gpus, throughput)``.
    path
        Output file (PNG, SVG, PDF).
    """
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    styles = ["-", "--", "-.", ":"]
    markers = ["o", "s", "^", "v", "D", "x", "+", "*"]
    for i, (name, pts) in enumerate(series.items()):
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, marker=markers[i % len(markers)], linestyle=styles[i % len(styles)],
                label=name)
    # linear scaling from the best throughput at the smallest size
    x0 = min(p[0] for pts in series.values() for p in pts)
    y0 = max(p[1] for pts in series.values() for p in pts if p[0] == x0)
    x_max = max(p[0] for pts in series.values() for p in pts)
    ax.plot([x0, x_max], [y0, y0 * x_max / x0], color="grey", linewidth=0.8, linestyle=":",
            label="linear scaling")
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def breakdown_chart(rows: Sequence[tuple[str, dict[str, float]]], path: str | Path, *,
                    title: str = "") -> None:
    """Stacked bars of the iteration-time breakdown, one bar per policy.

    Parameters
    ----------
    rows
        ``(policy, breakdown dict)`` pairs; the breakdown keys are those of
        :meth:`schedopt.plan.Breakdown.as_dict`.
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
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
