"""Import torch.profiler (Kineto) traces: layers, gradients, DDP buckets and measured collectives.

One Chrome-trace file per rank (``prof.export_chrome_trace`` or ``tensorboard_trace_handler``,
``.json`` or ``.json.gz``) is read as a stream (:mod:`schedopt.measure.kineto_stream`), keeping
only CPU ops, annotations, ``nn.Module`` ranges, GPU kernels and runtime launches in a compact
form. Per ``ProfilerStep#N`` range:

* **forward layers** are the step's top-level ops on the profiling thread between the first
  autograd-recorded op (one with a ``Sequence number``) and the first backward node, grouped by
  the innermost ``nn.Module:`` range around them (``with_stack=True, with_modules=True``), else by
  the innermost ``record_function`` range, else one layer per top-level autograd op (``linear_0``,
  ``relu_1``, ...). The grouping used is the trace's ``source``.
* **backward** nodes (``autograd::engine::evaluate_function: X``) belong to the layer whose forward
  op has their ``Sequence number``; an ``AccumulateGrad`` node belongs to the layer of the node
  before it, and its input (``record_shapes=True``) is one gradient: numel and dtype, in the
  order DDP sees them.
* **times**: on GPU traces the kernels of a layer's ops (linked by ``correlation`` id through
  their runtime launch); on CPU traces the op durations: a forward layer runs from its first op
  to the next layer's first op (the host gaps between them included), a backward layer is the
  sum of its nodes (the collective launches DDP makes inside them included; its wait for the
  buckets happens after the backward and is not counted). Times are means over the steps and
  ranks used, so that they add up to the mean step. The host time of a layer (its CPU span) is
  reported apart (the trace's ``source`` and the summary). The update is the optimizer step
  and the ops after the backward: their kernels on GPU traces, their op durations on CPU ones.
* **buckets**: each all-reduce launched during the backward: ``record_param_comms`` (NCCL: ``In
  msg nelems``, ``dtype``, ``Group size``) with its NCCL kernel, or ``c10d::allreduce_`` with the
  ``gloo:all_reduce`` range of the gloo worker thread (CPU). Their sizes cut the gradient-ready
  order into DDP's buckets, which must add up exactly.
* **transfer time** of a bucket: a collective's duration includes waiting for the slowest rank.
  With several rank files it is the duration on the rank that started the collective last
  (timestamps aligned by each file's ``baseTimeNanoseconds``); with one file it is the measured
  duration, an upper bound (stated in the summary).

Profiler traces carry no parameter names: tensors are named ``<layer>.p<i>`` (``i`` in the
order of the layer's parameters), or, with ``names``, by the model's ``named_parameters()``
names in ``parameters()`` order, which the trace's forward order and in-layer order follow.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schedopt.errors import SchedoptError, from_validation_error
from schedopt.measure.kineto_stream import read_events
from schedopt.model.trace import DTYPE_BYTES, Trace

__all__ = ["HOST_BOUND_IDLE", "KinetoImport", "import_kineto", "parse_steps"]

#: A step whose compute stream (GPU, or the CPU ops) is idle, neither computing nor waiting for
#: a collective, for more than this share of the step is host-bound.
HOST_BOUND_IDLE = 0.2

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_EVAL = "autograd::engine::evaluate_function: "
#: Runtime calls that wait for the device by design (their whole time is a wait, not host work)
_SYNC = re.compile(r"Synchronize|^cudaMemcpy$|^cuMemcpyDtoH|EventQuery$")
_ACC = "torch::autograd::AccumulateGrad"
_MODULE = "nn.Module: "
#: DDP's copy of an all-reduced bucket back into one gradient (torch >= 1.10 ``reducer.cpp``,
#: ``finalize_bucket_dense``; absent with ``gradient_as_bucket_view=True``): one device copy
#: per gradient, buckets in launch order, each bucket's gradients in the order they became ready
_COPY_BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
_KEEP_CATS = {"cpu_op", "user_annotation", "kernel", "cuda_runtime", "cuda_driver",
              "gpu_memcpy", "gpu_memset"}
_COMM_PREFIXES = ("c10d::", "record_param_comms", "nccl:", "gloo:")
_NOT_RANGES = ("ProfilerStep#", "DistributedDataParallel.", "Optimizer.", "## ", "gloo:", "nccl:",
               "record_param_comms", "Record Window End", "Iteration Start")
_ALLREDUCE = {"allreduce", "all_reduce", "allreduce_coalesced"}
_DTYPES = {
    "float": "float32", "float32": "float32", "c10::float": "float32",
    "double": "float64", "float64": "float64",
    "c10::half": "float16", "half": "float16", "float16": "float16",
    "c10::bfloat16": "bfloat16", "bfloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int64": "int64", "int": "int32", "int32": "int32",
    "signed char": "int8", "char": "int8", "int8": "int8",
}


def _dtype(text: Any, where: str) -> str:
    key = str(text).strip().lower()
    if key not in _DTYPES:
        raise SchedoptError("unknown gradient dtype", where, text)
    return _DTYPES[key]


def _numel(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


@dataclass(slots=True)
class _Ev:
    name: str
    cat: str
    tid: Any
    ts: float
    end: float
    seq: int | None = None
    corr: int | None = None
    dims: Any = None
    itype: Any = None
    args: dict[str, Any] | None = None


class _Keeper:
    """The stream filter: keeps the events the importer reads, compactly."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.events: list[_Ev] = []
        self.names: dict[str, str] = {}
        self.seen = 0

    def __call__(self, ev: dict[str, Any]) -> None:
        self.seen += 1
        if ev.get("ph") != "X":
            return
        cat = ev.get("cat", "")
        name = ev.get("name", "")
        if not isinstance(name, str) or not isinstance(cat, str):
            return
        if cat == "python_function":
            if not name.startswith(_MODULE):
                return
        elif cat not in _KEEP_CATS:
            return
        try:
            ts = float(ev["ts"])
            dur = float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            raise SchedoptError("event without a numeric ts/dur", f"{self.where}: {name}",
                                ev.get("ts")) from None
        if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0:
            raise SchedoptError("event with a negative or non-finite time",
                                f"{self.where}: {name}", dur)
        args = ev.get("args") or {}
        if not isinstance(args, dict):
            args = {}
        name = self.names.setdefault(name, name)
        seq = args.get("Sequence number")
        corr = args.get("correlation")
        keep_dims = (name.startswith(_ACC) or name.startswith(_COMM_PREFIXES)
                     or seq is not None)
        self.events.append(_Ev(
            name, cat, ev.get("tid"), ts, ts + dur,
            int(seq) if isinstance(seq, int | float) else None,
            int(corr) if isinstance(corr, int | float) else None,
            args.get("Input Dims") if keep_dims else None,
            args.get("Input type") if keep_dims else None,
            {k: args[k] for k in ("Collective name", "In msg nelems", "dtype", "Group size")
             if k in args} if name == "record_param_comms"
            else {"bytes": args.get("bytes")} if cat == "gpu_memcpy" else None,
        ))


