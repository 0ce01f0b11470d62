"""Measure one device for the compute estimator (the ``bench-gpu`` command).

:func:`bench_gpu` times, on a torch device (a CUDA GPU, or this CPU for tests and for
checking the method):

- matrix products ``[m, k] @ [k, n]`` over a grid of shapes (squares and the shapes of
  transformer and convolution layers), each the fastest of ``repeats`` calls, to which the
  estimator's GEMM model (:class:`~schedopt.measure.operators.GemmModel`: rate, ``k_half``,
  tile and wave quantisation over the device's units) is fitted by
  :func:`~schedopt.measure.operators.fit_gemm`;
- a streaming copy of ``stream_mib`` MiB (read and write: the achievable bandwidth of
  memory-bound operators);
- the smallest eager operator: many back-to-back one-element additions, launch and dispatch
  included (the estimator's kernel floor);
- a training batch norm, forward and backward, of a channels-last activation at the precision
  (float32 weights, as ``torch.autocast`` runs it), as the fraction of the copy's bandwidth that
  its 3 forward and 5 backward passes reach (PyTorch sends bfloat16 batch norms to its own
  kernels and the others to cuDNN);
- with ``attention=True`` on a CUDA device at bf16 or fp16, PyTorch's fused flash attention,
  forward and backward, at the sequence lengths of the estimator's FlashAttention-2 table
  (:data:`~schedopt.measure.gpus.FLASH_SEQ`), head dimensions 64 and 128, causal or not, 16,384
  tokens and a hidden size of 2,048 (FlashAttention-2's own benchmark), as FLOP/s by its count
  (forward ``4 b h s^2 d``, halved when causal; forward and backward 3.5 times that).

:func:`measured_profile` turns the figures into a :class:`~schedopt.measure.gpus.GPU` whose
operator figures at the measured precision are the fitted ones (``peak_flops`` the fitted rate,
``gemm_best`` 1, ``gemm_k_half`` and ``norm_eff`` at that precision; ``sms``, ``hbm_Bps`` with
``memory_eff`` 1, ``kernel_s``, and the flash table when measured); the figures the bench does
not measure (other precisions, host-to-device copy, data loading, the flash table otherwise)
are the base profile's, and its ``*_basis`` strings say which is which. ``schedopt estimate
--gpu FILE`` reads the file (:func:`~schedopt.measure.gpus.load_gpu_profile`).

torch is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import math
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.measure.gpus import FLASH_SEQ, GPU, GPUS, PRECISIONS
from schedopt.measure.operators import GemmModel, fit_gemm
from schedopt.measure.profile import Clock, resolve_device

__all__ = ["QUICK_SHAPES", "SHAPES", "GpuBench", "base_for", "bench_gpu", "check_bench_options",
           "device_info", "flash_table", "measured_profile"]

#: Products timed by default, ``(m, n, k)``: squares from 256 to 8,192 and the products of
#: transformer layers (tokens x hidden x hidden, x 4 hidden, and the reverse) and of
#: convolutions as implicit GEMMs (pixels x output channels x input channels x window).
SHAPES: tuple[tuple[int, int, int], ...] = (
    (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
    (4096, 4096, 4096), (8192, 8192, 8192),
    (2048, 1024, 1024), (2048, 4096, 1024), (2048, 1024, 4096), (8192, 768, 768),
    (8192, 3072, 768), (8192, 768, 3072), (16384, 2048, 2048), (16384, 8192, 2048),
    (16384, 2048, 8192), (4096, 50304, 768),
    (200704, 64, 576), (50176, 128, 1152), (12544, 256, 2304), (3136, 512, 4608),
    (50176, 256, 64), (12544, 1024, 256), (128, 4096, 4096), (64, 1024, 8192),
)
#: A grid small enough for a CPU thread in a few seconds (tests, ``--quick``).
QUICK_SHAPES: tuple[tuple[int, int, int], ...] = (
    (64, 64, 64), (128, 128, 128), (256, 256, 256), (128, 512, 128), (512, 128, 256),
    (32, 256, 512), (384, 384, 64), (256, 64, 512),
)
#: Streaming copy for the bandwidth (MiB of the source tensor).
STREAM_MIB = 256
#: Back-to-back one-element additions timed for the kernel floor.
FLOOR_CALLS = 200
#: Activation of the timed batch norm: a ResNet-50 ``layer1`` activation at batch 32, and a
#: small one for ``--quick``.
NORM_SHAPE, QUICK_NORM_SHAPE = (32, 256, 56, 56), (2, 64, 28, 28)
#: Tokens and hidden size of the flash-attention sweep (FlashAttention-2's benchmark).
FLASH_TOKENS, FLASH_HIDDEN = 16384, 2048
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}
_ITEMSIZE = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}


@dataclass(frozen=True)
class GpuBench:
    """What :func:`bench_gpu` measured.

    Attributes
    ----------
    device
        The device as torch names it (``NVIDIA H100 80GB HBM3``, ``cpu``).
    precision
        ``bf16``, ``fp16``, ``tf32`` or ``fp32``.
    units
        Streaming multiprocessors of a GPU, threads of a CPU (the GEMM model's ``units``).
    samples
        ``(m, n, k, seconds)`` of every timed product.
    gemm
        The GEMM model fitted to ``samples``.
    bandwidth_Bps
        Streaming copy: bytes read and written per second.
    kernel_s
        Seconds per back-to-back eager operator.
    norm_eff
        A training batch norm's 8 passes over its activation per second, over
        ``bandwidth_Bps``.
    flash_fb
        Flash attention forward+backward TFLOP/s at :data:`FLASH_SEQ` per ``(causal,
        head_dim)``; empty when not measured.
    software
        torch (and CUDA) versions and the host, for the profile's sources.
    """

    device: str
    precision: str
    units: int
    samples: list[tuple[int, int, int, float]]
    gemm: GemmModel
    bandwidth_Bps: float
    kernel_s: float
    norm_eff: float
    flash_fb: dict[tuple[bool, int], tuple[float, ...]]
    software: str

    @property
    def itemsize(self) -> int:
        """Bytes per element of the precision's products."""
        return _ITEMSIZE[self.precision]

    def fit_errors(self) -> list[float]:
        """Fitted over measured time of every sample, less one."""
        return [self.gemm.seconds(1, m, n, k, self.itemsize) / t - 1
                for m, n, k, t in self.samples]

    def fit_error_mean(self) -> float:
        """Mean |fitted / measured - 1| over the samples."""
        fit = self.fit_errors()
        return sum(abs(e) for e in fit) / len(fit)


def _device(torch: Any, name: str) -> Any:
    """The torch device called ``name``, checked to exist (:func:`.profile.resolve_device`), a
    GPU with its index."""
    dev = resolve_device(name, "--device")
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev


class _Timer:
    """Seconds of a call on a device (:class:`.profile.Clock`: CUDA events on a GPU,
    ``perf_counter`` on a CPU)."""

    def __init__(self, dev: Any) -> None:
        self.clock = Clock(dev)

    def sync(self) -> None:
        self.clock.sync()

    def once(self, fn: Callable[[], Any]) -> float:
        """Seconds of one call of ``fn`` (the device drained before and after)."""
        self.sync()
        start = self.clock.mark()
        fn()
        end = self.clock.mark()
        self.sync()
        return float(self.clock.between(start, end))

    def best(self, fn: Callable[[], Any], repeats: int, what: str) -> float:
        """The fastest of ``repeats`` calls after one untimed call (a busy machine slows some
        calls, never the fastest); a one-line error naming ``what`` when the clock gives no
        finite positive time, so that every figure derived from a time is finite."""
        fn()
        seconds = min(self.once(fn) for _ in range(repeats))
        if not (math.isfinite(seconds) and seconds > 0):
            raise SchedoptError("the measurement gave no finite positive figure", what, seconds)
        return seconds


def _products(torch: Any, timer: _Timer, dev: Any, dtype: Any,
              shapes: Sequence[tuple[int, int, int]], repeats: int
              ) -> list[tuple[int, int, int, float]]:
    out = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(k, n, device=dev, dtype=dtype)

        def product(a: Any = a, b: Any = b) -> Any:
            return torch.matmul(a, b)

        out.append((m, n, k, timer.best(product, repeats, f"product {m}x{n}x{k}")))
        del a, b
    return out


def _stream(torch: Any, timer: _Timer, dev: Any, mib: int, repeats: int) -> float:
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=dev).fill_(1)
    dst = torch.empty_like(src)
    return 2.0 * src.numel() / timer.best(lambda: dst.copy_(src), repeats, "streaming copy")


