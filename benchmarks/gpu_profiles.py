"""Measured traces of four shipped models on a CUDA GPU, with ``profile_model``.

The estimated traces of ``instances/generate.py`` price every operator by a roofline with
assumed efficiencies. This script measures the same models at the same batch, sequence and
precision on a real GPU, layer by layer, so that the estimates can be checked against a
measurement that was not used to make them (docs/instances.md, "Measured on an H200"):

``resnet50``
    torchvision ``resnet50()``, float32 weights and gradients, bf16 autocast, batch 256 of
    224 x 224 images copied from pinned host memory every iteration (the trace's ``h2d_s``);
``bert-large``
    transformers ``BertModel`` (hidden 1024, 24 layers, 16 heads, intermediate 4096, with
    pooler), bfloat16 weights and gradients, batch 32 x 512 tokens; the loss is the mean of
    the last hidden state plus that of the pooler output, so that every parameter gets a
    gradient;
``gpt2-124m``, ``gpt2-1.5b``
    transformers ``GPT2LMHeadModel(GPT2Config())`` (1.5B: ``n_embd=1600, n_layer=48,
    n_head=25``), bfloat16, batch 32 (1.5B: 8) x 1024 tokens, its own language-model loss.

Each is timed over ``--repeats`` iterations after ``--warmup`` (per-layer medians), with a fused
AdamW step of learning rate 0 as the update. Usage::

    python benchmarks/gpu_profiles.py --out DIR [--models resnet50,bert-large,gpt2-124m,gpt2-1.5b]
        [--repeats 20] [--warmup 5] [--tag h200]

``--compare h200 h100`` prints the shipped measured traces against the estimated ones.

It writes ``DIR/<model>-<tag>-....json`` (names as the shipped measured traces) and prints one
line per trace, with the median of whole iterations timed without the per-layer hooks beside
the trace's sum. ``--smoke`` runs the same code on the CPU at batch 2 (and 16 tokens), for a
check without a GPU.

``--sweep`` measures the GPU itself instead, for the estimator's operator model
(:func:`schedopt.measure.gpu_bench.bench_gpu`: matrix products over a grid of shapes, a
streaming copy, the kernel floor, a batch norm and flash attention), once per precision of
``--precisions``
(default bf16, fp16, tf32, fp32), each run on the profile of the runs before it, and writes
``DIR/gpu-<tag>.json`` (the profile, as ``schedopt bench-gpu`` writes it) and
``DIR/gpu-<tag>-products.json`` (every timed product, the device and the software). It prints
one row per precision: the fitted rate and ``k_half``, the mean |fitted / measured - 1| of the
products, and the rate against what the shipped profile of the same GPU
(:func:`~schedopt.measure.gpu_bench.base_for`) prices a 8192-cube product at. With
``--smoke`` it runs the quick grid on the CPU (``--base v100`` for the figures not measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: model -> (trace name pattern, batch, sequence); {tag} is the GPU's tag.
MODELS = {
    "resnet50": ("resnet50-{tag}-b{batch}-measured", 256, 0),
    "bert-large": ("bert-large-{tag}-bf16-measured", 32, 512),
    "gpt2-124m": ("gpt2-124m-{tag}-bf16-measured", 32, 1024),
    "gpt2-1.5b": ("gpt2-1.5b-{tag}-bf16-measured", 8, 1024),
}
#: GPT-2 configurations (transformers ``GPT2Config`` keywords).
GPT2 = {"gpt2-124m": {}, "gpt2-1.5b": {"n_embd": 1600, "n_layer": 48, "n_head": 25}}


def build(model: str, batch: int, seq: int) -> tuple[Any, Any, Callable[[Any], Any] | None,
                                                     str]:
    """The module, one batch, the loss function (None: ``profile_model``'s default) and the
    words that describe them in the trace's source."""
    import torch

    if model == "resnet50":
        import torchvision

        x = torch.randn(batch, 3, 224, 224)
        if torch.cuda.is_available():
            x = x.pin_memory()
            torch.backends.cudnn.benchmark = True
        # channels_last, as mixed-precision CNN training runs on tensor cores
        return (torchvision.models.resnet50().to(memory_format=torch.channels_last), x, None,
                "torchvision resnet50(), float32 weights in channels_last, bf16 autocast, "
                "cudnn.benchmark, 224x224 images copied from pinned host memory")
    import transformers

    ids = torch.randint(0, 30_000, (batch, seq))
    if model == "bert-large":
        cfg = transformers.BertConfig(hidden_size=1024, num_hidden_layers=24,
                                      num_attention_heads=16, intermediate_size=4096)
        net = transformers.BertModel(cfg).to(torch.bfloat16)

        def loss(out: Any) -> Any:
            return out.last_hidden_state.float().mean() + out.pooler_output.float().mean()

        return (net, {"input_ids": ids}, loss,
                "transformers BertModel (hidden 1024, 24 layers, 16 heads, intermediate 4096, "
                "with pooler), bfloat16 weights, loss = mean(last hidden state) + "
                "mean(pooler output)")
    kw = GPT2[model]
    net = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kw)).to(torch.bfloat16)
    args = ", ".join(f"{k}={v}" for k, v in kw.items())
    return (net, {"input_ids": ids, "labels": ids}, None,
            f"transformers GPT2LMHeadModel(GPT2Config({args})), bfloat16 weights, its "
            "language-model loss")


