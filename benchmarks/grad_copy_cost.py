"""What DDP's copy of the gradients into its buckets adds to a model's forward and backward.

PyTorch DDP's reducer copies every gradient into its bucket in an autograd hook, on the compute
stream, so a DDP run computes more than a plain forward and backward: ``schedopt profile
--grad-copy`` times those copies. This script measures their share on the models of
``benchmarks/ddp_models.py``: in one process, rounds of iterations with and without the hooks
of ``profile --grad-copy`` (every gradient copied into a buffer allocated once),
alternately (the machine's drift hits both
alike); the figure is the median over rounds of the per-round ratio of medians. Usage::

    python benchmarks/grad_copy_cost.py [--rounds 6] [--iters 8] [--models mlp,mlp12,bert_small]

Run it from the repository root with ``OMP_NUM_THREADS=1`` on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.ddp_evidence import MODELS


def measure(name: str, rounds: int, iters: int) -> tuple[list[float], list[float]]:
    """Per round, the median iteration time (ms) without and with the copies."""
    import torch

    from schedopt.measure.profile import _GradCopies, build_model, random_batch

    factory, shape, dtype = MODELS[name]
    torch.manual_seed(0)
    model = build_model(factory)
    batch = random_batch(shape, dtype)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def step() -> float:
        model.zero_grad(set_to_none=True)
        t = time.perf_counter()
        out = model(batch)
        out = out.last_hidden_state if hasattr(out, "last_hidden_state") else out
        out.float().mean().backward()
        return time.perf_counter() - t

    for _ in range(3):
        step()
    plain: list[float] = []
    copied: list[float] = []
    for _ in range(rounds):
        plain.append(statistics.median(step() for _ in range(iters)) * 1e3)
        copies = _GradCopies(params)  # the hooks of ``profile --grad-copy``
        copied.append(statistics.median(step() for _ in range(iters)) * 1e3)
        copies.remove()
    return plain, copied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--models", default="mlp,mlp12,bert_small")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    load = os.getloadavg()[0]
    print("| instance | method | figure |\n| --- | --- | --- |")
    for name in args.models.split(","):
        plain, copied = measure(name, args.rounds, args.iters)
        ratio = statistics.median(c / p for c, p in zip(copied, plain, strict=True))
        print(f"| {name} | forward + backward, ms per round | "
              + ", ".join(f"{v:.1f}" for v in plain) + " |")
        print(f"| {name} | the same with DDP's gradient copy, ms per round | "
              + ", ".join(f"{v:.1f}" for v in copied) + " |")
        print(f"| {name} | with / without (median of the rounds' ratios) | {ratio:.3f} |")
    print(f"\nload average (1 min): {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")


if __name__ == "__main__":
    main()