def _floor(torch: Any, timer: _Timer, dev: Any, repeats: int) -> float:
    x = torch.zeros(1, device=dev)

    def burst() -> None:
        for _ in range(FLOOR_CALLS):
            x.add_(1.0)

    return timer.best(burst, repeats, "kernel floor") / FLOOR_CALLS


def _norm(torch: Any, timer: _Timer, dev: Any, dtype: Any, shape: Sequence[int],
          repeats: int) -> float:
    """Bytes per second of a training batch norm's 8 passes over a channels-last activation of
    ``shape`` (forward and the gradients of input, scale and shift)."""
    x = torch.randn(*shape, device=dev, dtype=dtype).to(memory_format=torch.channels_last)
    x.requires_grad_(True)
    c = shape[1]
    w = torch.ones(c, device=dev, requires_grad=True)
    b = torch.zeros(c, device=dev, requires_grad=True)
    mean, var = torch.zeros(c, device=dev), torch.ones(c, device=dev)
    grad = torch.randn_like(x)

    def step() -> None:
        y = torch.nn.functional.batch_norm(x, mean, var, w, b, training=True)
        torch.autograd.grad(y, (x, w, b), grad)

    return 8.0 * x.nbytes / timer.best(step, repeats, "batch norm")


def flash_table(torch: Any, dev: Any, dtype: Any, repeats: int, *,
                seqs: Sequence[int] = FLASH_SEQ, tokens: int = FLASH_TOKENS,
                hidden: int = FLASH_HIDDEN, backend: str = "FLASH_ATTENTION"
                ) -> dict[tuple[bool, int], tuple[float, ...]]:
    """Fused attention forward+backward TFLOP/s at ``seqs`` per ``(causal, head_dim)``
    (module docstring); ``backend`` names the ``torch.nn.attention.SDPBackend`` to run
    (``MATH`` checks the code on a CPU)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    kernel = getattr(SDPBackend, backend)
    timer = _Timer(dev)
    table: dict[tuple[bool, int], tuple[float, ...]] = {}
    for causal in (False, True):
        for d in (64, 128):
            rates = []
            for s in seqs:
                b, h = max(1, tokens // s), max(1, hidden // d)
                q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype, requires_grad=True)
                           for _ in range(3))
                grad = torch.randn(b, h, s, d, device=dev, dtype=dtype)

                def step(q: Any = q, k: Any = k, v: Any = v, grad: Any = grad,
                         causal: bool = causal) -> None:
                    # autograd.grad: the input gradients are returned, not accumulated
                    with sdpa_kernel(kernel):
                        torch.autograd.grad(sdpa(q, k, v, is_causal=causal), (q, k, v), grad)

                flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0) * 3.5
                rates.append(flops / timer.best(step, repeats, f"attention at {s} tokens") / 1e12)
                del q, k, v, grad
            table[(causal, d)] = tuple(rates)
    return table


def bench_gpu(device: str = "cuda", precision: str = "bf16", *, quick: bool = False,
              shapes: Sequence[tuple[int, int, int]] | None = None, repeats: int = 10,
              stream_mib: int = STREAM_MIB, attention: bool | None = None,
              norm_shape: Sequence[int] | None = None) -> GpuBench:
    """Measure a device for the estimator (module docstring).

    Parameters
    ----------
    device
        A torch device: ``cuda``, ``cuda:N`` or ``cpu``.
    precision
        ``bf16``, ``fp16``, ``tf32`` (float32 tensors with TF32 products allowed) or ``fp32``
        (TF32 products not allowed).
    quick
        The defaults of ``shapes``, ``attention`` and ``norm_shape`` for seconds on a CPU
        thread: :data:`QUICK_SHAPES`, no attention, :data:`QUICK_NORM_SHAPE`.
    shapes
        The products ``(m, n, k)`` to time (at least 3; default :data:`SHAPES`).
    repeats
        Timed calls of each product, copy, burst and attention step (the fastest counts).
    stream_mib
        Size of the streaming copy (MiB).
    attention
        Also time flash attention (CUDA at bf16 or fp16 only; ignored otherwise; default: not
        ``quick``).
    norm_shape
        The timed batch norm's activation ``(N, C, H, W)`` (default :data:`NORM_SHAPE`).

    Returns
    -------
    GpuBench
        The figures and the fitted GEMM model.

    Raises
    ------
    SchedoptError
        For a device that does not exist here, or an unknown precision.
    """
    import torch

    if precision not in PRECISIONS:
        raise SchedoptError(f"unknown precision; known: {', '.join(PRECISIONS)}", "--dtype",
                            precision)
    dev = _device(torch, device)
    cuda = dev.type == "cuda"
    shapes = shapes or (QUICK_SHAPES if quick else SHAPES)
    norm_shape = norm_shape or (QUICK_NORM_SHAPE if quick else NORM_SHAPE)
    attention = not quick if attention is None else attention
    timer = _Timer(dev)
    dtype = getattr(torch, _DTYPES[precision])
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    # events, streams and synchronisation act on the current device: make it the measured one
    on_device = torch.cuda.device(dev) if cuda else contextlib.nullcontext()
    try:
        with on_device:
            samples = _products(torch, timer, dev, dtype, shapes, repeats)
            bandwidth = _stream(torch, timer, dev, stream_mib, repeats)
            floor = _floor(torch, timer, dev, repeats)
            norm = _norm(torch, timer, dev, dtype, norm_shape, repeats)
            flash = (flash_table(torch, dev, dtype, repeats)
                     if attention and cuda and precision in ("bf16", "fp16") else {})
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    name, _, units = _describe(torch, dev)
    software = (f"torch {torch.__version__}, CUDA {torch.version.cuda}" if cuda else
                f"torch {torch.__version__}, {platform.processor() or platform.machine()}")
    simt = precision == "fp32"
    gemm = fit_gemm(samples, units=units, bandwidth_Bps=bandwidth,
                    itemsize=_ITEMSIZE[precision], small_tile=1.0 if simt else 0.8,
                    align=1 if simt else 8)
    return GpuBench(device=name, precision=precision, units=units, samples=samples, gemm=gemm,
                    bandwidth_Bps=bandwidth, kernel_s=floor, norm_eff=norm / bandwidth,
                    flash_fb=flash, software=software)


def _describe(torch: Any, dev: Any) -> tuple[str, float | None, int]:
    """Name, memory (bytes; None on a CPU) and units of a checked device."""
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        return str(props.name), float(props.total_memory), int(props.multi_processor_count)
    return "cpu", None, int(torch.get_num_threads())


def device_info(device: str) -> tuple[str, float | None]:
    """Name and memory (bytes; None on a CPU) of a torch device, checked to exist.

    Raises
    ------
    SchedoptError
        For a device that does not exist here.
    """
    import torch

    name, memory, _ = _describe(torch, _device(torch, device))
    return name, memory


def base_for(device_name: str, memory_bytes: float | None = None) -> str:
    """The shipped profile of the same processor as ``device_name`` (``NVIDIA H100 80GB HBM3``
    gives ``h100``), for the figures a bench does not measure.

    Raises
    ------
    SchedoptError
        For a device of no shipped profile (the CPU, other GPUs): ``--base`` must name one.
    """
    up = device_name.upper()
    for key in ("H200", "H100", "V100", "K80"):
        if key in up:
            return key.lower()
    if "A100" in up:
        small = memory_bytes is not None and memory_bytes < 60e9
        return "a100-40gb" if small or "40GB" in up.replace(" ", "") else "a100"
    raise SchedoptError(f"no shipped profile matches {device_name!r}: name one for the figures"
                        f" not measured ({', '.join(GPUS)})", "--base", "auto")


def measured_profile(bench: GpuBench, base: GPU, name: str | None = None) -> GPU:
    """A profile with ``bench``'s figures at its precision and ``base``'s elsewhere (module
    docstring).

    Parameters
    ----------
    bench
        The measurement.
    base
        The profile of the figures not measured.
    name
        The profile's name (default: the device's, with ``measured``).

    Returns
    -------
    GPU
        The profile; ``schedopt.measure.gpus.gpu_profile_data`` gives its JSON.
    """
    p = bench.precision
    how = f"measured by `schedopt bench-gpu` on {bench.device} ({bench.software})"
    big = [2.0 * m * n * k / t for m, n, k, t in bench.samples if 2.0 * m * n * k >= 1e9]
    achieved = statistics.median(big) if big else bench.gemm.peak
    flash = bench.flash_fb or (base.flash_fb if base.attention == "flash" else {})
    flash_how = (f"flash attention {how}" if bench.flash_fb else
                 f"flash attention: {base.name}'s table" if flash else "no flash attention table")
    fit = bench.fit_errors()
    spread = f"{min(fit):+.0%} to {max(fit):+.0%}" if fit else "-"
    return replace(
        base,
        name=name or f"{bench.device} (measured)",
        flops={**base.flops, p: achieved},
        flops_basis={**base.flops_basis, p: f"median product of 1 GFLOP or more, {how}"},
        memory_Bps=bench.bandwidth_Bps,
        memory_basis=f"streaming copy, {how}",
        attention="flash" if flash else base.attention,
        peak_flops={**base.peak_flops, p: bench.gemm.peak},
        gemm_best={**base.gemm_best, p: 1.0},
        gemm_basis=(f"{p}: rate {bench.gemm.peak / 1e12:.4g} TFLOP/s, k_half"
                    f" {bench.gemm.k_half:g}, fitted to {len(bench.samples)} products (fitted /"
                    f" measured {spread}), {how}; {flash_how}; other precisions: {base.name}'s"
                    f" figures"),
        sms=bench.units,
        hbm_Bps=bench.bandwidth_Bps,
        memory_eff=1.0,
        hbm_basis=f"streaming copy (read and write), {how}",
        flash_fb=dict(flash),
        kernel_s=bench.kernel_s,
        gemm_k_half={**base.gemm_k_half, p: bench.gemm.k_half},
        norm_eff={**base.norm_eff, p: min(bench.norm_eff, 2.0)},
    )


def check_bench_options(repeats: int, stream_mib: int) -> None:
    """Refuse out-of-range ``--repeats`` and ``--stream-mib`` (one-line errors)."""
    from schedopt.model.limits import check_int_option

    check_int_option(repeats, "--repeats", 1, 1000)
    check_int_option(stream_mib, "--stream-mib", 1, 65536)
