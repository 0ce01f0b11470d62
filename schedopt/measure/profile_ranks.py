"""``schedopt profile --procs N``: a trace measured while N local ranks compute at once.

A profile taken in one process measures a rank that has the node to itself. In data-parallel
training every local rank computes at the same time, and the ranks share what the node has: CPU
cores and memory bandwidth on a CPU machine, host threads, PCIe and power on a GPU node. Their
compute is then slower than a lone process's, and a trace taken alone predicts it too fast.

:func:`profile_ranks` starts ``procs`` ranks with :func:`~schedopt.measure.bench_comm.launch`
(the same launcher, thread pinning and time limit as ``bench-ddp``). Every rank builds the model,
waits at a barrier, and runs :func:`~schedopt.measure.profile.profile_model` on its own batch,
so the ranks' measured iterations run side by side as in training, with no communication between
them. The trace is rank 0's, with every time replaced by the median over the ranks
(:func:`~schedopt.model.trace.median_trace`). With ``gloo`` the ranks compute on the CPU; with
``nccl`` each rank on its own GPU.
"""

from __future__ import annotations

from typing import Any

from schedopt.measure.launch import Launch, launch
from schedopt.model.trace import Trace, median_trace

__all__ = ["profile_ranks", "profile_worker"]


def profile_ranks(factory: str, input_shape: str, input_dtype: str, *, name: str,
                  batch_size: int, repeats: int, warmup: int, spec: Launch,
                  grad_copy: bool = False, grad_view: bool = False) -> Trace:
    """Profile ``factory``'s model on ``spec.procs`` co-running local ranks.

    Parameters
    ----------
    factory
        ``MODULE:FACTORY`` (imported in every rank; the working directory is on the path).
    input_shape, input_dtype
        One batch per rank (:func:`~schedopt.measure.profile.random_batch`).
    name, batch_size, repeats, warmup, grad_copy, grad_view
        As :func:`~schedopt.measure.profile.profile_model`.
    spec
        Ranks, backend (``gloo``: CPU; ``nccl``: one GPU per rank), threads and time limit.

    Returns
    -------
    Trace
        Rank 0's layers and tensors, each time the median over the ranks of their per-layer
        medians; ``source`` states the ranks, backend and threads.

    Raises
    ------
    SchedoptError
        A rank failed (its last error line is quoted), the run passed ``spec.timeout_s``, or
        the ranks measured different models.
    """
    spec.check()
    job = {"worker": "schedopt.measure.profile_ranks:profile_worker", "factory": factory,
           "input_shape": input_shape,
           "input_dtype": input_dtype, "name": name, "batch_size": batch_size,
           "repeats": repeats, "warmup": warmup, "grad_copy": grad_copy,
           "grad_view": grad_view}
    results = launch(job, spec)
    traces = [Trace.model_validate(r["trace"]) for r in results]
    device = "GPU" if spec.backend == "nccl" else "CPU"
    source = (f"{traces[0].source}; {spec.procs} ranks computing at once ({spec.backend}, one "
              f"{device} each, OMP_NUM_THREADS={spec.threads}), median over the ranks")
    return median_trace(traces, source=source)


def profile_worker(job: dict[str, Any], rank: int) -> dict[str, Any]:
    """One rank of :func:`profile_ranks` (runs in the process :func:`launch` starts)."""
    import torch
    import torch.distributed as dist

    from schedopt.measure.profile import build_model, profile_model, random_batch

    device = (torch.device("cuda", torch.cuda.current_device()) if job["backend"] == "nccl"
              else torch.device("cpu"))
    torch.manual_seed(1000 + rank)
    model = build_model(job["factory"])
    batch = random_batch(job["input_shape"], job["input_dtype"])
    dist.barrier()  # every rank's measured iterations start together
    trace = profile_model(model, batch, name=job["name"], batch_size=job["batch_size"],
                          repeats=job["repeats"], warmup=job["warmup"], device=device,
                          grad_copy=job["grad_copy"], grad_view=job["grad_view"])
    return {"rank": rank, "trace": trace.model_dump(mode="json", exclude_none=True)}
