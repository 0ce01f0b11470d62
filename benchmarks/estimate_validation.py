"""Estimated against measured compute: the H200 traces of instances/traces and published tables.

Usage::

    python benchmarks/estimate_validation.py [--quick | --breakdown | --layers]

For every measured H200 trace (``instances/traces/*-h200-*-measured.json``) it estimates the same
model, batch, sequence and precision on the ``h200`` profile with both methods of
:mod:`schedopt.measure.estimate` and prints, per instance and method: the per-step compute
(forward + backward) estimated and measured, the error, and the median per-block ratio (layers
grouped by their top two name components, as the measured trace charges parameter-free work to
the next layer and the estimate to the previous one). Then it compares the estimated iteration
(forward + backward + update) with published single-GPU throughputs (NVIDIA
DeepLearningExamples READMEs: BERT-large pretraining, ResNet-50 v1.5 and, as held-out
depthwise-convolution networks reported apart (:data:`DEPTHWISE`), EfficientNet-B0 and B4;
docs/estimate.md), then what the float32 EfficientNet rows leave for their depthwise layers
(:func:`depthwise_remainder`). The
two BERT rows of :data:`BINNED` ran length-binned data (fewer tokens than batch x sequence): their
full-padding estimate is an upper bound, checked, and left out of the mean |error|.
``--h200-profile FILE`` estimates the H200 traces on a profile that ``schedopt bench-gpu``
measured on an H200 (its products, bandwidth, kernel floor and flash attention: none of them
from these traces) instead of the shipped ``h200`` profile.
``--breakdown`` prints instead what each kind of operator costs per token for BERT-large on the
A100 at sequence 128 and 512 (:func:`~schedopt.measure.estimate.operator_breakdown`).
``--layers`` prints instead one BERT-large layer and one GPT-2-medium block in fp16 on the V100
and the A100, their best estimated throughput over a published micro-benchmark's grid against
that benchmark's best
(:data:`LAYER_BENCH`: measured by others, not used in any fit).
The ResNet-50 H200 trace and the published "AMP" rows ran under automatic mixed precision and
are estimated with ``autocast=True`` (float32 weights and gradients, docs/estimate.md), except
the PyTorch BERT runs, which ran fp16 weights (:data:`HALF_WEIGHTS`). The
published BERT rows are estimated with the attention their release ran (:data:`EAGER`, read from
DeepLearningExamples' source), not with ``auto``.
Then the traces imported from public torch.profiler traces (:data:`IMPORTED`), with the time
of cuDNN's layout transposes in their samples, and where their error lies: convolutions
(one by one) and the other operators, and the memory-bound kinds of :data:`KINDS` against their
kernels, and the ResNet-50 H200 trace's forward by kind of layer (:data:`RESNET_CLEAN`).
``gpt2-1.5b-h200`` fits
:data:`~schedopt.measure.operators.ODD` and is left out of the mean
|error| of the operator method. ``--quick`` skips the published tables.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedopt.files import instances_dir, load_trace
from schedopt.measure.estimate import IMAGE_KINDS, METHODS, MODELS, estimate, operator_breakdown

#: measured trace -> (model, precision, batch, sequence, autocast); the ResNet-50 trace ran under
#: bf16 autocast with float32 weights (its ``source``), the others with bfloat16 weights
MEASURED = {
    "resnet50-h200-b256-measured": ("resnet50", "bf16", 256, None, True),
    "bert-large-h200-bf16-measured": ("bert-large", "bf16", 32, 512, False),
    "gpt2-124m-h200-bf16-measured": ("gpt2-124m", "bf16", 32, 1024, False),
    "gpt2-1.5b-h200-bf16-measured": ("gpt2-1.5b", "bf16", 8, 1024, False),
}
FITTED = {"gpt2-1.5b-h200-bf16-measured"}

#: Attention path of the published BERT runs, read from the source of each release in
#: NVIDIA/DeepLearningExamples (docs/validation.md). Every one is eager: no fused attention kernel.
#:
#: - PyTorch BERT, pytorch:20.06 (commits f8b3a63f "Updating for Ampere and 20.06 container",
#:   2020-07-04, and b2763ae2 "Update ampere perf params", 2020-07-07: modeling.py and
#:   run_pretraining.py are the same at both; BertSelfAttention is the same up to a9e2c1d5^):
#:   PyTorch/LanguageModeling/BERT/modeling.py, BertSelfAttention.forward takes torch.matmul of
#:   the query and transposed key, divides by sqrt(head size), adds the mask, calls F.softmax,
#:   dropout, and torch.matmul with the values;
#: - PyTorch BERT, pytorch:21.11 (commit a9e2c1d5, the release whose Dockerfile is 21.11): the same
#:   module with torch.bmm over [batch x heads, s, d] and F.softmax on [batch, heads, s, s];
#: - TensorFlow BERT 20.06 (commit 96138d50): TensorFlow/LanguageModeling/BERT/modeling.py,
#:   attention_layer is tf.matmul(query, key, transpose_b=True), tf.nn.softmax, tf.matmul.
#:
#: The ResNet-50 rows have no attention ("auto").
EAGER = "eager"

#: DeepLearningExamples' EfficientNet training throughput on one GPU (PyTorch/Classification/
#: ConvNets/efficientnet/README.md at 729963dd, "Training performance results", PyTorch 21.03
#: NGC container): (model, GPU label, profile, precision label, precision, per-GPU batch, image
#: side, images per second). Batches and image sides are those of ConvNets/configs.yml at
#: 729963dd (``efficientnet_b0_params_4k`` 224, ``efficientnet_b4_params_4k`` 380; DGXA100 and
#: DGX1V-16G); AMP runs ``memory_format: nhwc`` with torch.cuda.amp, TF32 and FP32 run NCHW
#: (main.py's default). The model is torchvision's layout (the same MBConv blocks, squeeze on a
#: quarter of the input channels, as image_classification/models/efficientnet.py). The runs use
#: RMSprop (28 B per parameter against the 20 of the SGD update estimated: under 0.1% of these
#: steps) and read ImageNet through the PyTorch data loader.
EFFICIENTNET_ROWS = [
    ("efficientnet_b0", "A100-80GB", "a100", "TF32", "tf32", 256, 224, 1078),
    ("efficientnet_b0", "A100-80GB", "a100", "AMP", "fp16", 256, 224, 2489),
    ("efficientnet_b4", "A100-80GB", "a100", "TF32", "tf32", 64, 380, 157),
    ("efficientnet_b4", "A100-80GB", "a100", "AMP", "fp16", 128, 380, 331),
    ("efficientnet_b0", "V100-16GB", "v100", "FP32", "fp32", 64, 224, 655),
    ("efficientnet_b0", "V100-16GB", "v100", "AMP", "fp16", 128, 224, 1301),
    ("efficientnet_b4", "V100-16GB", "v100", "FP32", "fp32", 16, 380, 83),
    ("efficientnet_b4", "V100-16GB", "v100", "AMP", "fp16", 32, 380, 204),
]

#: (label, model, gpu, precision, batch, seq, samples per second, attention, source); ``seq`` is
#: the image side of image models (None: 224); the "AMP"
#: rows are mixed-precision runs and are estimated with ``autocast=True`` (float32 weights,
#: fp16 products), except those of :data:`HALF_WEIGHTS`.
#: The BERT 20.06 rows are those of the README before the January 2022 release
#: (DeepLearningExamples commit a9e2c1d5^): fixed-length HDF5 input, every sample padded to the
#: sequence length; micro-batch = accumulated batch per GPU / accumulation steps (65232/1208,
#: 65536/1024, 32768/4096, 32768/2048).
PUBLISHED = [
    ("bert-large A100-80GB TF32 b128 s128", "bert-large", "a100", "tf32", 128, 128, 317,
     EAGER, "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large A100-80GB AMP b256 s128", "bert-large", "a100", "fp16", 256, 128, 580,
     EAGER, "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large A100-80GB TF32 b16 s512", "bert-large", "a100", "tf32", 16, 512, 110,
     EAGER, "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large A100-80GB AMP b32 s512", "bert-large", "a100", "fp16", 32, 512, 210,
     EAGER, "DLE PyTorch BERT README, pytorch:21.11, 1 GPU"),
    ("bert-large A100-40GB TF32 b54 s128", "bert-large", "a100-40gb", "tf32", 54, 128, 234,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, 1 GPU, unbinned"),
    ("bert-large A100-40GB AMP b64 s128", "bert-large", "a100-40gb", "fp16", 64, 128, 415,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, 1 GPU, unbinned"),
    ("bert-large A100-40GB TF32 b8 s512", "bert-large", "a100-40gb", "tf32", 8, 512, 41,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, 1 GPU, unbinned"),
    ("bert-large A100-40GB AMP b16 s512", "bert-large", "a100-40gb", "fp16", 16, 512, 78,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, 1 GPU, unbinned"),
    ("bert-large V100-16GB FP32 b8 s128", "bert-large", "v100", "fp32", 8, 128, 40,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, DGX-1 16G, 1 GPU, unbinned"),
    ("bert-large V100-16GB AMP b16 s128", "bert-large", "v100", "fp16", 16, 128, 164,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, DGX-1 16G, 1 GPU, unbinned"),
    ("bert-large V100-16GB FP32 b2 s512", "bert-large", "v100", "fp32", 2, 512, 9,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, DGX-1 16G, 1 GPU, unbinned"),
    ("bert-large V100-16GB AMP b4 s512", "bert-large", "v100", "fp16", 4, 512, 34,
     EAGER, "DLE PyTorch BERT README, pytorch:20.06, DGX-1 16G, 1 GPU, unbinned"),
    ("bert-large V100-16GB AMP b16 s128 (TF)", "bert-large", "v100", "fp16", 16, 128, 134.34,
     EAGER, "DLE TensorFlow BERT README, 20.06, DGX-1 16GB, 1 GPU"),
    ("bert-large V100-16GB FP32 b8 s128 (TF)", "bert-large", "v100", "fp32", 8, 128, 39.43,
     EAGER, "DLE TensorFlow BERT README, 20.06, DGX-1 16GB, 1 GPU"),
    ("bert-large V100-16GB AMP b4 s512 (TF)", "bert-large", "v100", "fp16", 4, 512, 28.72,
     EAGER, "DLE TensorFlow BERT README, 20.06, DGX-1 16GB, 1 GPU"),
    ("bert-large V100-16GB FP32 b2 s512 (TF)", "bert-large", "v100", "fp32", 2, 512, 9.80,
     EAGER, "DLE TensorFlow BERT README, 20.06, DGX-1 16GB, 1 GPU"),
    ("bert-large V100-32GB AMP b8 s512 (TF)", "bert-large", "v100", "fp16", 8, 512, 31.23,
     EAGER, "DLE TensorFlow BERT README, 20.06, DGX-1 32GB, 1 GPU"),
    ("bert-large V100-32GB FP32 b8 s512 (TF)", "bert-large", "v100", "fp32", 8, 512, 10.67,
     EAGER, "DLE TensorFlow BERT README, 20.06, DGX-1 32GB, 1 GPU"),
    ("bert-large V100-32GB AMP b64 s128", "bert-large", "v100", "fp16", 64, 128, 168.63,
     EAGER, "DLE TensorFlow BERT README, 20.06, 1 GPU"),
    ("bert-large V100-32GB FP32 b32 s128", "bert-large", "v100", "fp32", 32, 128, 46.78,
     EAGER, "DLE TensorFlow BERT README, 20.06, 1 GPU"),
    ("resnet50 A100-80GB TF32 b256", "resnet50", "a100", "tf32", 256, None, 938,
     "auto", "DLE PyTorch ResNet-50 v1.5 README, 21.03, 1 GPU"),
    ("resnet50 A100-80GB AMP b256", "resnet50", "a100", "fp16", 256, None, 2470,
     "auto", "DLE PyTorch ResNet-50 v1.5 README, 21.03, 1 GPU"),
    ("resnet50 V100-16GB FP32 b128", "resnet50", "v100", "fp32", 128, None, 412,
     "auto", "DLE TensorFlow ResNet-50 v1.5 README, 20.06 XLA, 1 GPU"),
    ("resnet50 V100-16GB AMP b256", "resnet50", "v100", "fp16", 256, None, 1270,
     "auto", "DLE TensorFlow ResNet-50 v1.5 README, 20.06 XLA, 1 GPU"),
    *[(f"{model} V100 FP32 b32 (DDP benchmark)", model, "v100", "fp32", 32, None, 32 / step,
       "auto", "PyTorch benchmarks/distributed/ddp/README.md at bf69c149, 'no ddp' p50"
       f" {step:.3f} s/iter, torch 1.4, 1 GPU of a DGX-1")
      for model, step in (("resnet50", 0.097), ("resnet101", 0.162),
                          ("resnext50_32x4d", 0.145), ("resnext101_32x8d", 0.415))],
    *[(f"{model} {gpu_label} {prec_label} b{batch}", model, gpu, prec, batch, side, rate,
       "auto", f"DLE PyTorch EfficientNet README (ConvNets/efficientnet, 21.03), 1 GPU,"
       f" {side}x{side} images")
      for model, gpu_label, gpu, prec_label, prec, batch, side, rate in EFFICIENTNET_ROWS],
]
#: Published "AMP" rows that ran 16-bit weights, not torch.autocast, estimated as ``--dtype fp16``
#: without autocast: the PyTorch BERT runs. pytorch:20.06 ran apex ``amp.initialize(...,
#: opt_level="O2")`` (run_pretraining.py at b2763ae2; O2 casts the model to fp16, keeps float32
#: master weights in the optimizer and patches no functions, apex/amp/frontend.py) and
#: pytorch:21.11 ran ``model.half()`` without autocast (run_pretraining.py at a9e2c1d5 with
#: scripts/run_pretraining.sh's default allreduce_post_accumulation_fp16=true). TensorFlow's
#: automatic mixed precision (the V100 rows) rewrites the graph's operators and keeps float32
#: variables, and the ResNet-50 PyTorch 21.03 runs use torch.cuda.amp: both stay autocast.
#: Published rows that ran NCHW activations, estimated with ``memory_format="nchw"`` (the others:
#: channels_last, or text models): the PyTorch ResNet-50 TF32 run. DeepLearningExamples
#: PyTorch/Classification/ConvNets/configs.yml (commit 097c7ff9) sets ``memory_format: nhwc``
#: for resnet50 DGXA100 AMP and nothing for TF32, and main.py's ``--memory-format`` defaults to
#: ``nchw`` (commit 0107cf27). The TensorFlow rows are left at channels_last (XLA chooses
#: its layouts; not read here).
#: The EfficientNet rows: depthwise-convolution networks, added as held-out architectures after
#: the estimator's method and the other rows; their mean |error| is printed apart and, for
#: comparison, pooled with the rest.
DEPTHWISE = {f"{m} {g} {p} b{b}" for m, g, _, p, _, b, _, _ in EFFICIENTNET_ROWS}

NCHW = {"resnet50 A100-80GB TF32 b256",
        *(f"{m} {g} {p} b{b}" for m, g, _, p, _, b, _, _ in EFFICIENTNET_ROWS if p != "AMP"),
        *(f"{m} V100 FP32 b32 (DDP benchmark)"
          for m in ("resnet50", "resnet101", "resnext50_32x4d", "resnext101_32x8d"))}

HALF_WEIGHTS = {"bert-large A100-80GB AMP b256 s128", "bert-large A100-80GB AMP b32 s512",
                "bert-large A100-40GB AMP b64 s128", "bert-large A100-40GB AMP b16 s512",
                "bert-large V100-16GB AMP b16 s128", "bert-large V100-16GB AMP b4 s512"}

#: How each published BERT pre-training row ran: ``(LM positions, accumulation steps)``.
#:
#: *LM positions*: every row ran BertForPreTraining's heads and losses
#: (``heads="pretraining"``); 0 = the masked-LM head on every token, N = on N gathered
#: positions per sequence. PyTorch 20.06 (b2763ae2): ``BertPreTrainingHeads`` runs
#: ``self.predictions(sequence_output)`` on every token and ``BertPretrainingCriterion`` takes
#: the cross-entropy over ``[batch x seq, vocab]``. PyTorch 21.11 (a9e2c1d5):
#: ``sequence_output_is_dense`` (run_pretraining.py passes ``not --no_dense_sequence_output``,
#: which run_pretraining.sh does not set) gathers the masked positions with ``index_select``
#: first; at most ``--max_predictions_per_seq``, 20 at s128 and 80 at s512 in
#: run_pretraining.sh. TensorFlow 20.06 (96138d50): ``get_masked_lm_output`` runs
#: ``gather_indexes`` on ``masked_lm_positions``, 20 per sequence at s128 and 80 at s512
#: (run_pretraining_lamb_phase1.sh ``max_pred_per_seq=20``, phase2 ``80``).
#:
#: *Accumulation steps* (micro-batches per optimizer step; rows not listed: 1): the update
#: runs once per step, so a micro-batch carries ``update / steps``. PyTorch 20.06 and 21.11:
#: the README tables' "Accumulation steps" column (20.06: 65232/1208 ... as the micro-batch
#: note above; 21.11: 8192/128 = 64, 8192/256 = 32, 4096/16 = 256, 4096/32 = 128); TensorFlow
#: 20.06: the "Gradient Accumulation" column of each row's table (mixed precision, FP32),
#: DGX-1 16GB and 32GB.
AS_RUN = {
    "bert-large A100-80GB TF32 b128 s128": (20, 64),
    "bert-large A100-80GB AMP b256 s128": (20, 32),
    "bert-large A100-80GB TF32 b16 s512": (80, 256),
    "bert-large A100-80GB AMP b32 s512": (80, 128),
    "bert-large A100-40GB TF32 b54 s128": (0, 1208),
    "bert-large A100-40GB AMP b64 s128": (0, 1024),
    "bert-large A100-40GB TF32 b8 s512": (0, 4096),
    "bert-large A100-40GB AMP b16 s512": (0, 2048),
    "bert-large V100-16GB FP32 b8 s128": (0, 8192),
    "bert-large V100-16GB AMP b16 s128": (0, 4096),
    "bert-large V100-16GB FP32 b2 s512": (0, 16384),
    "bert-large V100-16GB AMP b4 s512": (0, 8192),
    "bert-large V100-16GB AMP b16 s128 (TF)": (20, 4096),
    "bert-large V100-16GB FP32 b8 s128 (TF)": (20, 8192),
    "bert-large V100-16GB AMP b4 s512 (TF)": (80, 8192),
    "bert-large V100-16GB FP32 b2 s512 (TF)": (80, 16384),
    "bert-large V100-32GB AMP b8 s512 (TF)": (80, 4096),
    "bert-large V100-32GB FP32 b8 s512 (TF)": (80, 4096),
    "bert-large V100-32GB AMP b64 s128": (20, 1024),
    "bert-large V100-32GB FP32 b32 s128": (20, 2048),
}

#: Published rows whose samples were not all padded to ``seq``: the pytorch:21.11 phase-2 runs
#: read LDDL data binned by length (bin size 64, scripts/run_pretraining.sh's default; README
#: changelog "Binned pretraining for phase2 with LDDL using a bin size of 64") and LDDL pads each
#: mini-batch only to its longest sequence (NVIDIA/LDDL README, "sequence binning"). They ran
#: fewer tokens than batch x seq, in a proportion that is not published, so an estimate at full
#: padding is an upper bound of them: printed, checked to be at least the measured time, and left
#: out of the mean |error|.
BINNED = {"bert-large A100-80GB TF32 b16 s512", "bert-large A100-80GB AMP b32 s512"}


def _blocks(tr: object) -> dict[str, float]:
    out: dict[str, float] = {}
    for la in tr.layers:  # type: ignore[attr-defined]
        key = ".".join(la.name.split(".")[:3])
        out[key] = out.get(key, 0.0) + la.forward_s + la.backward_s
    return out


def measured_rows(gpu: str = "h200") -> dict[str, list[float]]:
    """Print the H200 rows, estimated on profile ``gpu`` (the shipped ``h200``, or a profile
    file that ``schedopt bench-gpu`` measured on an H200); return the held-out |errors| per
    method."""
    errors: dict[str, list[float]] = {m: [] for m in METHODS}
    print("| instance | method | estimated ms | measured ms | error | median block ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (model, prec, batch, seq, autocast) in MEASURED.items():
        meas = load_trace(name)
        m_step = _step_s(meas)
        for method in METHODS:
            est = estimate(model, gpu, prec, batch, seq, method=method, autocast=autocast)
            e_step = _step_s(est)
            err = e_step / m_step - 1
            mb, eb = _blocks(meas), _blocks(est)
            ratio = statistics.median(eb[k] / mb[k] for k in mb if mb[k] > 0 and k in eb)
            fitted = name in FITTED and method == "operator"
            if not fitted:
                errors[method].append(abs(err))
            print(f"| {name} | {method}{' (fit)' if fitted else ''} | {e_step * 1e3:.1f} |"
                  f" {m_step * 1e3:.1f} | {err:+.1%} | {ratio:.2f} |")
    return errors


#: Traces imported from public torch.profiler traces (instances/traces/kineto-*, docs/instances.md):
#: (model, GPU profile, precision, batch, the sample it was read from in instances/samples/).
#: Both ran torchvision ResNet-50 in float32, NCHW, at
#: batch 32; the A100 (PG509-200, 40 GB) ran its convolutions in TF32 (torch's default
#: ``cudnn.allow_tf32``). Their per-step compute is the GPU kernel time of the forward and the
#: backward. The operator method estimates them with ``memory_format="nchw"`` (the roofline has
#: no layout), and the table prints the layout transposes modelled (the difference to
#: channels_last) beside those measured. Not used in any fit.
IMPORTED = {
    "kineto-resnet50-v100-measured": ("resnet50", "v100", "fp32", 32,
                                      "kineto-resnet50-v100-rank0"),
    "kineto-resnet50-a100-nccl-measured": ("resnet50", "a100-40gb", "tf32", 32,
                                           "kineto-resnet50-a100-nccl-rank0"),
}


def _sample_events(sample: str) -> tuple[list[dict], list[dict]]:
    """The events of a torch.profiler sample of instances/samples/ and its ``ProfilerStep``
    spans."""
    events = json.loads(gzip.decompress(
        (instances_dir() / "samples" / f"{sample}.json.gz").read_bytes()))["traceEvents"]
    return events, [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]


def _transposes_ms(sample: str) -> tuple[float, float]:
    """Mean time per profiled step (ms) of cuDNN's layout transposes (``nchwToNhwc`` and
    ``nhwcToNchw`` kernels) in a torch.profiler sample of instances/samples/, forward and
    backward: a kernel launched from ``aten::convolution_backward`` (its ``External id``) is
    backward, any other forward."""
    events, steps = _sample_events(sample)
    backward = {e["args"].get("External id") for e in events if e.get("cat") == "cpu_op"
                and e["name"] == "aten::convolution_backward"}
    out = [0.0, 0.0]
    for e in events:
        if e.get("cat") == "kernel" and ("nchwToNhwc" in e["name"] or "nhwcToNchw" in e["name"]):
            out[e["args"].get("External id") in backward] += e["dur"]
    return out[0] / len(steps) / 1e3, out[1] / len(steps) / 1e3


def imported_rows() -> dict[str, list[float]]:
    """Print the rows of :data:`IMPORTED`; return the |errors| per method."""
    errors: dict[str, list[float]] = {m: [] for m in METHODS}
    print("| instance | method | estimated ms | measured ms | error | layout transposes ms,"
          " forward + backward, modelled / measured |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (model, gpu, prec, batch, sample) in IMPORTED.items():
        meas = load_trace(name)
        m_step = _step_s(meas)
        t_fwd, t_bwd = _transposes_ms(sample)
        for method in METHODS:
            layout = "nchw" if method == "operator" else "channels_last"
            try:
                est = estimate(model, gpu, prec, batch, None, method=method,
                               memory_format=layout)
            except ValueError:
                continue  # the roofline profiles have no TF32 figure
            e_step = _step_s(est)
            modelled = "-"
            if layout == "nchw":
                base = estimate(model, gpu, prec, batch)
                fwd = sum(la.forward_s for la in est.layers) - sum(la.forward_s
                                                                  for la in base.layers)
                bwd = e_step - _step_s(base) - fwd
                modelled = f"{fwd * 1e3:.2f} + {bwd * 1e3:.2f}"
            errors[method].append(abs(e_step / m_step - 1))
            print(f"| {name} | {method} | {e_step * 1e3:.1f} | {m_step * 1e3:.1f} |"
                  f" {e_step / m_step - 1:+.1%} | {modelled} / {t_fwd:.2f} + {t_bwd:.2f} |")
    return errors


def _is_conv(name: str, imported: bool) -> bool:
    """Whether a layer is a convolution: ``conv2d_I`` in an imported trace (one layer per
    operator), a ``conv`` or ``downsample.0`` module in an estimate (whose parameter-free
    operators are charged to the batch norm after each convolution)."""
    if imported:
        return name.startswith("conv2d_")
    return "conv" in name or name.endswith("downsample.0")


def imported_split() -> None:
    """Print, per imported trace, the operator method's convolutions (the i-th estimated
    convolution against the trace's ``conv2d_i``) and its other operators against the measured
    ones, in ms, with the median per-convolution ratio."""
    print("| instance | convolutions, forward | convolutions, backward | median ratio per"
          " convolution, forward / backward | other operators, forward + backward |")
    print("| --- | --- | --- | --- | --- |")
    for name, (model, gpu, prec, batch, _) in IMPORTED.items():
        meas = load_trace(name).layers
        est = estimate(model, gpu, prec, batch, None, memory_format="nchw").layers
        mc = [la for la in meas if _is_conv(la.name, True)]
        ec = [la for la in est if _is_conv(la.name, False)]
        if len(mc) != len(ec):
            raise RuntimeError(f"{name}: {len(mc)} measured and {len(ec)} estimated convolutions")
        fwd = statistics.median(e.forward_s / m.forward_s for e, m in zip(ec, mc, strict=True))
        bwd = statistics.median(e.backward_s / m.backward_s
                                for e, m in zip(ec, mc, strict=True) if m.backward_s > 0)

        def ms(layers: list, attr: str) -> float:
            return sum(getattr(la, attr) for la in layers) * 1e3

        other_e = sum(la.forward_s + la.backward_s for la in est if la not in ec) * 1e3
        other_m = sum(la.forward_s + la.backward_s for la in meas if la not in mc) * 1e3
        print(f"| {name} | {ms(ec, 'forward_s'):.2f} / {ms(mc, 'forward_s'):.2f}"
              f" ({ms(ec, 'forward_s') / ms(mc, 'forward_s') - 1:+.0%}) |"
              f" {ms(ec, 'backward_s'):.2f} / {ms(mc, 'backward_s'):.2f}"
              f" ({ms(ec, 'backward_s') / ms(mc, 'backward_s') - 1:+.0%}) | {fwd:.2f} / {bwd:.2f} |"
              f" {other_e:.2f} / {other_m:.2f} ({other_e / other_m - 1:+.0%}) |")


#: Memory-bound kinds of the imported ResNet-50 steps: name -> (the estimate's ATen operator,
#: the profiler's forward operators, its backward operators). A residual addition's backward is
#: the gradient sum of its fork (an ``add_`` on the backward thread); BatchNorm's int64
#: ``num_batches_tracked.add_(1)`` is left out of the additions.
KINDS = {
    "batch norm": ("native_batch_norm", ("aten::cudnn_batch_norm", "aten::native_batch_norm"),
                   ("aten::cudnn_batch_norm_backward", "aten::native_batch_norm_backward")),
    "ReLU": ("relu_", ("aten::clamp_min_", "aten::relu_"), ("aten::threshold_backward",)),
    "residual addition": ("add", ("aten::add_", "aten::add"), ("aten::add_", "aten::add")),
    "max pooling": ("max_pool2d_with_indices", ("aten::max_pool2d_with_indices",),
                    ("aten::max_pool2d_with_indices_backward",)),
}


def _kinds_ms(sample: str) -> dict[str, list[float]]:
    """Measured forward and backward ms per step of each :data:`KINDS` in a torch.profiler
    sample: a kernel counts for the operator that launched it (its ``External id``), forward
    when that operator ran on the thread of the ``ProfilerStep`` spans, backward otherwise."""
    events, steps = _sample_events(sample)
    ops = {e["args"].get("External id"): e for e in events if e.get("cat") == "cpu_op"}
    out = {kind: [0.0, 0.0] for kind in KINDS}
    for e in events:
        op = ops.get(e.get("args", {}).get("External id"))
        if e.get("cat") != "kernel" or op is None or "<long>" in e["name"]:
            continue
        backward = op["tid"] != steps[0]["tid"]
        for kind, (_, fwd, bwd) in KINDS.items():
            if op["name"] in (bwd if backward else fwd):
                out[kind][backward] += e["dur"] / len(steps) / 1e3
    return out


def imported_kinds() -> None:
    """Print, per imported trace, the memory-bound kinds of :data:`KINDS`: estimated (operator
    method, as :func:`imported_split`) against measured ms, forward and backward."""
    print("| instance | kind | forward, estimated / measured | backward, estimated / measured |")
    print("| --- | --- | --- | --- |")
    for name, (model, gpu, prec, batch, sample) in IMPORTED.items():
        est = operator_breakdown(model, gpu, prec, batch)
        meas = _kinds_ms(sample)
        for kind, (aten, _, _) in KINDS.items():
            ef = sum(t.forward_s for k, t in est.items() if k[0] == aten) * 1e3
            eb = sum(t.backward_s for k, t in est.items() if k[0] == aten) * 1e3
            mf, mb = meas[kind]
            print(f"| {name} | {kind} | {ef:.2f} / {mf:.2f} ({ef / mf:.2f}x) |"
                  f" {eb:.2f} / {mb:.2f} ({eb / mb:.2f}x) |")


#: Forward layers of the ResNet-50 H200 trace that hold one operator's work alone: the first
#: two batch norms of each block and the second and third convolutions. The first convolution
#: of a block also holds the previous block's residual addition and ReLU (the trace charges
#: parameter-free work to the next layer, the estimate to the previous one), and the last batch
#: norm of the estimate holds them, so those two are left out.
RESNET_CLEAN = {"batch norm (bn1, bn2)": (".bn1", ".bn2"), "convolution (conv2, conv3)":
                (".conv2", ".conv3")}


def resnet_forward_kinds(gpu: str = "h200") -> None:
    """Print the ResNet-50 H200 trace's forward by kind of layer (:data:`RESNET_CLEAN`),
    estimated (operator method, on profile ``gpu``) against measured; its backward is not split
    (docs/instances.md: the trace charges it to ``fc``)."""
    model, prec, batch, seq, autocast = MEASURED["resnet50-h200-b256-measured"]
    meas = {la.name: la.forward_s for la in load_trace("resnet50-h200-b256-measured").layers}
    est = {la.name: la.forward_s
           for la in estimate(model, gpu, prec, batch, seq, autocast=autocast).layers}
    print("| resnet50-h200-b256-measured, forward | layers | estimated ms | measured ms |"
          " estimated / measured |")
    print("| --- | --- | --- | --- | --- |")
    for kind, ends in RESNET_CLEAN.items():
        names = [n for n in meas if n.startswith("layer") and n.endswith(ends)]
        e, m = sum(est[n] for n in names) * 1e3, sum(meas[n] for n in names) * 1e3
        print(f"| {kind} | {len(names)} | {e:.2f} | {m:.2f} | {e / m:.2f} |")


def _step_s(trace: object) -> float:
    """Forward + backward compute of one step (s)."""
    return sum(la.forward_s + la.backward_s for la in trace.layers)  # type: ignore[attr-defined]


def _published_estimate(label: str, model: str, gpu: str, prec: str, batch: int,
                        seq: int | None, attention: str, method: str, as_run: bool) -> float:
    """Estimated seconds per micro-batch of one published row: forward, backward and the
    update. ``as_run``: with the row's pre-training heads and, with its accumulation steps
    (:data:`AS_RUN`), a micro-batch in the middle of a step (two micro-batches less one:
    its gradients added into the accumulated ones) and the update once per step; else the
    encoder alone and an update per micro-batch (the accounting before the heads were
    modelled)."""
    layout = "nchw" if label in NCHW and method == "operator" else "channels_last"
    positions, steps = AS_RUN.get(label, (0, 1)) if as_run else (0, 1)
    heads = "pretraining" if as_run and label in AS_RUN else "none"

    image = MODELS[model].kind in IMAGE_KINDS if model in MODELS else False

    def run(accumulate: int) -> Any:
        return estimate(model, gpu, prec, batch, None if image else seq, method=method,
                        image_size=seq if image else None,
                        autocast=" AMP " in label and label not in HALF_WEIGHTS,
                        attention=attention, memory_format=layout, heads=heads,
                        lm_positions=positions, accumulate=accumulate)

    one = run(1)
    if steps == 1:
        return _step_s(one) + one.update_s
    return _step_s(run(2)) - _step_s(one) + one.update_s / steps


def published_rows() -> tuple[dict[str, list[float]], list[tuple[str, float]],
                              dict[tuple[str, int], list[tuple[float, str]]]]:
    """Print the published-throughput rows, as run (heads, accumulation) and as estimated
    before (the encoder alone, an update per micro-batch); return |errors| per method, as run
    and before (keys ``METHOD`` and ``METHOD before``; rows of :data:`BINNED` left out),
    ``(label, estimated / measured)`` of the binned rows as run, and the operator method's
    signed errors as run by ``(model, micro-batch)``."""
    errors: dict[str, list[float]] = {}
    by_batch: dict[tuple[str, int], list[tuple[float, str]]] = {}
    binned: list[tuple[str, float]] = []
    print("| instance | method | as run: estimated ms | error | before: estimated ms | error |"
          " measured ms | source |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, model, gpu, prec, batch, seq, rate, attention, source in PUBLISHED:
        m_step = batch / rate
        if attention != "auto":
            source += f"; {attention} attention"
        if label in HALF_WEIGHTS:
            source += "; fp16 weights (not autocast)"
        if label in BINNED:
            source += "; LDDL-binned (padded per batch): full padding is an upper bound"
        if label in NCHW:
            source += "; NCHW (operator: cuDNN layout transposes priced)"
        if label in AS_RUN:
            positions, steps = AS_RUN[label]
            source += (f"; LM head on {positions} positions" if positions
                       else "; LM head on every token")
            source += f"; {steps} micro-batches per update"
        for method in METHODS:
            try:
                run, old = (_published_estimate(label, model, gpu, prec, batch, seq, attention,
                                                method, as_run) for as_run in (True, False))
            except ValueError:
                continue  # the roofline profiles have no TF32 / V100-fp16-image figure
            if label in BINNED:
                binned.append((f"{label} ({method})", run / m_step))
            elif label in DEPTHWISE:  # reported apart: added after the method was set
                errors.setdefault(f"{method} depthwise", []).append(abs(run / m_step - 1))
                if method == "operator":
                    by_batch.setdefault((model, batch), []).append((run / m_step - 1, label))
            else:
                errors.setdefault(method, []).append(abs(run / m_step - 1))
                errors.setdefault(f"{method} before", []).append(abs(old / m_step - 1))
                if method == "operator":
                    by_batch.setdefault((model, batch), []).append((run / m_step - 1, label))
            print(f"| {label} | {method} | {run * 1e3:.1f} | {run / m_step - 1:+.1%} |"
                  f" {old * 1e3:.1f} | {old / m_step - 1:+.1%} | {m_step * 1e3:.1f} | {source} |")
    return errors, binned, by_batch


def depthwise_remainder() -> None:
    """For each EfficientNet row: the measured step less the estimate of everything but the
    depthwise convolutions, per image, over the rule's price of those convolutions, and as the
    rate of their FLOPs (forward and both gradients) that it implies (docs/validation.md,
    "EfficientNet"). Float32 and TF32 rows ran NCHW (PyTorch's own depthwise kernels), AMP rows
    channels-last (cuDNN's)."""
    print("\n| row | estimate without depthwise ms | depthwise, priced ms |"
          " measured - rest, per image ms | over the price | implied TFLOP/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model, gpu_label, gpu, prec_label, prec, batch, side, rate in EFFICIENTNET_ROWS:
        amp = prec_label == "AMP"
        log: list[Any] = []
        tr = estimate(model, gpu, prec, batch, image_size=side, autocast=amp, log=log,
                      memory_format="channels_last" if amp else "nchw")
        dw = [r for r in log if r[0] == "convolution"
              and r[3] / (2 * math.prod(r[2])) in (9, 25)]  # 2 k^2 FLOPs per output
        priced = sum(r[5] + r[6] for r in dw)
        rest = _step_s(tr) + tr.update_s - priced
        left = batch / rate - rest
        print(f"| {model} {gpu_label} {prec_label} b{batch} | {rest * 1e3:.1f} |"
              f" {priced * 1e3:.1f} | {left / batch * 1e3:.3f} | {left / priced:.1f} |"
              f" {3 * sum(r[3] for r in dw) / left / 1e12:.2f} |")


def print_by_batch(by_batch: dict[tuple[str, int], list[tuple[float, str]]]) -> None:
    """The operator method's errors as run, by model and micro-batch (every GPU and
    precision at that micro-batch together, each error with its row's GPU and precision)."""
    print("\n| model | micro-batch | rows | errors | mean abs. error |")
    print("| --- | --- | --- | --- | --- |")
    for (model, batch), errs in sorted(by_batch.items()):
        shown = ", ".join(f"{e:+.1%} ({' '.join(label.split()[1:3])})" for e, label in errs)
        print(f"| {model} | {batch} | {len(errs)} | {shown} |"
              f" {statistics.mean(abs(e) for e, _ in errs):.1%} |")


#: Per-operator breakdown rows: (label, precision, batch, seq, autocast, attention) of BERT-large
#: on the 80 GB A100: the published rows' settings (eager attention, :data:`EAGER`; the AMP rows
#: with fp16 weights, :data:`HALF_WEIGHTS`), and the AMP ones again with the fused flash kernel
#: (what ``attention="auto"`` prices on the A100 at fp16).
BREAKDOWN = [("TF32 b128 s128", "tf32", 128, 128, False, EAGER),
             ("TF32 b16 s512", "tf32", 16, 512, False, EAGER),
             ("AMP b256 s128", "fp16", 256, 128, False, EAGER),
             ("AMP b32 s512", "fp16", 32, 512, False, EAGER),
             ("AMP flash b256 s128", "fp16", 256, 128, False, "flash"),
             ("AMP flash b32 s512", "fp16", 32, 512, False, "flash")]


def _category(name: str, shape: tuple[int, ...], seq: int) -> str:
    if name in ("addmm", "mm"):
        return "linear products (addmm, mm)"
    if name == "bmm":
        return "attention products (bmm)"
    if name.startswith("_scaled_dot_product"):
        return "fused attention (flash)"
    if name == "autocast cast":
        return "autocast casts"
    if len(shape) == 4 and shape[-2:] == (seq, seq):
        return "attention scores, memory-bound (s x s)"
    return "other memory-bound"


def breakdown() -> None:
    """Print what each kind of operator costs per token in the BREAKDOWN settings, forward +
    backward, with the FLOPs and bytes it was priced on."""
    from schedopt.measure.estimate import operator_breakdown

    print("| setting | operators | count | fwd+bwd ms | us/token | fwd MFLOP/token |"
          " fwd MB/token |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, prec, batch, seq, autocast, attention in BREAKDOWN:
        tokens = batch * seq
        cats: dict[str, list[float]] = {}
        for (name, _, shape), tot in operator_breakdown("bert-large", "a100", prec, batch, seq,
                                                        autocast=autocast,
                                                        attention=attention).items():
            c = cats.setdefault(_category(name, shape, seq), [0, 0.0, 0.0, 0.0])
            c[0] += tot.count
            c[1] += tot.forward_s + tot.backward_s
            c[2] += tot.flops
            c[3] += tot.nbytes
        for cat, (n, sec, flops, nbytes) in sorted(cats.items(), key=lambda kv: -kv[1][1]):
            print(f"| {label} | {cat} | {n:.0f} | {sec * 1e3:.1f} | {sec / tokens * 1e6:.2f} |"
                  f" {flops / tokens / 1e6:.2f} | {nbytes / tokens / 1e6:.3f} |")
        total = sum(c[1] for c in cats.values())
        print(f"| {label} | all | {sum(c[0] for c in cats.values()):.0f} | {total * 1e3:.1f} |"
              f" {total / tokens * 1e6:.2f} | | |")


#: The best throughput of one layer (fp16 weights, TFLOP/s of the notebook's formula) over a grid
#: of sequences and batches, forward and forward+backward, from mli/transformers-benchmarks
#: README.md (commit 04df81d, "Micro-Benchmarking Summary": A100 80GB and V100 16GB, PyTorch
#: 1.13 / CUDA 11.7 containers). ``micro_bench.ipynb`` builds the layer with transformers
#: (``BertLayer(config).half()`` of bert-large-uncased; ``GPT2Block(config).half()`` of
#: gpt2-medium), in training mode, on ``torch.randn(b, s, h)``, and times ``layer(X)`` and
#: ``layer(X)[0].sum().backward()`` (the median of at least 3 s of runs). Per layer: the
#: configuration, the estimated trace's layer prefix, the grid and the published best figures.
LAYER_BENCH: dict[str, dict[str, Any]] = {
    "bert-large": {
        "config": {"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 1,
                   "num_attention_heads": 16, "intermediate_size": 4096},
        "prefix": ".layer.0.", "seq": (128, 512), "batch": (2, 4, 8, 16, 32, 64, 128),
        "best": {"v100": (56.0, 67.0), "a100": (110.0, 136.0)}},
    "gpt2-medium": {
        "config": {"model_type": "gpt2", "n_embd": 1024, "n_layer": 1, "n_head": 16,
                   "n_positions": 1024, "vocab_size": 50257},
        "prefix": ".h.0.", "seq": (512, 1024), "batch": (2, 4, 8, 16, 32, 64),
        "best": {"v100": (34.0, 37.0), "a100": (45.0, 53.0)}},
}


def layer_rows() -> None:
    """One BERT-large layer and one GPT-2-medium block estimated over the micro-benchmark's grid
    against its best figures (:data:`LAYER_BENCH`): the estimate's best throughput over the same
    grid, by the notebook's FLOP formula (forward ``24 b s h^2 + 4 b h s^2``, the full square
    of the causal attention included; forward+backward three times that)."""
    from schedopt.measure.estimate import config_spec

    print("| layer | GPU | estimated best fwd / fwd+bwd TFLOP/s (at b, s) | measured best |"
          " ratio |")
    print("| --- | --- | --- | --- | --- |")
    for name, bench in LAYER_BENCH.items():
        h = 1024
        spec = config_spec(bench["config"], f"{name}-layer")
        for gpu, (m_fwd, m_all) in bench["best"].items():
            best_f = best_a = (0.0, 0, 0)
            for s in bench["seq"]:
                for b in bench["batch"]:
                    tr = estimate(spec, gpu, "fp16", b, s, attention="eager")
                    lay = [la for la in tr.layers if bench["prefix"] in la.name]
                    fwd = sum(la.forward_s for la in lay)
                    both = fwd + sum(la.backward_s for la in lay)
                    flops = 24 * b * s * h * h + 4 * b * h * s * s
                    best_f = max(best_f, (flops / fwd / 1e12, b, s))
                    best_a = max(best_a, (3 * flops / both / 1e12, b, s))
            print(f"| {name} | {gpu} | {best_f[0]:.1f} (b{best_f[1]}, s{best_f[2]}) /"
                  f" {best_a[0]:.1f} (b{best_a[1]}, s{best_a[2]}) | {m_fwd:g} / {m_all:g} |"
                  f" {best_f[0] / m_fwd:.2f} / {best_a[0] / m_all:.2f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the H200 traces")
    ap.add_argument("--layers", action="store_true",
                    help="only one BERT-large layer against a published micro-benchmark")
    ap.add_argument("--breakdown", action="store_true",
                    help="only the per-operator breakdown of BERT-large on the A100 at s128/s512")
    ap.add_argument("--h200-profile", default="h200", metavar="FILE",
                    help="estimate the H200 traces on this profile (a `schedopt bench-gpu`"
                         " file measured on an H200) instead of the shipped h200")
    args = ap.parse_args(argv)
    if args.breakdown:
        breakdown()
        return 0
    if args.layers:
        layer_rows()
        return 0
    held = measured_rows(args.h200_profile)
    for method, errs in held.items():
        print(f"H200 per-step mean |error|, {method}, {len(errs)} traces not used in the fit:"
              f" {statistics.mean(errs):.1%}")
    print()
    imported = imported_rows()
    for method, errs in imported.items():
        if errs:
            print(f"imported per-step mean |error|, {method}, {len(errs)} traces:"
                  f" {statistics.mean(errs):.1%}")
    print()
    imported_split()
    print()
    imported_kinds()
    print()
    resnet_forward_kinds(args.h200_profile)
    if not args.quick:
        print()
        pub, binned, by_batch = published_rows()
        print_by_batch(by_batch)
        depthwise_remainder()
        for method, errs in pub.items():
            if errs and not method.endswith("depthwise"):
                print(f"published per-iteration mean |error|, {method}, {len(errs)} rows"
                      f" padded to their sequence: {statistics.mean(errs):.1%}")
        for method in METHODS:
            errs = pub.get(f"{method} depthwise", [])
            if errs:
                print(f"published per-iteration mean |error|, {method}, {len(errs)} EfficientNet"
                      f" rows (depthwise, added): {statistics.mean(errs):.1%}"
                      f" (max {max(errs):.1%})")
        for label, ratio in binned:
            verdict = "upper bound holds" if ratio >= 1 else "UPPER BOUND VIOLATED"
            print(f"binned row {label}: full-padding estimate / measured = {ratio:.2f}"
                  f" ({verdict}; not in the mean)")
        print_pooled(held, imported, pub)
        print_pooled(held, imported, {m: pub.get(m, []) + pub.get(f"{m} depthwise", [])
                                      for m in METHODS}, what=" with the EfficientNet rows")
    return 0


def print_pooled(*groups: dict[str, list[float]], what: str = "") -> None:
    """The mean |error| per step over every measured step not used in a fit (the H200 traces,
    the imported traces and the published rows together), per method; ``what`` says what the
    line adds."""
    for method in ("operator", "roofline"):
        errs = [e for group in groups for e in group.get(method, [])]
        if errs:
            print(f"every measured step not used in a fit{what}, {method}: mean |error|"
                  f" {statistics.mean(errs):.1%} over {len(errs)} steps (max {max(errs):.1%})")


if __name__ == "__main__":
    raise SystemExit(main())
