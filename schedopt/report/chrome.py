"""Chrome trace (``chrome://tracing`` / Perfetto) export of a recorded schedule."""

from __future__ import annotations

from typing import Any

from schedopt.model.plan import Schedule
from schedopt.report.aggregate import row_spans

__all__ = ["chrome_trace_events"]


def chrome_trace_events(schedule: Schedule, *, budget: int = 20_000) -> dict[str, Any]:
    """Return a Chrome trace document: one complete event per task, one thread per resource.

    A task holding several resources shows on each. Where one resource holds more than
    ``budget`` tasks of one kind (a trace of 200,000 tensors), runs of consecutive tasks of that
    kind are merged into one event named ``KIND xCOUNT`` (``args``: ``tasks``, ``first``), so
    the document grows at most linearly with the tasks and stays loadable; see
    :mod:`schedopt.report.aggregate`.

    Parameters
    ----------
    schedule
        A schedule simulated with ``record=True``.
    budget
        Events per resource and task kind at most.
    """
    lanes: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    spans = sorted(row_spans(schedule, budget=budget, chunks=True),
                   key=lambda sp: (sp.start, sp.end))
    for sp in spans:
        tid = lanes.setdefault(sp.row, len(lanes))
        name = "_".join(str(x) for x in sp.first)
        args: dict[str, Any] = {"iteration": sp.first[1],
                                "resources": list(schedule.resources[sp.first])}
        if sp.count > 1:
            args.update(tasks=sp.count, first=name)
            name = f"{sp.kind} x{sp.count}"
        events.append({"name": name, "cat": sp.kind, "ph": "X", "ts": sp.start * 1e6,
                       "dur": (sp.end - sp.start) * 1e6, "pid": 0, "tid": tid, "args": args})
    meta = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}
        for name, tid in lanes.items()
    ]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}
