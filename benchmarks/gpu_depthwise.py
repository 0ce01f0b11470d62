"""Depthwise convolutions on a GPU, timed and priced: one prepared run for a lent device.

The public EfficientNet steps leave their depthwise layers 0.39-0.52 TFLOP/s at float32 on both
a V100 and an A100 (PyTorch's own NCHW kernels) and 0.68-1.25 TFLOP/s under AMP (cuDNN's
channels-last kernels), 5-13 times what the estimator's traffic rule prices
(``benchmarks/estimate_validation.py``, ``depthwise_remainder``; docs/validation.md,
"EfficientNet"). This script times the depthwise convolutions themselves: every distinct
depthwise layer of a model (the estimator's torchvision layout, :mod:`schedopt.measure.cnns`)
at a batch and image size, forward and both gradients, in both layouts, each the fastest of
``--repeats`` calls, and prints each beside the estimator's price
(:func:`schedopt.measure.estimate.depthwise_s` on the profile ``--gpu``), with the FLOP rate
and the fraction of the profile's bandwidth each reaches.

Usage (a CUDA device)::

    python benchmarks/gpu_depthwise.py --out DIR [--model efficientnet_b0] [--batch 64]
        [--image-size 224] [--dtype fp32] [--gpu a100] [--repeats 10]
    python benchmarks/gpu_depthwise.py --smoke --out DIR    # the same path on the CPU

``DIR/depthwise-<model>-<dtype>.json`` receives the rows; the printed table is what to quote.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: Layouts timed: torch's name and the estimator's ``memory_format``.
LAYOUTS = (("channels_last", "channels_last"), ("contiguous_format", "nchw"))
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}


def depthwise_layers(model: str, batch: int, side: int) -> list[tuple[int, ...]]:
    """``(N, C, H, W, k, stride)`` of every distinct depthwise convolution of ``model`` (one
    input channel per group), in the order they run, from one forward pass on the meta
    device."""
    import torch

    from schedopt.measure.cnns import cnn_builders

    seen: dict[tuple[int, ...], None] = {}

    def hook(mod: Any, args: Any) -> None:
        if mod.groups > 1 and mod.weight.shape[1] == 1:
            n, c, h, w = args[0].shape
            seen.setdefault((n, c, h, w, mod.kernel_size[0], mod.stride[0]), None)

    with torch.device("meta"):
        net = cnn_builders()[model]()
        for mod in net.modules():
            if isinstance(mod, torch.nn.Conv2d):
                mod.register_forward_pre_hook(hook)
        net(torch.empty(batch, 3, side, side))
    return list(seen)


def _time(torch: Any, dev: Any, dtype: Any, shape: tuple[int, ...], layout: Any,
          repeats: int) -> float:
    """Fastest seconds of one depthwise convolution's forward and both gradients, after one
    untimed call (cuDNN's choice of kernel), timed as ``bench-gpu`` times its kernels."""
    from schedopt.measure.gpu_bench import _Timer

    n, c, h, w, k, stride = shape
    x = torch.randn(n, c, h, w, device=dev, dtype=dtype).to(memory_format=layout)
    wt = torch.randn(c, 1, k, k, device=dev, dtype=dtype).to(memory_format=layout)
    x.requires_grad_(True)
    wt.requires_grad_(True)
    y = torch.nn.functional.conv2d(x, wt, stride=stride, padding=k // 2, groups=c)
    grad = torch.randn_like(y)

    def step() -> None:
        out = torch.nn.functional.conv2d(x, wt, stride=stride, padding=k // 2, groups=c)
        torch.autograd.grad(out, (x, wt), grad)

    return _Timer(dev).best(step, repeats, "depthwise convolution")


def _priced(gpu: str, precision: str, layout: str, shape: tuple[int, ...]) -> float:
    """The estimator's seconds for the same convolution (forward and both gradients)."""
    import torch

    from schedopt.measure.estimate import depthwise_s
    from schedopt.measure.operators import operator_model

    n, c, h, w, k, stride = shape
    dtype = getattr(torch, _DTYPES[precision])
    with torch.device("meta"):
        x = torch.empty(n, c, h, w, dtype=dtype, requires_grad=True)
        wt = torch.empty(c, 1, k, k, dtype=dtype, requires_grad=True)
        out = torch.empty(n, c, (h - 1) // stride + 1, (w - 1) // stride + 1, dtype=dtype)
    fwd, bwd = depthwise_s(operator_model(gpu, precision, memory_format=layout), x, wt, out)
    return fwd + bwd


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Time and price every layer in both layouts (module docstring); the rows."""
    import torch

    from schedopt.measure.gpus import get_gpu

    dev = torch.device("cpu" if args.smoke else args.device)
    dtype = getattr(torch, _DTYPES[args.dtype])
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
    gpu = get_gpu(args.gpu)
    bandwidth = gpu.hbm_Bps * gpu.memory_eff
    rows = []
    for shape in depthwise_layers(args.model, args.batch, args.image_size):
        n, c, h, w, k, stride = shape
        ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
        flops = 3 * 2.0 * n * c * ho * wo * k * k  # forward and both gradients
        nbytes = 3 * dtype.itemsize * (n * c * h * w + n * c * ho * wo + c * k * k)
        for torch_layout, layout in LAYOUTS:
            t = _time(torch, dev, dtype, shape, getattr(torch, torch_layout), args.repeats)
            priced = _priced(args.gpu, args.dtype, layout, shape)
            rows.append({"shape": list(shape), "layout": layout, "measured_s": t,
                         "priced_s": priced, "tflops": flops / t / 1e12,
                         "bandwidth_fraction": nbytes / t / bandwidth})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--model", default="efficientnet_b0")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--dtype", default="fp32", choices=sorted(_DTYPES))
    ap.add_argument("--gpu", default="a100", help="the profile whose price is printed")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--smoke", action="store_true",
                    help="the CPU, batch 2, 64 x 64 images, 2 repeats: the path, not a figure")
    args = ap.parse_args(argv)
    if args.smoke:
        args.batch, args.image_size, args.repeats = 2, 64, 2
    rows = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"depthwise-{args.model}-{args.dtype}.json"
    path.write_text(json.dumps({"model": args.model, "batch": args.batch,
                                "image_size": args.image_size, "dtype": args.dtype,
                                "gpu_profile": args.gpu, "smoke": args.smoke, "rows": rows},
                               indent=1))
    print("| N, C, H, W, k, stride | layout | measured ms | priced ms | measured / priced |"
          " TFLOP/s | of the bandwidth |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {', '.join(map(str, r['shape']))} | {r['layout']} |"
              f" {r['measured_s'] * 1e3:.3f} | {r['priced_s'] * 1e3:.3f} |"
              f" {r['measured_s'] / r['priced_s']:.2f} | {r['tflops']:.2f} |"
              f" {r['bandwidth_fraction']:.2f} |")
    for _, layout in LAYOUTS:
        mine = [r for r in rows if r["layout"] == layout]
        meas, priced = (sum(r[k] for r in mine) for k in ("measured_s", "priced_s"))
        print(f"{args.model} b{args.batch} {args.image_size}px {args.dtype} {layout}: measured"
              f" {meas * 1e3:.2f} ms, priced {priced * 1e3:.2f} ms ({meas / priced:.2f}x) over"
              f" {len(mine)} layers")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
