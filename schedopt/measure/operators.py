"""The operator cost model of a GPU profile: the time of one matrix product from its shape, of a
memory-bound operator from its bytes, of flash attention from its sequence, each at least the
per-kernel floor (docs/estimate.md); and the fit of a product model to timed products
(``bench-gpu``). The compute estimator (:mod:`schedopt.measure.estimate`) prices every operator
with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.measure.gpus import FLASH_SEQ, GPU, get_gpu

__all__ = ["FLASH_PRECISIONS", "ODD", "UNALIGNED", "GemmModel", "OperatorModel", "fit_gemm",
           "has_flash", "operator_model"]

#: Compute precisions with a fused flash-attention kernel.
FLASH_PRECISIONS = ("bf16", "fp16")
#: Tensor-core product with an even dimension that is not a multiple of 8: 272.7 against 398.4
#: TFLOP/s for N = 10922 against 10944 (H100 fp16 bmm, ml-engineering training/performance).
UNALIGNED = 0.685
#: Tensor-core product with an odd dimension (GPT-2's vocabulary of 50,257), fitted to the
#: GPT-2 1.5B H200 measurement (instances/traces/gpt2-1.5b-h200-bf16-measured.json), the one
#: measured trace that the validation holds out of its error figures (docs/estimate.md).
ODD = 0.12


@dataclass(frozen=True)
class GemmModel:
    """Time of one matrix product ``(b x) [m, k] @ [k, n]`` from its shape.

    ``eff = best x tile x wave x k / (k + k_half) x (unaligned if a dimension is not a multiple of
    align, odd if one is odd)``, with ``tile = m n / (ceil(m/T) T ceil(n/T) T)`` and ``wave =
    tiles / (ceil(tiles / units) units)`` (split-K when there are fewer tiles than units), for
    the better of a 128 tile and a 64 tile (the latter at ``small_tile`` efficiency); time =
    ``max(2 b m n k / (peak x eff), bytes / bandwidth, kernel_s)``.

    Attributes
    ----------
    peak
        Dense peak FLOP/s of the compute precision.
    best
        Largest achievable fraction of ``peak``.
    units
        Output tiles that run at once (streaming multiprocessors; 1 on a single CPU thread).
    k_half
        Reduction length at which the main loop runs at half its asymptotic rate.
    bandwidth_Bps
        Achievable memory bandwidth.
    kernel_s
        Smallest time of one kernel.
    small_tile
        Efficiency of a 64 x 64 tile relative to a 128 x 128 one.
    align
        Alignment (elements) that tensor-core kernels need; 1: none.
    unaligned
        Efficiency factor of a product with an even dimension that is not a multiple of
        ``align``.
    odd
        Efficiency factor of a product with an odd dimension (no vectorised loads at all).
    """

    peak: float
    best: float
    units: int
    k_half: float
    bandwidth_Bps: float
    kernel_s: float
    small_tile: float = 0.8
    align: int = 8
    unaligned: float = UNALIGNED
    odd: float = ODD

    def efficiency(self, b: int, m: int, n: int, k: int) -> float:
        """Fraction of ``peak`` that a product of this shape reaches."""
        best = 0.0
        for size, factor in ((128, 1.0), (64, self.small_tile)):
            tm, tn = math.ceil(m / size), math.ceil(n / size)
            tile = m * n / (tm * tn * size * size)
            tiles = b * tm * tn
            # split-K: too few output tiles for the GPU share the reduction (>= 512 deep each)
            split = max(1, min(self.units // tiles, k // 512)) if tiles < self.units else 1
            wave = tiles * split / (math.ceil(tiles * split / self.units) * self.units)
            kk = k / split
            best = max(best, factor * tile * wave * kk / (kk + self.k_half))
        eff = self.best * best
        if self.align > 1 and any(d % 2 for d in (m, n, k)):
            eff *= self.odd
        elif self.align > 1 and any(d % self.align for d in (m, n, k)):
            eff *= self.unaligned
        return eff

    def seconds(self, b: int, m: int, n: int, k: int, itemsize: int) -> float:
        """Time of one product (seconds)."""
        flops = 2.0 * b * m * n * k
        nbytes = float(itemsize) * b * (m * k + k * n + m * n)
        return max(flops / (self.peak * self.efficiency(b, m, n, k)),
                   nbytes / self.bandwidth_Bps, self.kernel_s)


@dataclass(frozen=True)
class OperatorModel:
    """Operator-level cost model of one GPU profile and compute precision.

    Attributes
    ----------
    gemm
        Matrix products and convolutions.
    flash_fb
        FlashAttention-2 forward+backward TFLOP/s per ``(causal, head_dim)`` at
        :data:`~schedopt.measure.gpus.FLASH_SEQ` (empty: no fused attention).
    nchw_transposes
        Activations in NCHW on a tensor-core precision: every convolution that is not a
        pointwise product (1 x 1, stride 1, no padding, one group) also pays the layout
        transposes of :meth:`conv_transposes_s`.
    winograd
        SIMT (fp32) convolutions: a 3 x 3 stride-1 convolution costs the cheaper of its implicit
        GEMM and :meth:`winograd_s` (cuDNN picks the faster algorithm).
    norm_eff
        Fraction of the memory-bound bandwidth a training batch norm reaches (the profile's
        ``norm_eff`` at the precision; 1 unless measured).
    """

    gemm: GemmModel
    flash_fb: Mapping[tuple[bool, int], tuple[float, ...]] = field(default_factory=dict)
    nchw_transposes: bool = False
    winograd: bool = False
    norm_eff: float = 1.0

    def memory_s(self, nbytes: float) -> float:
        """Time of a memory-bound operator moving ``nbytes``."""
        return max(nbytes / self.gemm.bandwidth_Bps, self.gemm.kernel_s)

    def conv_transposes_s(self, x_bytes: float, w_bytes: float, y_bytes: float,
                          data_grad: bool, weight_grad: bool) -> tuple[float, float]:
        """Forward and backward time of cuDNN's NCHW <-> NHWC transposes around one tensor-core
        convolution of input, weight and output bytes ``x_bytes``, ``w_bytes``, ``y_bytes``.

        Each transpose reads and writes its tensor once (a memory-bound kernel). Forward: the
        input and the weight to NHWC, the output back. Data gradient: the output gradient and
        the weight in, the input gradient back. Weight gradient: the output gradient and the
        input in, the weight gradient back. The kernels are those of a ResNet-50 TF32 step on
        an A100 (cuDNN ``nchwToNhwcKernel`` / ``nhwcToNchwKernel``; docs/estimate.md).
        """
        def t(nbytes: float) -> float:
            return self.memory_s(2.0 * nbytes)

        fwd = t(x_bytes) + t(w_bytes) + t(y_bytes)
        bwd = (t(y_bytes) + t(w_bytes) + t(x_bytes) if data_grad else 0.0) + (
            t(y_bytes) + t(x_bytes) + t(w_bytes) if weight_grad else 0.0)
        return fwd, bwd

    def winograd_s(self, x: Any, w: Any, y: Any) -> tuple[float, float, float]:
        """Forward, data-gradient and weight-gradient time of a 3 x 3 stride-1 convolution of
        input ``x``, weight ``w`` and output ``y`` as cuDNN's non-fused Winograd F(4x4, 3x3)
        (``winogradForwardData4x4`` / ``winogradForwardOutput4x4`` / ``winogradWgrad*4x4``).

        One 6 x 6 tile per 4 x 4 output patch. Forward: a data transform (read the input,
        write 36/16 of it), 36 products ``[tiles, C_in] @ [C_in, C_out]`` and an output
        transform (read 36/16 of the output, write it). Data gradient: the same with the
        channels swapped. Weight gradient: the input and the output gradient transformed, 36
        products ``[C_out, tiles] @ [tiles, C_in]``, and their 36/9 of the weight transformed
        back.
        """
        g = self.gemm
        item = x.element_size()
        tiles = x.shape[0] * math.ceil(y.shape[2] / 4) * math.ceil(y.shape[3] / 4)
        c_in, c_out = w.shape[1], w.shape[0]
        xb, yb, wb = float(x.nbytes), float(y.nbytes), float(w.nbytes)

        def transform(nbytes: float, ratio: float) -> float:
            return self.memory_s(nbytes * (1.0 + ratio))

        fwd = transform(xb, 36 / 16) + g.seconds(36, tiles, c_out, c_in, item) + transform(
            yb, 36 / 16)
        dgrad = transform(yb, 36 / 16) + g.seconds(36, tiles, c_in, c_out, item) + transform(
            xb, 36 / 16)
        wgrad = (transform(xb, 36 / 16) + transform(yb, 36 / 16)
                 + g.seconds(36, c_out, c_in, tiles, item) + transform(wb, 36 / 9))
        return fwd, dgrad, wgrad

    def flash_rate(self, seq: int, head_dim: int, causal: bool) -> float:
        """FlashAttention-2 FLOP/s at ``seq`` (log-linear between the table's lengths)."""
        d = 64 if head_dim <= 96 else 128
        rates = self.flash_fb[(causal, d)]
        x = min(max(math.log2(seq), math.log2(FLASH_SEQ[0])), math.log2(FLASH_SEQ[-1]))
        i = min(int(x - math.log2(FLASH_SEQ[0])), len(FLASH_SEQ) - 2)
        lo = math.log2(FLASH_SEQ[i])
        rate = rates[i] + (rates[i + 1] - rates[i]) * (x - lo)
        return rate * 1e12 * (head_dim / d if head_dim < d else 1.0)


def operator_model(gpu: GPU | str, precision: str, odd: float | None = None,
                   memory_format: str = "channels_last") -> OperatorModel:
    """The operator cost model of a GPU profile at a compute precision.

    Parameters
    ----------
    gpu
        A profile or its name (:data:`~schedopt.measure.gpus.GPUS`).
    precision
        ``bf16``, ``fp16``, ``tf32`` or ``fp32``.
    odd
        Efficiency factor of products with an odd dimension (default :data:`ODD`).
    memory_format
        Activation layout of convolutions (:data:`MEMORY_FORMATS`): ``nchw`` prices cuDNN's
        layout transposes at every precision but ``fp32`` (whose SIMT kernels read NCHW).

    Returns
    -------
    OperatorModel
        The model.

    Raises
    ------
    SchedoptError
        For an unknown GPU or a precision the GPU has no figures for.
    """
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if precision not in g.peak_flops:
        raise SchedoptError(f"{g.name} has no {precision} figures; it has:"
                            f" {', '.join(g.peak_flops)}", "--dtype", precision)
    simt = precision == "fp32"
    gemm = GemmModel(peak=g.peak_flops[precision], best=g.gemm_best[precision], units=g.sms,
                     k_half=g.gemm_k_half.get(precision, 64.0),
                     bandwidth_Bps=g.hbm_Bps * g.memory_eff,
                     kernel_s=g.kernel_s,
                     small_tile=1.0 if simt else 0.8, align=1 if simt else 8,
                     odd=odd if odd is not None else ODD)
    flash = g.flash_fb if has_flash(g, precision) else {}
    return OperatorModel(gemm=gemm, flash_fb=flash,
                         nchw_transposes=memory_format == "nchw" and not simt, winograd=simt,
                         norm_eff=g.norm_eff.get(precision, 1.0))


def has_flash(gpu: GPU, precision: str) -> bool:
    """Whether ``gpu`` has a fused flash-attention kernel (and its figures) at ``precision``."""
    return gpu.attention == "flash" and precision in FLASH_PRECISIONS and bool(gpu.flash_fb)


def fit_gemm(samples: list[tuple[int, int, int, float]], *, units: int = 1,
             bandwidth_Bps: float = 10e9, itemsize: int = 4, small_tile: float = 1.0,
             align: int = 1) -> GemmModel:
    """Fit the GEMM model's rate, ``k_half`` and kernel floor to timed products.

    Parameters
    ----------
    samples
        ``(m, n, k, seconds)`` of measured ``[m, k] @ [k, n]`` products.
    units
        Tiles that run at once (1 for one CPU thread; the streaming multiprocessors of a GPU).
    bandwidth_Bps
        Memory bandwidth of the roofline's memory term.
    itemsize
        Bytes per element.
    small_tile, align
        The model's 64-tile efficiency and alignment, held fixed (:func:`operator_model` uses
        0.8 and 8 for tensor-core precisions, 1.0 and 1 for fp32).

    Returns
    -------
    GemmModel
        ``peak`` the fitted asymptotic rate, ``best`` 1.
    """
    if len(samples) < 3:
        raise SchedoptError("need at least 3 timed products", "samples", len(samples))
    best: tuple[float, GemmModel] | None = None
    floors = sorted({0.0} | {s[3] for s in samples})[:4]
    for k_half in (0.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0):
        for floor in floors:
            probe = GemmModel(peak=1.0, best=1.0, units=units, k_half=k_half,
                              bandwidth_Bps=bandwidth_Bps, kernel_s=0.0, small_tile=small_tile,
                              align=align)
            # time = work / rate with work = flops / eff at unit peak; rate by log-mean over
            # the products above the floor, then again over those the candidate puts on the
            # compute term (not on memory or the floor), until that set stays the same
            work = {(m, n, k): 2.0 * m * n * k / probe.efficiency(1, m, n, k)
                    for m, n, k, _ in samples}
            used = [s for s in samples if s[3] > floor]
            cand = None
            for _ in range(4):
                if not used:
                    break
                rate = math.exp(sum(math.log(work[s[:3]] / s[3]) for s in used) / len(used))
                cand = GemmModel(peak=rate, best=1.0, units=units, k_half=k_half,
                                 bandwidth_Bps=bandwidth_Bps, kernel_s=floor,
                                 small_tile=small_tile, align=align)
                bound = [s for s in samples
                         if work[s[:3]] / rate >= cand.seconds(1, *s[:3], itemsize)]
                if bound == used:
                    break
                used = bound
            if cand is None:
                continue
            err = sum(math.log(cand.seconds(1, m, n, k, itemsize) / t) ** 2
                      for m, n, k, t in samples)
            if best is None or err < best[0]:
                best = (err, cand)
    assert best is not None
    return best[1]