# --------------------------------------------------------------------------- per-step analysis
@dataclass
class _Layer:
    name: str
    forward_s: float = 0.0
    backward_s: float = 0.0
    host_forward_s: float = 0.0
    host_backward_s: float = 0.0
    tensors: list[tuple[int, str]] = field(default_factory=list)  # accumulate order

    @property
    def host_s(self) -> float:
        """The launching thread's time for the layer, forward and backward."""
        return self.host_forward_s + self.host_backward_s


@dataclass
class _Bucket:
    numel: int
    dtype: str
    launch_s: float  # from the step start
    start_s: float  # transfer start, from the step start
    start: float  # µs on a clock common to the files (base times aligned)
    end: float
    group: int | None


@dataclass
class _Step:
    number: int
    step_s: float
    layers: list[_Layer]
    buckets: list[_Bucket]
    io_s: float
    update_s: float
    busy_s: float
    exposed: list[float]  # per bucket, seconds
    host_update_s: float = 0.0

    def shape(self) -> tuple:
        return (tuple((la.name, tuple(la.tensors)) for la in self.layers),
                tuple((b.numel, b.dtype) for b in self.buckets))


def _nest(evs: list[_Ev]) -> list[int]:
    """Parent index of every event (events sorted by start, longest first; -1: top level)."""
    parent = [-1] * len(evs)
    stack: list[int] = []
    for i, e in enumerate(evs):
        while stack and evs[stack[-1]].end <= e.ts:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent


def _backward_nodes(by_tid: dict[Any, list[_Ev]], parents: dict[Any, list[int]],
                    where: str) -> list[tuple[_Ev, Any, int]]:
    """The autograd nodes of a step (``evaluate_function`` ops not inside another one), as
    (event, thread, index in the thread's ops), in start order."""
    bwd: list[tuple[_Ev, Any, int]] = []
    for tid, v in by_tid.items():
        par = parents[tid]
        for i, e in enumerate(v):
            if e.name.startswith(_EVAL):
                p = par[i]
                while p >= 0 and not v[p].name.startswith(_EVAL):
                    p = par[p]
                if p < 0:
                    bwd.append((e, tid, i))
    if not bwd:
        raise SchedoptError("no backward (autograd) ops in the step", "file", where)
    bwd.sort(key=lambda x: x[0].ts)
    return bwd


def _exposed(calls: list[tuple[float, float]], union: list[tuple[float, float]]) -> list[float]:
    """Each collective's time (s) that neither compute (``union``) nor an earlier collective
    covers; times in µs."""
    exposed: list[float] = []
    done: list[tuple[float, float]] = []
    for a0, a1 in calls:
        cover = _union(union + done)
        exposed.append(max(0.0, (a1 - a0) - _covered(a0, a1, cover)) * 1e-6)
        done.append((a0, a1))
    return exposed


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        elif b > a:
            out.append((a, b))
    return out


def _covered(a: float, b: float, union: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in union)


