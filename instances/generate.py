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
Every estimated model is built on PyTorch's ``meta`` device (shapes only, no memory, no weights
downloaded): AlexNet, VGG-16 and ResNet-50/152 as plain ``torch.nn`` modules written below after
torchvision's layouts and parameter names; BERT, GPT-2 and Llama from ``transformers`` configs. One
forward pass runs under a dispatch mode that sees every ATen operator with its tensors:

- a *layer* is a module that owns parameters (conv, linear, norm, embedding), in the order its
  forward first runs; its gradient tensors are its own parameters (a tied parameter is listed
  again in every later layer that owns it, and belongs to the first);
- the work of parameter-free operators (activations, pooling, attention core, residual adds,
  loss) is charged to the most recent layer (so its backward, which precedes that layer's weight
  gradients, delays them);
- each operator costs ``max(FLOPs / F, bytes / B, 2 us)``, with FLOPs from
  ``torch.utils.flop_counter``'s formulas (matmuls, convolutions, attention; other operators one
  FLOP per output element), bytes = the sizes of its input and output tensors (views cost nothing),
  F and B the achieved FLOP/s and memory bandwidth of the GPU profile below, 2 us an assumed
  minimal kernel duration;
- backward = 2 x forward per operator (backward computes the input and the weight gradients,
  about twice the forward FLOPs and memory traffic).

Attention runs as a fused flash-attention kernel on A100 and H100 (PyTorch SDPA) and as separate
matmul/softmax kernels on V100 (eager). Iteration-level costs: h2d = batch bytes / PCIe
bandwidth, io = per-sample loading cost / loader workers per GPU, update = optimizer bytes per
parameter / memory bandwidth. Every figure is written into each trace's ``source``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from schedopt.files import write_json_atomic  # noqa: E402
from schedopt.measure.bcaffe import load_bcaffe_log  # noqa: E402
from schedopt.measure.comm_tables import parse_comm_file  # noqa: E402
from schedopt.measure.commfit import cluster_from_fit, fit_alpha_beta  # noqa: E402
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


def sig(x: float) -> float:
    """Round to 6 significant digits (keeps the JSON short and stable)."""
    return float(f"{x:.6g}")


# ============================================================================ GPU profiles
@dataclass(frozen=True)
class GPU:
    """Achieved throughput of one GPU generation (all figures are stated in each trace)."""

    name: str
    flops: dict[str, float]  # achieved FLOP/s per compute precision
    flops_basis: dict[str, str]
    memory_Bps: float
    memory_basis: str
    pcie_Bps: float
    pcie_basis: str
    loader_workers: int
    loader_basis: str
    attention: str  # "eager" or "flash"


