"""Compute estimates of one training iteration, layer by layer, without a GPU.

A model (a shipped name, a Hugging Face configuration, a torchvision name) is built on PyTorch's
``meta`` device (shapes only: no memory, no weights, nothing downloaded) and one forward pass runs
under a dispatch mode that sees every ATen operator with its tensors:

- a *layer* is a module that owns parameters, in the order its forward first runs; its gradient
  tensors are its own parameters (a tied parameter belongs to the first layer that owns it);
- the work of parameter-free operators (activations, attention core, residual adds, loss) is
  charged to the most recent layer;
- every operator is priced by a cost model of the GPU profile (:mod:`schedopt.measure.gpus`):

  ``"operator"`` (default)
      matrix products and convolutions (as implicit GEMMs) at ``peak x best x tile x wave x
      k/(k + k_half) x alignment`` efficiency, flash attention at the FlashAttention-2 throughput
      of its sequence length and head size, every other operator at the achievable memory
      bandwidth, each at least the per-kernel floor; the backward of a product is its two
      gradient products (only for inputs that need a gradient), that of attention 2.5 x its
      forward FLOPs, that of a memory-bound operator 1.5 x its traffic, except the operators
      whose kernels sweep their tensors more often (batch and layer norms, residual additions,
      max pooling: :func:`_memory_passes`); at fp32, a 3 x 3 stride-1 convolution costs the
      cheaper of the implicit GEMM and cuDNN's Winograd (:meth:`OperatorModel.winograd_s`);
  ``"roofline"``
      ``max(FLOPs / F, bytes / B, 2 us)`` per operator with one achieved F and B per GPU and
      backward = 2 x forward (the method of the shipped estimated traces, kept so that they can
      be regenerated unchanged).

``recompute`` adds each layer's forward to its backward (full activation recomputation);
``accumulate=K`` prices K micro-batches per iteration: the first K - 1 forward and backward
passes run before the last micro-batch (whose backward overlaps the gradient communication, as
DDP's ``no_sync``) and are charged to the first layer's forward; with the operator method every
micro-batch after the first also adds its gradients into the accumulated ones, torch's in-place
``AccumulateGrad`` (docs/estimate.md).

``attention`` picks how the attention core of a text model is priced: ``"flash"`` the fused
flash kernel (PyTorch SDPA routed to ``_scaled_dot_product_flash_attention``; bf16/fp16 on a
profile with flash figures only), ``"eager"`` the matmul + softmax + dropout + matmul kernels of
Hugging Face's ``attn_implementation="eager"`` (an ``s x s`` score tensor per head), ``"auto"``
(default) the fused kernel where the profile has it at the precision, eager otherwise (the
roofline method: the profile's ``attention``), as before the choice existed.

``autocast`` (bf16 or fp16 only) estimates ``torch.autocast`` training: float32 parameters and
gradients; inside the dispatch mode the operators of torch's CUDA lower-precision list
(:data:`AUTOCAST_LOWER`) cast their float32 inputs to 16 bits and those of its float32 list
(:data:`AUTOCAST_FP32`) cast their 16-bit inputs to float32, every cast charged as a
memory-bound kernel (its backward a cast of the gradient); other operators run in their inputs'
dtype (the widest when mixed), as PyTorch's type promotion gives.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.files import safe_file_stem
from schedopt.measure.cnns import cnn_builders
from schedopt.measure.gpus import GPU, GPUS, PRECISIONS, get_gpu
from schedopt.measure.operators import FLASH_PRECISIONS, OperatorModel, has_flash, operator_model
from schedopt.model.limits import MAX_BATCH
from schedopt.model.trace import Trace

__all__ = [
    "ATTENTIONS",
    "AUTOCAST_FP32",
    "AUTOCAST_LOWER",
    "MEMORY_FORMATS",
    "METHODS",
    "MODELS",
    "ModelSpec",
    "OperatorTotal",
    "TraceSpec",
    "attention_path",
    "depthwise_s",
    "estimate",
    "estimate_trace",
    "load_model_spec",
    "operator_breakdown",
]

METHODS = ("operator", "roofline")
#: Attention paths ``schedopt estimate --attention`` takes (docs/estimate.md).
ATTENTIONS = ("auto", "flash", "eager")
#: Activation memory formats of image models: ``channels_last`` (NHWC, what tensor-core
#: convolution kernels read) and ``nchw`` (torch's default layout, transposed by cuDNN around its
#: tensor-core kernels: :class:`OperatorModel`, ``nchw_transposes``)
MEMORY_FORMATS = ("channels_last", "nchw")
#: Output heads of BERT models: ``none`` (the encoder with its pooler, transformers ``BertModel``)
#: or ``pretraining`` (transformers ``BertForPreTraining``: the masked-LM head, its decoder tied
#: to the word embeddings, and the next-sentence head, with both losses).
HEADS = ("none", "pretraining")
#: Model kinds without attention.
IMAGE_KINDS = ("image", "torchvision")
#: Where the autocast operator lists come from.
AUTOCAST_SOURCE = (
    "torch.autocast CUDA rules: AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,"
    " AT_FORALL_FP32_SET_OPT_DTYPE and norm (fp32_append_dtype) of pytorch/pytorch"
    " aten/src/ATen/autocast_mode.h (registered for CUDA in autocast_mode.cpp; torch 2.4 and"
    " later, commit d70fe7f3), checked against the AutocastCUDA kernels of torch 2.13.0"
)
# The lists below are those of AUTOCAST_SOURCE, plus the ATen operators that the dispatch mode
# sees in their place (a composite such as ``linear``, ``softmax`` or ``cross_entropy`` reaches
# it as ``addmm``/``mm``, ``_softmax``, ``_log_softmax`` + ``nll_loss_forward``).
#: ATen operators that autocast runs in bf16/fp16 (torch's ``lower_precision_fp`` list).
AUTOCAST_LOWER = frozenset({
    # AT_FORALL_LOWER_PRECISION_FP and the CUDA extras (cudnn_convolution[_transpose])
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm",
    "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
    "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    "cudnn_convolution", "cudnn_convolution_transpose",
    # the kernels those reach below the autocast key
    "_prelu_kernel", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
})
#: ATen operators that autocast runs in float32 (``fp32``, ``fp32_set_opt_dtype`` and
#: ``fp32_append_dtype`` lists).
AUTOCAST_FP32 = frozenset({
    # AT_FORALL_FP32
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm",
    "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa", "rms_norm",
    # AT_FORALL_FP32_SET_OPT_DTYPE and norm
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "sum", "norm",
    # the kernels those reach below the autocast key
    "_softmax", "_log_softmax", "nll_loss_forward", "nll_loss2d_forward", "native_group_norm",
    "_pdist_forward", "_cdist_forward", "multilabel_margin_loss_forward", "_fused_rms_norm",
})
#: Operators that autocast leaves alone when they are given an explicit ``dtype``.
_SET_OPT_DTYPE = frozenset({"prod", "softmax", "log_softmax", "cumprod", "cumsum",
                            "linalg_vector_norm", "linalg_matrix_norm", "sum", "norm"})
#: Roofline method's smallest operator duration (seconds).
MIN_KERNEL_S = 2e-6
#: Assumed JPEG decode and random-resized crop of one ImageNet image on one CPU core.
IMAGE_DECODE_S = 2.5e-3
#: Assumed cost of slicing and collating one pre-tokenized sample.
TEXT_SAMPLE_S = 20e-6
#: Largest model dimension (hidden size, vocabulary, layers ...) a configuration may give.
MAX_DIM = 2**22
#: Largest number of transformer layers.
MAX_LAYERS = 1024
#: Largest sequence length.
MAX_SEQ = 2**20
#: Largest number of tokens (or images x 1000) of one micro-batch.
MAX_TOKENS = 2**26
#: Image models' default input side (pixels) and the range ``--image-size`` accepts.
IMAGE_SIDE = 224
IMAGE_SIDES = (32, 4096)
#: Largest number of parameters.
MAX_PARAMS = 10**13


def sig(x: float) -> float:
    """Round to 6 significant digits (keeps the JSON short and stable)."""
    return float(f"{x:.6g}")


# ============================================================================ attention path
def attention_path(attention: str, gpu: GPU | str, precision: str, method: str = "operator",
                   text: bool = True) -> str:
    """The attention path an estimate prices: ``"flash"`` or ``"eager"``.

    Parameters
    ----------
    attention
        ``auto``, ``flash`` or ``eager`` (:data:`ATTENTIONS`).
    gpu
        A profile or its name.
    precision
        The compute precision.
    method
        ``operator`` or ``roofline``: ``auto`` is the fused kernel where the profile has it at
        ``precision`` (operator) or the profile's ``attention`` (roofline, as the shipped
        traces were made).
    text
        Whether the model has attention (``False`` for image models, which take ``auto`` only).

    Returns
    -------
    str
        ``flash`` or ``eager``.

    Raises
    ------
    SchedoptError
        For an unknown value, a choice for an image model, or ``flash`` where the profile has no
        fused kernel at ``precision``.
    """
    if attention not in ATTENTIONS:
        raise SchedoptError(f"unknown attention; known: {', '.join(ATTENTIONS)}", "--attention",
                            attention)
    if not text and attention != "auto":
        raise SchedoptError("applies to text models only", "--attention", attention)
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if attention == "auto":
        if method == "roofline":
            return g.attention
        return "flash" if has_flash(g, precision) else "eager"
    if attention == "flash" and not has_flash(g, precision):
        raise SchedoptError(f"no fused flash-attention kernel on {g.name} at {precision} (the"
                            f" profile's attention is {g.attention}; flash needs"
                            f" {' or '.join(FLASH_PRECISIONS)} on a profile with flash figures);"
                            " use eager or auto", "--attention", attention)
    return attention


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
    **{f"{key}{bn}": ModelSpec(f"{key}{bn}", f"VGG-{key[3:]}{' with batch norm' if bn else ''}"
                                " (torchvision layout), 224x224 ImageNet", "image", {})
       for key in ("vgg11", "vgg13", "vgg16", "vgg19") for bn in ("", "_bn")},
    **{key: ModelSpec(key, f"{title} (torchvision layout), 224x224 ImageNet", "image", {})
       for key, title in (("resnet18", "ResNet-18"), ("resnet34", "ResNet-34"),
                          ("resnet50", "ResNet-50 v1.5"), ("resnet101", "ResNet-101 v1.5"),
                          ("resnet152", "ResNet-152 v1.5"),
                          ("resnext50_32x4d", "ResNeXt-50 32x4d"),
                          ("resnext101_32x8d", "ResNeXt-101 32x8d"),
                          ("wide_resnet50_2", "Wide ResNet-50-2"),
                          ("wide_resnet101_2", "Wide ResNet-101-2"),
                          ("mobilenet_v2", "MobileNetV2"),
                          ("mobilenet_v3_large", "MobileNetV3-Large"),
                          ("mobilenet_v3_small", "MobileNetV3-Small"),
                          *((f"efficientnet_b{i}", f"EfficientNet-B{i}") for i in range(8)))},
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



#: Other names of shipped models.
ALIASES = {"gpt2": "gpt2-124m", "bert": "bert-base", "gpt2-xl": "gpt2-1.5b"}
#: Default sequence length per model kind when ``seq`` is not given.
DEFAULT_SEQ = {"bert": 512, "gpt2": 1024, "llama": 4096, "gpt_neox": 2048}

#: Hugging Face configuration keys read per family: required, then optional (others are ignored).
CONFIG_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gpt2": (("n_embd", "n_layer", "n_head"), ("vocab_size", "n_positions", "n_inner")),
    "bert": (("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"),
             ("vocab_size", "max_position_embeddings", "type_vocab_size")),
    "llama": (("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "vocab_size"), ("num_key_value_heads", "max_position_embeddings", "head_dim")),
    "gpt_neox": (("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "vocab_size"), ("max_position_embeddings", "rotary_pct")),
}
#: ``model_type`` values of each family.
MODEL_TYPES = {"gpt2": "gpt2", "bert": "bert", "roberta": "bert", "llama": "llama",
               "mistral": "llama", "gpt_neox": "gpt_neox"}
_CLASSES = {"gpt2": ("GPT2Config", "GPT2LMHeadModel"),
            "llama": ("LlamaConfig", "LlamaForCausalLM"),
            "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM")}


def _family(data: Mapping[str, Any], where: str) -> str:
    mtype = data.get("model_type")
    if mtype is not None:
        if mtype not in MODEL_TYPES:
            raise SchedoptError(f"{where}: unsupported model_type; supported:"
                                f" {', '.join(MODEL_TYPES)}", "model_type", mtype)
        return MODEL_TYPES[str(mtype)]
    if "n_embd" in data:
        return "gpt2"
    if "type_vocab_size" in data:
        return "bert"
    if "rotary_pct" in data:
        return "gpt_neox"
    if "hidden_size" in data:
        return "llama"
    raise SchedoptError(f"{where}: no model_type and no known size keys (n_embd, hidden_size)",
                        "model_type", None)


def _positive_int(data: Mapping[str, Any], key: str, where: str, top: int = MAX_DIM) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise SchedoptError(f"{where}: must be an integer from 1 to {top:,}", key, value)
    return value


def config_spec(data: Mapping[str, Any], where: str = "config") -> ModelSpec:
    """The model spec of a Hugging Face configuration (GPT-2, Llama/Mistral, GPT-NeoX, BERT).

    Parameters
    ----------
    data
        The configuration (the content of ``config.json``).
    where
        Name of the configuration in error messages.

    Returns
    -------
    ModelSpec
        The spec, with the keys the family reads (others are ignored).

    Raises
    ------
    SchedoptError
        For an unknown family, a missing required key, or a size that is not a positive integer
        within the limits.
    """
    if not isinstance(data, Mapping):
        raise SchedoptError(f"{where}: a configuration is a JSON object", "config",
                            type(data).__name__)
    kind = _family(data, where)
    required, optional = CONFIG_KEYS[kind]
    config: dict[str, Any] = {}
    for key in required:
        if key not in data:
            raise SchedoptError(f"{where}: missing required key for a {kind} configuration",
                                key, None)
        config[key] = _positive_int(data, key, where,
                                    MAX_LAYERS if "layer" in key else MAX_DIM)
    for key in optional:
        if key in data and data[key] is not None:
            if key == "rotary_pct":
                v = data[key]
                if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
                    raise SchedoptError(f"{where}: must be a number in (0, 1]", key, v)
                config[key] = v
            else:
                config[key] = _positive_int(data, key, where)
    heads = config.get("n_head", config.get("num_attention_heads", 1))
    hidden = config.get("n_embd", config.get("hidden_size", 1))
    if hidden % heads:
        raise SchedoptError(f"{where}: hidden size {hidden} is not a multiple of the number of"
                            f" heads {heads}", "num_attention_heads", heads)
    kv = config.get("num_key_value_heads")
    if kv is not None and heads % kv:
        raise SchedoptError(f"{where}: attention heads {heads} are not a multiple of the key/value"
                            " heads", "num_key_value_heads", kv)
    text = ", ".join(f"{k}={v}" for k, v in config.items())
    return ModelSpec(f"config:{where}", f"{kind} configuration {where} ({text})", kind, config)


def load_model_spec(model: str) -> ModelSpec:
    """The spec of ``model``: a shipped name, a configuration JSON file or a torchvision name.

    Parameters
    ----------
    model
        A key of :data:`MODELS` (or an alias such as ``gpt2``), a path to a Hugging Face
        ``config.json``, or a torchvision model name (needs torchvision).

    Returns
    -------
    ModelSpec
        The spec.

    Raises
    ------
    SchedoptError
        For an unknown model, an unreadable or invalid configuration, or a torchvision name
        without torchvision.
    """
    key = ALIASES.get(model, model)
    if key in MODELS:
        return MODELS[key]
    path = Path(model)
    if path.suffix == ".json" or path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise SchedoptError(f"cannot read the configuration: {exc}", "MODEL", model) from exc
        except json.JSONDecodeError as exc:
            raise SchedoptError(f"not a JSON configuration: {exc}", "MODEL", model) from exc
        return config_spec(data, path.name)
    try:
        import torchvision
    except ImportError:
        raise SchedoptError("unknown model: not a shipped name (" + ", ".join(
            [*MODELS, *ALIASES]) + "), not a configuration file, and torchvision (for its model"
            " names) is not installed", "MODEL", model) from None
    if model not in torchvision.models.list_models():
        raise SchedoptError("unknown model: not a shipped name, a configuration file or a"
                            " torchvision model", "MODEL", model)
    return ModelSpec(model, f"torchvision {model}(), 224x224 images", "torchvision", {})


@dataclass(frozen=True)
class TraceSpec:
    """One estimated trace: model, GPU, compute precision, per-GPU batch, sequence length, cost
    method, activation recomputation, micro-batches per iteration, autocast, attention path
    (:func:`attention_path`), activation layout, BERT heads, DDP's reducer kernels and an
    image model's input side."""

    name: str
    model: str
    gpu: str
    precision: str  # compute precision: fp32 | fp16 | bf16
    batch: int
    seq: int = 0
    grad_dtype: str = "float32"
    method: str = "roofline"
    recompute: bool = False
    accumulate: int = 1
    autocast: bool = False  # torch.autocast to ``precision`` over float32 parameters
    attention: str = "auto"  # auto | flash | eager (attention_path)
    memory_format: str = "channels_last"  # image models' activation layout (MEMORY_FORMATS)
    heads: str = "none"  # BERT output heads (HEADS)
    lm_positions: int = 0  # masked-LM head on this many positions per sequence; 0: every token
    ddp_copies: bool = False  # DDP's reducer copies into and out of the buckets (operator)
    image: int = IMAGE_SIDE  # image models' input height and width (pixels)