class _Rank:
    """The events of one rank file and their analysis, step by step."""

    def __init__(self, path: Path, max_bytes: int | None) -> None:
        self.where = str(path)
        keeper = _Keeper(self.where)
        self.meta = read_events(path, keeper, max_bytes=max_bytes)
        dist = self.meta.get("distributedInfo") or {}
        self.rank = dist.get("rank") if isinstance(dist, dict) else None
        self.world = dist.get("world_size") if isinstance(dist, dict) else None
        backend = dist.get("backend") if isinstance(dist, dict) else None
        self.backend = backend if isinstance(backend, str) else None
        base = self.meta.get("baseTimeNanoseconds", 0)
        self.base_ns = int(base) if isinstance(base, int | float) and math.isfinite(base) else 0
        self.offset = 0.0  # µs from the earliest base time of the files (set by the import)
        evs = sorted(keeper.events, key=lambda e: (e.ts, -e.end))
        self.steps = [(int(m.group(1)), e) for e in evs if e.cat == "user_annotation"
                      and (m := _STEP.match(e.name))]
        if not self.steps:
            raise SchedoptError("no ProfilerStep#N ranges: call prof.step() once per training"
                                " step inside the profiler", "file", self.where)
        self.main = Counter(e.tid for _, e in self.steps).most_common(1)[0][0]
        self.kernels = [e for e in evs if e.cat == "kernel"]
        self.gpu = bool(self.kernels)
        self.kernel_of = {e.corr: e for e in self.kernels if e.corr is not None}
        self.memcpy_of = {e.corr: e for e in evs if e.cat == "gpu_memcpy" and e.corr is not None}
        self.runtime = [e for e in evs if e.cat in ("cuda_runtime", "cuda_driver")
                        and e.corr is not None]
        self.cpu = [e for e in evs if e.cat in ("cpu_op", "user_annotation", "python_function")]
        self.cpu_ts = [e.ts for e in self.cpu]
        self.gloo = [e for e in evs if e.cat == "user_annotation" and e.name.startswith("gloo:all")]
        self.grouping = "autograd"
        self.sizes_from = "record_shapes"

    # ---------------------------------------------------------------- helpers
    def _window(self, s0: float, s1: float) -> list[_Ev]:
        return self.cpu[bisect.bisect_left(self.cpu_ts, s0):bisect.bisect_left(self.cpu_ts, s1)]

    def _gpu_time(self, op: _Ev) -> float:
        """Kernel time (µs) of the launches made inside ``op`` (same thread)."""
        total = 0.0
        lo = bisect.bisect_left(self._rt_ts, op.ts)
        for r in self.runtime[lo:]:
            if r.ts > op.end:
                break
            if r.tid == op.tid:
                k = self.kernel_of.get(r.corr) if r.corr is not None else None
                if k is not None and "nccl" not in k.name.lower():
                    total += k.end - k.ts
        return total

    def _waits(self, tid: Any, t0: float, t1: float) -> float:
        """Time (µs) the thread ``tid`` spent in ``[t0, t1)`` waiting on the device inside
        runtime calls: a synchronising call's whole duration, and what any other call took
        beyond its median in the trace (a launch blocks while the device's queue is full)."""
        total = 0.0
        for r in self.runtime[bisect.bisect_left(self._rt_ts, t0):]:
            if r.ts >= t1:
                break
            if r.tid == tid:
                dur = min(r.end, t1) - r.ts
                total += dur if _SYNC.search(r.name) else max(0.0, dur - self._typical[r.name])
        return total

    def analyse(self, wanted: tuple[int | None, int | None]) -> list[_Step]:
        self.runtime.sort(key=lambda e: e.ts)
        self._rt_ts = [e.ts for e in self.runtime]
        durations: dict[str, list[float]] = {}
        for r in self.runtime:
            durations.setdefault(r.name, []).append(r.end - r.ts)
        self._typical = {k: statistics.median(v) for k, v in durations.items()}
        lo, hi = wanted
        chosen = [(n, e) for n, e in self.steps if (lo is None or n >= lo)
                  and (hi is None or n < hi)]
        if not chosen:
            raise SchedoptError("selects none of the profiled steps "
                                f"({', '.join(str(n) for n, _ in self.steps)})", "--steps",
                                f"{'' if lo is None else lo}:{'' if hi is None else hi}")
        return [self._step(n, e) for n, e in chosen]

    def _step(self, number: int, st: _Ev) -> _Step:
        where = f"{self.where}: ProfilerStep#{number}"
        s0, s1 = st.ts, st.end
        window = [e for e in self._window(s0, s1) if e is not st]
        by_tid: dict[Any, list[_Ev]] = {}
        for e in window:
            if e.cat == "cpu_op":
                by_tid.setdefault(e.tid, []).append(e)
        parents = {tid: _nest(v) for tid, v in by_tid.items()}
        bwd = _backward_nodes(by_tid, parents, where)
        bwd_start = bwd[0][0].ts
        main = by_tid.get(self.main, [])
        mpar = parents.get(self.main, [])
        annots = [e for e in window if e.tid == self.main and e.cat == "user_annotation"]
        optim = [(e.ts, e.end) for e in annots if e.name.startswith("Optimizer.")]
        modules = [e for e in window if e.tid == self.main and e.cat == "python_function"]
        ranges = [e for e in annots if not e.name.startswith(_NOT_RANGES)]

        def top_ancestor(i: int) -> int:
            while mpar[i] >= 0:
                i = mpar[i]
            return i

        has_seq: set[int] = set()
        for i, e in enumerate(main):
            if e.seq is not None and e.ts < bwd_start:
                has_seq.add(top_ancestor(i))
        top = [i for i, e in enumerate(main) if mpar[i] < 0 and e.ts < bwd_start
               and not e.name.startswith(_COMM_PREFIXES)
               and not any(a <= e.ts < b for a, b in optim)]
        first = next((i for i in top if i in has_seq), None)
        if first is None:
            raise SchedoptError("no forward (autograd-recorded) ops before the backward",
                                "file", where)
        top = [i for i in top if main[i].ts >= main[first].ts]
        fwd_start = main[first].ts
        # grouping of the forward ops
        if modules:
            self.grouping, enclosing = "nn.Module", modules
        elif ranges:
            self.grouping, enclosing = "record_function", ranges
        else:
            self.grouping, enclosing = "autograd", []

        layers, starts, layer_of_top = self._forward_layers(main, top, has_seq, enclosing)
        if not layers:
            raise SchedoptError("no forward ops in the step", "file", where)
        # ops record the sequence number the next autograd node will take, so ops that make
        # no node (an input's .to(device)) share it with the op that does: the last one
        seq_layer: dict[int, int] = {}
        for i, e in enumerate(main):
            if e.seq is not None and e.ts < bwd_start:
                li = layer_of_top.get(top_ancestor(i))
                if li is not None:
                    seq_layer[e.seq] = li
        busy: list[tuple[float, float]] = []
        self._forward_spans(layers, [s0, *starts, bwd_start], fwd_start)
        for i in top:
            e = main[i]
            if self.gpu:
                layers[layer_of_top[i]].forward_s += self._gpu_time(e) * 1e-6
            busy.append((e.ts, e.end))
        accumulated = self._backward(layers, bwd, by_tid, seq_layer, busy, where)
        bwd_end = max(e.end for e, _, _ in bwd)
        buckets = self._buckets(window, by_tid, bwd_start, s0, where)
        if any(n < 0 for la in layers for n, _ in la.tensors):
            self._sizes_from_copies(layers, accumulated, buckets, window, where)
        roots = [e for i, e in enumerate(main) if mpar[i] < 0]
        update, busy = self._update(roots, optim, (bwd_start, bwd_end), busy, (s0, s1))
        host_update = self._host_update(roots, optim, by_tid, (bwd_start, bwd_end))
        io = (fwd_start - s0) * 1e-6 if not self.gpu else 0.0
        union = _union(busy)
        busy_s = sum(b - a for a, b in union) * 1e-6
        exposed = _exposed([(b.start - self.offset, b.end - self.offset) for b in buckets], union)
        return _Step(number, (s1 - s0) * 1e-6, layers, buckets, io, update, busy_s, exposed,
                     host_update)

    def _forward_spans(self, layers: list[_Layer], marks: list[float], fwd_start: float
                       ) -> None:
        """Each forward layer's span on the main thread (``marks``: the step's start, every
        layer's start, the backward's start): its host time, and on a CPU its forward time. On
        a GPU the thread's waits on the device are taken out, and the work before the forward
        (DDP's buffer broadcast, ...) is charged to the first layer's host time."""
        s0, starts = marks[0], marks[1:]
        for k, la in enumerate(layers):
            a, b = starts[k], starts[k + 1]
            if self.gpu:
                la.host_forward_s = (b - a - self._waits(self.main, a, b)) * 1e-6
            else:
                la.forward_s = la.host_forward_s = (b - a) * 1e-6
        if self.gpu:
            layers[0].host_forward_s += (fwd_start - s0 - self._waits(self.main, s0, fwd_start)
                                         ) * 1e-6

    def _forward_layers(self, main: list[_Ev], top: list[int], has_seq: set[int],
                        enclosing: list[_Ev]) -> tuple[list[_Layer], list[float], dict[int, int]]:
        """The forward's layers from the main thread's top-level ops ``top`` (indices into
        ``main``): consecutive ops in the same enclosing range (module or ``record_function``)
        form one layer, and without a range a new layer starts at every op that records an
        autograd node (``has_seq``). Returns the layers, their start times and the layer of
        each top-level op."""

        def key_of(e: _Ev) -> str | None:
            best = None
            for r in enclosing:
                if r.ts <= e.ts and e.end <= r.end + 1e-3 and (best is None or r.ts >= best.ts):
                    best = r
            if best is None:
                return None
            return best.name[len(_MODULE):] if best.name.startswith(_MODULE) else best.name

        layers: list[_Layer] = []
        starts: list[float] = []
        layer_of_top: dict[int, int] = {}
        used: Counter[str] = Counter()
        prev_key: str | None = None
        for i in top:
            e = main[i]
            key = key_of(e)
            if key is None:
                new = i in has_seq or not layers
                key = e.name.split("::")[-1] if new else prev_key
            else:
                new = key != prev_key
            if new or not layers:
                used[key or "op"] += 1
                n = used[key or "op"]
                base = key or "op"
                name = (f"{base}_{n - 1}" if self.grouping == "autograd" or key_of(e) is None
                        else base if n == 1 else f"{base}@{n}")
                layers.append(_Layer(name))
                starts.append(e.ts)
            prev_key = key
            layer_of_top[i] = len(layers) - 1
        return layers, starts, layer_of_top

    def _update(self, roots: list[_Ev], optim: list[tuple[float, float]],
                backward: tuple[float, float], busy: list[tuple[float, float]],
                step: tuple[float, float]) -> tuple[float, list[tuple[float, float]]]:
        """The update's time (seconds) from the main thread's top-level ops ``roots`` and the
        optimizer's ranges ``optim``, and the compute's busy intervals completed: on a GPU the
        step's kernels but NCCL's, on a CPU ``busy`` plus the optimizer and what follows the
        backward."""
        bwd_start, bwd_end = backward
        after = [e for e in roots if e.ts >= bwd_end
                 and not any(a <= e.ts < b for a, b in optim)]
        if self.gpu:  # the kernels of the optimizer's ops and of those after the backward
            stepping = [e for e in roots
                        if any(a <= e.ts < b for a, b in optim if a >= bwd_start)]
            update = sum(self._gpu_time(e) for e in stepping + after) * 1e-6
            return update, [(k.ts, k.end) for k in self.kernels if step[0] <= k.ts < step[1]
                            and "nccl" not in k.name.lower()]
        update = (sum(b - a for a, b in optim if a >= bwd_start)
                  + sum(e.end - e.ts for e in after)) * 1e-6
        return update, [*busy, *((a, b) for a, b in optim if a >= bwd_end),
                        *((e.ts, e.end) for e in after)]

    def _backward(self, layers: list[_Layer], bwd: list[tuple[_Ev, Any, int]],
                  by_tid: dict[Any, list[_Ev]], seq_layer: dict[int, int],
                  busy: list[tuple[float, float]], where: str) -> list[tuple[int, int]]:
        """Charge the backward nodes to their layers (the forward op with the node's sequence
        number; an ``AccumulateGrad`` adds a gradient to the current layer), in start order.

        A node's host time runs to the next node's start on its thread (the engine's work
        between nodes included). A gradient without a shape (no ``record_shapes``) is entered
        with numel -1, for :meth:`_sizes_from_copies`. Returns every gradient as (layer, index
        in the layer's ``tensors``), in the order they became ready."""
        current = len(layers) - 1
        accumulated: list[tuple[int, int]] = []
        later: dict[int, float] = {}  # node -> the next node's start on its thread
        last_on: dict[Any, int] = {}
        for n, (e, tid, _) in enumerate(bwd):
            if tid in last_on:
                later[last_on[tid]] = e.ts
            last_on[tid] = n
        for n, (e, tid, i) in enumerate(bwd):
            node = e.name[len(_EVAL):]
            if node.startswith(_ACC):
                v = by_tid[tid]
                child = next((c for c in v[i + 1:i + 8] if c.name == _ACC), None)
                if child is None:
                    raise SchedoptError("gradient shapes are missing: profile with"
                                        " record_shapes=True", "file", where)
                shaped = bool(child.dims) and isinstance(child.dims[0], list)
                itype = child.itype[0] if shaped and child.itype else "float"
                accumulated.append((current, len(layers[current].tensors)))
                layers[current].tensors.append((_numel(child.dims[0]) if shaped else -1,
                                                _dtype(itype, f"{where}: {_ACC}")))
            elif e.seq is not None and e.seq in seq_layer:
                current = seq_layer[e.seq]
            end = max(e.end, later.get(n, e.end))
            host = (end - e.ts - (self._waits(tid, e.ts, end) if self.gpu else 0.0)) * 1e-6
            layers[current].host_backward_s += host
            if self.gpu:
                layers[current].backward_s += self._gpu_time(e) * 1e-6
            else:
                layers[current].backward_s += (e.end - e.ts) * 1e-6
                busy.append((e.ts, e.end))
        return accumulated

    def _sizes_from_copies(self, layers: list[_Layer], accumulated: list[tuple[int, int]],
                           buckets: list[_Bucket], window: list[_Ev], where: str) -> None:
        """Gradient sizes of a trace without shapes, from DDP's copies of the all-reduced
        buckets back into the gradients (:data:`_COPY_BACK`, one device copy each, whose
        ``bytes`` the trace records): the i-th copy is the i-th gradient to become ready, and
        the copies must add up to every bucket exactly."""
        missing = SchedoptError("gradient shapes are missing: profile with record_shapes=True"
                                " (or keep DDP's copy_bucket_to_grad:"
                                " gradient_as_bucket_view=False)", "file", where)
        copies = [e for e in window if e.name == _COPY_BACK and e.cat == "cpu_op"]
        if not self.gpu or len(copies) != len(accumulated):
            raise missing
        self.sizes_from = "DDP's copies back into the gradients (no record_shapes)"
        sizes: list[int] = []
        for c in copies:
            got = 0
            for r in self.runtime[bisect.bisect_left(self._rt_ts, c.ts):]:
                if r.ts > c.end:
                    break
                m = self.memcpy_of.get(r.corr) if r.tid == c.tid and r.corr is not None else None
                if m is not None and m.args and isinstance(m.args.get("bytes"), int):
                    got += m.args["bytes"]
            if not got:
                raise missing
            sizes.append(got)
        pos = 0
        for k, b in enumerate(buckets):
            width, total = DTYPE_BYTES[b.dtype], 0
            while pos < len(sizes) and total < b.numel * width:
                li, ti = accumulated[pos]
                layers[li].tensors[ti] = (sizes[pos] // width, b.dtype)
                total += sizes[pos]
                pos += 1
            if total != b.numel * width:
                raise SchedoptError("DDP's copies into the gradients do not add up to the"
                                    " bucket", f"{where}: bucket {k} bytes", total)

    def _host_update(self, roots: list[_Ev], optim: list[tuple[float, float]],
                     by_tid: dict[Any, list[_Ev]], backward: tuple[float, float]) -> float:
        """Host time (s) after the backward on a GPU: the optimizer's ranges, the main thread's
        other top-level ops after the backward, and the top-level ops the other threads run
        after it (DDP's finalisation: the copies back into the gradients). 0 on a CPU, whose
        update is the compute itself."""
        if not self.gpu:
            return 0.0
        bwd_start, bwd_end = backward
        spans = [(self.main, a, b) for a, b in optim if a >= bwd_start]
        spans += [(self.main, e.ts, e.end) for e in roots if e.ts >= bwd_end
                  and not any(a <= e.ts < b for a, b in optim)]
        for tid, v in by_tid.items():
            if tid != self.main:
                end = -math.inf
                for e in v:
                    if e.ts >= max(bwd_end, end):
                        spans.append((tid, e.ts, e.end))
                        end = e.end
        return sum(b - a - self._waits(tid, a, b) for tid, a, b in spans) * 1e-6

    def _buckets(self, window: list[_Ev], by_tid: dict[Any, list[_Ev]], bwd_start: float,
                 s0: float, where: str) -> list[_Bucket]:
        out: list[_Bucket] = []
        rpc = [e for e in window if e.name == "record_param_comms" and e.ts >= bwd_start
               and e.args and str(e.args.get("Collective name", "")).lower() in _ALLREDUCE]
        if rpc:
            nccl = [k for k in self.kernels if "nccl" in k.name.lower()
                    and "allreduce" in k.name.lower().replace("_", "") and k.ts >= s0]
            used: set[int] = set()
            for _j, e in enumerate(rpc):
                args = e.args or {}
                kern = None
                lo = bisect.bisect_left(self._rt_ts, e.ts)
                for r in self.runtime[lo:]:
                    if r.ts > e.end:
                        break
                    k = (self.kernel_of.get(r.corr) if r.tid == e.tid and r.corr is not None
                         else None)
                    if k is not None and "nccl" in k.name.lower():
                        kern = k
                        break
                if kern is None:
                    kern = next((k for k in nccl if id(k) not in used and k.ts >= e.ts), None)
                if kern is None:  # CPU-only NCCL trace: the host call
                    kern = e
                used.add(id(kern))
                group = args.get("Group size")
                out.append(_Bucket(int(args.get("In msg nelems", 0)),
                                   _dtype(args.get("dtype", "float"), f"{where}: dtype"),
                                   (e.ts - s0) * 1e-6, (kern.ts - s0) * 1e-6,
                                   kern.ts + self.offset,
                                   kern.end + self.offset,
                                   int(group) if isinstance(group, int | float) else None))
            return out
        calls = [e for e in window if e.name == "c10d::allreduce_" and e.ts >= bwd_start
                 and e.cat == "cpu_op"]
        taken: set[int] = set()
        for e in calls:
            try:
                numel = sum(_numel(d) for d in e.dims[0])
            except (TypeError, ValueError, IndexError):
                raise SchedoptError("collective sizes are missing: profile with"
                                    " record_shapes=True", "file", where) from None
            g = next((x for x in self.gloo if id(x) not in taken and x.ts >= e.ts - 1.0
                      and x.dims and _numel(x.dims[0]) == numel), None)
            if g is not None:
                taken.add(id(g))
            span = g or e
            itype = g.itype[0] if g is not None and g.itype else "float"
            out.append(_Bucket(numel, _dtype(itype, f"{where}: gloo dtype"), (e.ts - s0) * 1e-6,
                               (span.ts - s0) * 1e-6, span.ts + self.offset, span.end + self.offset,
                               self.world if isinstance(self.world, int) else None))
        return out


# --------------------------------------------------------------------------- the import
def parse_steps(text: str | None) -> tuple[int | None, int | None]:
    """``N:M`` -> the profiled step numbers ``N <= step < M`` (either side may be empty)."""
    if text is None:
        return None, None
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", text)
    if not m:
        raise SchedoptError("must be N:M (step numbers N <= step < M; either may be left out)",
                            "--steps", text)
    lo = int(m.group(1)) if m.group(1) else None
    hi = int(m.group(2)) if m.group(2) else None
    if lo is not None and hi is not None and hi <= lo:
        raise SchedoptError("selects no step (M must exceed N)", "--steps", text)
    return lo, hi


@dataclass
class KinetoImport:
    """What :func:`import_kineto` measured.

    Attributes
    ----------
    trace
        The schedopt trace (per-layer medians over the steps and ranks used).
    buckets
        DDP's buckets in launch order, as lists of tensor names.
    summary
        The ``import kineto --json`` document (steps, step time, busy time, buckets, ...).
    points
        Measured collectives ``(bytes, transfer_s)``, one per bucket and step.
    ranks
        Process-group size of the collectives.
    concurrency
        Collective calls the process group runs at once (:data:`BACKEND_CONCURRENCY`), for the
        cluster's ``comm_concurrency``.
    """

    trace: Trace
    buckets: list[list[str]]
    summary: dict[str, Any]
    points: list[tuple[int, float]]
    ranks: int | None
    concurrency: int = 1


#: Collective calls a torch process group of each backend runs at once: gloo's two worker
#: threads (torch 2.13 ``ProcessGroupGloo::Options``, ``threads`` 2; ``runLoop`` takes queued
#: calls in order); NCCL's one stream per device (every other backend: 1).
BACKEND_CONCURRENCY = {"gloo": 2}


def _in_flight(steps: list[_Step]) -> int:
    """Most collectives seen in flight at once on one rank in one step."""
    most = 0
    for s in steps:
        edges = sorted([(b.start, 1) for b in s.buckets] + [(b.end, -1) for b in s.buckets])
        running = 0
        for _, d in edges:  # an end sorts before a start at the same instant
            running += d
            most = max(most, running)
    return most


def import_kineto(files: Sequence[str | Path], *, steps: str | None = None,
                  names: Sequence[str] | None = None, batch_size: int = 1,
                  name: str | None = None, max_bytes: int | None = None) -> KinetoImport:
    """Read torch.profiler traces (one file per rank) into a schedopt trace and measurements.

    Parameters
    ----------
    files
        Chrome-trace JSON files (``.json`` or ``.json.gz``), one per rank, of the same steps.
    steps
        ``N:M``: the step numbers used (``ProfilerStep#N``, ``N <= step < M``); None: all.
    names
        The model's parameter names in ``model.parameters()`` order (None: ``<layer>.p<i>``).
    batch_size
        Per-rank batch size of the profiled steps (the trace's ``batch_size``).
    name
        Trace name (default: the first file's name without suffixes).
    max_bytes
        Largest decompressed file read (default
        :data:`~schedopt.measure.kineto_stream.MAX_TRACE_BYTES`).

    Returns
    -------
    KinetoImport

    Raises
    ------
    SchedoptError
        A file that is not a Kineto trace, has no steps, no backward or no all-reduce; gradient
        sizes that do not add up to the buckets; ranks or steps that disagree.
    """
    if not files:
        raise SchedoptError("give at least one trace file", "FILE", 0)
    if batch_size < 1:
        raise SchedoptError("must be a positive integer", "--batch-size", batch_size)
    wanted = parse_steps(steps)
    ranks = _read_ranks(files, max_bytes)
    per_rank = [r.analyse(wanted) for r in ranks]
    all_steps = [s for rs in per_rank for s in rs]
    for s in all_steps:
        if not s.buckets:
            raise SchedoptError("no all-reduce (record_param_comms or c10d::allreduce_) during"
                                " the backward: is the model wrapped in DistributedDataParallel?",
                                "file", f"{files[0]}: ProfilerStep#{s.number}")
    shape = Counter(s.shape() for s in all_steps).most_common(1)[0][0]
    used = [s for s in all_steps if s.shape() == shape]
    dropped, ref = len(all_steps) - len(used), used[-1]
    grouping, gpu = ranks[0].grouping, ranks[0].gpu

    # tensors and buckets
    layer_names = _tensor_names(ref, names)
    buckets = _bucket_members(ref, layer_names)

    # per-bucket transfer: latest start across ranks
    multi = len(ranks) > 1
    by_step, transfer, points = _transfers(per_rank, shape, ref)
    group_sizes = {b.group for s in used for b in s.buckets if b.group}
    world = group_sizes.pop() if len(group_sizes) == 1 else (
        ranks[0].world if isinstance(ranks[0].world, int) else (len(files) if multi else None))
    method = ("duration on the rank that started the collective last (latest start across"
              f" {len(ranks)} rank files)" if multi else
              "measured duration on the one rank given: an upper bound (it includes waiting for"
              " slower ranks)")
    host = [_mean([s.layers[k].host_s for s in used]) for k in range(len(ref.layers))]
    source = _source(files, len(by_step), ranks, host)
    trace = _trace(used, ref, layer_names, name or Path(files[0]).name.split(".")[0],
                   batch_size, source, host=gpu)
    backend = ranks[0].backend
    concurrency = BACKEND_CONCURRENCY.get(backend or "", 1)
    header = {"files": [str(f) for f in files], "ranks": len(ranks),
              "process_group_size": world, "device": "gpu" if gpu else "cpu",
              "backend": backend, "comm_concurrency": concurrency,
              "collectives_in_flight_max": _in_flight(used),
              "grouping": grouping, "gradient_sizes": ranks[0].sizes_from,
              "steps": sorted(by_step), "steps_dropped": dropped}
    summary = _summary(header, method, trace, buckets, used, ref, transfer, host)
    return KinetoImport(trace, buckets, summary, points, world, concurrency)


def _source(files: Sequence[str | Path], steps: int, ranks: list[_Rank], host: list[float]
            ) -> str:
    """The imported trace's ``source``: the files, steps, grouping and what the times are."""
    r = ranks[0]
    return (f"MEASURED by torch.profiler: trace {', '.join(Path(f).name for f in files)}: "
            f"{steps} steps x {len(ranks)} rank(s), layers grouped by {r.grouping}, "
            + ("GPU kernel times and the launching threads' host times, their waits on the"
               f" device removed (means); gradient sizes from {r.sizes_from}" if r.gpu
               else "CPU op times (means); host time per layer (s): "
               + ", ".join(f"{h:.3g}" for h in host)))


def _mean(values: list[float]) -> float:
    return float(statistics.fmean(values))


def _trace(used: list[_Step], ref: _Step, layer_names: list[list[str]], name: str,
           batch_size: int, source: str, *, host: bool) -> Trace:
    """The imported trace: ``ref``'s layers and tensors (named ``layer_names``), each time the
    mean over the steps ``used``; with ``host`` (GPU traces) the launching threads' times too
    (``host_forward_s``, ``host_backward_s``, ``host_update_s``: docs/model.md, "Host side").

    Raises
    ------
    SchedoptError
        A figure the trace format refuses (one line naming it).
    """
    layers = []
    for k, la in enumerate(ref.layers):
        tensors = [{"name": nm, "bytes": n * DTYPE_BYTES[d], "dtype": d}
                   for nm, (n, d) in zip(layer_names[k], reversed(la.tensors), strict=True)]
        layers.append({
            "name": la.name,
            "forward_s": _mean([s.layers[k].forward_s for s in used]),
            "backward_s": _mean([s.layers[k].backward_s for s in used]),
            "tensors": tensors,
        })
        if host:
            layers[-1]["host_forward_s"] = _mean([s.layers[k].host_forward_s for s in used])
            layers[-1]["host_backward_s"] = _mean([s.layers[k].host_backward_s for s in used])
    data = {"name": name, "batch_size": batch_size, "source": source,
            "io_s": _mean([s.io_s for s in used]), "update_s": _mean([s.update_s for s in used]),
            "layers": layers}
    if host:
        data["host_update_s"] = _mean([s.host_update_s for s in used])
    try:
        return Trace.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, "imported trace") from None


