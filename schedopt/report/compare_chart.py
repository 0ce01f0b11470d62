"""Measured (torch.profiler import) and predicted (simulator) iterations, one above the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from schedopt.model.plan import Schedule

__all__ = ["compare_gantt"]

_COLORS = {"io": "#999999", "fwd": "#4c72b0", "bwd": "#dd8452", "update": "#55a868",
           "comm": "#c44e52"}


def _measured_bars(summary: dict[str, Any]) -> dict[str, list[tuple[float, float, str]]]:
    """Rows of the measured step: compute laid out from the layer means, buckets as measured."""
    compute: list[tuple[float, float, str]] = []
    t = summary["io_s"]
    if t > 0:
        compute.append((0.0, t, "io"))
    for la in summary["layers"]:
        compute.append((t, la["forward_s"], "fwd"))
        t += la["forward_s"]
    for la in reversed(summary["layers"]):
        compute.append((t, la["backward_s"], "bwd"))
        t += la["backward_s"]
    comm = [(b["start_s"], b["transfer_s"], "comm") for b in summary["buckets"]]
    return {"compute": compute, "comm": comm}


def _predicted_bars(sched: Schedule, it: int) -> tuple[float, dict[str, list]]:
    keys = [k for k in sched.tasks if len(k) > 1 and k[1] == it]
    begin = min(sched.tasks[k][0] for k in keys if k[0] in ("io", "h2d", "fwd"))
    rows: dict[str, list[tuple[float, float, str]]] = {"compute": [], "comm": []}
    for k in keys:
        a, b = sched.tasks[k]
        kind = k[0]
        row = "comm" if kind == "comm" else "compute"
        if kind in _COLORS:
            rows[row].append((a - begin, b - a, kind))
    return begin, rows


def compare_gantt(summary: dict[str, Any], sched: Schedule, iteration: int, path: str | Path, *,
                  fmt: str = "png", title: str = "") -> None:
    """Draw one measured step over one predicted steady-state iteration.

    Parameters
    ----------
    summary
        The ``import kineto --json`` summary of the measured run (layer means, bucket starts
        and transfer times, the median step).
    sched
        The simulation of the measured buckets (``record=True``).
    iteration
        The simulated iteration drawn.
    path
        Output file.
    fmt
        ``png``, ``svg`` or ``pdf``.
    title
        Figure title.
    """
    measured = _measured_bars(summary)
    _, predicted = _predicted_bars(sched, iteration)
    fig, axes = plt.subplots(2, 1, figsize=(11, 3.6), sharex=True)
    panels = [(f"measured (median step {summary['step_time_s'] * 1e3:.2f} ms)", measured,
               summary["step_time_s"]),
              (f"predicted ({sched.iteration_time_s * 1e3:.2f} ms)", predicted,
               sched.iteration_time_s)]
    for ax, (label, rows, step) in zip(axes, panels, strict=True):
        for y, row in enumerate(("compute", "comm")):
            for start, dur, kind in rows[row]:
                ax.broken_barh([(start * 1e3, max(dur, 0.0) * 1e3)], (y - 0.4, 0.8),
                               facecolors=_COLORS[kind], edgecolor="white", linewidth=0.3)
        ax.axvline(step * 1e3, color="black", linestyle="--", linewidth=0.8)
        ax.set_yticks([0, 1], ["compute", "comm"])
        ax.set_title(label, fontsize=9, loc="left")
    axes[-1].set_xlabel("ms from the start of the step")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _COLORS.values()]
    fig.legend(handles, list(_COLORS), loc="upper right", ncol=5, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(path, format=fmt, dpi=110)
    plt.close(fig)
