"""Start local ranks that meet through ``torch.distributed`` and run one job each.

``bench-comm``, ``bench-ddp`` and ``profile --procs N`` start ``procs`` local processes, one rank
each, that meet through ``torch.distributed`` (a rendezvous file in a private temporary folder;
gloo talks over loopback, nccl over the GPUs). Every process runs with ``OMP_NUM_THREADS`` and
``torch.set_num_threads`` pinned to ``threads``. The parent waits at most ``timeout_s`` for all of
them: a rank that exits with an error, or that has not finished in time, stops the whole run
(every rank is killed) with a one-line :class:`~schedopt.errors.SchedoptError`, and nothing is
written. A job names its worker as ``MODULE:FUNCTION`` (``job["worker"]``), called in each rank
as ``FUNCTION(job, rank)``; torch is imported only inside the ranks.

``bench-comm`` and ``bench-ddp`` with ``--launcher env`` run the same worker under a launcher
instead (torchrun, on one node or several): every process the launcher started is one rank,
reads its place from the
``torch.distributed`` environment variables (:func:`env_launch`), meets the others through
``env://`` (:func:`joined`, at most ``timeout_s``), runs the job and gathers every rank's result
with a collective (:func:`run_joined`), so that each rank holds the same results as
:func:`launch` returns.
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from schedopt.errors import SchedoptError

__all__ = ["BACKENDS", "ENV_VARS", "MAX_PROCS", "MAX_THREADS", "MAX_TIMEOUT_S", "MAX_WORLD",
           "AnyLaunch", "EnvLaunch", "Launch", "env_launch", "exit_process", "joined", "launch",
           "run_joined", "run_ranks", "write_text_atomic"]

#: Backends the benchmarks accept.
BACKENDS = ("gloo", "nccl")
#: Most local ranks one run starts (one machine).
MAX_PROCS = 64
#: Most threads of one rank.
MAX_THREADS = 1024
#: Longest time limit of one run (seconds; 7 days).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: Most ranks a launcher may start (``WORLD_SIZE``).
MAX_WORLD = 2**20
#: The variables a launcher such as torchrun sets in every rank (``--launcher env``).
ENV_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

#: Whether this process has joined a ``torch.distributed`` process group (:func:`exit_process`).
_joined_group = False

@dataclass(frozen=True)
class Launch:
    """How the ranks are started.

    Attributes
    ----------
    procs
        Number of local processes (ranks), ``least`` to :data:`MAX_PROCS`.
    backend
        ``gloo`` (CPU tensors over loopback) or ``nccl`` (one GPU per rank).
    threads
        ``OMP_NUM_THREADS`` and ``torch.set_num_threads`` of every rank.
    timeout_s
        Wall-clock limit of the whole run; also the collectives' timeout inside the ranks.
    least
        The fewest ranks the command accepts: 2 where ranks must talk to each other, 1 for
        ``bench-ddp`` (DDP on one GPU is the framework's own cost, with no communication).
    """

    procs: int = 2
    backend: str = "gloo"
    threads: int = 1
    timeout_s: float = 600.0
    least: int = 2

    def check(self) -> Launch:
        """Raise a :class:`SchedoptError` naming the command-line option of a bad field
        (``--procs``, ``--backend``, ``--threads``, ``--timeout``); return self."""
        if isinstance(self.procs, bool) or not isinstance(self.procs, int) or not (
                self.least <= self.procs <= MAX_PROCS):
            raise SchedoptError(f"must be an integer from {self.least} to {MAX_PROCS} local"
                                f" processes", "--procs", self.procs)
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

    def describe(self) -> str:
        """How the ranks ran, for a row's ``source``: ``2 procs``."""
        return f"{self.procs} procs"


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
        full = {**_full_job(job, spec), "rendezvous": str(workdir / "rendezvous")}
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


# ------------------------------------------------------------------------------ under a launcher
@dataclass(frozen=True)
class EnvLaunch:
    """This process as one of the ranks a launcher started (torchrun, on one node or several).

    Attributes
    ----------
    rank, world_size, local_rank
        ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (the GPU of an nccl rank).
    master_addr, master_port
        ``MASTER_ADDR`` and ``MASTER_PORT``: where the ranks meet (``env://``).
    backend, threads, timeout_s
        As :class:`Launch`; ``timeout_s`` limits the meeting and every collective.
    nodes
        Nodes the ranks ran on, known once they met (:func:`joined`); None before.
    """

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    backend: str = "gloo"
    threads: int = 1
    timeout_s: float = 600.0
    nodes: int | None = None

    @property
    def procs(self) -> int:
        """The ranks of the run (``WORLD_SIZE``), as :attr:`Launch.procs`."""
        return self.world_size

    @property
    def writes(self) -> bool:
        """Whether this rank writes the output (global rank 0 alone)."""
        return self.rank == 0

    def describe(self) -> str:
        """How the ranks ran, for a row's ``source``: ``4 ranks on 2 nodes (launcher env)``."""
        where = "" if self.nodes is None else \
            f" on {self.nodes} node{'' if self.nodes == 1 else 's'}"
        return f"{self.world_size} ranks{where} (launcher env)"


#: Either way of starting the ranks.
AnyLaunch = Launch | EnvLaunch


def _not_set(name: str) -> SchedoptError:
    """The error of a launcher's variable that is not set."""
    return SchedoptError(f"{name}: not set; --launcher env runs under a launcher (torchrun) that"
                         f" sets {', '.join(ENV_VARS)} (--launcher local starts local ranks)")


def _env_int(environ: Mapping[str, str], name: str, low: int, high: int, why: str = "") -> int:
    """The integer of variable ``name`` from ``low`` to ``high``; one-line errors naming it."""
    raw = environ.get(name)
    if raw is None:
        raise _not_set(name)
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 9 and low <= int(text) <= high):
        raise SchedoptError(f"must be an integer from {low} to {high}{why}", name, raw)
    return int(text)