def _summary(header: dict[str, Any], method: str, trace: Trace, buckets: list[list[str]],
             used: list[_Step], ref: _Step, transfer: list[list[float]], host: list[float]
             ) -> dict[str, Any]:
    """The ``--json`` summary of an import: ``header`` (files, ranks, device, steps), the step
    (median), busy and idle time, the host-bound verdict, the layers and the buckets."""
    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    step_times = [s.step_s for s in used]
    step_med = med(step_times)
    busy = med([s.busy_s for s in used])
    idle = [max(0.0, s.step_s - s.busy_s - sum(s.exposed)) / s.step_s for s in used
            if s.step_s > 0]
    host_bound = sum(1 for f in idle if f > HOST_BOUND_IDLE)
    size = {t.name: t.bytes for t in trace.tensor_list}
    return {
        **header,
        "step_time_s": step_med,
        "step_times_s": step_times,
        "busy_s": busy,
        "idle_s": max(0.0, step_med - busy),
        "host_bound_steps": host_bound,
        "host_bound": host_bound * 2 > len(used),
        "io_s": trace.io_s,
        "update_s": trace.update_s,
        "compute_s": trace.compute_s,
        "transfer_method": method,
        "layers": [{"name": la.name, "forward_s": la.forward_s, "backward_s": la.backward_s,
                    "host_s": h} for la, h in zip(trace.layers, host, strict=True)],
        "buckets": [{
            "index": k,
            "tensors": len(buckets[k]),
            "bytes": sum(size[n] for n in buckets[k]),
            "dtype": ref.buckets[k].dtype,
            "launch_s": med([s.buckets[k].launch_s for s in used]),
            "start_s": med([s.buckets[k].start_s for s in used]),
            "transfer_s": med(transfer[k]),
            "exposed_s": med([s.exposed[k] for s in used]),
        } for k in range(len(buckets))],
        "exposed_comm_s": med([sum(s.exposed) for s in used]),
    }


