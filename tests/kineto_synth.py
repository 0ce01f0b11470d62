"""Synthetic torch.profiler (Kineto) traces of a 2-rank NCCL DDP run on GPUs, with known truth.

The traces follow the Chrome-trace format torch 2.13 writes with ``ProfilerActivity.CUDA``,
``record_shapes=True, with_stack=True, with_modules=True``: ``ProfilerStep#N`` ranges,
``nn.Module:`` ranges (``python_function``), ``cpu_op`` events with ``External id``,
``Sequence number``, ``Fwd thread id``, ``Input Dims`` and ``Input type``; CUDA runtime (and
driver) launches with ``correlation`` ids, the kernels they launch (``pid`` the device,
``tid`` the stream) and their ``ac2g`` flow events; DDP's all-reduces as ``c10d::allreduce_``
> ``record_param_comms`` > ``nccl:all_reduce`` on the autograd thread, inside the
``AccumulateGrad`` node that made the bucket ready, launching an NCCL kernel on the NCCL
stream; the optimizer step; ``deviceProperties``, ``distributedInfo`` and a
``baseTimeNanoseconds`` to which every ``ts`` is relative.

The model is ``Sequential(Linear(512, 1024), ReLU(), Linear(1024, 1024), ReLU(),
Linear(1024, 10))`` under ``DistributedDataParallel(gradient_as_bucket_view=True)``, its input
copied to the GPU inside the step (``aten::to``, which shares the first layer's sequence
number), and ``F.cross_entropy`` as the loss. Each rank is simulated: a host thread that
launches kernels, a compute stream that runs them in order, and an NCCL stream whose
all-reduce kernel ends when the last rank has started it plus the bucket's transfer time.
The returned :class:`Truth` holds what the importer must recover.
"""

from __future__ import annotations

import gzip
import itertools
import json
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMPUTE = 7  # the default CUDA stream as Kineto numbers it
NCCL = 20  # ProcessGroupNCCL's stream
DEVICE_PROPERTIES = [{
    "id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045510144,
    "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
    "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
}]
GEMM = ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"
        "_execute_segment_k_off_kernel__5x_cublas")
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, {}, std::array<char*, {}> >"
               "(int, {}, std::array<char*, {}>)")
REDUCE = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
          "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>"
          "::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4"
          "> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
          "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
          "{lambda(float, float)#1}>, unsigned int, float, 4>)")
SOFTMAX_FWD = ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
               "(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)")
SOFTMAX_BWD = ("void (anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
               "(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, "
               "float const*, long)")
NLL_FWD = ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d"
           "<float, float, long>(float*, float*, float const*, long const*, float const*, "
           "bool, long, long, long, long)")
NLL_BWD = ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d"
           "<float, long>(float*, float const*, long const*, float const*, float const*, "
           "bool, int, int, long, long)")
FOREACH = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
           "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
           "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::"
           "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
           "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)")


def _elementwise(functor: str) -> str:
    return ELEMENTWISE.format(functor, 2, functor, 2)


FILL = _elementwise("at::native::FillFunctor<float>")
CLAMP = _elementwise("at::native::(anonymous namespace)::launch_clamp_scalar("
                     "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
                     "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::"
                     "{lambda()#7}::operator()() const::{lambda(float)#1}")
THRESHOLD = _elementwise("at::native::(anonymous namespace)::threshold_kernel_impl<float>("
                         "at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}")
DIV = _elementwise("at::native::BinaryFunctor<float, float, float, "
                   "at::native::binary_internal::DivFunctor<float> >")

_TORCH_DTYPE = {"float32": ("float", "Float", "f32"),
                "bfloat16": ("c10::BFloat16", "BFloat16", "bf16")}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclass
