"""``schedopt bench-gpu``'s method end to end on this machine's CPU: a profile measured here
estimates training steps that no fit used, timed on the same thread.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_gpu_cpu_check.py [--repeats 3]

It measures two profiles of this CPU at fp32 on one thread with
:func:`schedopt.measure.gpu_bench.bench_gpu`: the ``--quick`` grid (8 products up to 512) and the
full grid of a GPU run (24 products up to 8,192; a few minutes here), both with the batch norm
of ``NORM_SHAPE`` (32 x 256 x 56 x 56), then times the forward and
backward of two models (the median of a few steps after one untimed) and estimates them on each
profile (operator method):

- ResNet-50 (the estimator's torchvision layout, NCHW) at batch 1 and 2;
- MobileNetV2 and EfficientNet-B0 (the same, depthwise convolutions) at batch 1, 2 and 8 (at one
  or two images their activations fit in the CPU's caches, at eight they do not);
- a GPT-2 of 4 layers, hidden 512, 8 heads, vocabulary 8,192, eager attention, at batch 1 x 128,
  4 x 128 and 2 x 256 tokens (Hugging Face ``GPT2LMHeadModel`` with its loss).

It prints one row per step and profile: measured and estimated ms and their ratio, and the mean
|error| per profile, the depthwise networks apart. Nothing of the models is used by the fit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: The depthwise-convolution networks timed (their errors are reported apart).
DEPTHWISE = ("mobilenet_v2", "efficientnet_b0")
GPT2 = {"model_type": "gpt2", "n_embd": 512, "n_layer": 4, "n_head": 8, "vocab_size": 8192,
        "n_positions": 512, "architectures": ["GPT2LMHeadModel"]}


def _step_s(run: Callable[[], Any], reps: int) -> float:
    """Median seconds of ``run`` (forward and backward) over ``reps`` calls after one."""
    times = []
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def _steps(folder: Path, reps: int) -> list[tuple[str, str, int, int | None, float]]:
    """(label, model, batch, seq, measured seconds) of every timed step."""
    import torch
    import transformers

    from schedopt.measure.cnns import cnn_builders

    transformers.logging.set_verbosity_error()
    out = []
    for model in ("resnet50", *DEPTHWISE):
        for batch in (1, 2, 8) if model in DEPTHWISE else (1, 2):
            net = cnn_builders()[model]().train()
            x, y = torch.randn(batch, 3, 224, 224), torch.zeros(batch, dtype=torch.long)
            out.append((f"{model} b{batch}", model, batch, None, _step_s(
                lambda net=net, x=x, y=y: torch.nn.functional.cross_entropy(net(x),
                                                                            y).backward(),
                reps)))
    cfg_path = folder / "gpt2-4x512.json"
    cfg_path.write_text(json.dumps(GPT2))
    cfg = transformers.GPT2Config(**{k: v for k, v in GPT2.items()
                                     if k not in ("model_type", "architectures")},
                                  attn_implementation="eager")
    for batch, seq in ((1, 128), (4, 128), (2, 256)):
        lm = transformers.GPT2LMHeadModel(cfg).train()
        ids = torch.randint(0, GPT2["vocab_size"], (batch, seq))
        out.append((f"gpt2-4x512 b{batch} s{seq}", str(cfg_path), batch, seq, _step_s(
            lambda lm=lm, ids=ids: lm(input_ids=ids, labels=ids).loss.backward(), reps)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per product")
    args = ap.parse_args(argv)
    import torch

    from schedopt.measure.estimate import estimate
    from schedopt.measure.gpu_bench import (
        NORM_SHAPE,
        QUICK_SHAPES,
        SHAPES,
        bench_gpu,
        measured_profile,
    )
    from schedopt.measure.gpus import GPUS, check_profile, gpu_profile_data

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        profiles = {}
        for grid, shapes in (("quick", QUICK_SHAPES), ("full", SHAPES)):
            res = bench_gpu("cpu", "fp32", shapes=shapes, repeats=args.repeats, stream_mib=64,
                            norm_shape=NORM_SHAPE)
            prof = check_profile(measured_profile(res, GPUS["v100"], name=f"cpu {grid}"))
            path = folder / f"cpu-{grid}.json"
            path.write_text(json.dumps(gpu_profile_data(prof)))
            profiles[grid] = path
            print(f"# {grid} grid: {len(shapes)} products, rate {res.gemm.peak / 1e9:.1f}"
                  f" GFLOP/s, k_half {res.gemm.k_half:g}, copy {res.bandwidth_Bps / 1e9:.1f}"
                  f" GB/s, kernel floor {res.kernel_s * 1e6:.2f} us, batch norm at"
                  f" {res.norm_eff:.2f} of the copy")
        errors: dict[str, list[float]] = {}
        print("| step | profile | measured ms | estimated ms | estimated / measured |")
        print("| --- | --- | --- | --- | --- |")
        for label, model, batch, seq, measured in _steps(folder, 5):
            for grid, path in profiles.items():
                # the CNNs ran torch's default NCHW layout
                kw: dict[str, Any] = ({"memory_format": "nchw"} if seq is None
                                      else {"attention": "eager"})
                tr = estimate(model, str(path), "fp32", batch, seq, **kw)
                est = sum(la.forward_s + la.backward_s for la in tr.layers)
                group = f"{grid} grid" + (", depthwise networks" if model in DEPTHWISE else "")
                errors.setdefault(group, []).append(abs(est / measured - 1))
                print(f"| {label} | {grid} | {measured * 1e3:.1f} | {est * 1e3:.1f} |"
                      f" {est / measured:.2f} |")
        for grid, errs in errors.items():
            print(f"mean |error|, {grid}: {statistics.mean(errs):.1%} over {len(errs)} steps"
                  f" (max {max(errs):.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