# ============================================================================ profiling
class _Costs:
    """Per-layer forward (and, for the operator method, backward) cost of the dispatch mode."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.pending = (0.0, 0.0)  # work before the first layer
        self.time: dict[str, float] = {}
        self.back: dict[str, float] = {}
        self.order: list[str] = []
        self.ops = 0
        #: per-operator records ``(name, dtype, shape, flops, bytes, forward_s, backward_s)``
        #: when not None (:func:`operator_breakdown`)
        self.log: list[tuple[str, str, tuple[int, ...], float, float, float, float]] | None = None

    def enter(self, name: str) -> None:
        if name not in self.time:
            self.time[name] = 0.0
            self.back[name] = 0.0
            self.order.append(name)
            if self.pending != (0.0, 0.0):
                self.time[name] += self.pending[0]
                self.back[name] += self.pending[1]
                self.pending = (0.0, 0.0)
        self.current = name

    def add(self, seconds: float, backward: float = 0.0) -> None:
        self.ops += 1
        if self.current is None:
            self.pending = (self.pending[0] + seconds, self.pending[1] + backward)
        else:
            self.time[self.current] += seconds
            self.back[self.current] += backward


#: ``price(func, args, kwargs, out, flops, nbytes) -> (forward_s, backward_s)``.
Pricer = Callable[[Any, Any, Any, Any, float, float], tuple[float, float]]


def _roofline_pricer(flops_per_s: float, bytes_per_s: float) -> Pricer:
    """``max(FLOPs / F, bytes / B, 2 us)``; the backward is set per layer (2 x forward)."""

    def price(func: Any, args: Any, kwargs: Any, out: Any, flops: float,
              nbytes: float) -> tuple[float, float]:
        return max(flops / flops_per_s, nbytes / bytes_per_s, MIN_KERNEL_S), 0.0

    return price


def _needs_grad(t: Any) -> bool:
    return bool(getattr(t, "requires_grad", False))


def depthwise_s(model: OperatorModel, x: Any, w: Any, out: Any) -> tuple[float, float]:
    """Forward and backward seconds of a depthwise convolution (one input channel per group):
    each pass streams its input, weight and output once, as PyTorch's own kernels
    (``aten/src/ATen/native/cuda/DepthwiseConv2d.cu``: one thread per output, one per input
    gradient, one block per weight element summing over the batch) and cuDNN's depthwise
    kernels do; at least the pass's FLOPs at the products' peak. ``x``, ``w`` and ``out`` are
    tensors (the meta device will do) whose ``requires_grad`` says which gradients to price."""
    flops = 2.0 * out.numel() * math.prod(w.shape[2:])
    nbytes = x.nbytes + w.nbytes + out.nbytes  # every pass: one tensor of each size

    def one() -> float:
        return max(model.memory_s(nbytes), flops / model.gemm.peak)

    bwd = (one() if _needs_grad(x) else 0.0) + (one() if _needs_grad(w) else 0.0)
    return one(), bwd


def _operator_pricer(model: OperatorModel) -> Pricer:
    """Price every operator with :class:`OperatorModel` (forward and backward)."""
    import torch

    aten = torch.ops.aten
    g = model.gemm

    def gemm(func: Any, args: Any, out: Any) -> tuple[float, float]:
        packet = func._overloadpacket
        a, b = (args[1], args[2]) if packet in (aten.addmm, aten.baddbmm) else (args[0], args[1])
        bs, m, k = (a.shape[0], a.shape[1], a.shape[2]) if a.dim() == 3 else (1, *a.shape)
        n = b.shape[-1]
        item = a.element_size()
        fwd = g.seconds(bs, m, n, k, item)
        bwd = g.seconds(bs, m, k, n, item) if _needs_grad(a) else 0.0
        bwd += g.seconds(bs, k, n, m, item) if _needs_grad(b) else 0.0
        if packet in (aten.addmm, aten.baddbmm) and _needs_grad(args[0]):
            bwd += model.memory_s(out.nbytes)  # bias gradient: a reduction of the output's
        return fwd, bwd

    def conv(args: Any, out: Any) -> tuple[float, float]:
        x, w, groups = args[0], args[1], int(args[8])
        if groups > 1 and w.shape[1] == 1:  # depthwise: one input channel per group
            return depthwise_s(model, x, w, out)
        item = x.element_size()
        ks = math.prod(w.shape[2:])
        m, n, k = out.shape[0] * math.prod(out.shape[2:]), w.shape[0] // groups, w.shape[1] * ks
        fwd = g.seconds(groups, m, n, k, item)
        # data gradient: [N H W, C_out K] @ [C_out K, C_in]; weight: [C_out, N Ho Wo] @ [.., C_in K]
        dgrad = g.seconds(groups, x.shape[0] * math.prod(x.shape[2:]), w.shape[1], n * ks, item)
        wgrad = g.seconds(groups, n, k, m, item)
        stride1 = all(int(v) == 1 for v in args[3])
        if model.winograd and w.shape[2:] == (3, 3) and groups == 1 and stride1 and all(
                int(v) == 1 for v in args[5]):
            fwd, dgrad, wgrad = (min(a, b) for a, b in zip(
                (fwd, dgrad, wgrad), model.winograd_s(x, w, out), strict=True))
        bwd = (dgrad if _needs_grad(x) else 0.0) + (wgrad if _needs_grad(w) else 0.0)
        pointwise = ks == 1 and groups == 1 and stride1 and all(int(v) == 0 for v in args[4])
        if model.nchw_transposes and not pointwise:
            tf, tb = model.conv_transposes_s(x.nbytes, w.nbytes, out.nbytes, _needs_grad(x),
                                             _needs_grad(w))
            fwd, bwd = fwd + tf, bwd + tb
        return fwd, bwd

    def price(func: Any, args: Any, kwargs: Any, out: Any, flops: float,
              nbytes: float) -> tuple[float, float]:
        packet = func._overloadpacket
        grad = any(_needs_grad(a) for a in args)
        if packet in (aten.mm, aten.addmm, aten.bmm, aten.baddbmm):
            return gemm(func, args, out)
        if packet is aten.convolution:
            return conv(args, out)
        if packet is aten._scaled_dot_product_flash_attention and model.flash_fb:
            q = args[0]
            causal = bool(args[4]) if len(args) > 4 else bool(kwargs.get("is_causal", False))
            rate = model.flash_rate(q.shape[-2], q.shape[-1], causal)
            fwd = max(flops * (0.5 if causal else 1.0) / rate, g.kernel_s)
            return fwd, 2.5 * fwd if grad else 0.0
        if packet is aten.embedding:
            w = args[0]
            return (model.memory_s(nbytes),
                    model.memory_s(2 * w.nbytes + nbytes) if _needs_grad(w) else 0.0)
        passes = _memory_passes(func, args, out)
        if passes is not None:
            if packet is aten.native_batch_norm:  # at the profile's batch-norm efficiency
                passes = (passes[0] / model.norm_eff, passes[1] / model.norm_eff)
            bwd = model.memory_s(passes[1]) if grad and passes[1] > 0 else 0.0
            return model.memory_s(passes[0]), bwd
        fwd = model.memory_s(nbytes)
        return fwd, model.memory_s(1.5 * nbytes) if grad else 0.0

    return price


def _memory_passes(func: Any, args: Any, out: Any) -> tuple[float, float] | None:
    """Forward and backward bytes of the memory-bound operators whose kernels sweep their
    activation more often than once per input and output (``None`` for the others, priced at
    their traffic, backward 1.5 x).

    - ``native_batch_norm`` in training: a statistics sweep (read x) before the transform (read
      x, write y): 3 passes; its backward, the gradients of scale and shift (read x, dy) and then
      of the input (read x, dy, write dx): 5 passes (PyTorch's
      ``batch_norm_collect_statistics`` + ``batch_norm_transform_input`` and
      ``batch_norm_backward_reduce`` + ``batch_norm_backward_elemt``, cuDNN's one-kernel
      ``bn_fw_tr_1C11`` / ``bn_bw_1C11``);
    - ``native_layer_norm``: statistics per row in registers, 2 passes; its backward the input
      gradient (3 passes) and, with an affine weight, the weight and bias gradients (read x, dy
      again: 5 passes);
    - ``add``/``sub`` of two same-shape tensors that both need a gradient: the backward passes the
      gradient through (no kernel) and autograd sums the two gradients of the tensor that forked
      into them (read 2, write 1), charged here: 3 passes of the output. An operand broadcast to
      the output's shape gets the output gradient reduced (read it once);
    - ``max_pool2d_with_indices``: the backward visits every input element and reads the index of
      each output window that covers it (``ceil(k / s)`` windows per dimension, int64), writes the
      input gradient and reads each output gradient once (``max_pool_backward_nchw`` /
      ``_nhwc`` of PyTorch's ``DilatedMaxPool2d.cu``).
    """
    import torch

    aten = torch.ops.aten
    packet = func._overloadpacket
    if packet is aten.native_batch_norm and bool(args[5]):
        x = float(args[0].nbytes)
        return 3.0 * x, 5.0 * x
    if packet is aten.native_layer_norm:
        x = float(args[0].nbytes)
        return 2.0 * x, (5.0 if _needs_grad(args[2]) else 3.0) * x
    if packet in (aten.add, aten.sub) and isinstance(args[1], torch.Tensor):
        y = float(out.nbytes)
        full = [a for a in args[:2] if _needs_grad(a) and a.shape == out.shape]
        bwd = 3.0 * y if len(full) == 2 else 0.0
        bwd += sum(y for a in args[:2] if _needs_grad(a) and a.shape != out.shape)
        return sum(float(a.nbytes) for a in args[:2]) + y, bwd
    if packet is aten.max_pool2d_with_indices:
        x, y = args[0], out[0]
        kernel = [int(v) for v in args[1]] * (2 // len(args[1]))
        given = args[2] if len(args) > 2 else []
        stride = [int(v) for v in given] * (2 // len(given)) if given else kernel
        windows = math.prod(-(-k // s) for k, s in zip(kernel, stride, strict=True))
        fwd = float(x.nbytes + y.nbytes + out[1].nbytes)
        return fwd, x.numel() * windows * 8.0 + x.nbytes + y.nbytes
    return None


#: ``cast_price(source, cast, nbytes) -> (forward_s, backward_s)`` of one autocast cast.
CastPricer = Callable[[Any, Any, float], tuple[float, float]]


@dataclass(frozen=True)
class _Autocast:
    """What the dispatch mode casts: the 16-bit dtype and the price of one cast."""

    low: Any  # torch.bfloat16 | torch.float16
    price: CastPricer


def _autocast_args(func: Any, args: Any, kwargs: Any, ac: _Autocast,
                   costs: _Costs) -> tuple[Any, Any]:
    """Cast the inputs of ``func`` as ``torch.autocast`` (CUDA) would, charging each cast.

    Eligible inputs are floating-point tensors other than float64; an operator of
    :data:`AUTOCAST_LOWER` gets them in ``ac.low``, one of :data:`AUTOCAST_FP32` in float32
    (not a reduction given an explicit ``dtype``, nor an ``out=`` call); a cast keeps the
    source's ``requires_grad`` so that the backward of the operator is priced as before.
    """
    import torch
    from torch.utils._pytree import tree_map

    name = func._overloadpacket.__name__
    if name in AUTOCAST_LOWER:
        to = ac.low
    elif name in AUTOCAST_FP32:
        if "out" in kwargs or (name in _SET_OPT_DTYPE and kwargs.get("dtype") is not None):
            return args, kwargs
        to = torch.float32
    else:
        return args, kwargs

    def cast(t: Any) -> Any:
        if (not isinstance(t, torch.Tensor) or not t.is_floating_point()
                or t.dtype in (to, torch.float64)):
            return t
        c = torch.ops.aten._to_copy.default(t, dtype=to)
        if t.requires_grad:
            c.requires_grad_(True)
        nbytes = float(t.nbytes + c.nbytes)
        fwd, bwd = ac.price(t, c, nbytes)
        costs.add(fwd, bwd)
        if costs.log is not None:
            costs.log.append(("autocast cast", str(to).removeprefix("torch."), tuple(c.shape),
                              0.0, nbytes, fwd, bwd))
        return c

    return tree_map(cast, args), tree_map(cast, kwargs)


def _pricing_modes(ts: TraceSpec, spec: ModelSpec, attention: str,
                   autocast: _Autocast | None, costs: _Costs, price: Pricer
                   ) -> contextlib.ExitStack:
    """The modes one forward pass runs under: the fused attention kernel, CUDA's fused dropout
    (not for the roofline method, kept as the shipped traces were made), autocast's casts of
    convolution biases, and the dispatch mode that charges every operator."""
    stack = contextlib.ExitStack()
    if attention == "flash":
        stack.enter_context(_flash_attention(causal=spec.kind in ("gpt2", "llama", "gpt_neox")))
    as_cuda = ts.method != "roofline"
    if as_cuda:
        stack.enter_context(_fused_dropout())
    if autocast:
        stack.enter_context(_conv_bias_cast(autocast.low))
    stack.enter_context(_dispatch_mode(costs, price, autocast, in_place=as_cuda))
    return stack


@contextlib.contextmanager
def _conv_bias_cast(low: Any) -> Iterator[None]:
    """Convolutions' biases in ``low`` under autocast, as ``torch.autocast`` casts them with the
    input and weight: ``conv2d`` checks the bias's dtype against its input's before it
    dispatches, where :func:`_autocast_args` casts the input and weight (the cast of a bias is
    charged there as a copy)."""
    import torch
    from torch.overrides import TorchFunctionMode

    convs = (torch.conv1d, torch.conv2d, torch.conv3d)

    def cast(b: Any) -> Any:
        ok = isinstance(b, torch.Tensor) and b.is_floating_point() and b.dtype != low
        return b.to(low) if ok else b

    class BiasCast(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if func in convs and len(args) > 2:  # (input, weight, bias, ...)
                args = (*args[:2], cast(args[2]), *args[3:])
            elif func in convs and "bias" in kwargs:
                kwargs["bias"] = cast(kwargs["bias"])
            return func(*args, **kwargs)

    with BiasCast():
        yield


def _dispatch_mode(costs: _Costs, price: Pricer, autocast: _Autocast | None = None, *,
                   in_place: bool = True) -> Any:
    """A TorchDispatchMode that charges every operator to the current layer.

    With ``autocast``, the inputs of the operators of torch's autocast lists are cast first
    (:func:`_autocast_args`). Views (outputs that alias an input without writing it) are free;
    an in-place operator (``relu_``, ``add_``: its output aliases an input it writes) reads and
    writes its tensor like any other kernel and is charged, unless ``in_place`` is False (the
    roofline method as the shipped traces were made: it left them out).
    """
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
            if autocast is not None:
                args, kwargs = _autocast_args(func, args, kwargs, autocast, costs)
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if packet.__name__ in free or any(
                r.alias_info is not None and not (in_place and r.alias_info.is_write)
                for r in func._schema.returns
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
            fwd, bwd = price(func, args, kwargs, out, flops, nbytes)
            costs.add(fwd, bwd)
            if costs.log is not None and outs:
                costs.log.append((packet.__name__, str(outs[0].dtype).removeprefix("torch."),
                                  tuple(outs[0].shape), flops, nbytes, fwd, bwd))
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

    torch.nn.functional.scaled_dot_product_attention = flash  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original



@contextlib.contextmanager
def _fused_dropout() -> Iterator[None]:
    """Route ``F.dropout`` in training to ``aten.native_dropout``, the one fused kernel CUDA runs
    (``at::dropout`` takes it for CUDA tensors with ``0 < p < 1``): it reads the input and writes
    the output and a boolean mask. On the meta device ``at::dropout`` decomposes instead into a
    random mask (``bernoulli_``), its scaling (``div_``) and a product, which would be charged as
    three kernels of full-size floating-point tensors.
    """
    import torch

    original = torch.nn.functional.dropout

    def dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not training or not 0.0 < p < 1.0 or x.numel() == 0:
            return original(x, p, training, inplace)
        return torch.ops.aten.native_dropout(x, p, True)[0]

    torch.nn.functional.dropout = dropout  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.functional.dropout = original


def _build_bert(spec: ModelSpec, attn: str, batch: int, seq: int, dtype: Any,
                heads: tuple[str, int]) -> tuple[Any, Callable[[], None]]:
    """A BERT model (:data:`HEADS`) and its forward closure. With pre-training heads and
    ``lm_positions``, the masked-LM head runs on that many gathered positions per sequence
    (``index_select`` of the flattened encoder output, as a run that feeds the head only the
    masked tokens), else on every token; the losses are cross-entropies over the vocabulary
    and over the two next-sentence classes."""
    import torch
    from transformers import BertConfig, BertForPreTraining, BertModel

    kind, positions = heads
    cfg = BertConfig(**spec.config, attn_implementation=attn)  # type: ignore[call-arg]
    with torch.device("meta"):
        model = (BertForPreTraining if kind == "pretraining" else BertModel)(cfg).to(dtype)
        ids = torch.zeros(batch, seq, dtype=torch.long)
        where = torch.zeros(batch * positions, dtype=torch.long)
        lm_labels = torch.zeros(batch * (positions or seq), dtype=torch.long)
        nsp_labels = torch.zeros(batch, dtype=torch.long)

    def run_encoder() -> None:
        model(input_ids=ids, token_type_ids=torch.zeros_like(ids))

    def run_pretraining() -> None:
        hidden, pooled = model.bert(input_ids=ids, token_type_ids=torch.zeros_like(ids))[:2]
        flat = hidden.reshape(-1, hidden.shape[-1])
        if positions:
            flat = torch.index_select(flat, 0, where)
        loss = torch.nn.functional.cross_entropy(model.cls.predictions(flat), lm_labels)
        nsp = model.cls.seq_relationship(pooled)
        loss = loss + torch.nn.functional.cross_entropy(nsp, nsp_labels)

    return model, run_pretraining if kind == "pretraining" else run_encoder


def _build(spec: ModelSpec, attention: str, batch: int, seq: int, dtype: Any,
           heads: tuple[str, int] = ("none", 0)) -> tuple[Any, Callable[[], None]]:
    """The model on the meta device and a closure running one forward pass (with loss);
    ``seq`` is an image model's input side, ``heads`` is ``(HEADS entry, lm_positions)`` of a
    BERT model."""
    import torch

    if spec.kind in ("image", "torchvision"):
        with torch.device("meta"):
            if spec.kind == "image":
                model = cnn_builders()[spec.key]().to(dtype)
            else:
                import torchvision

                model = torchvision.models.get_model(spec.key).to(dtype)
            x = torch.empty(batch, 3, seq, seq, dtype=dtype)
            y = torch.zeros(batch, dtype=torch.long)

        def run() -> None:
            torch.nn.functional.cross_entropy(model(x), y)

        return model, run
    attn = "sdpa" if attention == "flash" else "eager"
    if spec.kind == "bert":
        return _build_bert(spec, attn, batch, seq, dtype, heads)
    import transformers

    transformers.logging.set_verbosity_error()  # no notes on stderr about default options
    # causal language models with an LM head: (config class, model class) by kind
    config_cls, model_cls = _CLASSES[spec.kind]
    cfg = getattr(transformers, config_cls)(**spec.config, attn_implementation=attn)
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(cfg).to(dtype)
        ids = torch.zeros(batch, seq, dtype=torch.long)

    def run_lm() -> None:
        model(input_ids=ids, labels=ids)

    return model, run_lm


def _torch_dtype(precision: str) -> Any:
    import torch

    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16}[precision]


def _pricers(ts: TraceSpec, gpu: GPU, text: bool) -> tuple[Pricer, str, CastPricer]:
    """The operator pricer of ``ts.method``, the attention it prices (``flash`` or ``eager``,
    :func:`attention_path` of ``ts.attention``; ``text``: the model has attention) and the
    price of one autocast cast.

    Raises
    ------
    SchedoptError
        The roofline profile of ``gpu`` has no figure for ``ts.precision``; a bad
        ``ts.attention``.
    """
    import torch

    path = attention_path(ts.attention, gpu, ts.precision, ts.method, text)
    if ts.method == "roofline":
        if ts.precision not in gpu.flops:
            raise SchedoptError(f"the roofline profile of {gpu.name} has no {ts.precision}"
                                " figure", "--dtype", ts.precision)
        price = _roofline_pricer(gpu.flops[ts.precision], gpu.memory_Bps)

        def roofline_cast(src: Any, dst: Any, nbytes: float) -> tuple[float, float]:
            return price(torch.ops.aten._to_copy.default, (src,), {}, dst,
                         float(dst.numel()), nbytes)  # backward: 2 x forward per layer

        return price, path, roofline_cast
    opm = operator_model(gpu, ts.precision, memory_format=ts.memory_format)

    def operator_cast(src: Any, dst: Any, nbytes: float) -> tuple[float, float]:
        # the backward of a cast is the cast of the gradient back to the source's dtype
        return opm.memory_s(nbytes), opm.memory_s(nbytes) if _needs_grad(src) else 0.0

    return _operator_pricer(opm), path, operator_cast


def _accumulation_s(opm: OperatorModel | None, tensor_bytes: list[int]) -> float:
    """Time (s) of adding one micro-batch's gradients of ``tensor_bytes`` into the accumulated
    ones: torch's ``AccumulateGrad`` adds in place once a gradient exists (every micro-batch
    after the first), one memory-bound kernel per tensor reading both and writing the sum
    (3 x its bytes); 0 without an operator model (one micro-batch, or the roofline method,
    which keeps the shipped traces' pricing)."""
    return sum(opm.memory_s(3 * b) for b in tensor_bytes) if opm is not None else 0.0


def ddp_copy_in_s(opm: OperatorModel, tensor_bytes: list[int]) -> float:
    """Device time (s) of DDP's reducer on the compute stream while one layer's gradients of
    ``tensor_bytes`` become ready: each gradient is copied into its bucket (a memory-bound
    kernel reading and writing it, 2 x its bytes) and the bucket is scaled by ``1/world`` in
    place (2 x the bytes again; one kernel per bucket, whose fixed cost depends on the plan:
    the cluster's ``bucket_compute_s``).

    torch ``torch/csrc/distributed/c10d/reducer.cpp`` (1.2-1.4: ``mark_variable_ready_dense``
    copies with ``bucket_view.copy_(grad)``, ``replica.contents.div_(world size)`` once the
    bucket's last gradient is in; later versions divide in the communication hook on the
    bucket). With ``gradient_as_bucket_view`` there is no copy.
    """
    bw = opm.gemm.bandwidth_Bps
    return sum(opm.memory_s(2 * b) + 2 * b / bw for b in tensor_bytes)


def ddp_copy_out_s(opm: OperatorModel, tensor_bytes: list[int]) -> float:
    """Device time (s) of DDP's copies of the reduced buckets back into the gradients, one
    memory-bound kernel per tensor (2 x its bytes) on the compute stream after its bucket's
    all-reduce and before the optimizer step (torch ``reducer.cpp``: ``finalize_backward`` /
    ``finalize_bucket_dense``, ``grad.copy_(bucket_view)``; none with
    ``gradient_as_bucket_view``)."""
    return sum(opm.memory_s(2 * b) for b in tensor_bytes)


def _layer_records(ts: TraceSpec, gpu: GPU, costs: _Costs, owned: dict[str, list[Any]],
                   name_of: dict[int, str]) -> list[dict[str, Any]]:
    """The trace's layers in forward order from the priced ``costs``: the roofline's backward
    is twice the forward, recomputation adds a forward to it, and with ``accumulate`` every
    backward adds its layer's gradients into the accumulated ones (:func:`_accumulation_s`)
    and the first K - 1 micro-batches (K - 2 of them with that add) are charged to the first
    layer's forward; with ``ddp_copies`` the last backward of each layer also copies its
    gradients into DDP's buckets and scales them (:func:`ddp_copy_in_s`); ``owned`` gives each
    layer's parameters, ``name_of`` their names."""
    itemsize = {"float32": 4, "float16": 2, "bfloat16": 2}[ts.grad_dtype]
    opm = (operator_model(gpu, ts.precision, memory_format=ts.memory_format)
           if (ts.accumulate > 1 or ts.ddp_copies) and ts.method == "operator" else None)
    layers: list[dict[str, Any]] = []
    extra = adds = 0.0
    for lname in costs.order:
        fwd = costs.time[lname]
        bwd = 2 * fwd if ts.method == "roofline" else costs.back[lname]
        if ts.recompute:
            bwd += fwd
        extra += fwd + bwd
        sizes = [p.numel() * itemsize for _, p in owned[lname]]
        add = _accumulation_s(opm, sizes) if ts.accumulate > 1 else 0.0
        adds += add
        bwd += add
        if ts.ddp_copies and opm is not None:  # the last micro-batch's backward only
            bwd += ddp_copy_in_s(opm, sizes)
        layers.append({
            "name": lname,
            "forward_s": fwd,
            "backward_s": bwd,
            "tensors": [
                {"name": name_of[id(p)], "bytes": p.numel() * itemsize, "dtype": ts.grad_dtype}
                for _, p in owned[lname]
            ],
        })
    if ts.accumulate > 1:
        layers[0]["forward_s"] += (ts.accumulate - 1) * extra + (ts.accumulate - 2) * adds
    for la in layers:
        la["forward_s"], la["backward_s"] = sig(la["forward_s"]), sig(la["backward_s"])
    return layers


def estimate_trace(ts: TraceSpec, spec: ModelSpec | None = None, *,
                   log: list[Any] | None = None) -> Trace:
    """Build, price and describe one estimated trace.

    Parameters
    ----------
    ts
        What to estimate (model key, GPU, precision, batch, sequence, method ...).
    spec
        The model; default ``MODELS[ts.model]``.
    log
        When given, one record per priced operator is appended to it: ``(ATen name, output
        dtype, output shape, FLOPs, bytes, forward_s, backward_s)``; autocast casts are
        recorded as ``autocast cast``.

    Returns
    -------
    Trace
        The estimated trace; its ``source`` states every figure used.
    """
    import torch

    spec = spec or MODELS[ts.model]
    gpu = get_gpu(ts.gpu)
    dtype = torch.float32 if ts.autocast else _torch_dtype(ts.precision)
    price, attention, cast_price = _pricers(ts, gpu, spec.kind not in IMAGE_KINDS)
    autocast = _Autocast(_torch_dtype(ts.precision), cast_price) if ts.autocast else None
    model, run = _build(spec, attention, ts.batch, ts.image if spec.kind in IMAGE_KINDS
                        else ts.seq, dtype, (ts.heads, ts.lm_positions))
    model.train()
    name_of: dict[int, str] = {}
    for pname, p in model.named_parameters():  # de-duplicates tied parameters: first name wins
        name_of.setdefault(id(p), pname)
    params = {name_of[id(p)]: p.numel() for p in model.parameters()}
    n_params, n_tensors = sum(params.values()), len(params)
    if n_params > MAX_PARAMS:
        raise SchedoptError(f"{n_params:,} parameters: more than {MAX_PARAMS:,}", "MODEL",
                            spec.key)
    costs = _Costs()
    costs.log = log
    owners = []
    for mname, module in model.named_modules(remove_duplicate=False):
        own = list(module.named_parameters(recurse=False))
        if own:
            owners.append((mname, module, own))
            module.register_forward_pre_hook(lambda _m, _a, n=mname: costs.enter(n))
    with _pricing_modes(ts, spec, attention, autocast, costs, price):
        run()
    by_name = {m: own for m, _, own in owners}
    missing = [m for m, _, _ in owners if m not in costs.time]
    if missing:
        raise RuntimeError(f"{ts.name}: layers never run: {missing[:3]}")
    layers = _layer_records(ts, gpu, costs, by_name, name_of)
    describe = _describe if ts.method == "roofline" else _describe_operator
    source = describe(ts, spec, gpu, n_params, n_tensors, costs.ops, attention)
    iteration = _iteration_costs(ts, spec, gpu, n_params)
    if ts.ddp_copies:
        opm = operator_model(gpu, ts.precision, memory_format=ts.memory_format)
        out_s = ddp_copy_out_s(opm, [t["bytes"] for la in layers for t in la["tensors"]])
        iteration["update_s"] = sig(iteration["update_s"] + out_s)
        source = source.removesuffix(".") + (
            f"; DDP's reducer (torch reducer.cpp, without gradient_as_bucket_view): every"
            f" gradient copied into its bucket and the bucket scaled by 1/world in its layer's"
            f" backward (4 x the gradient bytes), and copied back after the all-reduce, in the"
            f" update ({out_s * 1e3:.3g} ms: 2 x the bytes, one kernel per tensor).")
    try:
        return Trace.model_validate({
            "name": ts.name,
            "batch_size": ts.batch,
            **iteration,
            "layers": layers,
            "source": source,
        })
    except ValueError as exc:
        raise SchedoptError(f"the estimate is outside the trace limits: {exc}".split("\n")[0],
                            "MODEL", spec.key) from None


def _iteration_costs(ts: TraceSpec, spec: ModelSpec, gpu: GPU, n_params: int) -> dict[str, float]:
    bandwidth = gpu.memory_Bps if ts.method == "roofline" else gpu.hbm_Bps * gpu.memory_eff
    if spec.kind in ("image", "torchvision"):
        batch_bytes = ts.batch * 3 * ts.image**2 * 4
        io = ts.batch * IMAGE_DECODE_S / gpu.loader_workers
        update_bpp = 20  # SGD momentum, float32 master weights
    else:
        arrays = 4 if spec.kind == "bert" else 2
        batch_bytes = ts.batch * ts.seq * 8 * arrays
        io = ts.batch * TEXT_SAMPLE_S
        update_bpp = 28  # fused AdamW, fp32 master weights and moments, half-precision grads
    # autocast: float32 parameters and gradients, so SGD momentum reads w, g, m and writes w, m
    # (5 x 4 B) and AdamW reads w, g, m, v and writes w, m, v (7 x 4 B): the same bytes
    return {
        "io_s": sig(io * ts.accumulate),
        "h2d_s": sig(batch_bytes * ts.accumulate / gpu.pcie_Bps),
        "update_s": sig(update_bpp * n_params / bandwidth),
    }


def _heads_text(ts: TraceSpec) -> str:
    """What the pre-training heads add to a BERT model's description ('' without them)."""
    if ts.heads != "pretraining":
        return ""
    where = (f"{ts.lm_positions} gathered positions per sequence (index_select)"
             if ts.lm_positions else "every token")
    return (", with pre-training heads (transformers BertForPreTraining: the masked-LM head on"
            f" {where}, its decoder tied to the word embeddings, the next-sentence head, and"
            " both cross-entropy losses)")


def _model_text(ts: TraceSpec, spec: ModelSpec) -> str:
    """The model in a trace's description: its spec's, at the trace's image side, and with the
    heads of :func:`_heads_text`."""
    side = f"{IMAGE_SIDE}x{IMAGE_SIDE}"
    text = spec.description
    if ts.image != IMAGE_SIDE:
        text = (text.replace(side, f"{ts.image}x{ts.image}") if side in text
                else f"{text}, {ts.image}x{ts.image} images")
    return text + _heads_text(ts)


def _describe(ts: TraceSpec, spec: ModelSpec, gpu: GPU, n_params: int, n_tensors: int,
              n_ops: int, path: str) -> str:
    costs = _iteration_costs(ts, spec, gpu, n_params)
    seq = f", sequence {ts.seq}" if ts.seq else ""
    if spec.kind in IMAGE_KINDS:
        data = (f"h2d = {ts.batch} x {12 * ts.image**2:,} B (float32 3x{ts.image}x{ts.image}) /"
                f" {gpu.pcie_Bps / 1e9:g} GB/s"
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
        if ts.autocast:
            data = data.replace("fp32 master weights and moments, half-precision gradients and"
                                " weights", "float32 parameters, gradients and moments")
    grads = ("float32 gradients" if ts.grad_dtype == "float32"
             else f"{ts.grad_dtype} gradients, bytes = 2 x numel")
    compute = "mixed precision (bf16 autocast)" if (
        spec.kind == "image" and ts.precision == "bf16") else ts.precision
    if ts.autocast:
        compute = _autocast_text(ts)
    attention = "" if spec.kind in IMAGE_KINDS else _attention_text(ts, gpu, path, "")
    return (
        f"ESTIMATE (not measured). {_model_text(ts, spec)}; {n_params:,}"
        f" parameters in {n_tensors}"
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


def _attention_text(ts: TraceSpec, gpu: GPU, path: str, flash_detail: str) -> str:
    """The ``source`` clause naming the attention path priced; a path chosen explicitly (not
    ``auto``) says so and what ``auto`` would have priced; eager attention under autocast says
    that the scores' softmax ran on float32 casts (autocast's float32 list)."""
    if path == "flash":
        text = f"; attention: fused flash kernel (SDPA){flash_detail}"
    else:
        text = "; attention: eager matmul + softmax kernels"
    if ts.attention == "auto":
        return text  # as before the choice existed (the shipped traces)
    if path == "eager" and ts.autocast:
        text += (" (the [batch, heads, s, s] scores' softmax on float32 casts, autocast's float32"
                 " list, and the probabilities cast back to 16 bits for the second product)")
    auto = attention_path("auto", gpu, ts.precision, ts.method)
    return f"{text}; attention={path} chosen (auto: {auto})"


def _autocast_text(ts: TraceSpec) -> str:
    return (f"{ts.precision} autocast (torch.autocast to {_torch_dtype(ts.precision)} over"
            " float32 parameters and gradients; products, convolutions and attention on"
            " 16-bit casts of their inputs, float32-list operators on float32 casts, other"
            " operators in their inputs' dtype; each cast a memory-bound kernel whose backward"
            f" is a cast; {AUTOCAST_SOURCE})")


def _describe_operator(ts: TraceSpec, spec: ModelSpec, gpu: GPU, n_params: int, n_tensors: int,
                       n_ops: int, path: str) -> str:
    costs = _iteration_costs(ts, spec, gpu, n_params)
    opm = operator_model(gpu, ts.precision, memory_format=ts.memory_format)
    g = opm.gemm
    seq = f", sequence {ts.seq}" if ts.seq else ""
    attention = "" if spec.kind in IMAGE_KINDS else _attention_text(
        ts, gpu, path, " at the FlashAttention-2 forward+backward throughput of its sequence"
        " length and head size (Dao 2023, repository benchmark figures), backward 2.5 x forward")
    extras = []
    if ts.recompute:
        extras.append("full activation recomputation: each layer's backward includes its"
                      " forward again")
    if ts.accumulate > 1:
        extras.append(f"{ts.accumulate} micro-batches per iteration: the first"
                      f" {ts.accumulate - 1} forward and backward passes are charged to the"
                      " first layer's forward, io and h2d are per iteration; every micro-batch"
                      " after the first adds its gradients into the accumulated ones (torch's"
                      " AccumulateGrad, in place: 3 x the gradient bytes, in each layer's"
                      " backward)")
    if ts.memory_format == "nchw":
        extras.append("NCHW activations: " + (
            "cuDNN's layout transposes around every convolution that is not a pointwise"
            " product, each a memory-bound read and write of its tensor (forward: input, weight,"
            " output; each gradient product: its two inputs and its result)"
            if opm.nchw_transposes else "fp32 convolutions read NCHW, no layout transposes"))
    more = "".join(f"; {e}" for e in extras)
    wino = ("; a 3 x 3 stride-1 convolution costs the cheaper of its implicit GEMM and cuDNN's"
            " Winograd F(4x4, 3x3) (transforms and 36 products per pass)"
            if opm.winograd and spec.kind in IMAGE_KINDS else "")
    compute = _autocast_text(ts) if ts.autocast else ts.precision
    update = (" (float32 parameters, gradients and optimizer state)" if ts.autocast else "")
    align = (f", x {g.unaligned:g} when a dimension is not a multiple of {g.align}"
             if g.align > 1 else "")
    norm = _eff_text(opm.norm_eff, "norm_eff")
    dw = ("; depthwise convolutions stream input, weight and output once per pass (forward,"
          " data and weight gradients)" if spec.kind in IMAGE_KINDS else "")
    return (
        f"ESTIMATE (not measured). {_model_text(ts, spec)}; {n_params:,}"
        f" parameters in {n_tensors}"
        f" tensors, {ts.grad_dtype} gradients; per-GPU batch {ts.batch}{seq}; {gpu.name},"
        f" {compute} compute. Operator cost model over one meta-device forward pass"
        f" ({n_ops} operators; schedopt.measure.estimate, docs/estimate.md): products and"
        f" convolutions at {g.peak / 1e12:g} TFLOP/s peak x {g.best:.3g} best x tile and wave"
        f" quantisation over {g.units} SMs x k / (k + {g.k_half:g}){align}; memory-bound"
        f" operators at {g.bandwidth_Bps / 1e9:g} GB/s; at least {g.kernel_s * 1e6:g} us per"
        f" kernel; GEMM basis: {gpu.gemm_basis}; memory basis: {gpu.hbm_basis}{attention};"
        f" backward of a product = its two gradient products, of other operators 1.5 x the"
        f" traffic, but for batch norm (forward 3 and backward 5 passes over its"
        f" input{norm}), layer norm (2 and 5), same-shape additions (backward: the gradient sum"
        f" of the fork, 3"
        f" passes) and max pooling (backward reads the index of every window over each input)"
        f"{wino}{dw}{more}; parameter-free operators charged to the preceding layer; update ="
        f" {28 if spec.kind not in ('image', 'torchvision') else 20} B/param{update} /"
        f" {g.bandwidth_Bps / 1e9:g} GB/s = {costs['update_s'] * 1e3:.3g} ms; io ="
        f" {costs['io_s'] * 1e3:.3g} ms, h2d = {costs['h2d_s'] * 1e3:.3g} ms (as the shipped"
        f" estimated traces)."
    )


def _eff_text(eff: float, field: str) -> str:
    """``, at EFF of that bandwidth (the profile's FIELD)`` for a measured efficiency, else
    nothing."""
    return f", at {eff:.3g} of that bandwidth (the profile's {field})" if eff != 1.0 else ""


def _check_int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SchedoptError(f"must be an integer from {low} to {high:,}", what, value)
    return value


def _check_options(method: str, precision: str, autocast: object) -> None:
    """One-line errors for an unknown method or precision, and an ``autocast`` that is not a
    boolean or not to 16 bits."""
    if method not in METHODS:
        raise SchedoptError(f"unknown method; known: {', '.join(METHODS)}", "--method", method)
    if precision not in PRECISIONS:
        raise SchedoptError(f"unknown precision; known: {', '.join(PRECISIONS)}", "--dtype",
                            precision)
    if autocast not in (False, True):
        raise SchedoptError("must be true or false", "--autocast", autocast)
    if autocast and precision not in ("bf16", "fp16"):
        raise SchedoptError("applies to --dtype bf16 or fp16 only (autocast to 16 bits)",
                            "--autocast", precision)


def _check_memory_format(memory_format: object, method: str, spec: ModelSpec) -> None:
    """One-line errors for an unknown layout, and ``nchw`` where it prices nothing: the
    roofline method (no per-operator backward) or a model without convolutions."""
    if memory_format not in MEMORY_FORMATS:
        raise SchedoptError(f"unknown memory format; known: {', '.join(MEMORY_FORMATS)}",
                            "--memory-format", memory_format)
    if memory_format == "nchw" and method != "operator":
        raise SchedoptError("applies to --method operator only", "--memory-format",
                            memory_format)
    if memory_format == "nchw" and spec.kind not in IMAGE_KINDS:
        raise SchedoptError("applies to image models only (convolutions)", "--memory-format",
                            memory_format)


def _check_heads(heads: object, lm_positions: object, spec: ModelSpec, seq: int) -> None:
    """One-line errors for unknown heads, pre-training heads on a model that is not BERT, and
    masked-LM positions without them or outside ``0..seq``."""
    if heads not in HEADS:
        raise SchedoptError(f"unknown heads; known: {', '.join(HEADS)}", "--heads", heads)
    if heads == "pretraining" and spec.kind != "bert":
        raise SchedoptError("applies to BERT models only (the others carry their LM head)",
                            "--heads", heads)
    if lm_positions in (0, None):
        return
    if heads != "pretraining":
        raise SchedoptError("applies to --heads pretraining only", "--lm-positions",
                            lm_positions)
    _check_int(lm_positions, "--lm-positions", 0, seq)


def _sequence(spec: ModelSpec, batch: int, seq: int | None) -> int:
    """The sequence length to estimate ``spec`` at: 0 for image models (which refuse a
    ``--seq``), else ``seq`` or the family's default, checked against the model's positions
    and the token limit."""
    if spec.kind in ("image", "torchvision"):
        if seq not in (None, 0):
            raise SchedoptError("applies to text models only (an image model's input side is"
                                " --image-size)", "--seq", seq)
        if batch * 1000 > MAX_TOKENS:
            raise SchedoptError(f"at most {MAX_TOKENS // 1000:,} images", "--batch", batch)
        return 0
    positions = spec.config.get("n_positions", spec.config.get("max_position_embeddings"))
    if seq is None:
        seq = min(DEFAULT_SEQ[spec.kind], positions or MAX_SEQ)
    _check_int(seq, "--seq", 1, min(positions or MAX_SEQ, MAX_SEQ))
    if spec.kind == "gpt2" and positions is None and seq > 1024:
        raise SchedoptError("GPT-2 has 1024 positions unless n_positions says more",
                            "--seq", seq)
    if batch * seq > MAX_TOKENS:
        raise SchedoptError(f"batch x seq = {batch * seq:,} tokens: more than"
                            f" {MAX_TOKENS:,}", "--batch", batch)
    return seq


def estimate(model: str | ModelSpec, gpu: str, precision: str, batch: int,
             seq: int | None = None, *, recompute: bool = False, accumulate: int = 1,
             method: str = "operator", autocast: bool = False, attention: str = "auto",
             memory_format: str = "channels_last", heads: str = "none",
             lm_positions: int = 0, ddp_copies: bool = False, name: str | None = None,
             log: list[Any] | None = None, image_size: int | None = None) -> Trace:
    """Estimate the trace of ``model`` on ``gpu``.

    Parameters
    ----------
    model
        A shipped model name, a Hugging Face configuration file, a torchvision model name
        (:func:`load_model_spec`) or a spec.
    gpu
        A profile name of :data:`~schedopt.measure.gpus.GPUS`.
    precision
        ``bf16``, ``fp16``, ``tf32`` or ``fp32``.
    batch
        Per-GPU micro-batch (samples).
    seq
        Sequence length of text models (default per family: BERT 512, GPT-2 1024, GPT-NeoX
        2048, Llama 4096, at most the configuration's positions); image models take
        ``image_size``, their input side in pixels (default :data:`IMAGE_SIDE`).
    recompute
        Full activation recomputation (backward includes a second forward).
    accumulate
        Micro-batches per iteration (gradient accumulation).
    method
        ``operator`` or ``roofline``.
    autocast
        Automatic mixed precision (``torch.autocast`` to ``precision``, bf16 or fp16 only):
        float32 parameters and gradients (4 bytes per element in the trace), the operators of
        torch's lower-precision list on 16-bit casts of their inputs, those of its float32 list
        on float32 casts, each cast charged as a memory-bound kernel (docs/estimate.md).
    attention
        Attention path of text models (:func:`attention_path`): ``auto`` (the fused flash
        kernel where the profile has it at ``precision``, else eager), ``flash`` or ``eager``.
    memory_format
        Activation layout of image models (:data:`MEMORY_FORMATS`).
    heads
        Output heads of BERT models (:data:`HEADS`): ``none`` (encoder and pooler) or
        ``pretraining`` (masked-LM and next-sentence heads with their losses).
    lm_positions
        With ``heads="pretraining"``: the masked-LM head runs on this many positions per
        sequence (gathered, as runs that keep only the masked tokens do), at most ``seq``;
        0 (the default) runs it on every token.
    ddp_copies
        Price PyTorch DDP's reducer on the compute stream (operator method): each gradient
        copied into its bucket and the bucket scaled in its layer's backward, and copied back
        after the all-reduce in the update (:func:`ddp_copy_in_s`, :func:`ddp_copy_out_s`);
        what a DDP run without ``gradient_as_bucket_view`` adds to a model's own compute.
    name
        Trace name (default ``MODEL-GPU-PRECISION-bBATCH``, ``PRECISION-autocast`` with
        ``autocast``, a ``-flash`` or ``-eager`` suffix with a chosen ``attention``, then
        ``-pretraining`` and ``-lmN`` with the heads, ``-ddp`` with ``ddp_copies``).
    log
        When given, receives one record per priced operator (:func:`estimate_trace`;
        :func:`operator_breakdown` sums them).

    Returns
    -------
    Trace
        The estimated trace.

    Raises
    ------
    SchedoptError
        For bad input, one line naming the option (:func:`_checked`).
    """
    spec, seq = _checked(model, gpu, precision, batch, seq, accumulate, method, autocast,
                         attention, memory_format, heads, lm_positions, ddp_copies)
    image = _image_side(spec, batch, image_size)
    grad = "float32" if autocast else {"bf16": "bfloat16", "fp16": "float16"}.get(precision,
                                                                                  "float32")
    key = gpu.strip().lower()
    ts = TraceSpec("", spec.key, key if key in GPUS else gpu, precision, batch, seq, grad,
                   method=method, recompute=recompute, accumulate=accumulate,
                   autocast=bool(autocast), attention=attention, memory_format=memory_format,
                   heads=heads, lm_positions=lm_positions, ddp_copies=ddp_copies, image=image)
    return estimate_trace(replace(ts, name=name or _default_name(ts)), spec, log=log)


def _image_side(spec: ModelSpec, batch: int, image_size: int | None) -> int:
    """An image model's input side (default :data:`IMAGE_SIDE`), checked, and the pixels of the
    batch kept under the token limit's images at 224; :data:`IMAGE_SIDE` for text models, which
    refuse an ``image_size``."""
    if spec.kind not in IMAGE_KINDS:
        if image_size is not None:
            raise SchedoptError("applies to image models only", "--image-size", image_size)
        return IMAGE_SIDE
    side = IMAGE_SIDE if image_size is None else _check_int(image_size, "--image-size",
                                                             *IMAGE_SIDES)
    if batch * side**2 * 1000 > MAX_TOKENS * IMAGE_SIDE**2:
        raise SchedoptError(f"batch x image = {batch:,} x {side}x{side} pixels: more than"
                            f" {MAX_TOKENS // 1000:,} images of {IMAGE_SIDE}x{IMAGE_SIDE}",
                            "--batch", batch)
    return side


def _checked(model: str | ModelSpec, gpu: str, precision: str, batch: int, seq: int | None,
             accumulate: int, method: str, autocast: object, attention: str,
             memory_format: str, heads: str, lm_positions: int, ddp_copies: object
             ) -> tuple[ModelSpec, int]:
    """:func:`estimate`'s arguments checked: the model's spec and its sequence length
    (:func:`_sequence`).

    Raises
    ------
    SchedoptError
        For bad input: unknown model, GPU, precision, method or attention, sizes out of range,
        ``autocast`` with a precision other than bf16 and fp16, ``attention="flash"`` where the
        profile has no fused kernel at ``precision``, ``memory_format`` unknown, with the
        roofline method or for a text model, ``heads`` unknown or for a model that is not
        BERT, ``lm_positions`` without pre-training heads or outside ``0..seq``,
        ``ddp_copies`` with the roofline method or not a boolean.
    """
    _check_options(method, precision, autocast)
    get_gpu(gpu)
    _check_int(batch, "--batch", 1, MAX_BATCH)
    _check_int(accumulate, "--accumulate", 1, 1024)
    spec = model if isinstance(model, ModelSpec) else load_model_spec(model)
    if method == "operator":
        operator_model(gpu, precision)
    attention_path(attention, gpu, precision, method, spec.kind not in IMAGE_KINDS)
    _check_memory_format(memory_format, method, spec)
    length = _sequence(spec, batch, seq)
    _check_heads(heads, lm_positions, spec, length)
    _check_ddp_copies(ddp_copies, method)
    return spec, length


def _check_ddp_copies(ddp_copies: object, method: str) -> None:
    """One-line errors for ``ddp_copies`` that is not a boolean or goes with the roofline."""
    if not isinstance(ddp_copies, bool):
        raise SchedoptError("must be true or false", "--ddp-copies", ddp_copies)
    if ddp_copies and method != "operator":
        raise SchedoptError("needs the operator method (--method operator)", "--ddp-copies",
                            ddp_copies)


def _default_name(ts: TraceSpec) -> str:
    """``MODEL-GPU-PRECISION-bBATCH`` with the suffixes of :func:`estimate`'s ``name``."""
    label = ts.model.removeprefix("config:").removesuffix(".json")
    mode = f"{ts.precision}-autocast" if ts.autocast else ts.precision
    path = "" if ts.attention == "auto" else f"-{ts.attention}"
    path += "-nchw" if ts.memory_format == "nchw" else ""
    path += "-pretraining" if ts.heads == "pretraining" else ""
    path += f"-lm{ts.lm_positions}" if ts.lm_positions else ""
    path += "-ddp" if ts.ddp_copies else ""
    path += f"-i{ts.image}" if ts.image != IMAGE_SIDE else ""
    gpu = ts.gpu if ts.gpu in GPUS else safe_file_stem(Path(ts.gpu).stem, "gpu")
    return f"{label}-{gpu}-{mode}-b{ts.batch}{path}"


@dataclass
class OperatorTotal:
    """Summed cost of the operators that share an ATen name, output dtype and output shape.

    Attributes
    ----------
    count
        Operators summed.
    flops, nbytes
        Their FLOPs and bytes moved in the forward pass (as priced).
    forward_s, backward_s
        Their priced forward and backward seconds.
    """

    count: int = 0
    flops: float = 0.0
    nbytes: float = 0.0
    forward_s: float = 0.0
    backward_s: float = 0.0


def operator_breakdown(model: str | ModelSpec, gpu: str, precision: str, batch: int,
                       seq: int | None = None, *, method: str = "operator",
                       autocast: bool = False, attention: str = "auto",
                       ) -> dict[tuple[str, str, tuple[int, ...]], OperatorTotal]:
    """Per-operator totals of one estimate (what each kind of kernel costs).

    Parameters
    ----------
    model, gpu, precision, batch, seq, method, autocast, attention
        As :func:`estimate`.

    Returns
    -------
    dict
        ``(ATen name, output dtype, output shape)`` -> :class:`OperatorTotal`, most expensive
        (forward + backward) first. With ``method="roofline"`` the backward is 0 here (that
        method sets it per layer).
    """
    log: list[Any] = []
    estimate(model, gpu, precision, batch, seq, method=method, autocast=autocast,
             attention=attention, log=log)
    out: dict[tuple[str, str, tuple[int, ...]], OperatorTotal] = {}
    for name, dtype, shape, flops, nbytes, fwd, bwd in log:
        tot = out.setdefault((name, dtype, shape), OperatorTotal())
        tot.count += 1
        tot.flops += flops
        tot.nbytes += nbytes
        tot.forward_s += fwd
        tot.backward_s += bwd
    return dict(sorted(out.items(), key=lambda kv: -(kv[1].forward_s + kv[1].backward_s)))
