"""Compute and communication that slow each other: an exact fluid evaluation.

Two cluster fields describe the contention of docs/model.md ("Overlap slowdown"): while any
communication task runs, compute proceeds at speed ``1/s`` (``overlap_slowdown``); while compute
runs, every communication task proceeds at speed ``1/s_c`` (``comm_slowdown``). On a GPU the
first is the collective kernels' share of memory bandwidth and SMs and the second is usually 1;
on a CPU where the ranks and the backend's threads share the cores, both are near 2 and overlap
saves little.

:class:`Contention` is the communication side of that evaluation. It holds communication tasks,
each with its work (seconds at full speed), the resources it occupies, and what releases it (an
explicit :meth:`Contention.release` or the end of a predecessor task); every resource serves its
tasks in the order they were added. The simulator drives the compute stream through
:meth:`Contention.flow`: it advances the clock with a compute task of given work running, or with
compute idle until a time or until a task ends, processing every start and end in between. Rates
are piecewise constant between events, so the evaluation is exact up to floating-point rounding.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["Contention"]


@dataclass(slots=True)
class _Task:
    """One communication task: its work, resources and release rule."""

    work: float
    resources: tuple[str, ...]
    after: Hashable | None  # the task whose end releases it (None: an explicit release)
    at: float  # released at this time (-inf: not by time)
    fixed: bool  # runs at full speed and does not slow compute (a data copy)
    released: bool = False
    start: float = math.nan
    left: float = math.nan


class Contention:
    """Communication tasks on resources, advanced together with one compute stream.

    Parameters
    ----------
    compute_slowdown
        ``s >= 1``: compute runs at speed ``1/s`` while a communication task runs.
    comm_slowdown
        ``s_c >= 1``: communication runs at speed ``1/s_c`` while compute runs.
    on_end
        Called with ``(key, start, end)`` when a task ends (recording), or None.
    """

    def __init__(self, compute_slowdown: float, comm_slowdown: float,
                 on_end: Callable[[Hashable, float, float], None] | None = None) -> None:
        self.s, self.s_c = float(compute_slowdown), float(comm_slowdown)
        self.on_end = on_end
        self.now = 0.0
        self.tasks: dict[Hashable, _Task] = {}
        self.lanes: dict[str, deque[Hashable]] = {}
        self.active: list[Hashable] = []
        self.ends: dict[Hashable, float] = {}
        self.timed: list[Hashable] = []  # tasks released by time, not yet started
        self.dirty = False  # a task may have become startable since the last look

    # ------------------------------------------------------------------------ building
    def add(self, key: Hashable, work: float, resources: tuple[str, ...],
            after: Hashable | None = None, at: float = -math.inf, fixed: bool = False) -> None:
        """Add a task behind every task already added on its resources.

        Parameters
        ----------
        key
            Its name (unique among unfinished tasks).
        work
            Seconds at full speed (>= 0).
        resources
            Resources it occupies from start to end.
        after
            The task whose end releases it; None: released by :meth:`release` or by ``at``.
        at
            Released at this time.
        fixed
            A task that is neither slowed by compute nor slows it (a data copy sharing a
            link with communication).
        """
        self.tasks[key] = _Task(float(work), resources, after, float(at), fixed)
        if at > -math.inf:
            self.timed.append(key)
        for r in resources:
            self.lanes.setdefault(r, deque()).append(key)
        self.dirty = True

    def release(self, key: Hashable) -> None:
        """Release ``key`` now; it starts as soon as its resources reach it."""
        self.tasks[key].released = True
        self.dirty = True
        self._start()

    def release_at(self, key: Hashable, at: float) -> None:
        """Release ``key`` at time ``at`` (later than now): it starts then, or once its
        resources reach it."""
        task = self.tasks[key]
        if at <= self.now:
            self.release(key)
            return
        if task.at == -math.inf:
            self.timed.append(key)
        task.at = float(at)
        self.dirty = True

    def end_of(self, key: Hashable) -> float | None:
        """End of a finished task, or None."""
        return self.ends.get(key)

    def forget(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop the recorded ends of finished tasks for which ``keep`` is false."""
        self.ends = {k: v for k, v in self.ends.items() if keep(k)}

    def remaining(self) -> list[float]:
        """Work left of every unfinished task and the time to its release by ``at`` (0 when
        released), in the order they were added."""
        out: list[float] = []
        for t in self.tasks.values():
            out += [t.left if t.left == t.left else t.work, max(0.0, t.at - self.now)]
        return out

    def copy(self, record: bool = False) -> Contention:
        """An independent copy (to look ahead without changing this one); it reports ends to
        the same ``on_end`` only with ``record``."""
        other = Contention(self.s, self.s_c, self.on_end if record else None)
        other.now = self.now
        other.tasks = {k: _Task(t.work, t.resources, t.after, t.at, t.fixed, t.released,
                                t.start, t.left) for k, t in self.tasks.items()}
        other.lanes = {r: deque(lane) for r, lane in self.lanes.items()}
        other.active = list(self.active)
        other.ends = dict(self.ends)
        other.timed = list(self.timed)
        other.dirty = True
        return other

    def drain(self) -> float:
        """Run every task to its end with compute idle; return the time the last one ends."""
        while self.tasks:
            last = next(reversed(self.tasks))
            self.flow(wait=last)
        return self.now

    # ------------------------------------------------------------------------ running
    def _start(self) -> None:
        """Start every task that is released and at the head of all its lanes."""
        if not (self.dirty or self.timed):
            return
        self.dirty = False
        tasks, lanes, now, ends = self.tasks, self.lanes, self.now, self.ends
        for lane in lanes.values():
            if not lane:
                continue
            key = lane[0]
            task = tasks[key]
            if task.start == task.start:  # already running
                continue
            if not (task.released or -math.inf < task.at <= now
                    or (task.after is not None and task.after in ends)):
                continue
            if len(task.resources) > 1 and any(lanes[r][0] != key for r in task.resources):
                continue
            task.start, task.left = now, task.work
            self.active.append(key)
            if task.at > -math.inf:
                self.timed.remove(key)

    def _next_release(self) -> float:
        """The earliest future release by time of a task not yet started (inf: none)."""
        return min((self.tasks[k].at for k in self.timed if self.tasks[k].at > self.now),
                   default=math.inf)

    def _finish(self, key: Hashable) -> None:
        task = self.tasks.pop(key)
        self.active.remove(key)
        for r in task.resources:
            self.lanes[r].popleft()
        self.ends[key] = self.now
        self.dirty = True
        if self.on_end is not None:
            self.on_end(key, task.start, self.now)

    def flow(self, work: float = 0.0, until: float = math.inf,
             wait: Hashable | None = None) -> float:
        """Advance the clock; return the new time.

        With ``work > 0`` a compute task of that work runs from now until it is done. Otherwise
        compute idles until ``until`` or, with ``wait``, until that task ends (whichever is
        given).

        Raises
        ------
        RuntimeError
            Waiting for a task that can never end (nothing runs).
        """
        self._start()
        computing = work > 0.0
        if computing and not self.active and (not self.timed
                                              or self._next_release() >= self.now + work):
            self.now += work  # nothing runs meanwhile: compute alone
            return self.now
        slow = 1.0 / self.s_c if computing else 1.0
        tasks, inv_s = self.tasks, 1.0 / self.s
        while True:
            if not computing and (self.now >= until or (wait is not None and wait in self.ends)):
                return self.now
            dt, busy = math.inf, False
            for k in self.active:
                task = tasks[k]
                if task.fixed:
                    dt = min(dt, task.left)
                else:
                    dt = min(dt, task.left / slow)
                    busy = busy or task.left > 0.0
            comp_rate = inv_s if busy else 1.0
            dt = min(dt, work / comp_rate if computing else until - self.now)
            if self.timed:
                dt = min(dt, self._next_release() - self.now)
            if not math.isfinite(dt):
                raise RuntimeError(f"waiting for communication task {wait!r} that cannot end")
            self.now += dt
            done = []
            for k in self.active:
                task = tasks[k]
                rate = 1.0 if task.fixed else slow
                if task.left / rate <= dt:
                    task.left = 0.0
                    done.append(k)
                else:
                    task.left -= dt * rate
            if computing:
                work = 0.0 if work / comp_rate <= dt else work - dt * comp_rate
            for k in done:
                self._finish(k)
            self._start()
            if computing and work <= 0.0:
                return self.now
