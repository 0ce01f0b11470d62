"""Hard stops of a solve: Ctrl-C (SIGINT) and the time limit, wherever the search is.

:class:`Control` is entered by :func:`~schedopt.optimize.solve` around the whole search. In the
main thread it installs a SIGINT handler and a real-time timer (``SIGALRM``) at the deadline:

* while CP-SAT runs (:meth:`Control.run_solver`, the solver in a helper thread, the main thread
  waiting), either signal stops the search (``stop_search``) and the solver returns its best
  solution;
* elsewhere (the baselines, the programmes, the bounds) the handler raises :class:`Halt`, which
  the portfolio catches: the step is abandoned and the best plan known so far is returned;
* inside :meth:`Control.shield` (the few lines that record a new best plan) the signal is
  only recorded, and :class:`Halt` is raised when the shield ends;
* once stopped, the timer repeats the stop every :data:`REPEAT_S` seconds, in case Python
  swallowed it (an exception raised inside a garbage-collector callback or a finaliser); such a
  swallowed stop is not reported as an "Exception ignored" on stderr (``sys.unraisablehook``
  passes every other exception on).

A second Ctrl-C raises :class:`KeyboardInterrupt` at once. Interruption is thus known from the
signal itself (:attr:`Control.interrupted`), never guessed from wall time. Outside the main
thread (or without SIGALRM) no handler is installed: the deadline is then checked between
steps, and each step keeps its own share.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ortools.sat.python import cp_model

__all__ = ["Control", "Halt", "StepTimeout"]


#: Once stopped, the stop is repeated this often (s) until the search has heard it.
REPEAT_S = 0.1


class Halt(BaseException):
    """The search must stop now (Ctrl-C or the time limit); a BaseException so that no
    ``except Exception`` in a step swallows it."""


class StepTimeout(BaseException):
    """A step ran past its own deadline (:meth:`Control.limit`); the portfolio goes on."""


class Control:
    """Signals and the deadline of one solve (a context manager).

    Parameters
    ----------
    deadline
        ``time.perf_counter()`` value of the time limit.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.interrupted = False
        self._fired = False  # the timer went off at the hard deadline
        self._armed = deadline
        self._shield = 0
        self._pending = False
        self._solver: cp_model.CpSolver | None = None
        self._installed = False
        self._old: dict[int, Any] = {}
        self._old_unraisable: Callable[[Any], Any] | None = None
        #: :class:`Halt` is raised only while this is set (the search); afterwards a stop is
        #: only recorded, so that the result is always built.
        self.searching = False
        #: Called about ten times a second while CP-SAT runs (in the waiting thread).
        self.heartbeat: Callable[[], None] | None = None

    # ----------------------------------------------------------------------- state
    @property
    def halted(self) -> bool:
        """True once Ctrl-C was pressed or the deadline passed."""
        return self.interrupted or self._fired or time.perf_counter() >= self.deadline

    def left(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.perf_counter())

    def check(self) -> None:
        """Raise :class:`Halt` when the search must stop (cooperative loops call this)."""
        if self.halted and not self._shield and self.searching:
            raise Halt

    # ------------------------------------------------------------------ the context
    def __enter__(self) -> Control:
        # a timer needs SIGALRM (not on Windows): without it, the deadline is cooperative
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM"):
            self._old = {signal.SIGINT: signal.signal(signal.SIGINT, self._on_sigint),
                         signal.SIGALRM: signal.signal(signal.SIGALRM, self._on_alarm)}
            self._installed = True
            self._old_unraisable = sys.unraisablehook
            sys.unraisablehook = self._on_unraisable
            self._arm(self.deadline)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, old in self._old.items():
                signal.signal(sig, old)
            if self._old_unraisable is not None:
                sys.unraisablehook = self._old_unraisable
                self._old_unraisable = None
            self._installed = False

    def _arm(self, at: float) -> None:
        self._armed = at
        if self._installed:
            # once stopped, the timer repeats the stop until it is heard (an exception raised
            # in a garbage-collector callback or a finaliser is swallowed by Python)
            stopped = self.interrupted or self._fired
            delay = REPEAT_S if stopped else max(1e-3, at - time.perf_counter())
            signal.setitimer(signal.ITIMER_REAL, delay)

    # -------------------------------------------------------------------- handlers
    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted:  # the second Ctrl-C: leave now
            raise KeyboardInterrupt
        self.interrupted = True
        self._arm(self._armed)
        self._stop()

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted or time.perf_counter() >= self.deadline - 1e-3:
            self._fired = self._fired or not self.interrupted
            self._arm(self._armed)
            self._stop()
        elif (self.searching and self._solver is None and not self._shield
              and time.perf_counter() >= self._armed - 1e-3):  # not a late, stale alarm
            signal.setitimer(signal.ITIMER_REAL, REPEAT_S)  # again, until heard
            raise StepTimeout

    def _on_unraisable(self, unraisable: Any) -> None:
        """Python swallowed an exception (in a finaliser or a garbage-collector callback): a
        stop of this control is repeated by the timer, so it is dropped silently; anything else
        goes to the hook that was in place before."""
        if isinstance(unraisable.exc_value, (Halt, StepTimeout)):
            return
        if self._old_unraisable is not None:
            self._old_unraisable(unraisable)

    def _stop(self) -> None:
        if self._solver is not None:
            self._solver.stop_search()
        elif self._shield or not self.searching:
            self._pending = True
        else:
            raise Halt

    # ------------------------------------------------------------------ sections
    @contextmanager
    def shield(self, *, final: bool = False) -> Iterator[None]:
        """Record a stop request instead of raising it inside the block; raise it at the end
        (unless ``final``: the solve is finishing anyway)."""
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1
        if not final and not self._shield and self._pending and self.searching:
            self._pending = False
            raise Halt

    @contextmanager
    def limit(self, at: float) -> Iterator[None]:
        """Raise :class:`StepTimeout` in the block once ``at`` (``perf_counter``) passes."""
        prev = self._armed
        self._arm(min(at, prev))
        try:
            yield
        finally:
            self._arm(prev)

    # ------------------------------------------------------------------- CP-SAT
    def run_solver(self, solver: cp_model.CpSolver, model: cp_model.CpModel,
                   callback: cp_model.CpSolverSolutionCallback | None = None,
                   poll: Callable[[], None] | None = None) -> Any:
        """``solver.solve(model, callback)`` in a helper thread; Ctrl-C and the deadline stop
        it (its best solution stays). ``poll`` is called about ten times a second meanwhile,
        in this thread."""
        if not self._installed:
            return solver.solve(model, callback)
        solver.parameters.catch_sigint_signal = False
        out: dict[str, Any] = {}

        def work() -> None:
            try:
                out["status"] = solver.solve(model, callback)
            except BaseException as exc:  # handed to the caller's thread
                out["error"] = exc

        if self.halted:
            solver.parameters.max_time_in_seconds = 1e-3
        self._solver = solver
        thread = threading.Thread(target=work, name="cp-sat", daemon=True)
        try:
            thread.start()
            while thread.is_alive():
                thread.join(0.1)
                if self.interrupted or self._fired:  # a stop that came before the search
                    solver.stop_search()
                if poll is not None:
                    poll()
                if self.heartbeat is not None:
                    self.heartbeat()
        finally:
            if thread.is_alive():  # the caller leaves (a second Ctrl-C): stop the search
                solver.stop_search()
                thread.join()
            self._solver = None
        if "error" in out:
            raise out["error"]
        return out["status"]