class Config:
    """What to generate.

    Attributes
    ----------
    steps
        The profiled step numbers (``ProfilerStep#N``).
    slow_step, slow_factor
        A step whose kernels all take ``slow_factor`` times longer (a warm-up step).
    host_bound
        Short kernels and long host ops: the GPU waits for the launches.
    dtype
        The model's dtype (``float32`` or ``bfloat16``).
    transfer_us
        Per bucket, the all-reduce's transfer time once every rank has started it.
    extra_us
        ``(rank, layer, node)``: extra time (µs) of that rank's first kernel of a layer's
        ``node`` (``"fwd"`` or ``"bwd"``): a slower GPU, so that a different rank starts each
        bucket last.
    nccl_driver
        Launch the NCCL kernels through ``cuLaunchKernelEx`` (``cuda_driver``) and name them
        the NCCL < 2.19 way (``ncclKernel_AllReduce_RING_LL_Sum_...``).
    bases_ns
        ``baseTimeNanoseconds`` of each rank's file (every ``ts`` is relative to it).
    start_us
        When each rank's first profiled step begins, in µs after rank 0's base time.
    """

    steps: tuple[int, ...] = (10, 11, 12, 13, 14)
    slow_step: int | None = 10
    slow_factor: float = 1.5
    host_bound: bool = False
    dtype: str = "float32"
    transfer_us: tuple[float, ...] = (31.3, 412.6, 257.9)
    extra_us: dict[tuple[int, str, str], float] = field(default_factory=lambda: {
        (1, "Linear_2", "bwd"): 45.0, (0, "Linear_1", "bwd"): 130.0})
    nccl_driver: bool = False
    bases_ns: tuple[int, int] = (1_790_857_026_000_000_000, 1_790_857_031_000_000_000)
    start_us: tuple[float, float] = (5_687_561_744_332.016, 5_687_561_744_468.766)


@dataclass
class Layer:
    """One layer of the model: its kernels (µs) and parameters (parameter order)."""

    name: str
    kind: str  # "to", "linear", "relu", "loss"
    params: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    fwd: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class StepTruth:
    """The truth of one step on one rank (times in µs)."""

    s0: float  # the step's start, µs after rank 0's base time
    step_us: float
    busy_us: float
    fwd_us: dict[str, float]
    bwd_us: dict[str, float]
    update_us: float
    nccl: list[tuple[float, float]]  # (start, end), µs after rank 0's base time


@dataclass
class Truth:
    """What the importer must recover from the generated files."""

    layers: list[str]
    params: list[str]  # model.parameters() order
    grads_ready: list[tuple[str, int, str]]  # (name, numel, dtype) in DDP's ready order
    buckets: list[list[str]]  # parameter names per bucket, launch order
    bucket_numel: list[int]
    dtype: str
    transfer_us: tuple[float, ...]
    per: dict[tuple[int, int], StepTruth]  # (rank, step)

    def bucket_bytes(self) -> list[int]:
        """Bytes of every bucket in launch order."""
        return [n * DTYPE_BYTES[self.dtype] for n in self.bucket_numel]

    def mean(self, what: str, steps: list[int] | None = None) -> dict[str, float]:
        """Mean over ranks and ``steps`` of every layer's forward (``fwd``) or backward
        (``bwd``) kernel time, in seconds."""
        chosen = [v for (_, n), v in self.per.items() if steps is None or n in steps]
        return {la: statistics.fmean(getattr(v, f"{what}_us")[la] for v in chosen) * 1e-6
                for la in self.layers}

    def steps_of(self, steps: list[int] | None = None) -> list[StepTruth]:
        """The step truths of both ranks, of ``steps`` (None: all)."""
        return [v for (_, n), v in sorted(self.per.items()) if steps is None or n in steps]


def model(cfg: Config) -> list[Layer]:
    """The layers, with their forward kernels (the backward ones are made as they run)."""
    k = 0.06 if cfg.host_bound else 1.0  # host-bound: tiny kernels
    return [
        Layer("to", "to"),
        Layer("Linear_0", "linear", [("0.weight", (1024, 512)), ("0.bias", (1024,))],
              [(GEMM, 301.5 * k)]),
        Layer("ReLU_0", "relu", [], [(CLAMP, 40.25 * k)]),
        Layer("Linear_1", "linear", [("2.weight", (1024, 1024)), ("2.bias", (1024,))],
              [(GEMM, 577.0 * k)]),
        Layer("ReLU_1", "relu", [], [(CLAMP, 40.75 * k)]),
        Layer("Linear_2", "linear", [("4.weight", (10, 1024)), ("4.bias", (10,))],
              [(GEMM, 61.5 * k)]),
        Layer("cross_entropy_loss_0", "loss", [], [(SOFTMAX_FWD, 12.25 * k),
                                                   (NLL_FWD, 8.5 * k)]),
    ]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class _Gpu:
    """A device's streams: when each is free (µs after rank 0's base time)."""

    def __init__(self) -> None:
        self.free = {COMPUTE: 0.0, NCCL: 0.0}


