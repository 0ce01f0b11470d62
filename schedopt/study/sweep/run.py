"""Running a sweep: skip the rows already stored, run the rest locally or on Ray, store each.

The local executor is a process pool (``spawn``); the Ray executor submits one task per row
with ``num_cpus`` equal to the row's CP-SAT workers. Either way the parent process writes every
record to the store as soon as its row finishes, so an interrupted sweep loses only the rows in
flight, and a rerun runs exactly the rows that are missing.

A row is stored as failed only when the row itself fails (its record carries the error). A row
whose worker process dies (killed, out of memory) is not stored: it stays pending and a rerun
runs it. SIGTERM and SIGHUP stop the sweep as Ctrl-C does; the pool's workers are stopped with
it, and a worker whose parent dies (even by SIGKILL) exits too, so no worker outlives its sweep.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from schedopt.errors import SchedoptError
from schedopt.study.sweep.spec import Row, SweepSpec, expand_rows
from schedopt.study.sweep.store import Store
from schedopt.study.sweep.worker import run_row

__all__ = ["SweepSummary", "run_sweep"]

Executor = Literal["local", "ray"]
OnRecord = Callable[[dict[str, Any]], None]
OnLost = Callable[[Row], None]


class Terminated(KeyboardInterrupt):
    """The sweep was stopped by a signal other than SIGINT (``signum``: SIGTERM or SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class SweepSummary:
    """What one ``run_sweep`` call did.

    Attributes
    ----------
    total
        Rows in the spec.
    skipped
        Rows already in the database (not run again).
    done
        Rows run and stored by this call without error.
    failed
        Rows run and stored with an error.
    pending
        Rows not stored because their worker process died: a rerun runs them.
    wall_s
        Wall-clock time of the call.
    """

    total: int
    skipped: int
    done: int = 0
    failed: int = 0
    pending: int = 0
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain dictionary."""
        return dict(self.__dict__)


def _worker_setup(parent: int) -> None:
    """Pool worker set-up: on Ctrl-C leave at once and silently (the parent reports it), and
    exit when the parent ``parent`` dies."""
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):  # the kernel kills this process when its
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # parent dies
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    """Exit once the parent is gone (where the kernel cannot be asked to do it)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and stop the workers now (their rows stay pending).

    The pool's manager thread is joined last: it closes its wake-up pipe as it ends, and one
    still ending when the interpreter exits races the exit hook of ``concurrent.futures``,
    which then writes to the closed pipe and prints a traceback (CPython 3.11).
    """
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=5.0)
        if proc.is_alive():  # pragma: no cover - a worker that ignores SIGTERM
            proc.kill()
            proc.join(timeout=5.0)
    if manager is not None and manager is not threading.current_thread():
        manager.join(timeout=10.0)


@contextmanager
def _held_signals() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP (in the main thread) until the block ends, then deliver
    the first that came to the handler it had before.

    The pool starts its workers in ``submit``: the parent writes each worker's start-up data
    down a pipe, and a signal that interrupts the writing leaves the worker to die on a short
    read with a traceback on the shared stderr.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    names = ("SIGINT", "SIGTERM", "SIGHUP")
    sigs = [getattr(signal, name) for name in names if hasattr(signal, name)]
    old = {sig: signal.signal(sig, lambda signum, _frame: got.append(signum)) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            signal.raise_signal(got[0])


def _run_local(rows: list[Row], workers: int, on_record: OnRecord, on_lost: OnLost) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_setup,
                             initargs=(os.getpid(),)) as pool:
        futures: dict[Future[dict[str, Any]], Row] = {}
        try:
            with _held_signals():  # the workers start here: none is cut off mid-start
                futures = {pool.submit(run_row, row.as_dict()): row for row in rows}
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for fut in done:
                    row = futures.pop(fut)
                    if fut.cancelled() or fut.exception() is not None:
                        on_lost(row)  # the worker died (run_row itself never raises)
                    else:
                        on_record(fut.result())
        except BaseException:
            _stop_pool(pool)
            raise


@contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` (in the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise Terminated(signum)

    sigs = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    old = {sig: signal.signal(sig, stop) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _run_ray(rows: list[Row], workers: int, address: str | None, on_record: OnRecord,
             on_lost: OnLost) -> None:
    try:
        import ray
    except ImportError:
        raise SchedoptError("the Ray executor needs the ray extra (pip install 'schedopt[ray]')",
                            "--executor", "ray") from None
    started = not ray.is_initialized()
    if started:
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # Ray raises plain Exceptions (startup timeouts, bad address)
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise SchedoptError(f"cannot start Ray: {first}", "--ray-address",
                                address or "local") from None
    try:
        task = ray.remote(run_row)
        refs = {task.options(num_cpus=row.cpus(), max_retries=0).remote(row.as_dict()): row
                for row in rows}
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    row = refs.pop(ref)
                    try:
                        record = ray.get(ref)
                    except Exception:  # the worker died (run_row itself never raises)
                        on_lost(row)
                        continue
                    on_record(record)
        except BaseException:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[[bool], None]]:
    """A rich progress bar on stderr; yields ``advance(failed)``."""
    failed = 0
    prog = Progress(
        TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}"), TextColumn("{task.fields[rate]} rows/min"),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
        console=Console(stderr=True), disable=not enabled,
    )
    t0 = time.perf_counter()
    with prog:
        task = prog.add_task("sweep", total=total, failed=0, rate="-")

        def advance(is_failure: bool) -> None:
            nonlocal failed
            failed += is_failure
            done = prog.tasks[0].completed + 1
            rate = 60.0 * done / max(time.perf_counter() - t0, 1e-9)
            prog.update(task, advance=1, failed=failed, rate=f"{rate:.1f}")

        yield advance


def run_sweep(
    spec: SweepSpec,
    db: str | Path,
    *,
    executor: Executor = "local",
    workers: int = 2,
    ray_address: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
) -> SweepSummary:
    """Run every row of ``spec`` that ``db`` lacks, storing each as it finishes.

    Parameters
    ----------
    spec
        The sweep.
    db
        The SQLite file (created if missing).
    executor
        ``local`` (a process pool of ``workers`` processes) or ``ray`` (one task per row).
    workers
        Rows in flight at once (local), or the CPUs of a local Ray (ignored with an address).
    ray_address
        Address of a running Ray cluster; None starts a local one.
    retry_failed
        Run again the rows stored with an error.
    progress
        Show a progress bar on stderr.
    """
    from schedopt.study.sweep.spec import MAX_WORKERS

    if not 1 <= workers <= MAX_WORKERS:
        raise SchedoptError(f"must be between 1 and {MAX_WORKERS:,}", "--workers", workers)
    if executor not in ("local", "ray"):
        raise SchedoptError("must be local or ray", "--executor", executor)
    t0 = time.perf_counter()
    rows = expand_rows(spec)
    with Store(db) as store:
        if retry_failed:
            store.forget_failed(r.key for r in rows)
        have = store.keys()
        pending = [r for r in rows if r.key not in have]
        summary = SweepSummary(total=len(rows), skipped=len(rows) - len(pending))
        with _progress(len(pending), progress) as advance:

            def on_record(record: dict[str, Any]) -> None:
                store.put(record)
                failed = record.get("error") is not None
                summary.failed += failed
                summary.done += not failed
                advance(failed)

            def on_lost(row: Row) -> None:
                summary.pending += 1

            with _signals_stop():
                if executor == "local":
                    _run_local(pending, workers, on_record, on_lost)
                else:
                    _run_ray(pending, workers, ray_address, on_record, on_lost)
    summary.wall_s = time.perf_counter() - t0
    return summary
