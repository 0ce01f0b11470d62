"""GPU profiles of the compute estimator (:mod:`schedopt.measure.estimate`), with their sources.

Each profile holds two sets of figures:

- the *roofline* figures (``flops``, ``memory_Bps``): one achieved FLOP/s per precision and one
  achieved bandwidth, as the shipped estimated traces were made with (``method="roofline"``);
- the *operator* figures: dense peaks, the best achievable fraction of each peak for matrix
  products, the number of streaming multiprocessors (for wave quantisation), the peak memory
  bandwidth and its achievable fraction, the FlashAttention-2 throughput curve and the per-kernel
  floor (``method="operator"``, the default of ``schedopt estimate``; docs/estimate.md).

Sources are the public tables named in each ``*_basis`` string; no H200 layer measurement is used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schedopt.errors import SchedoptError, from_validation_error
from schedopt.model.limits import Bandwidth, Int, Number

__all__ = ["GPU", "GPUS", "PRECISIONS", "check_profile", "find_profile", "get_gpu",
           "gpu_profile_data", "load_gpu_profile", "profile_schema", "profile_summary"]

#: Compute precisions ``schedopt estimate --dtype`` takes.
PRECISIONS = ("bf16", "fp16", "tf32", "fp32")

#: Sequence lengths of the FlashAttention-2 forward+backward tables (Dao, arXiv 2307.08691,
#: repository figures ``assets/flash2_{a100,h100}_fwd_bwd_benchmark.png``).
FLASH_SEQ = (512, 1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True)
class GPU:
    """Throughput figures of one GPU generation.

    Attributes
    ----------
    name
        Marketing name, written into every trace's ``source``.
    flops, flops_basis
        Roofline method: achieved FLOP/s per precision and where the figure comes from.
    memory_Bps, memory_basis
        Roofline method: achieved memory bandwidth in bytes per second.
    pcie_Bps, pcie_basis, loader_workers, loader_basis
        Host-side figures of the iteration-level costs (``h2d_s``, ``io_s``).
    attention
        ``"flash"`` (fused FlashAttention kernel through PyTorch SDPA) or ``"eager"``.
    peak_flops
        Operator method: dense peak FLOP/s per precision (no sparsity).
    gemm_best
        Operator method: largest achievable fraction of ``peak_flops`` for a matrix product.
    gemm_basis
        Where ``peak_flops`` and ``gemm_best`` come from.
    sms
        Streaming multiprocessors (one output tile per SM per wave).
    hbm_Bps, memory_eff, hbm_basis
        Peak memory bandwidth, the fraction a large streaming kernel reaches, and sources.
    flash_fb
        FlashAttention-2 forward+backward TFLOP/s at :data:`FLASH_SEQ`, keyed by
        ``(causal, head_dim)`` with head_dim 64 or 128; empty without flash attention.
    kernel_s
        Smallest duration of one operator (launch and dispatch floor, seconds).
    gemm_k_half
        Per precision, the reduction length at which a matrix product's main loop runs at half
        its asymptotic rate (:class:`~schedopt.measure.operators.GemmModel`); 64 where not
        measured.
    norm_eff
        Per precision, the fraction of the memory-bound bandwidth (``hbm_Bps * memory_eff``) that
        a training batch norm's 3 forward and 5 backward passes reach; 1 where not measured.
    """

    name: str
    flops: dict[str, float]
    flops_basis: dict[str, str]
    memory_Bps: float
    memory_basis: str
    pcie_Bps: float
    pcie_basis: str
    loader_workers: int
    loader_basis: str
    attention: str
    peak_flops: dict[str, float] = field(default_factory=dict)
    gemm_best: dict[str, float] = field(default_factory=dict)
    gemm_basis: str = ""
    sms: int = 80
    hbm_Bps: float = 0.0
    memory_eff: float = 0.87
    hbm_basis: str = ""
    flash_fb: dict[tuple[bool, int], tuple[float, ...]] = field(default_factory=dict)
    kernel_s: float = 5e-6
    gemm_k_half: dict[str, float] = field(default_factory=dict)
    norm_eff: dict[str, float] = field(default_factory=dict)


#: Typical-shape GEMM throughput relative to the best shape: the five large GEMMs of the
#: EleutherAI cookbook's sizing sample (benchmarks/sizing/sample_results/transformer.out, h 4096,
#: micro-batch 4, sequence 2048: 241.6, 234.9, 241.1, 252.8, 255.4 TFLOP/s, mean 245) against the
#: 267 TFLOP/s the tile and wave terms predict for them at the A100's best-shape 86.9%.
TYPICAL_OVER_BEST = 0.92
#: Kernel floor: back-to-back asynchronous launches cost 2.5-4 us and an eager PyTorch operator
#: 5-7 us of host dispatch (research notes: ocannl#488, pytorch#41383, NVIDIA CUDA-graphs blog).
EAGER_KERNEL_S = 5e-6
_MEM = ("87% of peak for large streaming kernels: mli/transformers-benchmarks micro_bench, V100"
        " a*1.2 on 4M float32 = 783 of 900 GB/s; cub babelstream 86.9-87.8% (NVIDIA/cccl #9881)")

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
        peak_flops={"fp32": 4.37e12},
        gemm_best={"fp32": 0.44},
        gemm_basis="fp32 4.37 TFLOP/s boost peak of one GK210; 44% achieved on B-Caffe GoogleNet"
                   " (the roofline calibration above)",
        sms=13,
        hbm_Bps=240e9,
        memory_eff=0.70,
        hbm_basis="240 GB/s GDDR5 per GK210, 70% assumed",
        kernel_s=EAGER_KERNEL_S,
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
        peak_flops={"fp16": 125e12, "fp32": 15.7e12},
        gemm_best={"fp16": 94.9 / 125 * TYPICAL_OVER_BEST,
                   "fp32": 14.43 / 15.7},
        gemm_basis="peaks 125 (fp16 tensor) and 15.7 (fp32) TFLOP/s; best square matmul 94.9"
                   " (fp16) and 14.4 (fp32) TFLOP/s at n = 8192 on a V100-SXM2-16GB"
                   " (mli/transformers-benchmarks micro_bench.ipynb @53a232b, PyTorch 1.13)",
        sms=80,
        hbm_Bps=900e9,
        memory_eff=0.87,
        hbm_basis=f"900 GB/s HBM2; {_MEM}",
        kernel_s=EAGER_KERNEL_S,
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
        peak_flops={"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
        gemm_best={"bf16": 271.2 / 312 * TYPICAL_OVER_BEST, "fp16": 271.2 / 312 * TYPICAL_OVER_BEST,
                   "tf32": 116 / 156 * TYPICAL_OVER_BEST, "fp32": 18.88 / 19.5},
        gemm_basis="peaks 312 (bf16/fp16), 156 (TF32), 19.5 (fp32) TFLOP/s (NVIDIA A100"
                   " datasheet); bf16 best 271.2 TFLOP/s (ml-engineering MAMF table, torch 2.6)"
                   f" x {TYPICAL_OVER_BEST} typical-over-best shape (EleutherAI cookbook sizing"
                   " sample); TF32 116 TFLOP/s square matmul (mli/transformers-benchmarks README,"
                   " A100 80GB); fp32 18.88 TFLOP/s cuBLAS SGEMM (Yinghan-Li/YHs_Sample#4)",
        sms=108,
        hbm_Bps=2039e9,
        memory_eff=0.87,
        hbm_basis=f"2,039 GB/s HBM2e; {_MEM}",
        flash_fb={(False, 64): (132, 153, 162, 171, 175, 176),
                  (False, 128): (155, 173, 187, 196, 201, 203),
                  (True, 64): (88, 119, 140, 156, 165, 171),
                  (True, 128): (99, 133, 155, 173, 182, 189)},
        kernel_s=EAGER_KERNEL_S,
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
        peak_flops={"bf16": 989e12, "fp16": 989e12, "tf32": 494.5e12, "fp32": 67e12},
        gemm_best={"bf16": 794.5 / 989 * TYPICAL_OVER_BEST, "fp16": 794.5 / 989 * TYPICAL_OVER_BEST,
                   "tf32": 794.5 / 989 * TYPICAL_OVER_BEST, "fp32": 0.90},
        gemm_basis="peaks 989 (bf16/fp16), 494.5 (TF32), 67 (fp32) TFLOP/s (ml-engineering"
                   " accelerator tables); bf16 best 794.5 TFLOP/s (ml-engineering MAMF table,"
                   f" torch 2.7) x {TYPICAL_OVER_BEST} typical-over-best shape; TF32 assumed"
                   " the bf16 fraction; fp32 assumed 90% (the A100's SGEMM reaches 97%)",
        sms=132,
        hbm_Bps=3350e9,
        memory_eff=0.87,
        hbm_basis=f"3,350 GB/s HBM3; {_MEM}",
        flash_fb={(False, 64): (215, 254, 274, 288, 294, 296),
                  (False, 128): (248, 294, 320, 326, 335, 338),
                  (True, 64): (141, 192, 232, 257, 273, 284),
                  (True, 128): (163, 221, 265, 294, 308, 328)},
        kernel_s=EAGER_KERNEL_S,
    ),
}

#: The H100's assumptions with the H200's memory (the same processor, HBM3e at 4,800 GB/s).
GPUS["h200"] = replace(
    GPUS["h100"], name="H200 SXM 141GB", memory_Bps=3900e9,
    memory_basis="assumed 81% of 4,800 GB/s HBM3e",
    flops_basis={"bf16": "assumed 40% of the 989 TFLOP/s dense bf16 peak (the H100's)"},
    loader_basis="assumed as DGX H100: 112 CPU cores for 8 GPUs",
    hbm_Bps=4800e9, hbm_basis=f"4,800 GB/s HBM3e (ml-engineering: the H100's processor); {_MEM}",
    gemm_basis=GPUS["h100"].gemm_basis + "; the H200 has the H100's processor (ml-engineering"
    " MAMF table: 'H200 is the same')")


#: The A100's processor with the 40 GB board's memory (HBM2 at 1,555 GB/s against the 80 GB
#: board's HBM2e at 2,039 GB/s; the same 108 SMs and peaks, NVIDIA A100 datasheet).
GPUS["a100-40gb"] = replace(
    GPUS["a100"], name="A100 SXM4 40GB", memory_Bps=1213e9,
    memory_basis="assumed 78% of 1,555 GB/s HBM2 (the 80 GB profile's fraction)",
    hbm_Bps=1555e9, hbm_basis=f"1,555 GB/s HBM2 (NVIDIA A100 datasheet, 40 GB SXM4); {_MEM}",
    gemm_basis=GPUS["a100"].gemm_basis + "; the 40 GB A100 has the 80 GB one's processor")


def get_gpu(name: str) -> GPU:
    """The profile called ``name`` (case-insensitive), or the profile file at that path.

    Parameters
    ----------
    name
        A key of :data:`GPUS`, or the path of a profile JSON (:func:`load_gpu_profile`, written
        by ``schedopt bench-gpu``).

    Returns
    -------
    GPU
        The profile.

    Raises
    ------
    SchedoptError
        For an unknown name, or a profile file that cannot be read or is not valid.
    """
    key = str(name).strip().lower()
    if key in GPUS:
        return GPUS[key]
    if key.endswith(".json") or "/" in key or "\\" in key:
        return load_gpu_profile(name)
    raise SchedoptError(f"unknown GPU; known: {', '.join(GPUS)}, or a profile JSON written by"
                        " `schedopt bench-gpu`", "--gpu", name)


# ---------------------------------------------------------------------------- profile files
#: Keys of ``flash_fb`` in a profile file: ``(causal, head_dim)``.
_FLASH_KEYS = {"causal-64": (True, 64), "causal-128": (True, 128),
               "full-64": (False, 64), "full-128": (False, 128)}
_Precision = Literal["bf16", "fp16", "tf32", "fp32"]
_Text = Annotated[str, Field(max_length=2000)]
#: FLOP/s: 10^6 to 10^18 (every time derived from one stays finite).
_Flops = Annotated[Number, Field(ge=1e6, le=1e18)]
#: A fraction of a peak: 0.001 to 1.
_Fraction = Annotated[Number, Field(ge=1e-3, le=1.0)]
#: TFLOP/s of the flash tables: 10^-6 to 10^6.
_Tflops = Annotated[Number, Field(ge=1e-6, le=1e6)]
#: Largest profile file read (bytes).
MAX_PROFILE_BYTES = 1 << 20


class _ProfileFile(BaseModel):
    """The JSON form of a :class:`GPU` (every field required, nothing else allowed)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]
    flops: dict[_Precision, _Flops]
    flops_basis: dict[_Precision, _Text]
    memory_Bps: Bandwidth
    memory_basis: _Text
    pcie_Bps: Bandwidth
    pcie_basis: _Text
    loader_workers: Annotated[Int, Field(ge=1, le=4096)]
    loader_basis: _Text
    attention: Literal["flash", "eager"]
    peak_flops: Annotated[dict[_Precision, _Flops], Field(min_length=1)]
    gemm_best: dict[_Precision, _Fraction]
    gemm_basis: _Text
    sms: Annotated[Int, Field(ge=1, le=1_000_000)]
    hbm_Bps: Bandwidth
    memory_eff: _Fraction
    hbm_basis: _Text
    flash_fb: dict[Literal["causal-64", "causal-128", "full-64", "full-128"],
                   Annotated[list[_Tflops], Field(min_length=6, max_length=6)]]
    kernel_s: Annotated[Number, Field(ge=1e-9, le=1.0)]
    gemm_k_half: dict[_Precision, Annotated[Number, Field(ge=0.0, le=1e6)]]
    norm_eff: dict[_Precision, Annotated[Number, Field(ge=1e-3, le=2.0)]]

    @model_validator(mode="after")
    def _same_precisions(self) -> _ProfileFile:
        if set(self.gemm_best) != set(self.peak_flops):
            raise ValueError(f"gemm_best has {sorted(self.gemm_best)} and peak_flops"
                             f" {sorted(self.peak_flops)}: they must name the same precisions")
        return self


