"""Estimated against measured compute: the H200 traces of instances/traces and published tables.

Usage::

    python benchmarks/estimate_validation.py [--quick]

For every measured H200 trace (``instances/traces/*-h200-*-measured.json``) it estimates the same
model, batch, sequence and precision on the ``h200`` profile with both methods of
:mod:`schedopt.measure.estimate` and prints, per instance and method: the per-step compute
(forward + backward) estimated and measured, the error, and the median per-block ratio (layers
grouped by their top two name components, as the measured trace charges parameter-free work to
the next layer and the estimate to the previous one). Then it compares the estimated iteration
(forward + backward + update) with published single-GPU throughputs (NVIDIA
DeepLearningExamples READMEs: BERT-large pretraining and ResNet-50 v1.5; docs/estimate.md).
The ResNet-50 H200 trace and the published "AMP" rows ran under automatic mixed precision and
are estimated with ``autocast=True`` (float32 weights and gradients, docs/estimate.md).
``gpt2-1.5b-h200`` fits :data:`~schedopt.measure.estimate.ODD` and is left out of the mean
|error| of the operator method. ``--quick`` skips the published tables.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedopt.files import load_trace
from schedopt.measure.estimate import METHODS, estimate

#: measured trace -> (model, precision, batch, sequence, autocast); the ResNet-50 trace ran under
#: bf16 autocast with float32 weights (its ``source``), the others with bfloat16 weights
MEASURED = {
    "resnet50-h200-b256-measured": ("resnet50", "bf16", 256, None, True),
    "bert-large-h200-bf16-measured": ("bert-large", "bf16", 32, 512, False),
    "gpt2-124m-h200-bf16-measured": ("gpt2-124m", "bf16", 32, 1024, False),
    "gpt2-1.5b-h200-bf16-measured": ("gpt2-1.5b", "bf16", 8, 1024, False),
}
FITTED = {"gpt2-1.5b-h200-bf16-measured"}

#: (label, model, gpu, precision, batch, seq, samples per second, source); the "AMP" rows are
#: automatic mixed precision runs (float32 weights, fp16 products) and are estimated with
#: ``autocast=True``
PUBLISHED = [
    ("bert-large A100-80GB TF32 b128 s128", "bert-large", "a100", "tf32", 128, 128, 317,
     "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large A100-80GB AMP b256 s128", "bert-large", "a100", "fp16", 256, 128, 580,
     "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large A100-80GB TF32 b16 s512", "bert-large", "a100", "tf32", 16, 512, 110,
     "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large A100-80GB AMP b32 s512", "bert-large", "a100", "fp16", 32, 512, 210,
     "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large V100-32GB AMP b64 s128", "bert-large", "v100", "fp16", 64, 128, 168.63,
     "DLE TensorFlow BERT README, 20.06, 1 GPU"),
    ("bert-large V100-32GB FP32 b32 s128", "bert-large", "v100", "fp32", 32, 128, 46.78,
     "DLE TensorFlow BERT README, 20.06, 1 GPU"),
    ("resnet50 A100-80GB TF32 b256", "resnet50", "a100", "tf32", 256, None, 938,
     "DLE PyTorch ResNet-50 v1.5 README, 21.03, 1 GPU"),
    ("resnet50 A100-80GB AMP b256", "resnet50", "a100", "fp16", 256, None, 2470,
     "DLE PyTorch ResNet-50 v1.5 README, 21.03, 1 GPU"),
    ("resnet50 V100-16GB FP32 b128", "resnet50", "v100", "fp32", 128, None, 412,
     "DLE TensorFlow ResNet-50 v1.5 README, 20.06 XLA, 1 GPU"),
    ("resnet50 V100-16GB AMP b256", "resnet50", "v100", "fp16", 256, None, 1270,
     "DLE TensorFlow ResNet-50 v1.5 README, 20.06 XLA, 1 GPU"),
]


def _blocks(tr: object) -> dict[str, float]:
    out: dict[str, float] = {}
    for la in tr.layers:  # type: ignore[attr-defined]
        key = ".".join(la.name.split(".")[:3])
        out[key] = out.get(key, 0.0) + la.forward_s + la.backward_s
    return out


def measured_rows() -> dict[str, list[float]]:
    """Print the H200 rows; return the held-out |errors| per method."""
    errors: dict[str, list[float]] = {m: [] for m in METHODS}
    print("| instance | method | estimated ms | measured ms | error | median block ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (model, prec, batch, seq, autocast) in MEASURED.items():
        meas = load_trace(name)
        m_step = sum(la.forward_s + la.backward_s for la in meas.layers)
        for method in METHODS:
            est = estimate(model, "h200", prec, batch, seq, method=method, autocast=autocast)
            e_step = sum(la.forward_s + la.backward_s for la in est.layers)
            err = e_step / m_step - 1
            mb, eb = _blocks(meas), _blocks(est)
            ratio = statistics.median(eb[k] / mb[k] for k in mb if mb[k] > 0 and k in eb)
            fitted = name in FITTED and method == "operator"
            if not fitted:
                errors[method].append(abs(err))
            print(f"| {name} | {method}{' (fit)' if fitted else ''} | {e_step * 1e3:.1f} |"
                  f" {m_step * 1e3:.1f} | {err:+.1%} | {ratio:.2f} |")
    return errors


def published_rows() -> dict[str, list[float]]:
    """Print the published-throughput rows; return |errors| per method."""
    errors: dict[str, list[float]] = {m: [] for m in METHODS}
    print("| instance | method | estimated ms | measured ms | error | source |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, model, gpu, prec, batch, seq, rate, source in PUBLISHED:
        m_step = batch / rate
        for method in METHODS:
            try:
                est = estimate(model, gpu, prec, batch, seq, method=method,
                               autocast=" AMP " in label)
            except ValueError:
                continue  # the roofline profiles have no TF32 / V100-fp16-image figure
            e_step = sum(la.forward_s + la.backward_s for la in est.layers) + est.update_s
            err = e_step / m_step - 1
            errors[method].append(abs(err))
            print(f"| {label} | {method} | {e_step * 1e3:.1f} | {m_step * 1e3:.1f} |"
                  f" {err:+.1%} | {source} |")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the H200 traces")
    args = ap.parse_args(argv)
    held = measured_rows()
    for method, errs in held.items():
        print(f"H200 per-step mean |error|, {method}, {len(errs)} traces not used in the fit:"
              f" {statistics.mean(errs):.1%}")
    if not args.quick:
        print()
        pub = published_rows()
        for method, errs in pub.items():
            if errs:
                print(f"published per-iteration mean |error|, {method}, {len(errs)} rows:"
                      f" {statistics.mean(errs):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