class _Rank:
    """One rank: its host threads, its GPU and the events written so far."""

    def __init__(self, gen: _Gen, rank: int, t0: float) -> None:
        self.gen = gen
        self.rank = rank
        self.pid = 41000 + rank * 17
        self.events: list[dict[str, Any]] = []
        self.gpu = _Gpu()
        self.threads = {"main": _Thread(self, self.pid, t0),
                         "bwd": _Thread(self, self.pid + 9, t0)}
        self.python_id = itertools.count(1)


class _Thread:
    """A host thread: its clock and the stack of open ops (their ``External id``)."""

    def __init__(self, rank: _Rank, tid: int, t0: float) -> None:
        self.rank = rank
        self.tid = tid
        self.t = t0
        self.stack: list[int] = []

    def emit(self, ev: dict[str, Any]) -> dict[str, Any]:
        self.rank.events.append(ev)
        return ev

    @contextmanager
    def op(self, name: str, cat: str = "cpu_op", /, **args: Any) -> Iterator[int]:
        """An op (or annotation) of category ``cat`` and ``args`` around what the block does,
        with host time of its own before and after its children."""
        host = self.rank.gen.host_us
        ext = next(self.rank.gen.ext)
        start = self.t
        self.t += host
        self.stack.append(ext)
        try:
            yield ext
        finally:
            self.stack.pop()
            self.t += host
            self.emit({"ph": "X", "cat": cat, "name": name, "pid": self.rank.pid,
                       "tid": self.tid, "ts": start, "dur": self.t - start,
                       "args": {"External id": ext, "Record function id": 0, **args}})

    @contextmanager
    def module(self, name: str) -> Iterator[None]:
        """An ``nn.Module:`` range (``with_stack=True, with_modules=True``)."""
        start = self.t
        self.t += 3.0
        yield
        self.t += 2.0
        pyid = next(self.rank.python_id)
        self.emit({"ph": "X", "cat": "python_function", "name": f"nn.Module: {name}",
                   "pid": self.rank.pid, "tid": self.tid, "ts": start, "dur": self.t - start,
                   "args": {"Python parent id": pyid - 1, "Python id": pyid,
                            "Python module id": pyid % 5}})

    def runtime(self, name: str, cat: str = "cuda_runtime", dur: float = 3.0,
                cbid: int = 0) -> int:
        """A runtime (or driver) call without a kernel; its correlation id."""
        corr = next(self.rank.gen.corr)
        self.emit({"ph": "X", "cat": cat, "name": name, "pid": self.rank.pid, "tid": self.tid,
                   "ts": self.t, "dur": dur,
                   "args": {"External id": self.stack[-1] if self.stack else 0, "cbid": cbid,
                            "correlation": corr}})
        self.t += dur
        return corr

    def launch(self, kernel: str, dur: float, stream: int = COMPUTE,
               api: str = "cudaLaunchKernel", cat: str = "cuda_runtime",
               after: float = 0.0, defer: bool = False) -> dict[str, Any]:
        """Launch ``kernel`` (``dur`` µs) on ``stream``; it starts when the stream is free, not
        before ``after`` (an event waited on) and shortly after the launch call."""
        gen, gpu = self.rank.gen, self.rank.gpu
        launch_at = self.t
        corr = self.runtime(api, cat, gen.launch_us, cbid=211 if cat == "cuda_runtime" else 0)
        start = max(launch_at + 2.5, gpu.free[stream], after)
        ext = self.stack[-1] if self.stack else 0
        kern = {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream,
                "ts": start, "dur": dur,
                "args": {"External id": ext, "device": 0, "stream": stream,
                         "correlation": corr, "registers per thread": 128,
                         "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 4.0,
                         "grid": [132, 1, 1], "block": [128, 1, 1],
                         "est. achieved occupancy %": 6}}
        self.emit(kern)
        self.emit({"ph": "s", "id": corr, "pid": self.rank.pid, "tid": self.tid,
                   "ts": launch_at, "cat": "ac2g", "name": "ac2g"})
        flow = self.emit({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": start,
                          "cat": "ac2g", "name": "ac2g", "bp": "e"})
        kern["_flow"] = flow
        if not defer:
            gpu.free[stream] = start + dur
        return kern

    def memcpy(self, kind: str, nbytes: int) -> None:
        """A pageable ``cudaMemcpyAsync``: the host waits for the copy."""
        gpu = self.rank.gpu
        corr = next(self.rank.gen.corr)
        start = max(self.t + 2.0, gpu.free[COMPUTE])
        dur = 6.0 + nbytes / 20e3  # 20 GB/s
        gpu.free[COMPUTE] = start + dur
        ext = self.stack[-1] if self.stack else 0
        self.emit({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {kind} (Pageable -> Device)"
                   if kind == "HtoD" else f"Memcpy {kind} (Device -> Pageable)",
                   "pid": 0, "tid": COMPUTE, "ts": start, "dur": dur,
                   "args": {"External id": ext, "device": 0, "context": 1, "stream": COMPUTE,
                            "correlation": corr, "bytes": nbytes,
                            "memory bandwidth (GB/s)": nbytes / dur / 1e3}})
        self.emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync",
                   "pid": self.rank.pid, "tid": self.tid, "ts": self.t,
                   "dur": start + dur + 1.0 - self.t,
                   "args": {"External id": ext, "cbid": 41, "correlation": corr}})
        self.t = start + dur + 1.0