GPUS: dict[str, GPU] = {
    "k80": GPU(
        name="Tesla K80 (one GK210)",
        flops={"fp32": 1.9e12},
        flops_basis={"fp32": "calibrated on B-Caffe GoogleNet: backward 200 ms at batch 64 on K80"
                     " (tmp2comm.log) for 64 x 2 x 3.0 GFLOP (1.5 G multiply-adds per image,"
                     " Szegedy et al. 2015) = 1.9 TFLOP/s, 44% of the 4.37 TFLOP/s boost peak of"
                     " one GK210"},
        memory_Bps=170e9,
        memory_basis="assumed 70% of one GK210's 240 GB/s",
        pcie_Bps=10e9,
        pcie_basis="PCIe Gen3 x16, reference/FACTS.md link table (10-12 GB/s)",
        loader_workers=6,
        loader_basis="assumed 24-core host shared by 4 GPUs",
        attention="eager",
    ),
    "v100": GPU(
        name="Tesla V100 SXM2",
        flops={"fp32": 11.0e12, "fp16": 39e12},
        flops_basis={
            "fp32": "assumed 70% of the 15.7 TFLOP/s fp32 peak",
            "fp16": "39 TFLOP/s on one V100 with fp16 tensor cores, 30% of the 125 TFLOP/s peak,"
                    " as reported by Shoeybi et al. 2019 (Megatron-LM)",
        },
        memory_Bps=750e9,
        memory_basis="assumed 83% of 900 GB/s HBM2",
        pcie_Bps=10e9,
        pcie_basis="PCIe Gen3 x16, reference/FACTS.md link table (10-12 GB/s)",
        loader_workers=5,
        loader_basis="DGX-1: 40 CPU cores for 8 GPUs",
        attention="eager",
    ),
    "a100": GPU(
        name="A100 SXM4 80GB",
        flops={"bf16": 140e12},
        flops_basis={"bf16": "assumed 45% of the 312 TFLOP/s dense bf16 peak (Narayanan et al."
                     " SC'21 report 52% at scale for large GPT models; smaller models reach"
                     " less)"},
        memory_Bps=1600e9,
        memory_basis="assumed 78% of 2,039 GB/s HBM2e",
        pcie_Bps=20e9,
        pcie_basis="PCIe Gen4 x16, assumed twice the Gen3 figure of reference/FACTS.md",
        loader_workers=16,
        loader_basis="DGX A100: 128 CPU cores for 8 GPUs",
        attention="flash",
    ),
    "h100": GPU(
        name="H100 SXM5 80GB",
        flops={"bf16": 400e12},
        flops_basis={"bf16": "assumed 40% of the 989 TFLOP/s dense bf16 peak"},
        memory_Bps=2700e9,
        memory_basis="assumed 81% of 3,350 GB/s HBM3",
        pcie_Bps=40e9,
        pcie_basis="PCIe Gen5 x16, assumed four times the Gen3 figure of reference/FACTS.md",
        loader_workers=14,
        loader_basis="DGX H100: 112 CPU cores for 8 GPUs",
        attention="flash",
    ),
}

#: The H100's assumptions with the H200's memory (the same processor, HBM3e at 4,800 GB/s). No
#: shipped trace uses it: ``benchmarks/gpu_profiles.py --compare`` estimates with it.
GPUS["h200"] = replace(
    GPUS["h100"], name="H200 SXM 141GB", memory_Bps=3900e9,
    memory_basis="assumed 81% of 4,800 GB/s HBM3e",
    flops_basis={"bf16": "assumed 40% of the 989 TFLOP/s dense bf16 peak (the H100's)"},
    loader_basis="assumed as DGX H100: 112 CPU cores for 8 GPUs")

MIN_KERNEL_S = 2e-6
#: Assumed JPEG decode and random-resized crop of one ImageNet image on one CPU core.
IMAGE_DECODE_S = 2.5e-3
#: Assumed cost of slicing and collating one pre-tokenized sample.
TEXT_SAMPLE_S = 20e-6


