"""Real DistributedDataParallel runs of a user's model, written as measurements rows.

:func:`ddp_configs` turns policy specs and plan files into what each run executes:

``ddp[:knobs]``
    ``DistributedDataParallel(model, **knobs)``: ``bucket_cap_mb`` and ``bucket_cap_mb_list``
    are passed as they are; ``first_bucket_mb`` (only with the cap unset) sets
    ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` for the run.
``plan:PATH`` (a plan, or the output of ``optimize --out``)
    The ``bucket_cap_mb_list`` the ddp emitter computes. When DDP cannot express the plan
    exactly, the row names the emitted ``ddp:`` spec instead (what ran).
``cntk``, ``sync-easgd`` (and plans with ``overlap: false``)
    No overlap: the backward runs under ``no_sync()``, then each of the plan's buckets is
    all-reduced in launch order (each gradient divided by the world size while it is copied
    into the bucket's buffer, as DDP's reducer does, then summed): one all-reduce per layer for
    ``cntk``, one of all gradients for ``sync-easgd``. With ``gradient_as_bucket_view`` (the
    default) the gradients then become views of the reduced buffer, as DDP's do: a copy into
    the buffer and none back, the copies DDP itself makes (a copy back costs 8-10% of such an
    iteration on this machine: ``benchmarks/ddp_comm_timing.py``).

Every rank builds the model with the same seed and its own random batch, and runs ``warmup``
untimed iterations (DDP rebuilds its buckets after the first) then ``iters`` timed ones. An
iteration is forward, loss, backward (and the manual all-reduces); its time is the interval
between the ends of consecutive iterations (the steady-state period the simulator predicts).
``gradient_as_bucket_view`` is the same for every row (default on, as the ddp emitter sets it),
so that rows differ only in their buckets. After the timed iterations each rank reads the buckets
DDP built (``_get_ddp_logging_data``); :func:`summarize` compares them with the plan's.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.measure.launch import AnyLaunch, run_ranks, write_text_atomic
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.policies.ddp import ddp_buckets, ddp_limits
from schedopt.policies.registry import parse_spec

__all__ = ["DdpConfig", "DdpRow", "bench_ddp", "ddp_configs", "ddp_worker", "rows_csv",
           "write_rows"]

#: Policies bench-ddp runs without overlap (manual all-reduce after the backward).
MANUAL_POLICIES = ("cntk", "sync-easgd")
_DDP_KNOBS = ("bucket_cap_mb", "bucket_cap_mb_list", "first_bucket_mb")


@dataclass
class DdpConfig:
    """One configuration to run.

    Attributes
    ----------
    policy
        The measurements row's policy column (a spec, or ``plan:PATH``).
    label
        Short name for tables.
    mode
        ``ddp`` (DDP's own buckets) or ``manual`` (no_sync, then the buckets all-reduced).
    kwargs
        ``DistributedDataParallel`` keyword arguments (``ddp`` mode).
    first_bucket_bytes
        Value for ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` during the run, or None.
    buckets
        The buckets the run should use, as tensor names in launch order.
    """

    policy: str
    label: str
    mode: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    first_bucket_bytes: int | None = None
    buckets: list[list[str]] = field(default_factory=list)


def _spec_config(spec: str, trace: Trace, cluster: Cluster) -> DdpConfig:
    name, knobs = parse_spec(spec)
    plan = make_plan(trace, cluster, spec)  # validates the knobs
    if name in MANUAL_POLICIES:
        return DdpConfig(spec, spec, "manual", buckets=plan.buckets)
    if name != "ddp":
        raise SchedoptError(f"bench-ddp runs ddp, {', '.join(MANUAL_POLICIES)} specs and plans",
                            "policy", spec)
    bad = sorted(set(knobs) - set(_DDP_KNOBS))
    if bad:
        raise SchedoptError("not a DDP keyword argument", f"policy {spec}", bad[0])
    kwargs: dict[str, Any] = {k: knobs[k] for k in ("bucket_cap_mb", "bucket_cap_mb_list")
                              if k in knobs}
    first = None
    if "first_bucket_mb" in knobs:
        if "bucket_cap_mb" in knobs or "bucket_cap_mb_list" in knobs:
            raise SchedoptError("DDP takes first_bucket_mb only with the cap unset",
                                f"policy {spec}", knobs["first_bucket_mb"])
        first = ddp_limits(first_bucket_mb=knobs["first_bucket_mb"])[0]
    return DdpConfig(spec, spec, "ddp", kwargs, first, plan.buckets)


def _plan_config(path: Path, plan: Plan, trace: Trace, cluster: Cluster, ref: str) -> DdpConfig:
    from schedopt.emit.ddp import emit_ddp

    if not plan.overlap:
        return DdpConfig(f"plan:{ref}", path.name, "manual", buckets=plan.buckets)
    emitted = emit_ddp(trace, cluster, plan)
    caps = emitted.config["bucket_cap_mb_list"]
    buckets = ddp_buckets(trace, ddp_limits(bucket_cap_mb_list=caps))
    policy = f"plan:{ref}" if emitted.exact else str(emitted.spec)
    return DdpConfig(policy, path.name, "ddp", {"bucket_cap_mb_list": caps}, None, buckets)


def ddp_configs(trace: Trace, cluster: Cluster, specs: list[str], plans: list[Path],
                csv_dir: Path) -> list[DdpConfig]:
    """The configurations of ``specs`` and plan files, in that order.

    Plan paths are written relative to ``csv_dir`` (the measurements file's folder).

    Raises
    ------
    SchedoptError
        No configuration, a policy bench-ddp cannot run, a bad knob, or a plan that does not fit
        the trace.
    """
    from schedopt.files import load_plan

    if not specs and not plans:
        raise SchedoptError("give at least one -p SPEC or --plan PLAN.json", "policy", None)
    out = [_spec_config(s, trace, cluster) for s in specs]
    for path in plans:
        plan = load_plan(path)
        plan.check_against(trace)
        out.append(_plan_config(path, plan, trace, cluster, _rel(path, csv_dir)))
    return out


def _rel(path: Path, base: Path) -> str:
    return os.path.relpath(path.resolve(), base.resolve())


# ------------------------------------------------------------------------------ the ranks
def _slices(group: list[Any], flat: Any) -> Iterator[tuple[Any, Any]]:
    """Each parameter of ``group`` with its slice of ``flat``, shaped as the parameter (the
    bucket layout: parameters back to back in ``group``'s order)."""
    offset = 0
    for p in group:
        yield p, flat[offset:offset + p.numel()].view_as(p)
        offset += p.numel()


def _view_grads(group: list[Any], flat: Any) -> None:
    """Make the gradients of ``group`` views of ``flat`` (as ``gradient_as_bucket_view``)."""
    for p, part in _slices(group, flat):
        p.grad = part


def _scale_into(group: list[Any], flat: Any, factor: float) -> None:
    """Copy the gradients of ``group`` into ``flat``, multiplied by ``factor`` on the way, as
    DDP's reducer divides while it copies into its bucket (torch 2.13, ``reducer.cpp``,
    ``copy_grad_to_bucket``: ``mul_out``): one pass over the bytes, not a copy and a division."""
    import torch

    for p, part in _slices(group, flat):
        torch.mul(p.grad, factor, out=part)


def _copy_grads(group: list[Any], flat: Any) -> None:
    """Copy ``flat`` back into the gradients of ``group``."""
    for p, part in _slices(group, flat):
        p.grad.copy_(part)


def _iterate(job: dict[str, Any], model: Any, ddp: Any, batch: Any, cfg: dict[str, Any]
             ) -> tuple[list[float], float | None]:
    """Run warm-up and timed iterations; return the timed iteration times and, on a CPU, the
    minor page faults per timed iteration (None where the OS does not count them)."""
    import torch
    import torch.distributed as dist

    from schedopt.measure.profile import _call, _default_loss, _minor_faults

    params = dict(model.named_parameters())
    groups = [[params[n] for n in b] for b in cfg["buckets"]]
    flats = [torch.empty(sum(p.numel() for p in g), dtype=g[0].dtype, device=g[0].device)
             for g in groups]  # one buffer per bucket, allocated once (as DDP's buckets)
    world = dist.get_world_size()
    ends: list[float] = []
    dist.barrier()
    faults_start = None
    for _ in range(job["warmup"] + job["iters"]):
        if len(ends) == job["warmup"]:
            faults_start = _minor_faults()
        model.zero_grad(set_to_none=True)
        if cfg["mode"] == "manual":
            with ddp.no_sync():
                _default_loss(_call(ddp, batch)).backward()
            for group, flat in zip(groups, flats, strict=True):
                _scale_into(group, flat, 1.0 / world)
                dist.all_reduce(flat)
                if job["bucket_view"]:  # the gradients become views of the bucket (no copy back)
                    _view_grads(group, flat)
                else:
                    _copy_grads(group, flat)
        else:
            _default_loss(_call(ddp, batch)).backward()
        if job["backend"] == "nccl":
            torch.cuda.synchronize()
        ends.append(time.perf_counter())
    faults_end = _minor_faults()
    faults = None
    if job["backend"] == "gloo" and faults_start is not None and faults_end is not None:
        faults = (faults_end - faults_start) / job["iters"]
    return ([b - a for a, b in zip(ends[job["warmup"] - 1:], ends[job["warmup"]:], strict=False)],
            faults)


def ddp_worker(job: dict[str, Any], rank: int) -> dict[str, Any]:
    """One rank of :func:`bench_ddp` (in a process :func:`launch` starts, or under a launcher
    through :func:`~schedopt.measure.launch.run_joined`)."""
    import torch
    import torch.distributed as dist

    from schedopt.emit.ddp_torch import check_model, rebuilt_buckets
    from schedopt.files import load_trace
    from schedopt.measure.profile import _to_device, load_factory, random_batch

    trace = load_trace(job["trace"])
    factory = load_factory(job["factory"])
    device = torch.device("cuda", torch.cuda.current_device()) if job["backend"] == "nccl" \
        else torch.device("cpu")
    torch.manual_seed(1000 + rank)
    batch = _to_device(random_batch(job["input_shape"], job["input_dtype"]), device)
    default_first = dist._DEFAULT_FIRST_BUCKET_BYTES
    out = []
    for cfg in job["configs"]:
        torch.manual_seed(0)
        model = factory().to(device)
        model.train()
        check_model(model, trace)
        if cfg["first_bucket_bytes"] is not None:
            dist._DEFAULT_FIRST_BUCKET_BYTES = cfg["first_bucket_bytes"]
        try:
            ddp = torch.nn.parallel.DistributedDataParallel(
                model, gradient_as_bucket_view=job["bucket_view"], **cfg["kwargs"])
        finally:
            dist._DEFAULT_FIRST_BUCKET_BYTES = default_first
        times, faults = _iterate(job, model, ddp, batch, cfg)
        built = rebuilt_buckets(ddp) if cfg["mode"] == "ddp" else None
        out.append({"times": times, "buckets": built, "faults": faults})
        del ddp, model
    return {"rank": rank, "runs": out}


# ------------------------------------------------------------------------------ results
@dataclass
class DdpRow:
    """One measured configuration (one round).

    Attributes
    ----------
    config
        What ran.
    round
        Round number (configurations run alternately, round after round).
    times
        Every timed iteration of every rank (s).
    median_s, std_s
        Median and standard deviation of ``times``.
    buckets_ok
        DDP built the intended buckets on every rank (always True for manual runs, which
        all-reduce the plan's buckets themselves).
    note
        What the bucket check found.
    faults
        Minor page faults per timed iteration, the median over the ranks (CPU ranks only;
        None elsewhere): fresh memory the kernel maps and zeroes, which the iteration times
        include (docs/cli.md, ``profile``).
    """

    config: DdpConfig
    round: int
    times: list[float]
    median_s: float
    std_s: float
    buckets_ok: bool
    note: str
    faults: float | None = None


def _check_buckets(cfg: DdpConfig, built: list[Any]) -> tuple[bool, str]:
    if cfg.mode == "manual":
        return True, f"no overlap: {len(cfg.buckets)} all-reduces after the backward"
    if any(b is None for b in built):
        return False, "DDP did not rebuild its buckets (raise --warmup)"
    if any(b != built[0] for b in built):
        return False, "ranks built different buckets"
    if built[0] != cfg.buckets:
        return False, (f"DDP built {len(built[0])} buckets, the plan has {len(cfg.buckets)}"
                       " (or in another order): the model's gradient order differs from the"
                       " trace's")
    return True, f"DDP built the {len(cfg.buckets)} planned buckets"


def summarize(configs: list[DdpConfig], results: list[dict[str, Any]], rnd: int) -> list[DdpRow]:
    """Rows of one round from every rank's results."""
    import math

    rows = []
    for k, cfg in enumerate(configs):
        times = [t for r in results for t in r["runs"][k]["times"]]
        if not times or not all(math.isfinite(t) and t > 0 for t in times):
            raise SchedoptError("a measured iteration time is not a positive number",
                                "iteration_time_s", cfg.label)
        ok, note = _check_buckets(cfg, [r["runs"][k]["buckets"] for r in results])
        std = statistics.pstdev(times) if len(times) > 1 else 0.0
        counts = [r["runs"][k].get("faults") for r in results]
        faults = statistics.median(counts) if all(c is not None for c in counts) else None
        rows.append(DdpRow(cfg, rnd, times, statistics.median(times), std, ok, note, faults))
    return rows


def bench_ddp(configs: list[DdpConfig], spec: AnyLaunch, *, factory: str, input_shape: str,
              input_dtype: str, trace_path: Path, iters: int, warmup: int, rounds: int = 1,
              bucket_view: bool = True) -> list[DdpRow]:
    """Run every configuration ``rounds`` times, alternately, on ``spec.procs`` ranks.

    A :class:`~schedopt.measure.launch.Launch` starts its local ranks for every round; an
    :class:`~schedopt.measure.launch.EnvLaunch` (``--launcher env``) runs this process as one
    rank, inside :func:`~schedopt.measure.launch.joined`, and every rank returns the same rows.

    Raises
    ------
    SchedoptError
        ``warmup < 2`` (DDP's buckets are final from the second iteration on), ``iters < 2``,
        ``rounds < 1``, or a rank that fails or hangs.
    """
    if warmup < 2:
        raise SchedoptError("must be at least 2 (DDP rebuilds its buckets after the first "
                            "iteration)", "warmup", warmup)
    if iters < 2:
        raise SchedoptError("must be at least 2", "iters", iters)
    if rounds < 1:
        raise SchedoptError("must be a positive integer", "rounds", rounds)
    job = {"worker": "schedopt.measure.bench_ddp:ddp_worker", "factory": factory,
           "input_shape": input_shape,
           "input_dtype": input_dtype, "trace": str(trace_path.resolve()), "iters": iters,
           "warmup": warmup, "bucket_view": bucket_view,
           "configs": [{"mode": c.mode, "kwargs": c.kwargs, "buckets": c.buckets,
                        "first_bucket_bytes": c.first_bucket_bytes} for c in configs]}
    rows: list[DdpRow] = []
    for rnd in range(rounds):
        results = run_ranks(job, spec)
        rows += summarize(configs, results, rnd)
    return rows


def write_rows(path: Path, rows: list[DdpRow], *, trace_ref: str, cluster_ref: str,
               spec: AnyLaunch, iters: int, warmup: int) -> None:
    """Write the rows as a measurements CSV (docs/formats.md), atomically."""
    write_text_atomic(path, rows_csv(rows, trace_ref=trace_ref, cluster_ref=cluster_ref,
                                     spec=spec, iters=iters, warmup=warmup))


def rows_csv(rows: list[DdpRow], *, trace_ref: str, cluster_ref: str, spec: AnyLaunch,
             iters: int, warmup: int) -> str:
    """The rows as the text of a measurements CSV (docs/formats.md); each ``source`` says how
    the ranks ran (``2 procs``, or ``4 ranks on 2 nodes (launcher env)``)."""
    import csv
    import io

    from schedopt.measure.profile import faults_text

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["trace", "cluster", "nodes", "policy", "iteration_time_s",
                "iteration_time_std_s", "samples", "source"])
    for r in rows:
        src = (f"bench-ddp {spec.backend} {spec.describe()} OMP_NUM_THREADS={spec.threads} "
               f"{iters} iters after {warmup} warm-up, round {r.round + 1}; {r.note}")
        if r.faults is not None:
            src += f"; {faults_text(r.faults)}"
        w.writerow([trace_ref, cluster_ref, "", r.config.policy, f"{r.median_s:.6g}",
                    f"{r.std_s:.3g}", len(r.times), src])
    return buf.getvalue()
