"""Chrome trace (``chrome://tracing`` / Perfetto) export of a recorded schedule."""

from __future__ import annotations

from typing import Any

from ..plan import Schedule

__all__ = ["chrome_trace_events"]


def chrome_trace_events(schedule: Schedule) -> dict[str, Any]:
    """Return a Chrome trace document: one complete event per task, one thread per resource.

    Parameters
    ----------
    schedule
        A schedule simulated with ``record=True``.
    """
    lanes: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for key, (start, end) in sorted(schedule.tasks.items(), key=lambda kv: kv[1]):
        for res in schedule.resources[key]:  # a task holding several resources shows on each
            tid = lanes.setdefault(res, len(lanes))
            events.append({
                "name": "_".join(str(x) for x in key),
                "cat": key[0],
                "ph": "X",
                "ts": start * 1e6,
                "dur": (end - start) * 1e6,
                "pid": 0,
                "tid": tid,
                "args": {"iteration": key[1], "resources": list(schedule.resources[key])},
            })
    meta = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}
        for name, tid in lanes.items()
    ]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}