class _Gen:
    """Counters shared by the ranks and the host costs of the variant."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.ext = itertools.count(1)
        self.corr = itertools.count(1)
        self.host_us = 140.0 if cfg.host_bound else 4.0  # own time of an op, each side
        self.launch_us = 9.0 if cfg.host_bound else 4.5


def _shape(dims: Any) -> dict[str, Any]:
    return {"Input Dims": dims}


def _seq(n: int, thread: int = 0) -> dict[str, Any]:
    return {"Sequence number": n, "Fwd thread id": thread}


class _Step:
    """One rank's forward and backward of one step: host ops, kernels and NCCL launches."""

    def __init__(self, cfg: Config, gen: _Gen, rk: _Rank, layers: list[Layer], number: int,
                 seq: int, buckets: list[list[str]]) -> None:
        self.cfg, self.gen, self.rk, self.layers = cfg, gen, rk, layers
        self.slow = cfg.slow_factor if number == cfg.slow_step else 1.0
        self.k = 0.06 if cfg.host_bound else 1.0
        self.main, self.bwd = rk.threads["main"], rk.threads["bwd"]
        self.fwd_us = {la.name: 0.0 for la in layers}
        self.bwd_us = {la.name: 0.0 for la in layers}
        self.kernels: list[dict[str, Any]] = []
        self.nccl: list[dict[str, Any]] = []
        self.ready: list[tuple[float, float]] = []  # per bucket: (launch, compute-ready)
        self.seq = seq
        self.seq_of: dict[str, int] = {}
        self.shapes = {p: s for la in layers for p, s in la.params}
        self.bucket_numel = [sum(_numel(self.shapes[p]) for p in b) for b in buckets]
        self.last_of_bucket = {b[-1]: k for k, b in enumerate(buckets)}
        self.tname, self.rpc_dtype, self.nccl_tag = _TORCH_DTYPE[cfg.dtype]
        self.s0 = self.main.t

    def run(self, th: _Thread, kernel: str, us: float, layer: str, node: str,
            first: bool) -> None:
        """Launch a kernel of ``layer``'s ``node`` (``fwd``/``bwd``) and count it."""
        extra = self.cfg.extra_us.get((self.rk.rank, layer, node), 0.0) if first else 0.0
        d = (us + extra) * self.slow
        self.kernels.append(th.launch(kernel, d))
        (self.fwd_us if node == "fwd" else self.bwd_us)[layer] += d

    def node(self, name: str, sq: int | None) -> Any:
        """An autograd node evaluated on the autograd thread."""
        args = {} if sq is None else _seq(sq, 1)
        return self.bwd.op(f"autograd::engine::evaluate_function: {name}", **args)

    def forward(self) -> None:
        """zero_grad, the input's copy, the model under DDP, the loss and its seed gradient."""
        main, seq = self.main, self.seq
        main.t += 6.0
        with main.op("Optimizer.zero_grad#SGD.zero_grad", "user_annotation"):
            main.t += 12.0  # set_to_none: no kernels
        # the input copied to the GPU: aten::to peeks the next sequence number
        with main.op("aten::to", **_seq(seq), **{
                "Input type": ["float", "", "", "Scalar", "Scalar", ""],
                "Input Dims": [[64, 512], [], [], [], [], []]}), \
                main.op("aten::_to_copy", **_seq(seq), **{
                    "Input type": ["float", "", ""], "Input Dims": [[64, 512], [], []]}):
            with main.op("aten::empty_strided", **_shape([[], [], [], [], [], []])):
                pass
            with main.op("aten::copy_", **_shape([[64, 512], [64, 512], []])):
                main.memcpy("HtoD", 64 * 512 * 4)
        with main.module("DistributedDataParallel_0"), \
                main.op("DistributedDataParallel.forward", "user_annotation"), \
                main.module("Sequential_0"):
            for la in self.layers:
                if la.kind == "linear":
                    (o, i), b = la.params[0][1], la.params[1][1][0]
                    with main.module(la.name), main.op("aten::linear", **_seq(seq), **{
                            "Input type": [self.tname] * 3,
                            "Input Dims": [[64, i], [o, i], [b]]}):
                        with main.op("aten::t", **_seq(seq), **_shape([[o, i]])), \
                                main.op("aten::transpose"), main.op("aten::as_strided"):
                            pass
                        self.seq_of[la.name + ".t"] = seq
                        seq += 1
                        with main.op("aten::addmm", **_seq(seq),
                                     **_shape([[b], [64, i], [i, o], [], []])):
                            self.run(main, la.fwd[0][0], la.fwd[0][1], la.name, "fwd", True)
                        self.seq_of[la.name] = seq
                        seq += 1
                elif la.kind == "relu":
                    with main.module(la.name), main.op("aten::relu", **_seq(seq)), \
                            main.op("aten::clamp_min"):
                        self.run(main, la.fwd[0][0], la.fwd[0][1], la.name, "fwd", True)
                    self.seq_of[la.name] = seq
                    seq += 1
        loss = self.layers[-1]
        with main.op("aten::cross_entropy_loss", **_seq(seq)):
            with main.op("aten::log_softmax", **_seq(seq)), main.op("aten::_log_softmax"):
                self.run(main, loss.fwd[0][0], loss.fwd[0][1], loss.name, "fwd", True)
            self.seq_of["softmax"] = seq
            seq += 1
            with main.op("aten::nll_loss_nd", **_seq(seq)), \
                    main.op("aten::nll_loss", **_seq(seq)), \
                    main.op("aten::nll_loss_forward", **_seq(seq)):
                self.run(main, loss.fwd[1][0], loss.fwd[1][1], loss.name, "fwd", False)
            self.seq_of["nll"] = seq
            seq += 1
        # loss.backward(): the seed gradient, then the autograd device thread takes over
        with main.op("aten::ones_like"):
            with main.op("aten::empty_like"), main.op("aten::empty_strided"):
                pass
            with main.op("aten::fill_"):
                self.run(main, FILL, 2.5 * self.k, loss.name, "fwd", False)
        self.bwd.t = main.t + 15.0

    def backward(self) -> None:
        """The autograd nodes, last layer first, with DDP's hooks and all-reduces."""
        bwd, k, loss = self.bwd, self.k, self.layers[-1]
        nll, softmax = self.seq_of["nll"], self.seq_of["softmax"]
        with self.node("NllLossBackward0", nll), bwd.op("NllLossBackward0", **_seq(nll, 1)), \
                bwd.op("aten::nll_loss_backward"):
            self.run(bwd, FILL, 2.25 * k, loss.name, "bwd", True)
            self.run(bwd, NLL_BWD, 7.5 * k, loss.name, "bwd", False)
        with self.node("LogSoftmaxBackward0", softmax), \
                bwd.op("LogSoftmaxBackward0", **_seq(softmax, 1)), \
                bwd.op("aten::_log_softmax_backward_data"):
            self.run(bwd, SOFTMAX_BWD, 11.75 * k, loss.name, "bwd", False)
        for la in reversed(self.layers):
            if la.kind == "linear":
                o = la.params[0][1][0]
                sq, sq_t = self.seq_of[la.name], self.seq_of[la.name + ".t"]
                with self.node("AddmmBackward0", sq), \
                        bwd.op("AddmmBackward0", **_seq(sq, 1), **_shape([[64, o]])):
                    first = True
                    if la.name != "Linear_0":  # the model's input needs no gradient
                        with bwd.op("aten::t"), bwd.op("aten::mm"):
                            self.run(bwd, GEMM, 2.0 * la.fwd[0][1], la.name, "bwd", first)
                        first = False
                    with bwd.op("aten::t"), bwd.op("aten::mm"):
                        self.run(bwd, GEMM, 1.5 * la.fwd[0][1], la.name, "bwd", first)
                    with bwd.op("aten::sum", **_shape([[64, o], [], [], []])):
                        self.run(bwd, REDUCE, 9.25 * k, la.name, "bwd", False)
                    with bwd.op("aten::view"):
                        pass
                self.accumulate(la.params[1][0], la.name)
                with self.node("TBackward0", sq_t), bwd.op("TBackward0", **_seq(sq_t, 1)), \
                        bwd.op("aten::t"), bwd.op("aten::transpose"):
                    pass
                self.accumulate(la.params[0][0], la.name)
            elif la.kind == "relu":
                sq = self.seq_of[la.name]
                with self.node("ReluBackward0", sq), bwd.op("ReluBackward0", **_seq(sq, 1)), \
                        bwd.op("aten::threshold_backward"):
                    self.run(bwd, THRESHOLD, 1.25 * la.fwd[0][1], la.name, "bwd", True)

    def accumulate(self, p: str, layer: str) -> None:
        """``AccumulateGrad`` of parameter ``p``, DDP's hook, and the bucket's all-reduce if
        ``p`` completes it."""
        bwd, shape = self.bwd, list(self.shapes[p])
        with self.node("torch::autograd::AccumulateGrad", None):
            with bwd.op("torch::autograd::AccumulateGrad",
                        **{"Input type": [self.tname], "Input Dims": [shape]}), \
                    bwd.op("aten::detach", **_shape([shape])), \
                    bwd.op("detach", **_shape([shape])):
                pass
            # DDP's hook: the gradient (a view of its bucket) divided by the world size
            with bwd.op("aten::div_", **_shape([shape, []])):
                self.run(bwd, DIV, (1.5 + _numel(self.shapes[p]) / 4e4) * self.k, layer,
                         "bwd", False)
            if p in self.last_of_bucket:
                self.allreduce(self.bucket_numel[self.last_of_bucket[p]])

    def allreduce(self, numel: int) -> None:
        """DDP's bucket all-reduce: ``c10d::allreduce_`` > ``record_param_comms`` >
        ``nccl:all_reduce``, launching the NCCL kernel (timed once every rank launched)."""
        bwd, cfg = self.bwd, self.cfg
        comm = {"Collective name": "allreduce", "dtype": self.rpc_dtype,
                "In msg nelems": numel, "Out msg nelems": numel, "Group size": 2,
                "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]"}
        with bwd.op("c10d::allreduce_", **{
                "Input type": ["GenericList", "ScriptObject", "ScriptObject", "", "Scalar"],
                "Input Dims": [[[numel]], [], [], [], []]}), \
                bwd.op("record_param_comms", **comm, **{
                    "Global rank start": 0, "Global rank stride": 1, "Rank": self.rk.rank,
                    "Seq": len(self.nccl)}), \
                bwd.op("nccl:all_reduce", "user_annotation"):
            ready_at = self.rk.gpu.free[COMPUTE]  # the event recorded on the compute stream
            bwd.runtime("cudaEventRecord", dur=2.0)
            bwd.runtime("cudaStreamWaitEvent", dur=2.0)
            if cfg.nccl_driver:
                name = ("ncclKernel_AllReduce_RING_LL_Sum_"
                        f"{'float' if cfg.dtype == 'float32' else 'bfloat16'}(ncclWorkElem)")
                api, cat = "cuLaunchKernelEx", "cuda_driver"
            else:
                name = (f"ncclDevKernel_AllReduce_Sum_{self.nccl_tag}_RING_LL"
                        "(ncclDevKernelArgsStorage<4096ul>)")
                api, cat = "cudaLaunchKernelExC", "cuda_runtime"
            launch_at = bwd.t
            kern = bwd.launch(name, 0.0, stream=NCCL, api=api, cat=cat, defer=True)
            kern["args"].update(comm)
            self.nccl.append(kern)
            self.ready.append((launch_at, ready_at))
            bwd.runtime("cudaEventRecord", dur=2.0)


