"""Generate every shipped instance of schedopt: ``instances/traces`` and ``instances/clusters``.

Run from anywhere (it finds the repository from its own path)::

    python instances/generate.py                 # everything
    python instances/generate.py --only clusters # or: estimated, bcaffe, synthetic

The estimated traces need the ``torch`` extra (torch and transformers); the other parts need only
the package. The B-Caffe traces and the OSU-fitted clusters read the shared reference data
(``../shared/reference/mgwfbp-traces`` next to the repository; ``--reference`` overrides it) and are
skipped with a message when it is absent.

Estimated traces
----------------
The estimated traces are made by :mod:`schedopt.measure.estimate` (``schedopt estimate`` on the
command line; docs/estimate.md) with its ``roofline`` method: ``max(FLOPs / F, bytes / B, 2 us)``
per operator with the achieved FLOP/s F and bandwidth B of the GPU profiles of
:mod:`schedopt.measure.gpus`, backward = 2 x forward. This script only lists them
(``ESTIMATED``) and checks each model's parameter count against ``EXPECTED_PARAMS`` (the published
counts), so that the shipped files stay as they were made.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schedopt.files import write_json_atomic  # noqa: E402
from schedopt.measure.bcaffe import load_bcaffe_log  # noqa: E402
from schedopt.measure.comm_tables import parse_comm_file  # noqa: E402
from schedopt.measure.commfit import cluster_from_fit, fit_alpha_beta  # noqa: E402
from schedopt.measure.estimate import (  # noqa: E402, F401 (MODELS: the shipped models)
    MIN_KERNEL_S,
    MODELS,
    TraceSpec,
    sig,
)
from schedopt.measure.estimate import estimate_trace as _estimate_trace  # noqa: E402
from schedopt.measure.gpus import GPUS  # noqa: E402, F401 (the GPU profiles)
from schedopt.model.cluster import Cluster, ClusterFamily  # noqa: E402
from schedopt.model.trace import Trace  # noqa: E402

TRACES = REPO / "instances" / "traces"
CLUSTERS = REPO / "instances" / "clusters"
DEFAULT_REFERENCE = REPO.parent / "shared" / "reference"
BCAFFE_COMMIT = "github.com/hclhkbu/B-Caffe @ fdb55951 (logdata/)"

#: Parameter counts of reference/FACTS.md (Llama: the published Llama-2 7B and 70B counts); the
#: generated traces must match them exactly.
EXPECTED_PARAMS: dict[str, tuple[int, int | None]] = {
    "alexnet": (61_100_840, None),
    "vgg16": (138_357_544, None),
    "resnet50": (25_557_032, 161),
    "resnet152": (60_192_808, 467),
    "bert-base": (109_482_240, None),
    "bert-large": (335_141_888, None),
    "gpt2-124m": (124_439_808, None),
    "gpt2-1.5b": (1_557_611_200, None),
    "llama-7b": (6_738_415_616, 291),
    "llama-70b": (68_976_648_192, 723),
}


def estimate_trace(ts: TraceSpec) -> Trace:
    """One shipped estimated trace, its parameter count checked against ``EXPECTED_PARAMS``."""
    tr = _estimate_trace(ts)
    n_params = sum(t.numel for t in tr.tensor_list)
    want, want_tensors = EXPECTED_PARAMS[ts.model]
    if n_params != want or (want_tensors is not None and tr.num_tensors != want_tensors):
        raise RuntimeError(f"{ts.name}: {n_params} params in {tr.num_tensors} tensors,"
                           f" want {want}")
    return tr


ESTIMATED: list[TraceSpec] = [
    TraceSpec("alexnet-k80-b128", "alexnet", "k80", "fp32", 128),
    TraceSpec("alexnet-v100-b256", "alexnet", "v100", "fp32", 256),
    TraceSpec("alexnet-a100-b512", "alexnet", "a100", "bf16", 512),
    TraceSpec("vgg16-k80-b32", "vgg16", "k80", "fp32", 32),
    TraceSpec("vgg16-v100-b64", "vgg16", "v100", "fp32", 64),
    TraceSpec("vgg16-a100-b128", "vgg16", "a100", "bf16", 128),
    TraceSpec("resnet50-k80-b32", "resnet50", "k80", "fp32", 32),
    TraceSpec("resnet50-v100-b64", "resnet50", "v100", "fp32", 64),
    TraceSpec("resnet50-a100-b256", "resnet50", "a100", "bf16", 256),
    TraceSpec("resnet50-h100-b256", "resnet50", "h100", "bf16", 256),
    TraceSpec("resnet152-v100-b32", "resnet152", "v100", "fp32", 32),
    TraceSpec("resnet152-a100-b128", "resnet152", "a100", "bf16", 128),
    TraceSpec("bert-base-v100-fp16", "bert-base", "v100", "fp16", 32, 128, "float16"),
    TraceSpec("bert-base-a100-bf16", "bert-base", "a100", "bf16", 32, 512, "bfloat16"),
    TraceSpec("bert-large-v100-fp16", "bert-large", "v100", "fp16", 16, 128, "float16"),
    TraceSpec("bert-large-a100-bf16", "bert-large", "a100", "bf16", 16, 512, "bfloat16"),
    TraceSpec("bert-large-h100-bf16", "bert-large", "h100", "bf16", 32, 512, "bfloat16"),
    TraceSpec("gpt2-124m-v100-fp16", "gpt2-124m", "v100", "fp16", 8, 1024, "float16"),
    TraceSpec("gpt2-124m-a100-bf16", "gpt2-124m", "a100", "bf16", 16, 1024, "bfloat16"),
    TraceSpec("gpt2-124m-h100-bf16", "gpt2-124m", "h100", "bf16", 32, 1024, "bfloat16"),
    TraceSpec("gpt2-1.5b-v100-fp16", "gpt2-1.5b", "v100", "fp16", 1, 1024, "float16"),
    TraceSpec("gpt2-1.5b-a100-bf16", "gpt2-1.5b", "a100", "bf16", 8, 1024, "bfloat16"),
    TraceSpec("gpt2-1.5b-h100-bf16", "gpt2-1.5b", "h100", "bf16", 8, 1024, "bfloat16"),
    TraceSpec("llama-7b-a100-bf16", "llama-7b", "a100", "bf16", 2, 4096, "bfloat16"),
    TraceSpec("llama-7b-h100-bf16", "llama-7b", "h100", "bf16", 2, 4096, "bfloat16"),
    TraceSpec("llama-70b-a100-bf16", "llama-70b", "a100", "bf16", 1, 4096, "bfloat16"),
    TraceSpec("llama-70b-h100-bf16", "llama-70b", "h100", "bf16", 1, 4096, "bfloat16"),
]


# ============================================================================ synthetic
SYNTHETIC_SEED = 20180510


def synthetic_trace(n_layers: int = 2500, seed: int = SYNTHETIC_SEED) -> Trace:
    """A seeded random trace of ``2 * n_layers`` tensors (weight and bias per layer)."""
    rng = np.random.default_rng(seed)
    w_numel = np.exp(rng.uniform(math.log(64), math.log(2**20), n_layers)).astype(np.int64)
    b_numel = rng.integers(16, 4097, n_layers)
    noise = rng.lognormal(0.0, 0.5, n_layers)
    ratio = rng.uniform(1.5, 2.5, n_layers)
    tokens, flops = 8192, 100e12
    layers = []
    for k in range(n_layers):
        fwd = 2 * int(w_numel[k]) * tokens / flops * noise[k] + MIN_KERNEL_S
        layers.append({
            "name": f"layer{k:04d}",
            "forward_s": sig(fwd),
            "backward_s": sig(ratio[k] * fwd),
            "tensors": [
                {"name": f"layer{k:04d}.weight", "bytes": 4 * int(w_numel[k])},
                {"name": f"layer{k:04d}.bias", "bytes": 4 * int(b_numel[k])},
            ],
        })
    n_params = int(w_numel.sum() + b_numel.sum())
    update = 20 * n_params / 1600e9
    source = (
        f"SYNTHETIC (numpy default_rng seed {seed}) for benchmarks: {n_layers} layers, each a"
        f" float32 weight with log-uniform numel in [64, 2^20] and a bias with uniform numel in"
        f" [16, 4096] ({2 * n_layers} tensors, {n_params:,} parameters); forward = 2 x numel x"
        f" {tokens} tokens / {flops / 1e12:g} TFLOP/s x lognormal(0, 0.5) + 2 us; backward ="
        f" uniform[1.5, 2.5] x forward; io = 1 ms, h2d = 0.5 ms (set); update = 20 B/param /"
        f" 1,600 GB/s = {update * 1e3:.3g} ms."
    )
    return Trace.model_validate({
        "name": "synthetic-5000" if n_layers == 2500 else f"synthetic-{2 * n_layers}",
        "batch_size": 8,
        "source": source,
        "io_s": 1e-3,
        "h2d_s": 0.5e-3,
        "update_s": sig(update),
        "layers": layers,
    })


# ============================================================================ B-Caffe
BCAFFE_TRACES = {
    "googlenet-k80-10gbe-2n": "tmp2comm.log",
    "googlenet-k80-10gbe-4n": "tmp4comm.log",
    "googlenet-k80-10gbe-8n": "tmp8comm.log",
    "googlenet-k80-10gbe-4n-o": "tmp4ocomm.log",
    "googlenet-k80-10gbe-8n-o": "tmp8ocomm.log",
}


def bcaffe_traces(reference: Path) -> dict[str, Trace]:
    """The GoogleNet traces of the B-Caffe logs."""
    logdata = reference / "mgwfbp-traces" / "B-Caffe" / "logdata"
    out = {}
    for name, fname in BCAFFE_TRACES.items():
        run = " ('o' run, MG-WFBP merging on)" if "o" in fname.removeprefix("tmp")[1:2] else ""
        out[name] = load_bcaffe_log(
            logdata / fname,
            name=name,
            source=(f"MEASURED backward times: GoogleNet batch 64 on Tesla K80, 10GbE cluster,"
                    f" {fname}{run} from {BCAFFE_COMMIT}; setup as inferred in"
                    f" reference/mgwfbp-traces/README.md"),
        )
    return out


def osu_clusters(reference: Path) -> dict[str, Cluster]:
    """Clusters fitted to the three B-Caffe OSU all-reduce logs (sizes >= 64 KB)."""
    logdata = reference / "mgwfbp-traces" / "B-Caffe" / "logdata"
    out = {}
    for n in (2, 4, 8):
        samples = parse_comm_file(logdata / f"allreduce{n}.log")
        fit = fit_alpha_beta(samples, min_bytes=65536)
        used = int(((samples.sizes >= 65536)).sum())
        out[f"bcaffe-osu-{n}n"] = cluster_from_fit(
            fit,
            name=f"bcaffe-osu-{n}n",
            ranks=n,
            gpu="Tesla K80",
            source=(f"MEASURED: OSU osu_allreduce v5.4.0 latencies, {n} processes, B-Caffe"
                    f" logdata/allreduce{n}.log from {BCAFFE_COMMIT} (the 10GbE K80 cluster of"
                    f" the GoogleNet logs, as inferred in reference/mgwfbp-traces/README.md);"
                    f" least squares over the {used} sizes >= 65,536 B (schedopt.measure.commfit)"),
        )
    return out


# ============================================================================ clusters
# Link figures (reference/FACTS.md link table and MG-WFBP fits; each cluster cites its lines).
PCIE3 = {"name": "pcie3", "bandwidth_Bps": 10e9, "latency_s": 5e-6}
NVLINK2 = {"name": "nvlink2", "bandwidth_Bps": 120e9, "latency_s": 0.6e-6}
NVSWITCH_A100 = {"name": "nvswitch-a100", "bandwidth_Bps": 230e9, "latency_s": 2e-6}
NVSWITCH_H100 = {"name": "nvswitch-h100", "bandwidth_Bps": 370e9, "latency_s": 3e-6}
# 10GbE: 1.1 GB/s (FACTS); per-step latency from the MG-WFBP fits: a / (2(p-1)) = 5.23e-4 / 14 =
# 37 us (8 workers) and 9.08e-4 / 30 = 30 us (16 workers) -> 35 us.
TENGBE = {"name": "10gbe", "bandwidth_Bps": 1.1e9, "latency_s": 35e-6}
# 56 Gb FDR: bandwidth from the 16-worker MG-WFBP fit read as a ring, 2(p-1)/p / b =
# 1.875 / 4.06e-10 = 4.6 GB/s (FACTS: 2.5-5 effective); latency 2.36e-4 / 30 = 7.9 us.
IB_FDR = {"name": "ib-fdr-56g", "bandwidth_Bps": 4.6e9, "latency_s": 7.9e-6}
IB_EDR = {"name": "ib-edr-100g", "bandwidth_Bps": 12e9, "latency_s": 5e-6}
IB_HDR = {"name": "ib-hdr-200g", "bandwidth_Bps": 24e9, "latency_s": 5e-6}
IB_NDR = {"name": "ib-ndr-400g", "bandwidth_Bps": 46e9, "latency_s": 5e-6}

SRC_PCIE = "PCIe Gen3 x16 10 GB/s, 5 us per step (FACTS.md link table: 10-12 GB/s, 1-6 us)"
SRC_NVL2 = "NVLink2 120 GB/s, 0.6 us per hop (FACTS.md: 6 links x ~20 GB/s, NCCL constant)"
SRC_NVS_A = "NVSwitch A100 230 GB/s (FACTS.md: 208-235 GB/s, nccl-tests issues), 2 us per step"
SRC_NVS_H = ("NVSwitch H100 370 GB/s ring (FACTS.md: ~370 ring, nccl issues), 3 us per step"
             " (FACTS.md: ~6 us total for 2 GPUs)")
SRC_10G = ("10GbE 1.1 GB/s (FACTS.md: <= 1.1 GB/s), 35 us per step (MG-WFBP 10GbE fits:"
           " 5.23e-4 s / 14 steps at 8 workers, 9.08e-4 s / 30 steps at 16)")
SRC_FDR = ("56 Gb IB FDR 4.6 GB/s = 1.875 / 4.06e-10 s/B and 7.9 us = 2.36e-4 s / 30 steps"
           " (MG-WFBP 16-worker fit read as a ring; FACTS.md: 2.5-5 GB/s effective)")
SRC_EDR = "100 Gb IB EDR 12 GB/s per NIC, 5 us per step (FACTS.md: ~12 GB/s, 2.7-14 us)"
SRC_HDR = "200 Gb IB HDR 24 GB/s per NIC (FACTS.md), 5 us per step (as EDR, FACTS.md)"
SRC_NDR = "400 Gb IB NDR 46 GB/s per NIC (FACTS.md: 46-48), 5 us per step (as EDR, FACTS.md)"


#: Host cost of one NCCL collective call (s): ~2.5 us inside ncclGroupStart/ncclAllReduce/
#: ncclGroupEnd (NVIDIA/nccl#1765) plus c10d's call and the kernel launch (nccl-tests' 0-byte op
#: 5.5 us, NVIDIA/nccl-tests#128; an eager op 5-7 us, pytorch/pytorch#41383); docs/instances.md.
NCCL_LAUNCH_S = 1e-5


def _c(**kw: Any) -> Cluster:
    return Cluster.model_validate(kw)


def clusters() -> dict[str, Cluster | ClusterFamily]:
    """The hand-written clusters and cluster families."""
    out: dict[str, Cluster | ClusterFamily] = {}
    out["k80-pcie-4gpu"] = _c(
        name="k80-pcie-4gpu", nodes=1, gpus_per_node=4, gpu="Tesla K80", intra_link=PCIE3,
        shared_pcie=True, collective="ring",
        source=f"One node with 4 K80 GPUs (two boards) on PCIe only, as in Shi et al.'s K80"
               f" experiments; {SRC_PCIE}; h2d and GPU-to-GPU traffic share PCIe.")
    out["dgx1-v100"] = _c(
        name="dgx1-v100", nodes=1, gpus_per_node=8, gpu="Tesla V100 SXM2", intra_link=NVLINK2,
        collective="ring", launch_overhead_s=NCCL_LAUNCH_S,
        source=f"NVIDIA DGX-1 with 8 V100 (NVLink2 hybrid cube mesh); {SRC_NVL2}.")
    out["k80-4x4-10gbe"] = _c(
        name="k80-4x4-10gbe", nodes=4, gpus_per_node=4, gpu="Tesla K80", intra_link=PCIE3,
        inter_link=TENGBE, shared_pcie=True, collective="hierarchical",
        source=f"4 nodes x 4 K80 over 10GbE, hierarchical all-reduce as in Caffe-MPI (FACTS.md);"
               f" intra: {SRC_PCIE}; inter: {SRC_10G}.")
    out["k80-4x4-10gbe-ps"] = _c(
        name="k80-4x4-10gbe-ps", nodes=4, gpus_per_node=4, gpu="Tesla K80", intra_link=PCIE3,
        inter_link=TENGBE, shared_pcie=True, collective="ps",
        ps={"servers": 4, "colocated": True},
        source=f"k80-4x4-10gbe with a parameter server on every node (MXNet KVStore /"
               f" TensorFlow 1.x layout, FACTS.md); intra: {SRC_PCIE}; inter: {SRC_10G}.")
    out["k80-4x4-ib-fdr"] = _c(
        name="k80-4x4-ib-fdr", nodes=4, gpus_per_node=4, gpu="Tesla K80", intra_link=PCIE3,
        inter_link=IB_FDR, shared_pcie=True, collective="ring",
        source=f"4 nodes x 4 K80 over 56 Gb InfiniBand FDR; intra: {SRC_PCIE}; inter: {SRC_FDR}.")
    out["dgx1-v100-4n-ib-edr"] = _c(
        name="dgx1-v100-4n-ib-edr", nodes=4, gpus_per_node=8, gpu="Tesla V100 SXM2",
        intra_link=NVLINK2, inter_link=IB_EDR, nics_per_node=4, collective="ring",
        launch_overhead_s=NCCL_LAUNCH_S,
        source=f"4 DGX-1 (8 V100 each) with 4 x 100 Gb EDR InfiniBand NICs per node;"
               f" intra: {SRC_NVL2}; inter: {SRC_EDR}.")
    out["dgx-a100"] = _c(
        name="dgx-a100", nodes=1, gpus_per_node=8, gpu="A100 SXM4 80GB", intra_link=NVSWITCH_A100,
        collective="ring", launch_overhead_s=NCCL_LAUNCH_S,
        source=f"One NVIDIA DGX A100 (8 A100, NVSwitch); {SRC_NVS_A}.")
    a100_4n = {
        "name": "dgx-a100-4n", "nodes": 4, "gpus_per_node": 8, "gpu": "A100 SXM4 80GB",
        "intra_link": NVSWITCH_A100, "inter_link": IB_HDR, "nics_per_node": 8,
        "collective": "ring", "launch_overhead_s": NCCL_LAUNCH_S,
        "source": f"4 DGX A100 (8 A100, NVSwitch, 8 x 200 Gb HDR InfiniBand compute NICs per"
                  f" node); intra: {SRC_NVS_A}; inter: {SRC_HDR}.",
    }
    out["dgx-a100-4n"] = _c(**a100_4n)
    out["dgx-a100-4n-hierarchical"] = _c(**(a100_4n | {
        "name": "dgx-a100-4n-hierarchical", "collective": "hierarchical",
        "pipelined_hierarchical": True,
        "source": a100_4n["source"] + " Hierarchical all-reduce in three pipelined tasks"
                  " (intra reduce-scatter, inter all-reduce, intra all-gather).",
    }))
    out["dgx-a100-16n-tree"] = _c(**(a100_4n | {
        "name": "dgx-a100-16n-tree", "nodes": 16, "collective": "tree",
        "source": a100_4n["source"].replace("4 DGX", "16 DGX") + " NCCL double binary tree.",
    }))
    out["dgx-h100"] = _c(
        name="dgx-h100", nodes=1, gpus_per_node=8, gpu="H100 SXM5 80GB", intra_link=NVSWITCH_H100,
        collective="ring", launch_overhead_s=NCCL_LAUNCH_S,
        source=f"One NVIDIA DGX H100 (8 H100, NVSwitch); {SRC_NVS_H}.")
    h100_4n = {
        "name": "dgx-h100-4n", "nodes": 4, "gpus_per_node": 8, "gpu": "H100 SXM5 80GB",
        "intra_link": NVSWITCH_H100, "inter_link": IB_NDR, "nics_per_node": 8,
        "collective": "ring", "launch_overhead_s": NCCL_LAUNCH_S,
        "source": f"4 DGX H100 (8 H100, NVSwitch, 8 x 400 Gb NDR InfiniBand compute NICs per"
                  f" node); intra: {SRC_NVS_H}; inter: {SRC_NDR}.",
    }
    out["dgx-h100-4n"] = _c(**h100_4n)
    # ---------------------------------------------------------------- families
    out["10gbe-k80-family"] = ClusterFamily.model_validate({
        "name": "10gbe-k80-family",
        "source": f"N nodes x 1 K80 over 10GbE. Links: {SRC_10G}; {SRC_PCIE}. Fitted all-reduce"
                  " per worker count from Shi et al.'s MG-WFBP code (FACTS.md: 10GbE 8 workers"
                  " a = 5.23e-4 s, b = 8.57e-10 s/B; 16 workers 9.08e-4, 7.40e-10); other sizes"
                  " use the ring model.",
        "base": {"name": "10gbe-k80", "nodes": 8, "gpus_per_node": 1, "gpu": "Tesla K80",
                 "intra_link": PCIE3, "inter_link": TENGBE, "collective": "ring"},
        "fits": {
            "8": {"alpha_s": 5.23e-4, "beta_s_per_byte": 8.57e-10},
            "16": {"alpha_s": 9.08e-4, "beta_s_per_byte": 7.40e-10},
        },
    })
    out["ib-fdr-56g-family"] = ClusterFamily.model_validate({
        "name": "ib-fdr-56g-family",
        "source": f"N nodes x 1 GPU over 56 Gb InfiniBand FDR (GPU model not stated with the"
                  f" fits). Links: {SRC_FDR}; {SRC_PCIE}. Fitted all-reduce per worker count from"
                  " Shi et al.'s MG-WFBP code (FACTS.md: 2 workers a = 2.55e-6 s, b = 9.84e-11"
                  " s/B; 4: 4.20e-5, 2.06e-10; 8: 9.75e-5, 3.06e-10; 16: 2.36e-4, 4.06e-10).",
        "base": {"name": "ib-fdr-56g", "nodes": 4, "gpus_per_node": 1, "intra_link": PCIE3,
                 "inter_link": IB_FDR, "collective": "ring"},
        "fits": {
            "2": {"alpha_s": 2.55e-6, "beta_s_per_byte": 9.84e-11},
            "4": {"alpha_s": 4.20e-5, "beta_s_per_byte": 2.06e-10},
            "8": {"alpha_s": 9.75e-5, "beta_s_per_byte": 3.06e-10},
            "16": {"alpha_s": 2.36e-4, "beta_s_per_byte": 4.06e-10},
        },
    })
    out["dgx-a100-family"] = ClusterFamily.model_validate({
        "name": "dgx-a100-family",
        "source": f"N DGX A100 nodes (8 A100, NVSwitch, 8 x 200 Gb HDR NICs); intra:"
                  f" {SRC_NVS_A}; inter: {SRC_HDR}; ring model at every size (no fits).",
        "base": a100_4n | {"name": "dgx-a100", "source": ""},
    })
    out["dgx-h100-family"] = ClusterFamily.model_validate({
        "name": "dgx-h100-family",
        "source": f"N DGX H100 nodes (8 H100, NVSwitch, 8 x 400 Gb NDR NICs); intra:"
                  f" {SRC_NVS_H}; inter: {SRC_NDR}; hierarchical all-reduce (one task) at every"
                  f" size (no fits).",
        "base": h100_4n | {"name": "dgx-h100", "source": "", "collective": "hierarchical"},
    })
    return out


# ============================================================================ main
#: Cluster fields added after the shipped clusters were first written: left out of a file while
#: they hold their default (which keeps that file's meaning), as the shipped files have them.
LATER_CLUSTER_FIELDS = ("overlap_slowdown", "comm_slowdown", "collective_overhead_s",
                        "launch_overhead_s", "hook_overhead_s", "bucket_compute_s",
                        "comm_concurrency")


def _dump(model: Trace | Cluster | ClusterFamily) -> dict[str, Any]:
    data = model.model_dump(mode="json", exclude_none=True)
    if isinstance(model, Cluster | ClusterFamily):
        fields = data if isinstance(model, Cluster) else data["base"]
        for key in LATER_CLUSTER_FIELDS:
            if key in fields and fields[key] == Cluster.model_fields[key].default:
                del fields[key]
    return data


def main(argv: list[str] | None = None) -> int:
    """Write the instances; returns a process exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["estimated", "bcaffe", "synthetic", "clusters"],
                    action="append", help="generate only these parts (repeatable)")
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                    help="the shared reference folder (B-Caffe logs)")
    ap.add_argument("--trace", action="append", help="only these estimated traces (names)")
    args = ap.parse_args(argv)
    parts = set(args.only or ["estimated", "bcaffe", "synthetic", "clusters"])
    written: list[str] = []

    def write(folder: Path, name: str, model: Trace | Cluster | ClusterFamily) -> None:
        write_json_atomic(folder / f"{name}.json", _dump(model))
        written.append(f"{folder.name}/{name}.json")

    if "clusters" in parts:
        for name, cl in clusters().items():
            write(CLUSTERS, name, cl)
    have_ref = (args.reference / "mgwfbp-traces").is_dir()
    if not have_ref and parts & {"bcaffe", "clusters"}:
        sys.stderr.write(f"skipping B-Caffe traces and OSU clusters: no {args.reference}\n")
    if have_ref and "clusters" in parts:
        for name, cl in osu_clusters(args.reference).items():
            write(CLUSTERS, name, cl)
    if have_ref and "bcaffe" in parts:
        for name, tr in bcaffe_traces(args.reference).items():
            write(TRACES, name, tr)
    if "synthetic" in parts:
        write(TRACES, "synthetic-5000", synthetic_trace())
    if "estimated" in parts:
        for ts in ESTIMATED:
            if args.trace and ts.name not in args.trace:
                continue
            write(TRACES, ts.name, estimate_trace(ts))
            sys.stderr.write(f"  {ts.name}\n")
    sys.stdout.write(f"wrote {len(written)} files:\n" + "".join(f"  {w}\n" for w in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
