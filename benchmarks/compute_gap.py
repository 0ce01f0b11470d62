"""Three suspected causes of the DDP evidence's per-model compute gap, each measured.

In the DDP evidence runs of 2026-12-05 (docs/validation.md, "Earlier results") every bert_small
row was predicted too fast and every mlp row too slow; the results are in docs/validation.md,
"The gradient's lifetime". This study, one run of 2 gloo ranks computing side by side
(``OMP_NUM_THREADS`` pinned, as the profiles and the runs), measures per model of
``benchmarks/ddp_models.py``:

``medians``
    the profiler's own timed iterations (``--grad-copy``): the plain sum of the per-layer
    medians against the median of whole iterations (``profile`` now scales the layers by that
    ratio, per pass, and states it);
``contexts``
    forward and backward, and the minor page faults they take (fresh memory the kernel maps
    and zeroes), in four settings, blocks of iterations interleaved: ``alone``;
    ``views`` (then the gradients copied into a flat buffer, divided by the world size, and
    made views of it, as ``bench-ddp``'s no-overlap runs); ``all-reduce`` (the same with the
    buffer all-reduced before the views); ``no_sync`` (the same through DDP's ``no_sync``);
``small``
    both slowdowns per message size (``bench-comm`` measures them at 25 MiB only): ``s_c``,
    all-reduces alone and while every rank runs ``bench-comm``'s compute loop, and ``s``, the
    loop alone and under back-to-back all-reduces of that size.

It prints tables (model or size, what, figure). Usage::

    OMP_NUM_THREADS=1 python benchmarks/compute_gap.py [--models bert_small,mlp,mlp12]

Run from the repository root, on an otherwise idle machine (one to two minutes). Under glibc,
``MALLOC_TRIM_THRESHOLD_=4000000000 MALLOC_MMAP_THRESHOLD_=4000000000`` in the environment keeps
freed memory in the process (no page faults per iteration, as a caching allocator): the
comparison of docs/validation.md.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.ddp_evidence import MODELS

CONTEXTS = ("alone", "views", "all-reduce", "no_sync")
SMALL_SIZES = (256 << 10, 1 << 20, 2621440, 4 << 20, 25 << 20)


def _medians(name: str, iters: int) -> dict[str, float]:
    """Sum of per-layer medians and median of whole iterations (s), one profile."""
    from schedopt.measure.profile import (
        _build_trace,
        _default_loss,
        _GradCopies,
        _layers,
        _measure,
        _place,
        build_model,
        random_batch,
    )

    factory, shape, dtype = MODELS[name]
    model, x = build_model(factory), random_batch(shape, dtype)
    dev = _place(model, None)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    candidates = _layers(model)
    runs = _measure(model, x, dev, params, candidates, _default_loss, None, 3 + iters, 3,
                    _GradCopies(params))
    trace = _build_trace(model, name, 1, dev, iters, candidates, params, runs, "")
    # the trace's layers are scaled to the median whole pass; its source states the factors,
    # which undo the scaling: the plain sum of per-layer medians
    scale = re.search(r"forward x([\d.]+), backward x([\d.]+)", trace.source)
    fwd, bwd = (float(scale.group(1)), float(scale.group(2))) if scale else (1.0, 1.0)
    return {"layers": len(trace.layers),
            "sum of per-layer medians": sum(la.forward_s / fwd + la.backward_s / bwd
                                            for la in trace.layers),
            "median of iterations": statistics.median(r["bwd_end"] for r in runs)}


def _contexts(name: str, cycles: int, per_block: int) -> dict[str, dict[str, list[float]]]:
    """Forward + backward times (s) and minor page faults per setting of CONTEXTS, blocks
    interleaved."""
    import torch
    import torch.distributed as dist

    from schedopt.measure.bench_ddp import _scale_into, _view_grads
    from schedopt.measure.profile import (
        _call,
        _default_loss,
        _minor_faults,
        build_model,
        random_batch,
    )

    factory, shape, dtype = MODELS[name]
    torch.manual_seed(0)
    model = build_model(factory)
    model.train()
    torch.manual_seed(1000 + dist.get_rank())
    x = random_batch(shape, dtype)
    ddp = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.empty(sum(p.numel() for p in params))
    out: dict[str, dict[str, list[float]]] = {c: {"s": [], "faults": []} for c in CONTEXTS}
    for _ in range(cycles):
        for c in CONTEXTS:
            for it in range(per_block):
                model.zero_grad(set_to_none=True)
                dist.barrier()
                f0 = _minor_faults() or 0
                t0 = time.perf_counter()
                if c == "no_sync":
                    with ddp.no_sync():
                        _default_loss(_call(ddp, x)).backward()
                else:
                    _default_loss(_call(model, x)).backward()
                t1 = time.perf_counter()
                faults = (_minor_faults() or 0) - f0
                if c != "alone":
                    _scale_into(params, flat, 1.0 / dist.get_world_size())
                    if c != "views":
                        dist.all_reduce(flat)
                    _view_grads(params, flat)
                if it >= 2:  # the first two of a block settle the new setting
                    out[c]["s"].append(t1 - t0)
                    out[c]["faults"].append(faults)
    return out


def _small(repeats: int) -> dict[int, dict[str, list[tuple[float, float]]]]:
    """Per size of SMALL_SIZES: ``(alone_s, under_s)`` of the all-reduces (``comm``) and of
    the compute loop (``compute``), per repeat."""
    import torch
    import torch.distributed as dist

    from schedopt.integrations import bench

    defaults = inspect.signature(bench.bench_comm).parameters
    out: dict[int, dict[str, list[tuple[float, float]]]] = {
        n: {"comm": [], "compute": []} for n in SMALL_SIZES}
    for _ in range(repeats):
        for n in SMALL_SIZES:
            job = {"backend": "gloo", "overlap_bytes": n, "overlap_repeats": 1, "warmup": 3,
                   "iters": 10, **{k: defaults[k].default for k in ("compute_dim",
                                                                    "compute_reps")}}
            buf = torch.ones(n // 4)
            for _ in range(3):
                dist.all_reduce(buf)
            out[n]["comm"].append(bench._comm_under_compute(job, buf))
            alone, under, _ = bench._overlap(job, bench._time_allreduce(job, n))["pairs"][0]
            out[n]["compute"].append((alone, under))
    return out


def _rank(rank: int, init: str, args: argparse.Namespace, q: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    res: dict[str, Any] = {}
    for name in args.models.split(","):
        dist.barrier()
        res[name] = {"medians": _medians(name, args.iters),
                     "contexts": _contexts(name, args.cycles, args.per_block)}
    res["small"] = _small(args.repeats)
    dist.destroy_process_group()
    q.put((rank, res))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="bert_small,mlp,mlp12")
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    p.add_argument("--iters", type=int, default=20, help="profiled iterations (medians)")
    p.add_argument("--cycles", type=int, default=5, help="rounds of the four settings")
    p.add_argument("--per-block", type=int, default=7, help="iterations per setting and round")
    p.add_argument("--repeats", type=int, default=7, help="repeats per message size")
    args = p.parse_args()
    for name in args.models.split(","):
        if name not in MODELS:
            p.error(f"--models: unknown model {name!r} (known: {', '.join(MODELS)})")
    import torch.multiprocessing as mp

    load = os.getloadavg()[0]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        procs = [ctx.Process(target=_rank, args=(r, f"file://{tmp}/rendezvous", args, q))
                 for r in range(2)]
        for proc in procs:
            proc.start()
        results = dict(q.get(timeout=900) for _ in procs)
        for proc in procs:
            proc.join(timeout=60)
    print(f"load average (1 min): {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"OMP_NUM_THREADS={args.threads}; {time.time() - t0:.0f} s")
    print("| model | what | rank 0 | rank 1 |")
    print("| --- | --- | --- | --- |")
    for name in args.models.split(","):
        m = [results[r][name]["medians"] for r in (0, 1)]
        s, w = "sum of per-layer medians", "median of iterations"
        print(f"| {name} | profile: {s} ({m[0]['layers']} layers), ms | "
              f"{1e3 * m[0][s]:.1f} | {1e3 * m[1][s]:.1f} |")
        print(f"| {name} | profile: {w}, ms | {1e3 * m[0][w]:.1f} | {1e3 * m[1][w]:.1f} |")
        print(f"| {name} | profile: ratio | {m[0][w] / m[0][s]:.3f} | {m[1][w] / m[1][s]:.3f} |")
        for c in CONTEXTS:
            v = [statistics.median(results[r][name]["contexts"][c]["s"]) for r in (0, 1)]
            print(f"| {name} | forward + backward, {c}, ms | {1e3 * v[0]:.1f} | {1e3 * v[1]:.1f} |")
        for c in CONTEXTS:
            f = [statistics.median(results[r][name]["contexts"][c]["faults"]) for r in (0, 1)]
            print(f"| {name} | minor page faults per forward + backward, {c} | {f[0]:,.0f} | "
                  f"{f[1]:,.0f} |")
    print()
    print("| size | all-reduce alone, ms | under compute, ms | s_c (medians) | single repeats "
          "| s (median of ratios) | single repeats |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in SMALL_SIZES:
        comm = results[0]["small"][n]["comm"]  # times are the slowest rank's already
        a = statistics.median(x for x, _ in comm)
        u = statistics.median(y for _, y in comm)
        rc = [y / x for x, y in comm]
        rs = [y / x for x, y in results[0]["small"][n]["compute"]]
        print(f"| {n:,} B | {1e3 * a:.3f} | {1e3 * u:.3f} | {u / a:.2f} | {min(rc):.2f}-"
              f"{max(rc):.2f} | {statistics.median(rs):.2f} | {min(rs):.2f}-{max(rs):.2f} |")


if __name__ == "__main__":
    main()