def gpu_profile_data(gpu: GPU) -> dict[str, Any]:
    """The JSON document of a profile (:func:`load_gpu_profile` reads it back)."""
    data = asdict(gpu)
    names = {v: k for k, v in _FLASH_KEYS.items()}
    data["flash_fb"] = {names[key]: list(vals) for key, vals in gpu.flash_fb.items()}
    return data


def find_profile(ref: str) -> GPU | None:
    """The profile ``ref`` names, or None when it names none: a shipped key, or a JSON file whose
    top level has ``peak_flops`` (read and checked by :func:`load_gpu_profile`)."""
    import json

    key = str(ref).strip().lower()
    if key in GPUS:
        return GPUS[key]
    path = Path(ref)
    try:  # anything unreadable is not a profile here: the trace or cluster loader reports it
        if not (key.endswith(".json") and path.is_file()):
            return None
        data = path.read_bytes()[:MAX_PROFILE_BYTES]
        head = json.loads(data) if b'"peak_flops"' in data else None
    except (ValueError, OSError, RecursionError):
        return None
    return load_gpu_profile(path) if isinstance(head, dict) and "peak_flops" in head else None


def profile_summary(gpu: GPU) -> dict[str, Any]:
    """What ``schedopt info`` shows of a profile: its operator figures, one line per kind."""
    products = "; ".join(
        f"{p} {gpu.peak_flops[p] * gpu.gemm_best[p] / 1e12:.4g} TFLOP/s best shape, k_half"
        f" {gpu.gemm_k_half.get(p, 64.0):g}" for p in PRECISIONS if p in gpu.peak_flops)
    norms = "; ".join(f"{p} at {e:.2f} of it" for p, e in gpu.norm_eff.items())
    return {
        "kind": "gpu-profile", "name": gpu.name, "matrix_products": products,
        "units": gpu.sms, "memory_bandwidth_Bps": gpu.hbm_Bps * gpu.memory_eff,
        "batch_norm": norms or "at the memory bandwidth", "kernel_floor_s": gpu.kernel_s,
        "attention": ("flash (FlashAttention-2 table, 512 to 16k tokens)"
                      if gpu.attention == "flash" and gpu.flash_fb else "eager"),
        "products_basis": gpu.gemm_basis, "memory_basis": gpu.hbm_basis,
    }