def _read_ranks(files: Sequence[str | Path], max_bytes: int | None) -> list[_Rank]:
    """The rank files, one rank each, their clocks put on the earliest file's base time (µs
    since the epoch would lose precision)."""
    ranks = [_Rank(Path(f), max_bytes) for f in files]
    ids = [r.rank for r in ranks if r.rank is not None]
    if len(ids) != len(set(ids)):
        raise SchedoptError("two files hold the same rank", "FILE",
                            ", ".join(f"{r.where}: rank {r.rank}" for r in ranks))
    first_base = min(r.base_ns for r in ranks)
    for r in ranks:
        r.offset = (r.base_ns - first_base) / 1e3
    return ranks


def _bucket_members(ref: _Step, layer_names: list[list[str]]) -> list[list[str]]:
    """DDP's buckets as tensor names: the gradients in the order they became ready, cut where
    each all-reduce's element count is reached."""
    buckets: list[list[str]] = []
    pos = 0
    flat = [name_ for k in _ready_layers(ref) for name_ in reversed(layer_names[k])]
    numel_of = {nm: n for k, la in enumerate(ref.layers)
                for nm, (n, _) in zip(layer_names[k], reversed(la.tensors), strict=True)}
    for b in ref.buckets:
        members: list[str] = []
        total = 0
        while pos < len(flat) and total < b.numel:
            members.append(flat[pos])
            total += numel_of[flat[pos]]
            pos += 1
        if total != b.numel:
            raise SchedoptError("the gradients do not add up to DDP's bucket (a gradient"
                                " without a shape, an unused parameter, or a non-DDP"
                                " all-reduce)", f"bucket {len(buckets)} numel", b.numel)
        buckets.append(members)
    if pos != len(flat):
        raise SchedoptError("gradients left outside every bucket (find_unused_parameters or"
                            " a model outside DDP)", "gradients", len(flat) - pos)
    return buckets