# ============================================================================ CNN definitions
def _cnn_modules() -> dict[str, Callable[[], Any]]:
    """Builders of the torchvision-layout CNNs (imported lazily: torch is optional)."""
    import torch
    from torch import nn

    class AlexNet(nn.Module):
        """torchvision's AlexNet (one-GPU variant): 61,100,840 parameters."""

        def __init__(self, num_classes: int = 1000) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2),
                nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
                nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            )
            self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
            self.classifier = nn.Sequential(
                nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
                nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
                nn.Linear(4096, num_classes),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    class VGG16(nn.Module):
        """torchvision's VGG-16 (configuration D, no batch norm): 138,357,544 parameters."""

        def __init__(self, num_classes: int = 1000) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            cin = 3
            for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                      512, 512, 512, "M"):
                if v == "M":
                    layers.append(nn.MaxPool2d(2, 2))
                else:
                    layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                    cin = int(v)
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
            self.classifier = nn.Sequential(
                nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(0.5),
                nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5),
                nn.Linear(4096, num_classes),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    class Bottleneck(nn.Module):
        """torchvision's Bottleneck (ResNet v1.5: the stride sits on the 3x3 convolution)."""

        expansion = 4

        def __init__(self, cin: int, planes: int, stride: int = 1,
                     downsample: nn.Module | None = None) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            identity = self.downsample(x) if self.downsample is not None else x
            return self.relu(out + identity)

    class ResNet(nn.Module):
        """torchvision's ResNet with Bottleneck blocks (ResNet-50: [3, 4, 6, 3])."""

        def __init__(self, depths: list[int], num_classes: int = 1000) -> None:
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._make(64, depths[0], 1)
            self.layer2 = self._make(128, depths[1], 2)
            self.layer3 = self._make(256, depths[2], 2)
            self.layer4 = self._make(512, depths[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(2048, num_classes)

        def _make(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
            down = None
            if stride != 1 or self.inplanes != planes * 4:
                down = nn.Sequential(
                    nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes * 4),
                )
            layers = [Bottleneck(self.inplanes, planes, stride, down)]
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return {
        "alexnet": AlexNet,
        "vgg16": VGG16,
        "resnet50": lambda: ResNet([3, 4, 6, 3]),
        "resnet152": lambda: ResNet([3, 8, 36, 3]),
    }


# ============================================================================ model specs
@dataclass(frozen=True)
class ModelSpec:
    """How to build one model and its inputs."""

    key: str
    description: str
    kind: str  # "image" | "bert" | "gpt2" | "llama"
    config: dict[str, Any]


MODELS: dict[str, ModelSpec] = {
    "alexnet": ModelSpec("alexnet", "AlexNet (torchvision layout), 224x224 ImageNet", "image", {}),
    "vgg16": ModelSpec("vgg16", "VGG-16 (torchvision layout), 224x224 ImageNet", "image", {}),
    "resnet50": ModelSpec("resnet50", "ResNet-50 v1.5 (torchvision layout), 224x224 ImageNet",
                          "image", {}),
    "resnet152": ModelSpec("resnet152", "ResNet-152 v1.5 (torchvision layout), 224x224 ImageNet",
                           "image", {}),
    "bert-base": ModelSpec("bert-base", "BERT-base encoder with pooler (transformers BertModel,"
                           " BertConfig())", "bert", {}),
    "bert-large": ModelSpec("bert-large", "BERT-large encoder with pooler (transformers BertModel,"
                            " hidden 1024, 24 layers, 16 heads, intermediate 4096)", "bert",
                            {"hidden_size": 1024, "num_hidden_layers": 24,
                             "num_attention_heads": 16, "intermediate_size": 4096}),
    "gpt2-124m": ModelSpec("gpt2-124m", "GPT-2 124M with LM head and loss (transformers"
                           " GPT2LMHeadModel, GPT2Config(); lm_head tied to wte)", "gpt2", {}),
    "gpt2-1.5b": ModelSpec("gpt2-1.5b", "GPT-2 1.5B with LM head and loss (transformers"
                           " GPT2LMHeadModel, GPT2Config(n_embd=1600, n_layer=48, n_head=25);"
                           " lm_head tied to wte)", "gpt2",
                           {"n_embd": 1600, "n_layer": 48, "n_head": 25}),
    "llama-7b": ModelSpec("llama-7b", "Llama-style 7B with LM head and loss (transformers"
                          " LlamaForCausalLM, LlamaConfig(hidden_size=4096,"
                          " intermediate_size=11008, num_hidden_layers=32,"
                          " num_attention_heads=32, num_key_value_heads=32, vocab_size=32000):"
                          " the Llama-2-7B shape; lm_head not tied)", "llama",
                          {"hidden_size": 4096, "intermediate_size": 11008,
                           "num_hidden_layers": 32, "num_attention_heads": 32,
                           "num_key_value_heads": 32, "vocab_size": 32000}),
    "llama-70b": ModelSpec("llama-70b", "Llama-style 70B with LM head and loss (transformers"
                           " LlamaForCausalLM, LlamaConfig(hidden_size=8192,"
                           " intermediate_size=28672, num_hidden_layers=80,"
                           " num_attention_heads=64, num_key_value_heads=8, vocab_size=32000):"
                           " the Llama-2-70B shape with grouped-query attention; lm_head not"
                           " tied)", "llama",
                           {"hidden_size": 8192, "intermediate_size": 28672,
                            "num_hidden_layers": 80, "num_attention_heads": 64,
                            "num_key_value_heads": 8, "vocab_size": 32000}),
}


@dataclass(frozen=True)
class TraceSpec:
    """One estimated trace: model, GPU, compute precision, per-GPU batch, sequence length."""

    name: str
    model: str
    gpu: str
    precision: str  # compute precision: fp32 | fp16 | bf16
    batch: int
    seq: int = 0
    grad_dtype: str = "float32"


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


# ============================================================================ profiling
class _Costs:
    """Per-layer forward cost accumulated by the dispatch mode."""

    def __init__(self, flops_per_s: float, bytes_per_s: float) -> None:
        self.F = flops_per_s
        self.B = bytes_per_s
        self.current: str | None = None
        self.pending = 0.0  # work before the first layer
        self.time: dict[str, float] = {}
        self.order: list[str] = []
        self.ops = 0

    def enter(self, name: str) -> None:
        if name not in self.time:
            self.time[name] = 0.0
            self.order.append(name)
            if self.pending:
                self.time[name] += self.pending
                self.pending = 0.0
        self.current = name

    def add(self, seconds: float) -> None:
        self.ops += 1
        if self.current is None:
            self.pending += seconds
        else:
            self.time[self.current] += seconds


def _dispatch_mode(costs: _Costs) -> Any:
    """A TorchDispatchMode that charges every operator to the current layer."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    free = {"_unsafe_view", "empty", "empty_like", "empty_strided", "detach", "alias",
            "lift_fresh", "scalar_tensor", "new_empty"}

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if packet.__name__ in free or any(
                r.alias_info is not None for r in func._schema.returns
            ):
                return out
            ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if packet is torch.ops.aten.embedding:
                nbytes = sum(t.nbytes for t in outs) + ins[1].nbytes  # rows read, not the table
            else:
                nbytes = sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)
            if packet in flop_registry:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            else:
                flops = float(sum(t.numel() for t in outs))
            costs.add(max(flops / costs.F, nbytes / costs.B, MIN_KERNEL_S))
            return out

    return Mode()


@contextlib.contextmanager
def _flash_attention(causal: bool) -> Iterator[None]:
    """Route ``F.scaled_dot_product_attention`` to the fused flash-attention operator (meta).

    The attention mask the model builds is dropped: ``causal`` says whether it was causal.
    """
    import torch

    original = torch.nn.functional.scaled_dot_product_attention

    def flash(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
              is_causal: bool = False, scale: float | None = None, **_: Any) -> Any:
        return torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, causal or bool(is_causal), False, scale=scale
        )[0]

    torch.nn.functional.scaled_dot_product_attention = flash
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original



def _build(spec: ModelSpec, gpu: GPU, batch: int, seq: int, dtype: Any) -> tuple[Any, Callable]:
    """The model on the meta device and a closure running one forward pass (with loss)."""
    import torch

    if spec.kind == "image":
        with torch.device("meta"):
            model = _cnn_modules()[spec.key]().to(dtype)
            x = torch.empty(batch, 3, 224, 224, dtype=dtype)
            y = torch.zeros(batch, dtype=torch.long)

        def run() -> None:
            torch.nn.functional.cross_entropy(model(x), y)

        return model, run
    attn = "sdpa" if gpu.attention == "flash" else "eager"
    if spec.kind == "bert":
        from transformers import BertConfig, BertModel

        cfg = BertConfig(**spec.config, attn_implementation=attn)
        with torch.device("meta"):
            model = BertModel(cfg).to(dtype)
            ids = torch.zeros(batch, seq, dtype=torch.long)

        def run() -> None:
            model(input_ids=ids, token_type_ids=torch.zeros_like(ids))

        return model, run
    import transformers

    # causal language models with an LM head: (config class, model class) by kind
    config_cls, model_cls = {"gpt2": ("GPT2Config", "GPT2LMHeadModel"),
                             "llama": ("LlamaConfig", "LlamaForCausalLM")}[spec.kind]
    cfg = getattr(transformers, config_cls)(**spec.config, attn_implementation=attn)
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(cfg).to(dtype)
        ids = torch.zeros(batch, seq, dtype=torch.long)

    def run() -> None:
        model(input_ids=ids, labels=ids)

    return model, run


def estimate_trace(ts: TraceSpec) -> Trace:
    """Build, profile and describe one estimated trace."""
    import torch

    spec, gpu = MODELS[ts.model], GPUS[ts.gpu]
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[ts.precision]
    model, run = _build(spec, gpu, ts.batch, ts.seq, dtype)
    model.train()
    costs = _Costs(gpu.flops[ts.precision], gpu.memory_Bps)
    name_of = {}
    for pname, p in model.named_parameters():  # de-duplicates tied parameters: first name wins
        name_of.setdefault(id(p), pname)
    owners = []
    for mname, module in model.named_modules(remove_duplicate=False):
        own = list(module.named_parameters(recurse=False))
        if own:
            owners.append((mname, module, own))
            module.register_forward_pre_hook(lambda _m, _a, n=mname: costs.enter(n))
    ctx = (_flash_attention(causal=spec.kind in ("gpt2", "llama")) if gpu.attention == "flash"
           else contextlib.nullcontext())
    with ctx, _dispatch_mode(costs):
        run()
    by_name = {m: own for m, _, own in owners}
    missing = [m for m, _, _ in owners if m not in costs.time]
    if missing:
        raise RuntimeError(f"{ts.name}: layers never run: {missing[:3]}")
    itemsize = {"float32": 4, "float16": 2, "bfloat16": 2}[ts.grad_dtype]
    layers = []
    for lname in costs.order:
        fwd = costs.time[lname]
        layers.append({
            "name": lname,
            "forward_s": sig(fwd),
            "backward_s": sig(2 * fwd),
            "tensors": [
                {"name": name_of[id(p)], "bytes": p.numel() * itemsize, "dtype": ts.grad_dtype}
                for _, p in by_name[lname]
            ],
        })
    params = {name_of[id(p)]: p.numel() for p in model.parameters()}
    n_params, n_tensors = sum(params.values()), len(params)
    want, want_tensors = EXPECTED_PARAMS[ts.model]
    if n_params != want or (want_tensors is not None and n_tensors != want_tensors):
        raise RuntimeError(f"{ts.name}: {n_params} params in {n_tensors} tensors, want {want}")
    return Trace.model_validate({
        "name": ts.name,
        "batch_size": ts.batch,
        **_iteration_costs(ts, spec, gpu, n_params),
        "layers": layers,
        "source": _describe(ts, spec, gpu, n_params, n_tensors, costs.ops),
    })


def _iteration_costs(ts: TraceSpec, spec: ModelSpec, gpu: GPU, n_params: int) -> dict[str, float]:
    if spec.kind == "image":
        batch_bytes = ts.batch * 3 * 224 * 224 * 4
        io = ts.batch * IMAGE_DECODE_S / gpu.loader_workers
        update_bpp = 20  # SGD momentum, float32 master weights
    else:
        arrays = 4 if spec.kind == "bert" else 2
        batch_bytes = ts.batch * ts.seq * 8 * arrays
        io = ts.batch * TEXT_SAMPLE_S
        update_bpp = 28  # fused AdamW, fp32 master weights and moments, half-precision grads
    return {
        "io_s": sig(io),
        "h2d_s": sig(batch_bytes / gpu.pcie_Bps),
        "update_s": sig(update_bpp * n_params / gpu.memory_Bps),
    }


def _describe(ts: TraceSpec, spec: ModelSpec, gpu: GPU, n_params: int, n_tensors: int,
              n_ops: int) -> str:
    costs = _iteration_costs(ts, spec, gpu, n_params)
    seq = f", sequence {ts.seq}" if ts.seq else ""
    if spec.kind == "image":
        data = (f"h2d = {ts.batch} x 602,112 B (float32 3x224x224) / {gpu.pcie_Bps / 1e9:g} GB/s"
                f" ({gpu.pcie_basis}) = {costs['h2d_s'] * 1e3:.3g} ms; io = {ts.batch} x"
                f" {IMAGE_DECODE_S * 1e3:g} ms (assumed JPEG decode and crop per image and core)"
                f" / {gpu.loader_workers} loader workers ({gpu.loader_basis}) ="
                f" {costs['io_s'] * 1e3:.3g} ms; update = 20 B/param (SGD momentum, float32:"
                f" read w, g, m, write w, m)")
    else:
        arrays = 4 if spec.kind == "bert" else 2
        data = (f"h2d = {ts.batch} x {ts.seq} x 8 B x {arrays} int64 arrays / "
                f"{gpu.pcie_Bps / 1e9:g} GB/s ({gpu.pcie_basis}) = {costs['h2d_s'] * 1e6:.3g} us;"
                f" io = {ts.batch} x {TEXT_SAMPLE_S * 1e6:g} us (assumed per pre-tokenized"
                f" sample) = {costs['io_s'] * 1e3:.3g} ms; update = 28 B/param (fused AdamW with"
                f" fp32 master weights and moments, half-precision gradients and weights)")
    grads = ("float32 gradients" if ts.grad_dtype == "float32"
             else f"{ts.grad_dtype} gradients, bytes = 2 x numel")
    compute = "mixed precision (bf16 autocast)" if (
        spec.kind == "image" and ts.precision == "bf16") else ts.precision
    attention = "" if spec.kind == "image" else (
        "; attention: fused flash kernel (SDPA)" if gpu.attention == "flash"
        else "; attention: eager matmul + softmax kernels")
    return (
        f"ESTIMATE (not measured). {spec.description}; {n_params:,} parameters in {n_tensors}"
        f" tensors (exact shapes), {grads}; per-GPU batch {ts.batch}{seq}; {gpu.name},"
        f" {compute} compute. Per-operator roofline over one meta-device forward pass"
        f" ({n_ops} operators; instances/generate.py):"
        f" max(FLOPs / {gpu.flops[ts.precision] / 1e12:g} TFLOP/s,"
        f" bytes / {gpu.memory_Bps / 1e9:g} GB/s, 2 us); FLOP/s basis:"
        f" {gpu.flops_basis[ts.precision]}; memory basis: {gpu.memory_basis}{attention};"
        f" parameter-free operators charged to the"
        f" preceding layer; backward = 2 x forward. {data} / {gpu.memory_Bps / 1e9:g} GB/s ="
        f" {costs['update_s'] * 1e3:.3g} ms."
    )


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
        collective="ring",
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
        source=f"4 DGX-1 (8 V100 each) with 4 x 100 Gb EDR InfiniBand NICs per node;"
               f" intra: {SRC_NVL2}; inter: {SRC_EDR}.")
    out["dgx-a100"] = _c(
        name="dgx-a100", nodes=1, gpus_per_node=8, gpu="A100 SXM4 80GB", intra_link=NVSWITCH_A100,
        collective="ring", source=f"One NVIDIA DGX A100 (8 A100, NVSwitch); {SRC_NVS_A}.")
    a100_4n = {
        "name": "dgx-a100-4n", "nodes": 4, "gpus_per_node": 8, "gpu": "A100 SXM4 80GB",
        "intra_link": NVSWITCH_A100, "inter_link": IB_HDR, "nics_per_node": 8,
        "collective": "ring",
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
        collective="ring", source=f"One NVIDIA DGX H100 (8 H100, NVSwitch); {SRC_NVS_H}.")
    h100_4n = {
        "name": "dgx-h100-4n", "nodes": 4, "gpus_per_node": 8, "gpu": "H100 SXM5 80GB",
        "intra_link": NVSWITCH_H100, "inter_link": IB_NDR, "nics_per_node": 8,
        "collective": "ring",
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
def _dump(model: Trace | Cluster | ClusterFamily) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)


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
