"""Where DDP's time goes on this machine: its own all-reduces against stand-alone ones.

The DDP evidence (docs/validation.md, "Real DDP runs") compares whole iterations with the
model's predictions; this study takes them apart. It times, in one run of 2 gloo
ranks (OMP_NUM_THREADS pinned), per model of ``benchmarks/ddp_models.py``:

``backward``
    forward + backward alone (``no_sync``), no communication;
``ddp``
    DDP at a bucket cap that puts (almost) all gradients in one bucket (gradients as bucket
    views, as ``bench-ddp`` runs it), with a communication hook that records, per bucket, when
    DDP hands it over and when its all-reduce completes;
``manual``
    the no-overlap run of ``bench-ddp`` (``sync-easgd``), its own steps: ``zero_grad``, the
    ``no_sync`` backward, the gradients copied into one buffer (divided by the world size on
    the way, as DDP's reducer), a 4-byte all-reduce (the wait until the other rank has got
    there too), the all-reduce, the gradients made views of the buffer (which frees the
    tensors autograd made), each part timed; and how much longer the slower rank's backward
    was than this rank's in the same iteration;
``alone``
    a blocking all-reduce of the same buffer sizes with nothing else running.

It prints a table (model, what, milliseconds; medians over iterations and ranks). Usage::

    OMP_NUM_THREADS=1 python benchmarks/ddp_comm_timing.py [--iters 20] \
        [--models mlp12,mlp,bert_small]

Run from the repository root, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.ddp_evidence import MODELS
from schedopt.measure.bench_ddp import _scale_into, _view_grads
from schedopt.measure.profile import _call, build_model, random_batch
from schedopt.measure.profile import _default_loss as _loss


def _factory(name: str) -> Any:
    return build_model(MODELS[name][0])


def _run_ddp(model: Any, x: Any, cap_mb: float, iters: int, warmup: int, bucket_view: bool
             ) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist

    calls: list[tuple[int, float, list[float]]] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations
        start = time.perf_counter()
        done: list[float] = []
        buf = bucket.buffer()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def finish(f: Any) -> Any:
            done.append(time.perf_counter())
            return f.value()[0].div_(dist.get_world_size())

        calls.append((bucket.index(), start, done))
        return fut.then(finish)

    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap_mb,
                                                    gradient_as_bucket_view=bucket_view)
    ddp.register_comm_hook(None, hook)
    out: dict[str, list[float]] = {"ddp iteration": [], "ddp all-reduce (largest bucket)": [],
                                   "ddp exposed after backward": []}
    dist.barrier()
    for it in range(warmup + iters):
        calls.clear()
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        _loss(_call(ddp, x)).backward()  # DDP waits for every bucket at the end of backward
        t1 = time.perf_counter()
        if it >= warmup:
            out["ddp iteration"].append(t1 - t0)
            big = max(calls, key=lambda c: ddp_bucket_numel(ddp, c[0]))
            out["ddp all-reduce (largest bucket)"].append(big[2][0] - big[1])
            out["ddp exposed after backward"].append(t1 - max(c[1] for c in calls))
    return out


def ddp_bucket_numel(ddp: Any, index: int) -> int:
    """Elements of DDP bucket ``index`` (from its logging data's bucket sizes)."""
    sizes = [int(s) for s in str(ddp._get_ddp_logging_data().get("bucket_sizes", "")).split(",")
             if s.strip()]
    return sizes[index] if index < len(sizes) else 0


def _run_manual(model: Any, x: Any, iters: int, warmup: int) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    params = [p for p in model.parameters() if p.requires_grad]
    flat = params[0].new_empty(sum(p.numel() for p in params))
    out: dict[str, list[float]] = {k: [] for k in (
        "manual iteration", "manual zero_grad", "manual backward", "manual copy in (divided)",
        "manual wait for the other rank", "manual all-reduce", "manual gradients made views",
        "manual slower rank's backward - own")}
    world = dist.get_world_size()
    token = torch.zeros(1)
    both = torch.zeros(world)
    dist.barrier()
    for it in range(warmup + iters):
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        with ddp.no_sync():
            _loss(_call(ddp, x)).backward()
        t2 = time.perf_counter()
        _scale_into(params, flat, 1.0 / world)  # bench-ddp's own steps, in its order
        t3 = time.perf_counter()
        dist.all_reduce(token)  # a 4-byte collective: the wait until the other rank is here
        t3w = time.perf_counter()
        dist.all_reduce(flat)
        t4 = time.perf_counter()
        _view_grads(params, flat)  # frees the gradients autograd made
        t5 = time.perf_counter()
        both.zero_()
        both[dist.get_rank()] = t2 - t1
        dist.all_reduce(both)  # outside the timed span: every rank's backward this iteration
        if it >= warmup:
            for key, v in zip(out, (t5 - t0, t1 - t0, t2 - t1, t3 - t2, t3w - t3, t4 - t3w,
                                    t5 - t4, float(both.max()) - (t2 - t1)), strict=True):
                out[key].append(v)
    return out


def _run_alone(numel: int, iters: int, warmup: int) -> dict[str, list[float]]:
    import torch
    import torch.distributed as dist

    buf = torch.ones(numel)
    times: list[float] = []
    dist.barrier()
    for it in range(warmup + iters):
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        if it >= warmup:
            times.append(time.perf_counter() - t0)
    return {"stand-alone all-reduce (all gradients)": times}


def _rank(rank: int, world: int, init: str, args: argparse.Namespace, q: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    result: dict[str, dict[str, list[float]]] = {}
    for name in args.models.split(","):
        torch.manual_seed(0)
        x = random_batch(MODELS[name][1], MODELS[name][2])
        rows: dict[str, list[float]] = {}
        rows.update(_run_ddp(_factory(name), x, args.cap_mb, args.iters, args.warmup,
                             args.bucket_view))
        rows.update(_run_manual(_factory(name), x, args.iters, args.warmup))
        numel = sum(p.numel() for p in _factory(name).parameters() if p.requires_grad)
        rows.update(_run_alone(numel, args.iters, args.warmup))
        result[name] = rows
    q.put((rank, result))
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp12,mlp,bert_small")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cap-mb", type=float, default=100.0, help="DDP bucket cap (one bucket)")
    p.add_argument("--no-bucket-view", dest="bucket_view", action="store_false",
                   help="gradient_as_bucket_view off (bench-ddp's default is on)")
    args = p.parse_args()
    import torch.multiprocessing as mp

    print(f"load average at start: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/rendezvous"
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        procs = [ctx.Process(target=_rank, args=(r, 2, init, args, q)) for r in range(2)]
        for proc in procs:
            proc.start()
        results = [q.get(timeout=900) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
    print(f"load average at end: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print("| model | what | median ms | min ms | max ms |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        for key in results[0][1][name]:
            vals = [v for _, res in results for v in res[name][key]]
            print(f"| {name} | {key} | {1e3 * statistics.median(vals):.1f} |"
                  f" {1e3 * min(vals):.1f} | {1e3 * max(vals):.1f} |")


if __name__ == "__main__":
    main()
