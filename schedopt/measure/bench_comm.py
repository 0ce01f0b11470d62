"""Real runs on this machine: local process launch, all-reduce latency and the overlap slowdown.

``schedopt bench-comm`` and ``schedopt bench-ddp`` start ``procs`` local processes, one rank each,
that meet through ``torch.distributed`` (a rendezvous file in a private temporary folder; gloo
talks over loopback, nccl over the GPUs). Every process runs with ``OMP_NUM_THREADS`` and
``torch.set_num_threads`` pinned to ``threads``. The parent waits at most ``timeout_s`` for all of
them: a rank that exits with an error, or that has not finished in time, stops the whole run
(every rank is killed) with a one-line :class:`~schedopt.errors.SchedoptError`, and nothing is
written. torch is imported only inside the worker processes and the functions that need it.
With ``--launcher env`` (:class:`~schedopt.measure.launch.EnvLaunch`) the same worker runs in
this process as one rank of torchrun, on one node or several (:mod:`schedopt.measure.launch`):
the way to measure the network between nodes.

bench-comm (:func:`bench_comm`)
    All-reduce latency of float32 messages from ``min_bytes`` to ``max_bytes`` (powers of two):
    per size, ``warmup`` untimed calls, then ``iters`` timed calls in one of two **patterns**
    (:data:`PATTERNS`). ``isolated`` (the default): every call starts alone after a barrier
    and is waited for before the next; its time is the slowest rank's, and the size's time the
    median over the calls. That is the cost of one all-reduce with nothing queued beside it,
    the task the simulator schedules. ``queued``: the ``iters`` calls are launched back to back
    (``async_op``) after a barrier and waited for, as nccl-tests does; the time per call is the
    slowest rank's total over ``iters``. A backend that runs queued calls concurrently (gloo
    has two threads per process group) reports less per call that way than one call alone
    costs: on this project's 2-core machine a lone 16-64 MiB all-reduce took 14-24% longer
    than its queued time (docs/validation.md, "One all-reduce alone"). Then the **overlap
    slowdown** ``s`` of docs/model.md: every rank times a fixed compute loop (matrix products)
    alone, and again while all-reduces of ``overlap_bytes`` run without a break on the
    backend's own threads (``async_op``); ``s`` = time with / time alone (the median over
    ``overlap_repeats`` pairs and the slowest rank): the fluid slowdown of compute that
    overlaps communication. In the same repeats, the **communication slowdown** ``s_c``: a
    few all-reduces of ``overlap_bytes`` timed alone and again while every rank keeps
    computing until they are done; ``s_c`` = time under compute / time alone. On a GPU it is
    about 1; where the ranks and the backend's threads share CPU cores, both are near 2.
    Last, the **launch cost** (``launch_overhead_s`` of docs/model.md, "Host side"): the host
    time of one ``all_reduce(async_op=True)`` call of 4 bytes, from the call to its return (the
    framework's and the library's enqueue, nothing of the transfer), each call waited for
    before the next; the median over ``launch_calls`` calls of the slowest rank.

The output (:func:`format_nccl_tests`) is in the nccl-tests ``all_reduce_perf`` layout, so
``schedopt fit-comm`` reads it; the slowdowns travel in ``# schedopt overlap_slowdown`` and
``# schedopt comm_slowdown`` comment lines, the launch cost in ``# schedopt
launch_overhead_s``, all of which ``fit-comm --out`` copies into the cluster
(:func:`schedopt.measure.comm_tables.read_slowdowns`). Starting the ranks is
:mod:`schedopt.measure.launch`.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.measure.comm_tables import PATTERNS
from schedopt.measure.launch import AnyLaunch, EnvLaunch, run_ranks

__all__ = [
    "CommBench",
    "bench_comm",
    "comm_worker",
    "format_nccl_tests",
    "parse_sizes",
]

#: All-reduces of ``overlap_bytes`` per timing of the communication slowdown.
_COMM_CALLS = 3


#: Largest message ``--sizes`` may name (bytes; 16 GiB).
MAX_MESSAGE_BYTES = 2**34


# ------------------------------------------------------------------------------ bench-comm
def parse_sizes(text: str) -> tuple[int, int]:
    """``MIN:MAX`` in bytes, with optional K, M, G suffixes (powers of 1024): ``4K:64M``.

    Raises
    ------
    SchedoptError
        Malformed text, sizes below 4 bytes, or MIN > MAX.
    """
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
    out = []
    parts = text.split(":")
    for part in parts:
        m = re.fullmatch(r"\s*(\d{1,18})\s*([KMG]?)(i?B)?\s*", part, re.IGNORECASE)
        if not m:
            raise SchedoptError("write MIN:MAX in bytes (K, M, G suffixes allowed)", "--sizes",
                                text)
        out.append(int(m.group(1)) * units[m.group(2).upper()])
    if len(out) != 2 or out[0] < 4 or out[0] > out[1] or out[1] > MAX_MESSAGE_BYTES:
        raise SchedoptError("write MIN:MAX with 4 <= MIN <= MAX <= 16G bytes", "--sizes", text)
    return out[0], out[1]


def _sizes(lo: int, hi: int) -> list[int]:
    sizes, n = [], lo
    while n <= hi:
        sizes.append(n // 4 * 4)
        n *= 2
    return sizes


def _device(job: dict[str, Any]) -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if job["backend"] == "nccl" else (
        torch.device("cpu"))


def _slowest_each(values: list[float]) -> list[float]:
    """The largest of each of ``values`` over the ranks (one collective for all of them)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