def generate(cfg: Config) -> tuple[list[dict[str, Any]], Truth]:
    """The two ranks' trace documents and the truth they encode."""
    gen = _Gen(cfg)
    layers = model(cfg)
    params = [p for la in layers for p, _ in la.params]
    shapes = {p: s for la in layers for p, s in la.params}
    grads_ready = [(p, _numel(s), cfg.dtype) for la in reversed(layers)
                   for p, s in reversed(la.params)]
    buckets = [[p for p, _ in reversed(la.params)] for la in reversed(layers) if la.params]
    bucket_numel = [sum(_numel(shapes[p]) for p in b) for b in buckets]
    ranks = [_Rank(gen, r, cfg.start_us[r]) for r in range(2)]
    per: dict[tuple[int, int], StepTruth] = {}

    for j, n in enumerate(cfg.steps):
        steps = [_Step(cfg, gen, rk, layers, n, 120_000 + 40 * j, buckets) for rk in ranks]
        for st in steps:
            st.forward()
            st.backward()
        pending = [st.nccl for st in steps]
        ready = [st.ready for st in steps]
        # the all-reduces: each ends once both ranks have started it, plus its transfer time
        nccl_iv: list[list[tuple[float, float]]] = [[], []]
        for kb, transfer in enumerate(cfg.transfer_us):
            starts = [max(ready[r][kb][0] + 3.0, ready[r][kb][1], ranks[r].gpu.free[NCCL])
                      for r in range(2)]
            end = max(starts) + transfer
            for r in range(2):
                kern = pending[r][kb]
                kern["ts"], kern["dur"] = starts[r], end - starts[r]
                kern["_flow"]["ts"] = starts[r]
                ranks[r].gpu.free[NCCL] = end
                nccl_iv[r].append((starts[r], end))

        # the rest of the step: DDP waits for the buckets, the optimizer, loss.item()
        for rk, st in zip(ranks, steps, strict=True):
            main, bwd = rk.threads["main"], rk.threads["bwd"]
            bwd.runtime("cudaStreamWaitEvent", dur=2.0)  # Reducer::finalize_backward
            rk.gpu.free[COMPUTE] = max(rk.gpu.free[COMPUTE], rk.gpu.free[NCCL])
            main.t = max(main.t, bwd.t) + 8.0
            update = 0.0
            dims = [list(shapes[p]) for p in params]
            with main.op("Optimizer.step#SGD.step", "user_annotation"), \
                    main.op("aten::_foreach_add_", **{
                        "Input type": ["TensorList", "TensorList", "Scalar"],
                        "Input Dims": [dims, dims, []]}):
                for _chunk in range(2):  # multi_tensor_apply launches one kernel per chunk
                    d = (4.0 if cfg.host_bound else 55.0) * st.slow
                    st.kernels.append(main.launch(FOREACH, d))
                    update += d
            with main.op("aten::item"), main.op("aten::_local_scalar_dense"):
                main.memcpy("DtoH", 4)
                main.runtime("cudaStreamSynchronize", dur=1.5)
            main.t += 5.0
            s1 = main.t
            main.emit({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                       "pid": rk.pid, "tid": main.tid, "ts": st.s0, "dur": s1 - st.s0,
                       "args": {"External id": next(gen.ext), "Record function id": 0}})
            gpu_kernels = st.kernels
            g0 = min(kk["ts"] for kk in gpu_kernels)
            main.emit({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}",
                       "pid": 0, "tid": COMPUTE, "ts": g0,
                       "dur": max(kk["ts"] + kk["dur"] for kk in gpu_kernels) - g0,
                       "args": {"External id": 0}})
            assert all(st.s0 <= kk["ts"] < s1 for kk in gpu_kernels)
            per[(rk.rank, n)] = StepTruth(
                s0=st.s0, step_us=s1 - st.s0, busy_us=sum(kk["dur"] for kk in gpu_kernels),
                fwd_us=st.fwd_us, bwd_us=st.bwd_us, update_us=update,
                nccl=nccl_iv[rk.rank])
            main.t += 20.0  # prof.step()
            bwd.t = main.t

    docs = []
    for rk in ranks:
        shift = (cfg.bases_ns[rk.rank] - cfg.bases_ns[0]) / 1e3  # exact: small
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": rk.pid, "tid": 0,
             "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "pid": rk.pid, "tid": 0,
             "args": {"labels": "CPU"}},
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0,
             "args": {"labels": "GPU 0"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": COMPUTE,
             "args": {"name": f"stream {COMPUTE} "}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": NCCL,
             "args": {"name": f"stream {NCCL} "}},
        ]
        for ev in rk.events:
            ev = {k: v for k, v in ev.items() if not k.startswith("_")}
            if "ts" in ev:
                ev["ts"] = round(ev["ts"] - shift, 3)
            if "dur" in ev:
                ev["dur"] = round(ev["dur"], 3)
            events.append(ev)
        first = min(e["ts"] for e in events if "ts" in e)
        events.append({"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler",
                       "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": first})
        docs.append({
            "schemaVersion": 1, "deviceProperties": DEVICE_PROPERTIES,
            "distributedInfo": {"backend": "nccl", "rank": rk.rank, "world_size": 2,
                                "pg_count": 1, "pg_config": [{"pg_name": "0",
                                                              "pg_desc": "default_pg",
                                                              "backend_config": "cuda:nccl",
                                                              "pg_size": 2,
                                                              "ranks": [0, 1]}],
                                "nccl_version": "2.27.5"},
            "cupti_version": 26, "cuda_runtime_version": 12080,
            "cuda_driver_version": 12080, "with_stack": 1, "record_shapes": 1,
            "with_modules": 1, "trace_id": f"{0xABCDEF00 + rk.rank:032X}",
            "displayTimeUnit": "ms", "baseTimeNanoseconds": cfg.bases_ns[rk.rank],
            "traceEvents": events, "traceName": f"rank{rk.rank}.pt.trace.json",
        })
    truth = Truth(layers=[("to_0" if la.kind == "to" else la.name) for la in layers],
                  params=params, grads_ready=grads_ready, buckets=buckets,
                  bucket_numel=bucket_numel, dtype=cfg.dtype, transfer_us=cfg.transfer_us,
                  per=per)
    for v in per.values():  # the "to" layer launches no kernel
        v.fwd_us["to_0"] = v.fwd_us.pop("to")
        v.bwd_us["to_0"] = v.bwd_us.pop("to")
    return docs, truth


def write(cfg: Config, folder: Path, gzip_rank0: bool = True) -> tuple[list[Path], Truth]:
    """Write the two rank files (rank 0 gzipped by default); their paths and the truth."""
    docs, truth = generate(cfg)
    paths = []
    for r, doc in enumerate(docs):
        text = json.dumps(doc, indent=1)
        if r == 0 and gzip_rank0:
            p = folder / "rank0.pt.trace.json.gz"
            p.write_bytes(gzip.compress(text.encode()))
        else:
            p = folder / f"rank{r}.pt.trace.json"
            p.write_text(text)
        paths.append(p)
    return paths, truth