def _parse(data: Any) -> _ProfileFile:
    """``data`` validated as a profile file; a one-line error naming the field otherwise."""
    try:
        return _ProfileFile.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, "GPU profile") from None


def profile_schema() -> dict[str, Any]:
    """The JSON Schema of a profile file (``schedopt schema gpu-profile``)."""
    return _ProfileFile.model_json_schema()


def check_profile(gpu: GPU) -> GPU:
    """``gpu`` when its JSON document is a valid profile file (every figure finite and in
    range), else a one-line :class:`SchedoptError` naming the field: a profile is checked
    before it is written, so every file written reads back."""
    _parse(gpu_profile_data(gpu))
    return gpu


def load_gpu_profile(path: str | Path) -> GPU:
    """Read a GPU profile JSON (``schedopt bench-gpu --out``, :func:`gpu_profile_data`).

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    GPU
        The profile.

    Raises
    ------
    SchedoptError
        For a file that cannot be read, is not JSON, or has a field missing, unknown, of the
        wrong type or out of range (the message names it).
    """
    from schedopt.files import parse_json, read_text

    text = read_text(Path(path), "GPU profile", max_bytes=MAX_PROFILE_BYTES)
    doc = _parse(parse_json(text, "GPU profile", str(path)))
    fields = doc.model_dump()
    fields["flash_fb"] = {_FLASH_KEYS[k]: tuple(v) for k, v in doc.flash_fb.items()}
    return GPU(**fields)