def profile_one(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """Profile ``model``; the trace as a JSON-ready dict."""
    import contextlib

    import torch

    from schedopt.measure.profile import profile_model
    from schedopt.model.trace import Trace

    pattern, batch, seq = MODELS[model]
    if args.smoke:
        batch, seq = 2, 16 if seq else 0
    net, inputs, loss_fn, words = build(model, batch, seq)
    device = "cpu" if args.smoke else "cuda"
    net = net.to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=0.0, fused=device == "cuda")
    cast = (torch.autocast(device, dtype=torch.bfloat16) if model == "resnet50"
            else contextlib.nullcontext())
    start = time.perf_counter()
    with cast:
        tr = profile_model(net, inputs, name=pattern.format(tag=args.tag, batch=batch),
                           batch_size=batch, loss_fn=loss_fn, repeats=args.repeats,
                           warmup=args.warmup, optimizer=opt)
    plain = _plain_iteration_s(net, inputs, loss_fn, opt, cast, device, args)
    gpu = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    data = tr.model_dump(mode="json", exclude_none=True)
    data["source"] = (f"MEASURED on one {gpu} by benchmarks/gpu_profiles.py: {words}; batch "
                      f"{batch}" + (f" x {seq} tokens" if seq else "") + "; update: fused "
                      f"AdamW step (learning rate 0). {tr.source}")
    Trace.model_validate(data)
    print(f"{data['name']}: {len(tr.layers)} layers, {tr.num_tensors} tensors, compute "
          f"{tr.compute_s * 1e3:.2f} ms, h2d {tr.h2d_s * 1e3:.2f} ms, update "
          f"{tr.update_s * 1e3:.2f} ms; the same iteration without the timing hooks "
          f"{plain * 1e3:.2f} ms ({time.perf_counter() - start:.0f} s)", flush=True)
    del net, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return data


def _plain_iteration_s(net: Any, inputs: Any, loss_fn: Callable[[Any], Any] | None, opt: Any,
                       cast: Any, device: str, args: argparse.Namespace) -> float:
    """Median wall time of a whole iteration (copy, forward, loss, backward, step) without
    the per-layer hooks: what the profile's own marks may add shows against its sum."""
    import statistics

    import torch

    from schedopt.measure.profile import _call, _default_loss, _to_device

    loss_fn = loss_fn or _default_loss
    times = []
    for it in range(args.warmup + args.repeats):
        net.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with cast:
            loss_fn(_call(net, _to_device(inputs, torch.device(device)))).backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        if it >= args.warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _generate() -> Any:
    """``instances/generate.py`` as a module (imported once, by its folder on the path)."""
    folder = str(Path(__file__).resolve().parents[1] / "instances")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import generate

    return generate


def _estimate_on(name: str, gpu: str) -> Any:
    """The estimated trace ``name`` made again by ``instances/generate.py`` for GPU ``gpu``."""
    import dataclasses

    gen = _generate()
    ts = next(t for t in gen.ESTIMATED if t.name == name)
    return gen.estimate_trace(dataclasses.replace(ts, gpu=gpu))