def _env_addr(environ: Mapping[str, str]) -> str:
    """``MASTER_ADDR``: a host name or address, without spaces or control characters."""
    raw = environ.get("MASTER_ADDR")
    if raw is None:
        raise _not_set("MASTER_ADDR")
    addr = raw.strip()
    if not addr or len(addr) > 255 or not addr.isprintable() or " " in addr:
        raise SchedoptError("must be the host name or address of rank 0's node", "MASTER_ADDR",
                            raw)
    return addr


def env_launch(environ: Mapping[str, str], backend: str = "gloo", threads: int = 1,
               timeout_s: float = 600.0) -> EnvLaunch:
    """This process's place among the ranks a launcher started, read from ``environ``.

    Parameters
    ----------
    environ
        The environment (:data:`ENV_VARS`: torchrun sets them in every rank).
    backend, threads, timeout_s
        As :class:`Launch` (checked the same way, naming ``--backend``, ``--threads`` and
        ``--timeout``).

    Raises
    ------
    SchedoptError
        A variable that is missing or malformed, ``WORLD_SIZE`` below 2, ``RANK`` or
        ``LOCAL_RANK`` not below ``WORLD_SIZE``: one line naming the variable.
    """
    Launch(2, backend, threads, timeout_s).check()
    world = _env_int(environ, "WORLD_SIZE", 2, MAX_WORLD)
    below = f" (WORLD_SIZE is {world})"
    rank = _env_int(environ, "RANK", 0, world - 1, below)
    local_rank = _env_int(environ, "LOCAL_RANK", 0, world - 1, below)
    addr = _env_addr(environ)
    port = _env_int(environ, "MASTER_PORT", 1, 65535)
    return EnvLaunch(rank, world, local_rank, addr, port, backend, threads, timeout_s)


def _node_key() -> tuple[str, str]:
    """What tells this rank's node from the others: the host name, and torchrun's node rank
    (``GROUP_RANK``) where set (several torchrun nodes may share one host)."""
    import socket

    return socket.gethostname(), os.environ.get("GROUP_RANK", "")