def _transfers(per_rank: list[list[_Step]], shape: Any, ref: _Step
               ) -> tuple[dict[int, list[_Step]], list[list[float]], list[tuple[int, float]]]:
    """The steps of ``shape`` by number (one per rank), each bucket's transfer time per step
    (the duration on the rank that started it last) and the measured points (bytes, s)."""
    by_step: dict[int, list[_Step]] = {}
    for rs in per_rank:
        for s in rs:
            if s.shape() == shape:
                by_step.setdefault(s.number, []).append(s)
    transfer: list[list[float]] = [[] for _ in ref.buckets]
    points: list[tuple[int, float]] = []
    for group in by_step.values():
        for k in range(len(ref.buckets)):
            last = max((s.buckets[k] for s in group), key=lambda b: b.start)
            t = (last.end - last.start) * 1e-6
            transfer[k].append(t)
            points.append((ref.buckets[k].numel * DTYPE_BYTES[ref.buckets[k].dtype], t))
    return by_step, transfer, points


def _ready_layers(step: _Step) -> list[int]:
    """Layers in the order their gradients became ready (the backward visits them last first;
    a layer's tensors are listed in parameter order, the reverse of their ready order)."""
    return [k for k in range(len(step.layers) - 1, -1, -1) if step.layers[k].tensors]


def _tensor_names(step: _Step, names: Sequence[str] | None) -> list[list[str]]:
    """Names of every layer's tensors in parameter order."""
    counts = [len(la.tensors) for la in step.layers]
    total = sum(counts)
    if names is not None:
        if len(names) != total:
            raise SchedoptError(f"must list the model's {total} parameters (in parameters()"
                                " order)", "--names", f"{len(names)} names")
        out, i = [], 0
        for c in counts:
            out.append(list(names[i:i + c]))
            i += c
        return out
    return [[f"{la.name}.p{i}" for i in range(c)] for la, c in zip(step.layers, counts,
                                                                   strict=True)]