def compare(measured_tag: str, estimated_tag: str) -> None:
    """Print the shipped measured traces against the estimated ones of the same model, batch
    and precision (``instances/traces``, GPU tag ``estimated_tag``) and against the same
    estimate made for the measured GPU (``instances/generate.py``, GPU ``measured_tag``, needs
    torch and transformers): totals, then per-layer ratios."""
    import statistics

    from schedopt.files import load_trace

    print("| model | figure | estimated | estimated for the measured GPU | measured | "
          "measured / estimated | measured / estimated for the measured GPU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for model, (pattern, batch, _) in MODELS.items():
        meas = load_trace(pattern.format(tag=measured_tag, batch=batch))
        name = pattern.format(tag=estimated_tag, batch=batch).removesuffix("-measured")
        est, here = load_trace(name), _estimate_on(name, measured_tag)
        assert [la.name for la in meas.layers] == [la.name for la in est.layers], model
        for what, get in (("forward, ms", lambda t: sum(la.forward_s for la in t.layers)),
                          ("backward, ms", lambda t: sum(la.backward_s for la in t.layers)),
                          ("optimizer step, ms", lambda t: t.update_s)):
            e, h, m = get(est), get(here), get(meas)
            print(f"| {model} | {what} | {e * 1e3:.2f} | {h * 1e3:.2f} | {m * 1e3:.2f} | "
                  f"{m / e:.2f} | {m / h:.2f} |")
        cells = []
        for ref in (est, here):
            ratios = [(a.forward_s + a.backward_s) / (b.forward_s + b.backward_s)
                      for a, b in zip(meas.layers, ref.layers, strict=True)]
            inside = sum(1 for r in ratios if 1 / 1.5 <= r <= 1.5) / len(ratios)
            cells.append(f"{statistics.median(ratios):.2f}, {inside:.0%} of {len(ratios)}")
        print(f"| {model} | per layer (forward + backward): median ratio, layers within "
              f"1.5x | | | | {cells[0]} | {cells[1]} |")


def sweep(args: argparse.Namespace) -> None:
    """``--sweep`` (module docstring): the device's profile, precision by precision."""
    from schedopt.measure.gpu_bench import base_for, bench_gpu, device_info, measured_profile
    from schedopt.measure.gpus import check_profile, get_gpu, gpu_profile_data
    from schedopt.measure.operators import operator_model

    device = "cpu" if args.smoke else "cuda"
    shipped = get_gpu("v100" if args.smoke else base_for(*device_info(device)))
    prof, products = shipped, []
    print("| device | precision | rate (TFLOP/s) | k_half | fit mean abs. error |"
          " 8192^3 product, shipped profile / measured |")
    print("| --- | --- | --- | --- | --- | --- |")
    for precision in args.precisions.split(","):
        res = bench_gpu(device, precision, quick=args.smoke, repeats=args.repeats,
                        stream_mib=16 if args.smoke else 1024)
        prof = check_profile(measured_profile(res, prof, name=f"{res.device} (measured)"))
        products += [{"precision": precision, "m": m, "n": n, "k": k, "seconds": t}
                     for m, n, k, t in res.samples]
        item = res.itemsize
        cube = (operator_model(shipped, precision).gemm.seconds(1, 8192, 8192, 8192, item)
                / res.gemm.seconds(1, 8192, 8192, 8192, item)
                if precision in shipped.peak_flops else float("nan"))
        print(f"| {res.device} | {precision} | {res.gemm.peak / 1e12:.4g} | {res.gemm.k_half:g}"
              f" | {res.fit_error_mean():.1%} | {cube:.2f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"gpu-{args.tag}.json").write_text(
        json.dumps(gpu_profile_data(prof), indent=1) + "\n")
    (args.out / f"gpu-{args.tag}-products.json").write_text(json.dumps(
        {"device": res.device, "software": res.software, "units": res.units,
         "products": products}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", nargs=2, metavar=("MEASURED", "ESTIMATED"),
                    help="print the shipped measured traces of GPU tag MEASURED against the "
                         "estimated ones of tag ESTIMATED (e.g. h200 h100) and stop")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tag", default="h200", help="GPU tag in the trace names")
    ap.add_argument("--smoke", action="store_true", help="CPU, batch 2: a check without a GPU")
    ap.add_argument("--sweep", action="store_true",
                    help="measure the GPU's products, copy, kernel floor and attention into a"
                         " profile for the estimator instead of profiling models")
    ap.add_argument("--precisions", default="bf16,fp16,tf32,fp32",
                    help="--sweep: the precisions, in order")
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare)
        return 0
    if args.out is None:
        ap.error("--out is required")
    if args.sweep:
        sweep(args)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for model in args.models.split(","):
        data = profile_one(model, args)
        (args.out / f"{data['name']}.json").write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