def _slowest(value: float) -> float:
    """The largest ``value`` over the ranks."""
    return _slowest_each([value])[0]


def _sync(job: dict[str, Any]) -> None:
    import torch

    if job["backend"] == "nccl":
        torch.cuda.synchronize()


def _time_allreduce(job: dict[str, Any], n_bytes: int) -> float:
    import torch
    import torch.distributed as dist

    buf = torch.ones(n_bytes // 4, dtype=torch.float32, device=_device(job))
    for _ in range(job["warmup"]):
        dist.all_reduce(buf)
    _sync(job)
    if job["pattern"] == "queued":
        dist.barrier()
        t0 = time.perf_counter()
        # launched back to back, then waited for (as nccl-tests)
        works = [dist.all_reduce(buf, async_op=True) for _ in range(job["iters"])]
        for w in works:
            w.wait()
        _sync(job)
        return _slowest((time.perf_counter() - t0) / job["iters"])
    calls = []
    for _ in range(job["iters"]):  # each call alone: nothing queued before or beside it
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        _sync(job)
        calls.append(time.perf_counter() - t0)
    return statistics.median(_slowest_each(calls))  # per call, the slowest rank


def _compute_loop(job: dict[str, Any]) -> Callable[[], float]:
    """A fixed amount of compute (matrix products); returns a function that times it."""
    import torch

    dim = job["compute_dim"]
    a = torch.randn(dim, dim, device=_device(job))
    b = torch.randn(dim, dim, device=_device(job))

    def run() -> float:
        _sync(job)
        t0 = time.perf_counter()
        for _ in range(job["compute_reps"]):
            torch.mm(a, b)
        _sync(job)
        return time.perf_counter() - t0

    return run


def _overlap(job: dict[str, Any], t_op: float) -> dict[str, Any]:
    """Compute time alone and under continuous all-reduces of ``overlap_bytes``, per repeat."""
    import torch
    import torch.distributed as dist

    run = _compute_loop(job)
    run()
    buf = torch.ones(job["overlap_bytes"] // 4, dtype=torch.float32, device=_device(job))
    pairs = []
    for _ in range(job["overlap_repeats"]):
        alone = _slowest(run())
        # enough calls to outlast the loop even when it runs up to 8x slower under them
        count = min(10_000, 2 + math.ceil(8 * alone / max(t_op, 1e-6)))
        dist.barrier()
        works = [dist.all_reduce(buf, async_op=True) for _ in range(count)]
        under = run()
        covered = 0.0 if works[-1].is_completed() else 1.0
        for w in works:
            w.wait()
        under = _slowest(under)
        covered = -_slowest(-covered)  # 1 only if communication outlasted compute everywhere
        pairs.append((alone, under, covered))
    return {"pairs": pairs, "comm_pairs": [_comm_under_compute(job, buf)
                                           for _ in range(job["overlap_repeats"])]}


def _comm_under_compute(job: dict[str, Any], buf: Any) -> tuple[float, float]:
    """``_COMM_CALLS`` all-reduces of ``buf`` alone, then while every rank keeps computing
    until they are done: ``(alone_s, under_s)`` per call (slowest rank)."""
    import torch
    import torch.distributed as dist

    dim = job["compute_dim"]
    a = torch.randn(dim, dim, device=_device(job))
    times = []
    for busy in (False, True):
        _sync(job)
        dist.barrier()
        t0 = time.perf_counter()
        works = [dist.all_reduce(buf, async_op=True) for _ in range(_COMM_CALLS)]
        while busy and not works[-1].is_completed():
            torch.mm(a, a)
            _sync(job)
        for w in works:
            w.wait()
        _sync(job)
        times.append(_slowest((time.perf_counter() - t0) / _COMM_CALLS))
    return times[0], times[1]


def _launch_cost(job: dict[str, Any]) -> float | None:
    """Host time of one ``all_reduce(async_op=True)`` of 4 bytes, from the call to its return,
    each call waited for (and the device synchronised) before the next: the median over
    ``launch_calls`` calls of the slowest rank (None when ``launch_calls`` is 0)."""
    import torch
    import torch.distributed as dist

    if not job["launch_calls"]:
        return None
    buf = torch.ones(1, dtype=torch.float32, device=_device(job))
    for _ in range(max(job["warmup"], 3)):
        dist.all_reduce(buf)
    _sync(job)
    calls = []
    for _ in range(job["launch_calls"]):
        t0 = time.perf_counter()
        work = dist.all_reduce(buf, async_op=True)
        calls.append(time.perf_counter() - t0)
        work.wait()
        _sync(job)
    return statistics.median(_slowest_each(calls))


def comm_worker(job: dict[str, Any], rank: int) -> dict[str, Any]:
    """One rank of :func:`bench_comm` (in a process :func:`launch` starts, or under a launcher
    through :func:`~schedopt.measure.launch.run_joined`)."""
    import socket

    sizes = _sizes(job["min_bytes"], job["max_bytes"])
    times = [_time_allreduce(job, n) for n in sizes]
    t_op = _time_allreduce(job, job["overlap_bytes"])
    return {"rank": rank, "sizes": sizes, "times": times, "overlap_op_s": t_op,
            **(_overlap(job, t_op) if job["overlap_repeats"] else {"pairs": [],
                                                                   "comm_pairs": []}),
            "launch_s": _launch_cost(job), "host": socket.gethostname(),
            "device": _device_index(job, rank)}


def _device_index(job: dict[str, Any], rank: int) -> int:
    """The rank's GPU with nccl; with gloo its local rank (``LOCAL_RANK`` under a launcher)."""
    import os

    if job["backend"] == "nccl":
        import torch

        return int(torch.cuda.current_device())
    return int(os.environ.get("LOCAL_RANK", rank))


@dataclass(frozen=True)
class CommBench:
    """Result of :func:`bench_comm`.

    Attributes
    ----------
    sizes, times
        Message sizes (bytes) and the all-reduce time (s) as ``pattern`` measures it.
    overlap_slowdown
        ``s >= 1`` (1 where the loop ran no faster alone), or None when not measured.
    overlap_pairs
        ``(alone_s, under_s)`` of every repeat.
    comm_slowdown
        ``s_c >= 1``: all-reduces under compute against alone, or None when not measured.
    comm_pairs
        ``(alone_s, under_s)`` per all-reduce call of every repeat.
    launch
        How the ranks ran.
    overlap_bytes, compute
        The message size under the compute loop, and the loop (``dim x dim`` products, count).
    pattern
        How the calls were timed (:data:`PATTERNS`).
    launch_overhead_s
        Host time of one asynchronous all-reduce call (its enqueue), or None when not
        measured.
    launch_calls
        Calls timed for ``launch_overhead_s``.
    ranks
        ``(host, device)`` of every rank, in rank order (the device: the rank's GPU with nccl,
        its local rank with gloo).
    """

    sizes: list[int]
    times: list[float]
    overlap_slowdown: float | None
    overlap_pairs: list[tuple[float, float]]
    launch: AnyLaunch
    overlap_bytes: int
    compute: tuple[int, int]
    comm_slowdown: float | None = None
    comm_pairs: tuple[tuple[float, float], ...] = ()
    pattern: str = "isolated"
    launch_overhead_s: float | None = None
    launch_calls: int = 0
    ranks: tuple[tuple[str, int], ...] = ()


def bench_comm(spec: AnyLaunch, *, min_bytes: int = 4096, max_bytes: int = 64 * 2**20,
               iters: int = 10, warmup: int = 3, overlap_bytes: int | None = None,
               overlap_repeats: int = 5, compute_dim: int = 512,
               compute_reps: int = 25, pattern: str = "isolated",
               launch_calls: int = 200) -> CommBench:
    """Measure all-reduce latency over message sizes and the overlap slowdown.

    Parameters
    ----------
    spec
        Processes, backend, threads, time limit: local ranks
        (:class:`~schedopt.measure.launch.Launch`), or this process as one rank of a launcher
        (:class:`~schedopt.measure.launch.EnvLaunch`, inside
        :func:`~schedopt.measure.launch.joined`; every rank returns the same result;
        :func:`~schedopt.measure.launch.run_ranks`).
    min_bytes, max_bytes
        Message sizes: powers of two times ``min_bytes`` up to ``max_bytes``.
    iters, warmup
        Timed and untimed calls per size.
    pattern
        ``isolated``: every timed call alone after a barrier, the median call;
        ``queued``: the calls launched back to back, the mean (module docstring).
    overlap_bytes
        Message size of the all-reduces under the compute loop (default: 25 MiB, DDP's bucket
        cap, or ``max_bytes`` if smaller).
    overlap_repeats
        Pairs (alone, under communication) timed; 0 skips the overlap measurement.
    compute_dim, compute_reps
        The compute loop: ``compute_reps`` products of two ``compute_dim`` square matrices.
    launch_calls
        Asynchronous 4-byte calls timed for the launch cost (0 skips it).

    Raises
    ------
    SchedoptError
        Bad arguments, a failed or hung rank, or communication that did not outlast the loop.
    """
    if pattern not in PATTERNS:
        raise SchedoptError(f"must be one of {', '.join(PATTERNS)}", "pattern", pattern)
    for name, value in (("iters", iters), ("compute_dim", compute_dim),
                        ("compute_reps", compute_reps)):
        if value < 1:
            raise SchedoptError("must be a positive integer", name, value)
    for name, value in (("warmup", warmup), ("overlap_repeats", overlap_repeats),
                        ("launch_calls", launch_calls)):
        if value < 0:
            raise SchedoptError("must be >= 0", name, value)
    if not 4 <= min_bytes <= max_bytes:
        raise SchedoptError("write 4 <= MIN <= MAX bytes", "sizes", (min_bytes, max_bytes))
    ob = min(25 * 2**20, max_bytes) if overlap_bytes is None else overlap_bytes
    if ob < 4:
        raise SchedoptError("must be at least 4 bytes", "overlap_bytes", ob)
    ob = ob // 4 * 4
    job: dict[str, Any] = {
           "worker": "schedopt.measure.bench_comm:comm_worker", "min_bytes": min_bytes,
           "max_bytes": max_bytes, "iters": iters,
           "warmup": warmup, "overlap_bytes": ob,
           "overlap_repeats": overlap_repeats, "compute_dim": compute_dim,
           "compute_reps": compute_reps, "pattern": pattern, "launch_calls": launch_calls}
    results = run_ranks(job, spec)
    first = results[0]
    pairs = [(a, u) for a, u, _ in first["pairs"]]
    if first["pairs"] and not all(c for _, _, c in first["pairs"]):
        raise SchedoptError("the all-reduces finished before the compute loop; raise "
                            "--overlap-bytes", "overlap_bytes", job["overlap_bytes"])
    slow = (max(1.0, statistics.median(u / a for a, u in pairs)) if pairs else None)
    comm_pairs = tuple((a, u) for a, u in first["comm_pairs"])
    comm_slow = (max(1.0, statistics.median(u / a for a, u in comm_pairs)) if comm_pairs
                 else None)
    return CommBench(first["sizes"], first["times"], slow, pairs, spec, ob,
                     (compute_dim, compute_reps), comm_slow, comm_pairs, pattern,
                     first.get("launch_s"), launch_calls,
                     tuple((r["host"], r["device"]) for r in results))


def format_nccl_tests(res: CommBench) -> str:
    """The result in nccl-tests ``all_reduce_perf`` layout (out-of-place columns; the in-place
    columns repeat them), with the call pattern and the slowdowns in ``# schedopt`` comment
    lines."""
    sp = res.launch
    p = sp.procs
    how = ("the median over the timed calls of the slowest rank's time, each call alone after"
           " a barrier" if res.pattern == "isolated" else
           "the slowest rank's mean over the timed calls, launched back to back")
    ran = sp.describe() if isinstance(sp, EnvLaunch) else f"{p} local processes"
    lines = [f"# schedopt bench-comm: all_reduce_perf layout (nccl-tests), backend {sp.backend},"
             f" {ran}, OMP_NUM_THREADS={sp.threads}",
             f"# schedopt pattern {res.pattern}",
             f"# times (us) are {how}"]
    where = res.ranks if isinstance(sp, EnvLaunch) and len(res.ranks) == p else \
        [("localhost", r) for r in range(p)]
    lines += [f"#  Rank {r:2d} Group  0 Pid {0:6d} on {host} device {dev:2d} [{sp.backend}]"
              for r, (host, dev) in enumerate(where)]
    loop = f"compute loop ({res.compute[1]} products of {res.compute[0]}^2 float32)"
    op = f"all-reduce of {res.overlap_bytes} B"
    for field, value, pairs, what, under in (
            ("overlap_slowdown", res.overlap_slowdown, res.overlap_pairs, loop,
             f"all-reduces of {res.overlap_bytes} B"),
            ("comm_slowdown", res.comm_slowdown, res.comm_pairs, op, "the compute loop")):
        if value is None:
            continue
        t_alone = statistics.median(a for a, _ in pairs)
        t_under = statistics.median(u for _, u in pairs)
        lines.append(f"# schedopt {field} {value:.4f}")
        lines.append(f"#   {what} {t_alone * 1e3:.3f} ms alone, {t_under * 1e3:.3f} ms under "
                     f"{under} (medians of {len(pairs)})")
    if res.launch_overhead_s is not None:
        lines.append(f"# schedopt launch_overhead_s {res.launch_overhead_s:.4g}")
        lines.append(f"#   host time of one all_reduce(async_op=True) call of 4 B, from the call "
                     f"to its return (median of {res.launch_calls} calls, slowest rank)")
    lines.append("#       size    count   type  redop     time  algbw  busbw #wrong     time"
                 "  algbw  busbw #wrong")
    lines.append("#        (B) (elements)                 (us) (GB/s) (GB/s)           (us)"
                 " (GB/s) (GB/s)")
    for n, t in zip(res.sizes, res.times, strict=True):
        us = t * 1e6
        alg = n / t / 1e9 if t > 0 else 0.0
        bus = alg * 2 * (p - 1) / p
        half = f"{us:10.1f} {alg:6.3f} {bus:6.3f}      0"
        lines.append(f"{n:12d} {n // 4:10d}  float    sum {half} {half}")
    return "\n".join(lines) + "\n"