def _join(spec: EnvLaunch) -> None:
    """Pin threads and GPU, then meet the other ranks through ``env://`` (at most
    ``spec.timeout_s``)."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(spec.threads)
    import torch

    if spec.backend == "nccl" and spec.local_rank >= torch.cuda.device_count():
        raise SchedoptError(f"this node has {torch.cuda.device_count()} GPUs for nccl",
                            "LOCAL_RANK", spec.local_rank)
    _place(spec.threads, spec.backend, spec.local_rank)
    try:
        _init(spec, spec.rank, "env://")
    except Exception as exc:
        raise SchedoptError(
            f"rank {spec.rank} of {spec.world_size} did not meet the others at "
            f"{spec.master_addr}:{spec.master_port} within --timeout {spec.timeout_s:g} s: "
            f"{_exc_line(exc)}") from None


def _gather(obj: Any, spec: EnvLaunch) -> list[Any]:
    """``obj`` of every rank, in rank order (``all_gather_object``)."""
    import torch.distributed as dist

    out: list[Any] = [None] * spec.world_size
    dist.all_gather_object(out, obj)
    return out


@contextlib.contextmanager
def joined(spec: AnyLaunch) -> Iterator[AnyLaunch]:
    """Meet the other ranks of an :class:`EnvLaunch` for the block; a :class:`Launch` is
    yielded as it is (its ranks meet in :func:`launch`).

    Yields
    ------
    Launch or EnvLaunch
        ``spec``, with :attr:`EnvLaunch.nodes` filled in.

    Raises
    ------
    SchedoptError
        The ranks did not meet within ``spec.timeout_s``, or an nccl rank's ``LOCAL_RANK``
        names no GPU of its node.
    """
    if isinstance(spec, Launch):
        yield spec
        return
    import torch.distributed as dist

    _join(spec)
    try:
        yield replace(spec, nodes=len(set(_gather(_node_key(), spec))))
        # no rank tears its process group down while another still talks to it (gloo aborts
        # with "terminate called without an active exception")
        dist.barrier()
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def run_joined(job: dict[str, Any], spec: EnvLaunch) -> list[dict[str, Any]]:
    """Run ``job`` as this rank, inside :func:`joined`, and return every rank's result.

    Returns
    -------
    list of dict
        One result per rank, in rank order, on every rank (as :func:`launch` returns them).

    Raises
    ------
    SchedoptError
        The worker failed here, or a collective failed or passed ``spec.timeout_s`` (another
        rank failed or hung); one line that names this rank.
    """
    try:
        return _gather(_run_worker(_full_job(job, spec), spec.rank), spec)
    except SchedoptError as exc:
        raise SchedoptError(f"rank {spec.rank}: {exc}") from None
    except Exception as exc:
        raise SchedoptError(f"rank {spec.rank} of {spec.world_size}: {_exc_line(exc)}"
                            ) from None


def run_ranks(job: dict[str, Any], spec: AnyLaunch) -> list[dict[str, Any]]:
    """Every rank's result of ``job``, in rank order: local ranks started by :func:`launch`, or
    this process as one rank of a launcher (:func:`run_joined`, inside :func:`joined`).

    Raises
    ------
    SchedoptError
        A rank failed or hung (as :func:`launch` and :func:`run_joined` say).
    """
    return launch(job, spec) if isinstance(spec, Launch) else run_joined(job, spec)


def _full_job(job: dict[str, Any], spec: AnyLaunch) -> dict[str, Any]:
    """``job`` with what every rank needs to know of the launch."""
    return {**job, "procs": spec.procs, "backend": spec.backend, "threads": spec.threads,
            "timeout_s": spec.timeout_s}


def _exc_line(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line of at most 400 characters of message."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"


def _place(threads: int, backend: str, device: int) -> None:
    """Pin this rank's torch threads; with nccl, make GPU ``device`` the current one."""
    import torch

    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(device)


def _init(spec: AnyLaunch, rank: int, init_method: str) -> None:
    """Join the process group of ``spec`` as ``rank`` (the collectives' timeout too)."""
    from datetime import timedelta

    import torch.distributed as dist

    global _joined_group
    _joined_group = True
    dist.init_process_group(spec.backend, init_method=init_method, rank=rank,
                            world_size=spec.procs, timeout=timedelta(seconds=spec.timeout_s))


def _run_worker(job: dict[str, Any], rank: int) -> dict[str, Any]:
    """Call ``job["worker"]`` (``MODULE:FUNCTION``) as ``FUNCTION(job, rank)``."""
    module, _, name = job["worker"].partition(":")
    result: dict[str, Any] = getattr(importlib.import_module(module), name)(job, rank)
    return result


def _worker(argv: list[str]) -> int:
    """Entry of one rank: ``python -m schedopt.measure.launch WORKDIR RANK``."""
    import torch
    import torch.distributed as dist

    workdir, rank = Path(argv[0]), int(argv[1])
    job = json.loads((workdir / "job.json").read_text())
    spec = Launch(job["procs"], job["backend"], job["threads"], job["timeout_s"])
    try:
        gpus = torch.cuda.device_count() if spec.backend == "nccl" else 1
        _place(spec.threads, spec.backend, rank % max(1, gpus))
        _init(spec, rank, "file://" + job["rendezvous"])
        result = _run_worker(job, rank)
        dist.barrier()
    except Exception as exc:
        print(_exc_line(exc), file=sys.stderr, flush=True)
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


def exit_process(status: int) -> NoReturn:
    """End this process with ``status``; once it has joined a process group, without the
    interpreter's finalization.

    A gloo process group outlives :func:`torch.distributed.destroy_process_group` once
    DistributedDataParallel has used it (torch 2.13: its worker threads still run), and a worker
    thread frees the last collective's work after the caller's wait has returned. When that free
    drops a tensor that Python also saw (``all_gather_object``'s buffers) while the interpreter
    is finalizing, the thread cannot take the GIL and the process aborts ("terminate called
    without an active exception", SIGABRT) after all of its output was written; torchrun then
    reports the rank as failed. Such a process therefore flushes its standard streams and ends
    with :func:`os._exit`: every file it writes is complete (written through a temporary file
    and a rename) before this is called.

    Parameters
    ----------
    status : int
        The exit status.
    """
    if not _joined_group:
        sys.exit(status)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    os._exit(status)


if __name__ == "__main__":  # a rank started by launch()
    exit_process(_worker(sys.argv[1:]))
