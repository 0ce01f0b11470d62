"""Aggregation of recorded tasks beyond what a picture can show (linear in the tasks).

A Gantt chart 1,440 pixels wide cannot show 200,000 gradient communications one by one, and a
Chrome trace of millions of events does not load. Both group the tasks of one resource row and
one kind: tasks closer together than a resolution are drawn as one span (with a count), and the
resolution doubles until the row holds at most its budget of spans. A row within its budget is
never merged. Chrome traces merge runs of consecutive tasks instead, to keep detail to zoom
into.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from schedopt.model.plan import Schedule

__all__ = ["Span", "row_spans"]


@dataclass(frozen=True)
class Span:
    """Tasks of one kind on one resource, drawn as one bar.

    Attributes
    ----------
    row, kind
        Resource and task kind (``fwd``, ``bwd``, ``comm``, ...).
    start, end
        Seconds.
    count
        Tasks merged into the span.
    first
        Key of its first task.
    """

    row: str
    kind: str
    start: float
    end: float
    count: int
    first: tuple


def _merge(starts: np.ndarray, ends: np.ndarray, resolution: float) -> np.ndarray:
    """Group labels: a new group wherever a task starts more than ``resolution`` after the end
    of every earlier task (inputs sorted by start)."""
    reach = np.maximum.accumulate(ends)
    new = np.empty(len(starts), dtype=bool)
    new[0] = True
    new[1:] = starts[1:] - reach[:-1] > resolution
    return np.cumsum(new) - 1


def row_spans(schedule: Schedule, *, budget: int, keep: Iterable[int] | None = None,
              window: tuple[float, float] | None = None, chunks: bool = False) -> list[Span]:
    """The recorded tasks as spans, at most about ``budget`` per (resource, kind).

    Parameters
    ----------
    schedule
        A schedule simulated with ``record=True``.
    budget
        Largest number of spans one resource row may hold for one kind of task.
    keep
        Iterations to show (None: all).
    window
        ``(start, end)``: tasks are clipped to it and those outside dropped (None: no clipping).
    chunks
        Merge runs of ``ceil(n / budget)`` consecutive tasks (keeps detail for zooming), instead
        of tasks closer together than a resolution (what a picture shows).

    Returns
    -------
    list of Span
        Ordered by row (first appearance) and start.
    """
    keep_set = None if keep is None else set(keep)
    groups: dict[tuple[str, str], list[tuple[float, float, tuple]]] = {}
    for key, (start, end) in schedule.tasks.items():
        if end <= start or (keep_set is not None and key[1] not in keep_set):
            continue
        if window is not None:
            start, end = max(start, window[0]), min(end, window[1])
            if end <= start:
                continue
        for res in schedule.resources[key]:
            groups.setdefault((res, key[0]), []).append((start, end, key))
    out: list[Span] = []
    for (row, kind), tasks in groups.items():
        tasks.sort(key=lambda x: x[0])
        starts = np.array([t[0] for t in tasks])
        ends = np.array([t[1] for t in tasks])
        if len(tasks) <= budget:
            out.extend(Span(row, kind, t[0], t[1], 1, t[2]) for t in tasks)
            continue
        if chunks:
            firsts = np.arange(0, len(tasks), -(-len(tasks) // budget))
        else:
            resolution = (ends.max() - starts.min()) / budget
            label = _merge(starts, ends, resolution)
            while label[-1] + 1 > budget:
                resolution *= 2.0
                label = _merge(starts, ends, resolution)
            firsts = np.flatnonzero(np.r_[True, label[1:] != label[:-1]])
        counts = np.diff(np.r_[firsts, len(tasks)])
        g_end = np.maximum.reduceat(ends, firsts)
        out.extend(Span(row, kind, float(starts[i]), float(e), int(c), tasks[i][2])
                   for i, e, c in zip(firsts, g_end, counts, strict=True))
    return out
