"""Predicted against measured iteration times (``schedopt validate --plot``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["validation_chart"]


def validation_chart(points: Sequence[tuple[float, float, str]], path: str | Path, *,
                     title: str = "", band: float = 0.10) -> None:
    """Scatter of predicted against measured iteration times, with ``y = x`` and a band.

    Parameters
    ----------
    points
        ``(measured_s, predicted_s, label)`` per row; one colour and marker per label (the
        configuration: the policy with its knobs).
    path
        Output file; the format follows the suffix (PNG, SVG, PDF).
    title
        Figure title.
    band
        Half-width of the shaded relative band around ``y = x`` (default ±10%).
    """
    fig, ax = plt.subplots(figsize=(5.5, 5.0))
    values = [v * 1e3 for m, p, _ in points for v in (m, p)]
    lo, hi = min(values) * 0.8, max(values) * 1.2
    log = hi / lo > 20
    xs = [lo, hi]
    ax.fill_between(xs, [x * (1 - band) for x in xs], [x * (1 + band) for x in xs],
                    color="#cfd8dc", alpha=0.6, label=f"±{band * 100:.0f}%", linewidth=0)
    ax.plot(xs, xs, color="#37474f", linewidth=1.0, label="y = x")
    labels = list(dict.fromkeys(lab for _, _, lab in points))
    cmap = plt.get_cmap("tab20" if len(labels) > 10 else "tab10")
    markers = "osD^v<>pP*X"
    for k, lab in enumerate(labels):
        sel = [(m * 1e3, p * 1e3) for m, p, la in points if la == lab]
        ax.scatter([m for m, _ in sel], [p for _, p in sel], s=22, marker=markers[k % 11],
                   color=cmap(k % cmap.N), label=lab, zorder=3)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted iteration time (ms)")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8 if len(labels) <= 10 else 6, loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
