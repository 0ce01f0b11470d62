"""Start local ranks that meet through ``torch.distributed`` and run one job each.

``bench-comm``, ``bench-ddp`` and ``profile --procs N`` start ``procs`` local processes, one rank
each, that meet through ``torch.distributed`` (a rendezvous file in a private temporary folder;
gloo talks over loopback, nccl over the GPUs). Every process runs with ``OMP_NUM_THREADS`` and
``torch.set_num_threads`` pinned to ``threads``. The parent waits at most ``timeout_s`` for all of
them: a rank that exits with an error, or that has not finished in time, stops the whole run
(every rank is killed) with a one-line :class:`~schedopt.errors.SchedoptError`, and nothing is
written. A job names its worker as ``MODULE:FUNCTION`` (``job["worker"]``), called in each rank
as ``FUNCTION(job, rank)``; torch is imported only inside the ranks.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedopt.errors import SchedoptError

__all__ = ["BACKENDS", "MAX_PROCS", "MAX_THREADS", "MAX_TIMEOUT_S", "Launch", "launch",
           "write_text_atomic"]

#: Backends the benchmarks accept.
BACKENDS = ("gloo", "nccl")
#: Most local ranks one run starts (one machine).
MAX_PROCS = 64
#: Most threads of one rank.
MAX_THREADS = 1024
#: Longest time limit of one run (seconds; 7 days).
MAX_TIMEOUT_S = 7 * 24 * 3600.0

@dataclass(frozen=True)
class Launch:
    """How the ranks are started.

    Attributes
    ----------
    procs
        Number of local processes (ranks), 2 to :data:`MAX_PROCS`.
    backend
        ``gloo`` (CPU tensors over loopback) or ``nccl`` (one GPU per rank).
    threads
        ``OMP_NUM_THREADS`` and ``torch.set_num_threads`` of every rank.
    timeout_s
        Wall-clock limit of the whole run; also the collectives' timeout inside the ranks.
    """

    procs: int = 2
    backend: str = "gloo"
    threads: int = 1
    timeout_s: float = 600.0

    def check(self) -> Launch:
        """Raise a :class:`SchedoptError` naming the command-line option of a bad field
        (``--procs``, ``--backend``, ``--threads``, ``--timeout``); return self."""
        if isinstance(self.procs, bool) or not isinstance(self.procs, int) or not (
                2 <= self.procs <= MAX_PROCS):
            raise SchedoptError(f"must be an integer from 2 to {MAX_PROCS} local processes",
                                "--procs", self.procs)
        if self.backend not in BACKENDS:
            raise SchedoptError(f"must be one of {', '.join(BACKENDS)}", "--backend",
                                self.backend)
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not (
                1 <= self.threads <= MAX_THREADS):
            raise SchedoptError(f"must be an integer from 1 to {MAX_THREADS}", "--threads",
                                self.threads)
        if not (isinstance(self.timeout_s, int | float) and math.isfinite(self.timeout_s)
                and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            raise SchedoptError(f"must be a number of seconds above 0 and at most "
                                f"{MAX_TIMEOUT_S:,.0f} (7 days)", "--timeout", self.timeout_s)
        return self


# ------------------------------------------------------------------------------ launching
def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


def _wait(procs: list[subprocess.Popen], workdir: Path, timeout_s: float) -> None:
    """Wait for every rank; on a failure or the deadline, kill them all and raise."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        # a rank that wrote its result and then crashed on the way out (gloo threads at
        # interpreter exit) did its work: only a rank without a result has failed
        failed = [(r, c) for r, c in enumerate(codes)
                  if c not in (None, 0) and not (workdir / f"rank{r}.json").exists()]
        if failed:
            rank, code = failed[0]
            # a rank that failed first brings its peers down: report the root cause
            errs = {r: _last_line(workdir / f"rank{r}.err") for r, _ in failed}
            rank = next((r for r, _ in failed if "Connection" not in errs[r]), rank)
            code = codes[rank] or code
            _stop(procs)
            why = errs[rank] or "no message"
            raise SchedoptError(f"rank {rank} exited with status {code}: {why}", "procs",
                                len(procs))
        if all(c is not None for c in codes) and not failed:
            return
        if time.monotonic() > deadline:
            late = [r for r, c in enumerate(codes) if c is None]
            _stop(procs)
            raise SchedoptError(f"rank(s) {', '.join(map(str, late))} did not finish in time "
                                "(hung or too slow); nothing written", "timeout", timeout_s)
        time.sleep(0.05)


def launch(job: dict[str, Any], spec: Launch) -> list[dict[str, Any]]:
    """Run ``job`` on ``spec.procs`` local ranks and return each rank's result.

    Parameters
    ----------
    job
        JSON-serialisable; ``job["worker"]`` names the function every rank runs
        (``MODULE:FUNCTION``, called as ``FUNCTION(job, rank)``).
    spec
        Processes, backend, threads and the time limit.

    Returns
    -------
    list of dict
        One result per rank, in rank order.

    Raises
    ------
    SchedoptError
        A rank failed (its last stderr line is quoted) or the run passed ``spec.timeout_s``.
    """
    spec.check()
    workdir = Path(tempfile.mkdtemp(prefix="schedopt-bench-"))
    try:
        full = {**job, "procs": spec.procs, "backend": spec.backend, "threads": spec.threads,
                "timeout_s": spec.timeout_s, "rendezvous": str(workdir / "rendezvous")}
        (workdir / "job.json").write_text(json.dumps(full))
        env = dict(os.environ, OMP_NUM_THREADS=str(spec.threads),
                   MKL_NUM_THREADS=str(spec.threads), PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH"))
                                            if p)
        procs: list[subprocess.Popen] = []
        try:
            for r in range(spec.procs):
                with open(workdir / f"rank{r}.err", "w") as err:
                    procs.append(subprocess.Popen(
                        [sys.executable, "-m", "schedopt.measure.launch", str(workdir),
                         str(r)], stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env))
            _wait(procs, workdir, spec.timeout_s)
        finally:
            _stop(procs)
        try:
            return [json.loads((workdir / f"rank{r}.json").read_text())
                    for r in range(spec.procs)]
        except (OSError, ValueError):
            raise SchedoptError("a rank exited without its result", "procs",
                                spec.procs) from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _worker(argv: list[str]) -> int:
    """Entry of one rank: ``python -m schedopt.measure.launch WORKDIR RANK``."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    workdir, rank = Path(argv[0]), int(argv[1])
    job = json.loads((workdir / "job.json").read_text())
    torch.set_num_threads(job["threads"])
    try:
        if job["backend"] == "nccl":
            torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
        dist.init_process_group(job["backend"], init_method="file://" + job["rendezvous"],
                                rank=rank, world_size=job["procs"],
                                timeout=timedelta(seconds=job["timeout_s"]))
        module, _, name = job["worker"].partition(":")
        result = getattr(importlib.import_module(module), name)(job, rank)
        dist.barrier()
    except Exception as exc:
        text = " ".join(str(exc).split())[:400]
        print(f"{type(exc).__name__}: {text}", file=sys.stderr, flush=True)
        return 1
    tmp = workdir / f"rank{rank}.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(workdir / f"rank{rank}.json")
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return 0



def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through :func:`schedopt.files.output_files` (a temporary file
    and a rename, the umask respected; no partial file).

    Raises
    ------
    SchedoptError
        The file cannot be written.
    """
    from schedopt.files import output_files

    with output_files({"--out": path}) as files:
        files.write_text(path, text)



if __name__ == "__main__":  # a rank started by launch()
    sys.exit(_worker(sys.argv[1:]))
