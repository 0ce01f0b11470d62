"""Measure a PyTorch model's layer-wise trace (the ``profile`` command).

torch is imported inside the functions, so ``schedopt.measure.profile`` imports without it.
Applying a plan to a model is :mod:`schedopt.emit.ddp_torch`.

Measurement (:func:`profile_model`)
    A *layer* is a leaf module that owns parameters (directly) and runs in the forward pass, in
    the order its forward first ends. Forward times come from forward hooks: the time from the
    end of one layer's forward to the end of the next is charged to the next (so
    parameter-free modules such as activations are charged to the layer after them, and the
    loss to the last layer). Backward times come from ``register_post_accumulate_grad_hook`` on
    every parameter, the moment DDP also sees a gradient as ready: layer ``l``'s backward ends
    when the last of its gradients is accumulated (never earlier than that of layer ``l+1``,
    since the trace's backward runs layer by layer), and runs from the end of layer ``l+1``'s.
    On CUDA the marks are CUDA events and each iteration is synchronised once at its end. The
    trace keeps the median of ``repeats`` iterations after ``warmup``.
"""

from __future__ import annotations

import itertools
import logging
import math
import mmap
import statistics
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from schedopt.emit.ddp_torch import _dtype_name
from schedopt.emit.ddp_torch import torch_module as _torch
from schedopt.errors import SchedoptError
from schedopt.model.trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = [
    "Clock",
    "build_model",
    "check_profile_options",
    "load_factory",
    "profile_model",
    "random_batch",
    "resolve_device",
]

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- profiling


class Clock:
    """Time marks: ``perf_counter`` on CPU, CUDA events on a GPU."""

    def __init__(self, device: Any) -> None:
        self.torch = _torch()
        self.device = device
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def between(self, a: Any, b: Any) -> float:
        """Seconds from mark ``a`` to mark ``b`` (after :meth:`sync`)."""
        if self.cuda:
            return max(0.0, a.elapsed_time(b) / 1e3)
        return max(0.0, b - a)


def _minor_faults() -> int | None:
    """This process's minor page faults so far (None where the OS does not count them)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def _to_device(inputs: Any, device: Any) -> Any:
    torch = _torch()
    if isinstance(inputs, torch.Tensor):
        return inputs.to(device)
    if isinstance(inputs, dict):
        return {k: _to_device(v, device) for k, v in inputs.items()}
    if isinstance(inputs, list | tuple):
        return type(inputs)(_to_device(v, device) for v in inputs)
    return inputs


def _call(model: Any, inputs: Any) -> Any:
    torch = _torch()
    if isinstance(inputs, torch.Tensor):
        return model(inputs)
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, list | tuple):
        return model(*inputs)
    return model(inputs)


def _default_loss(output: Any) -> Any:
    """A scalar to run the backward from: ``output.loss`` if set, else the first tensor's mean."""
    torch = _torch()
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(output, torch.Tensor):
        return output.float().mean()
    values = output.values() if isinstance(output, dict) else (
        output if isinstance(output, list | tuple) else ())
    for v in values:
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return v.float().mean()
    raise SchedoptError("cannot find a tensor in the model's output; pass loss_fn", "loss_fn",
                        type(output).__name__)


def _layers(model: Any) -> list[tuple[str, Any]]:
    """Leaf modules that own parameters needing gradients (candidates for layers)."""
    out = []
    for name, module in model.named_modules():
        if next(module.children(), None) is not None:
            continue
        if any(p.requires_grad for p in module.parameters(recurse=False)):
            out.append((name or "root", module))
    return out


def profile_model(
    model: Any,
    example_inputs: Any,
    *,
    name: str,
    batch_size: int,
    loss_fn: Callable[[Any], Any] | None = None,
    repeats: int = 5,
    warmup: int = 2,
    device: Any = None,
    optimizer: Any = None,
    grad_copy: bool = False,
    grad_view: bool = False,
    host: bool | None = None,
) -> Trace:
    """Measure a model's per-layer forward and backward times and gradient tensors.

    Parameters
    ----------
    model
        A ``torch.nn.Module``, in training mode while measured, moved to ``device`` if given.
    example_inputs
        One batch: a tensor (``model(x)``), a tuple or list (``model(*x)``) or a dict
        (``model(**x)``). Tensors on the CPU are copied to a CUDA device every iteration and
        the copy is reported as ``h2d_s``.
    name
        Trace name.
    batch_size
        Per-GPU batch size of ``example_inputs`` (recorded in the trace).
    loss_fn
        ``output -> scalar tensor``; default: ``output.loss``, else the mean of the output.
    repeats, warmup
        Measured and discarded iterations; the trace keeps the per-layer medians, scaled so
        that each pass sums to the median of its whole passes.
    device
        ``cpu``, ``cuda``, ``cuda:1``, ...; default: the device of the model's parameters.
    optimizer
        ``None`` (``update_s`` = 0), ``"sgd"`` (SGD at learning rate 0: weights unchanged) or
        an optimizer whose ``step()`` is timed (it changes the weights).
    grad_copy
        Copy every gradient, once ready, into a buffer of its own and time the copies in the
        backward, as DDP's reducer copies each into its bucket in its autograd hook; the
        ``source`` states the bytes copied per iteration.
    grad_view
        As ``grad_copy``, then make the copy the gradient, as DDP's ``gradient_as_bucket_view``
        (the emitted setting): autograd's tensor is freed inside the backward and ``zero_grad``
        frees nothing, which on a CPU decides what memory each iteration maps afresh.
    host
        Record the host side: per layer, the CPU time of the thread that launched its forward
        and backward (``host_forward_s``, ``host_backward_s``) and the optimizer step's
        (``host_update_s``), docs/model.md "Host side". Default: on a GPU only (on a CPU the
        launching thread runs the kernels itself: recorded only when asked, capped at the
        layer's time).

    Returns
    -------
    Trace
        Layers (leaf modules owning parameters) in forward order, tensors named as in
        ``named_parameters`` with their bytes and dtype, tied parameters once (in the earliest
        layer); an explicit ``grad_ready_order`` when autograd's order differs from the
        default; on a CPU, the ``source`` states an iteration's minor page faults (median).
        Parameters of non-leaf modules join the layer whose backward made their gradient;
        parameters that receive no gradient are left out (and logged).

    Raises
    ------
    SchedoptError
        No parameters needing gradients, no layer ran, bad ``repeats``/``warmup``, an
        unsupported dtype, or no torch.
    """
    torch = _torch()
    _check_counts(name, repeats, warmup)
    dev = _place(model, device)
    params, opt, copies = _trainable(model, optimizer, grad_copy, grad_view)
    candidates = _layers(model)
    runs = _measure(model, example_inputs, dev, params, candidates, loss_fn or _default_loss,
                    opt, warmup + repeats, warmup, copies)
    trace = _build_trace(model, name, batch_size, dev, repeats, candidates, params, runs,
                         torch.__version__, dev.type == "cuda" if host is None else host)
    return trace if copies is None else copies.noted(trace, warmup + repeats)


def _trainable(model: Any, optimizer: Any, grad_copy: bool, grad_view: bool
               ) -> tuple[list[tuple[str, Any]], Any, _GradCopies | None]:
    """The parameters that need gradients, the optimizer to time (``"sgd"``: SGD at learning
    rate 0) and the gradient copies (with ``grad_copy`` or ``grad_view``)."""
    torch = _torch()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not params:
        raise SchedoptError("the model has no parameters that need gradients", "model",
                            type(model).__name__)
    opt = torch.optim.SGD([p for _, p in params], lr=0.0) if optimizer == "sgd" else optimizer
    copies = _GradCopies(params, view=grad_view) if grad_copy or grad_view else None
    return params, opt, copies


def _check_counts(name: str, repeats: int, warmup: int) -> None:
    """A trace name, and measured and discarded iterations within bounds."""
    if not name:
        raise SchedoptError("must not be empty", "name", name)
    if not 1 <= repeats <= MAX_REPEATS or not 0 <= warmup <= MAX_REPEATS:
        raise SchedoptError(f"repeats must be 1 to {MAX_REPEATS:,} and warmup 0 to "
                            f"{MAX_REPEATS:,}", "repeats", (repeats, warmup))


class _GradCopies:
    """Hooks that copy every gradient, once accumulated, into a buffer allocated once, as
    DDP's reducer copies each gradient into its bucket during the backward (torch 2.13,
    ``torch/csrc/distributed/c10d/reducer.cpp``, ``mark_variable_ready_dense``).

    With ``view`` the buffer then becomes the gradient, as DDP with ``gradient_as_bucket_view``
    makes the bucket's view the gradient, which frees autograd's tensor inside the backward;
    without it the gradient stays autograd's own tensor until ``zero_grad``."""

    def __init__(self, params: list, view: bool = False) -> None:
        self.view = view
        self.bytes = 0
        self.handles = []
        self.buffers = []
        for _, p in params:
            buf = p.detach().new_empty(p.shape)
            self.buffers.append(buf)
            self.handles.append(p.register_post_accumulate_grad_hook(
                lambda q, buf=buf: self._copy(q, buf)))

    def _copy(self, q: Any, buf: Any) -> None:
        buf.copy_(q.grad)
        self.bytes += buf.numel() * buf.element_size()
        if self.view:  # the bucket's view becomes the gradient; autograd's tensor is freed
            q.grad = buf

    def remove(self) -> None:
        """Remove the hooks."""
        for h in self.handles:
            h.remove()

    def noted(self, trace: Trace, iterations: int) -> Trace:
        """``trace`` with the copies stated in its ``source``."""
        per_iteration = self.bytes / iterations
        return Trace.model_validate({**trace.model_dump(exclude_none=True), "source": (
            f"{trace.source}; every gradient copied into a buffer of its own in the backward "
            f"(DDP's copy into its buckets): {per_iteration / 2**20:.1f} MiB per iteration"
            + ("; the copies then made the gradients (gradient_as_bucket_view)" if self.view
               else ""))})


def _measure(model: Any, example_inputs: Any, dev: Any, params: list, candidates: list,
             loss_fn: Callable[[Any], Any], opt: Any, iterations: int,
             warmup: int, copies: _GradCopies | None = None) -> list[dict[str, Any]]:
    """Run ``iterations`` training steps with timing hooks; the raw figures of those after
    ``warmup``. ``copies`` (hooks registered before the timing hooks, so each gradient's
    copy ends before its time is taken) are removed at the end with them. A failure of the
    user's model becomes one line naming the input and device."""
    clock = Clock(dev)
    fwd_marks: list[tuple[int, Any]] = []
    grad_marks: list[tuple[int, Any]] = []
    handles = []
    host_fwd: list[tuple[int, int]] = []
    host_grad: list[tuple[int, int]] = []

    def marker(marks: list, host: list, key: int) -> Callable[..., None]:
        def hook(*_a: Any) -> None:  # returns None: a forward hook's result replaces the output
            marks.append((key, clock.mark()))
            host.append(_host_mark())
        return hook

    for i, (_, module) in enumerate(candidates):
        handles.append(module.register_forward_hook(marker(fwd_marks, host_fwd, i)))
    for j, (_, p) in enumerate(params):
        handles.append(p.register_post_accumulate_grad_hook(marker(grad_marks, host_grad, j)))
    was_training = model.training
    model.train()
    runs: list[dict[str, Any]] = []
    try:
        for it in range(iterations):
            log.info("%s iteration %d of %d", "warm-up" if it < warmup else "measured",
                     it + 1 if it < warmup else it - warmup + 1,
                     warmup if it < warmup else iterations - warmup)
            model.zero_grad(set_to_none=True)
            fwd_marks.clear()
            grad_marks.clear()
            host_fwd.clear()
            host_grad.clear()
            f0 = _minor_faults()
            t0 = clock.mark()
            inputs = _to_device(example_inputs, dev)
            t1, h1 = clock.mark(), _host_mark()
            loss = loss_fn(_call(model, inputs))
            t2, h2 = clock.mark(), _host_mark()
            loss.backward()
            t3, h3 = clock.mark(), _host_mark()
            t4, h4 = t3, h3
            if opt is not None:
                opt.step()
                t4, h4 = clock.mark(), _host_mark()
            clock.sync()
            f1 = _minor_faults()
            if it >= warmup:
                runs.append(_segments(clock, (t0, t1, t2, t3, t4), fwd_marks, grad_marks))
                runs[-1]["host"] = _host_segments(
                    (h1, h2, h3, h4), [i for i, _ in fwd_marks], host_fwd,
                    [j for j, _ in grad_marks], host_grad)
                runs[-1]["faults"] = f1 - f0 if f0 is not None and f1 is not None else None
    except SchedoptError:
        raise
    except Exception as exc:  # the user's model fails on this input or device
        raise SchedoptError(f"the model fails on this input on {dev} ({_one_line(exc)})",
                            "input_shape", _shape_of(example_inputs)) from None
    finally:
        for h in handles:
            h.remove()
        if copies is not None:
            copies.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return runs


def _place(model: Any, device: Any) -> Any:
    """Move ``model`` to ``device`` (None: where its parameters are) and return the device."""
    if device is None:
        first = next(model.parameters(), None)
        return resolve_device(first.device if first is not None else "cpu")
    dev = resolve_device(device)
    try:
        model.to(dev)
    except Exception as exc:  # the user's module refuses the device
        raise SchedoptError(f"cannot move the model there: {_one_line(exc)}", "device",
                            str(device)) from None
    return dev


def _shape_of(inputs: Any) -> Any:
    """Shapes of the example inputs, for error messages."""
    shape = getattr(inputs, "shape", None)
    if shape is not None:
        return ",".join(str(d) for d in shape)
    if isinstance(inputs, dict):
        return {k: _shape_of(v) for k, v in inputs.items()}
    if isinstance(inputs, list | tuple):
        return [_shape_of(v) for v in inputs]
    return type(inputs).__name__


def _host_mark() -> tuple[int, float]:
    """The calling thread and its CPU time (s)."""
    return threading.get_ident(), time.thread_time()


def _host_segments(marks: tuple, fwd_ids: list[int], fwd: list, grad_ids: list[int],
                   grads: list) -> dict[str, Any]:
    """One iteration's host figures in the shape of :func:`_segments`: each mark's time is the
    launching thread's CPU time since the start of the forward, summed over consecutive marks
    taken on one thread (a stretch between marks of two threads, as from the main thread to
    autograd's device thread, counts 0: no one thread's CPU time measures it)."""
    h1, h2, h3, h4 = marks

    def run(seq: list[tuple[int, float]]) -> list[float]:
        out, acc = [0.0], 0.0
        for (ta, a), (tb, b) in itertools.pairwise(seq):
            acc += max(0.0, b - a) if ta == tb else 0.0
            out.append(acc)
        return out

    f = run([h1, *fwd, h2])
    b = run([h2, *grads, h3])
    return {
        "fwd": list(zip(fwd_ids, f[1:-1], strict=True)), "fwd_end": f[-1],
        "bwd_start": f[-1],
        "grads": [(j, f[-1] + t) for j, t in zip(grad_ids, b[1:-1], strict=True)],
        "bwd_end": f[-1] + b[-1],
        "update": max(0.0, h4[1] - h3[1]) if h3[0] == h4[0] else 0.0,
    }


def _segments(clock: Clock, marks: tuple, fwd: list, grads: list) -> dict[str, Any]:
    """One iteration's raw figures, in seconds from the start of the forward."""
    t0, t1, t2, t3, t4 = marks
    return {
        "h2d": clock.between(t0, t1),
        "fwd": [(i, clock.between(t1, m)) for i, m in fwd],
        "fwd_end": clock.between(t1, t2),
        "bwd_start": clock.between(t1, t2),
        "grads": [(j, clock.between(t1, m)) for j, m in grads],
        "bwd_end": clock.between(t1, t3),
        "update": clock.between(t3, t4),
    }


def _build_trace(model: Any, name: str, batch_size: int, dev: Any, repeats: int,
                 candidates: list, params: list, runs: list[dict[str, Any]],
                 version: str, host: bool) -> Trace:
    first = runs[0]
    # layers in the order their forward first ended; only those that ran
    order: list[int] = list(dict.fromkeys(i for i, _ in first["fwd"]))
    if not order:
        raise SchedoptError("no leaf module with parameters ran in the forward pass", "model",
                            type(model).__name__)
    pos = {i: k for k, i in enumerate(order)}
    param_index = {id(p): j for j, (_, p) in enumerate(params)}
    owner: dict[int, int] = {}  # param index -> layer position
    for i in order:
        for p in candidates[i][1].parameters(recurse=False):
            if p.requires_grad:
                owner.setdefault(param_index[id(p)], pos[i])
    fired = [j for j, _ in first["grads"]]
    fired_set = set(fired)
    n = len(order)
    fwd_times: list[list[float]] = [[] for _ in range(n)]
    bwd_times: list[list[float]] = [[] for _ in range(n)]
    host_fwd: list[list[float]] = [[] for _ in range(n)]
    host_bwd: list[list[float]] = [[] for _ in range(n)]
    extra_owner: dict[int, int] = {}
    for run in runs:
        hf, _ = _forward_times(run["host"], pos, n)
        hb, _ = _backward_times(run["host"], owner, n)
        f, ends = _forward_times(run, pos, n)
        b, ends = _backward_times(run, owner, n)
        for k in range(n):
            fwd_times[k].append(f[k])
            bwd_times[k].append(b[k])
            host_fwd[k].append(hf[k])
            host_bwd[k].append(hb[k])
        if run is first:
            ready = dict(run["grads"])
            for j in fired:
                if j not in owner:
                    later = [k for k in range(n) if ends[k] >= ready[j]]
                    extra_owner[j] = max(later) if later else 0
    unused = [params[j][0] for j in range(len(params)) if j not in fired_set]
    if unused:
        log.warning("left out %d parameters that received no gradient: %s", len(unused),
                    ", ".join(unused[:5]))
    home = {**{j: k for j, k in owner.items() if j in fired_set}, **extra_owner}
    tensors = _layer_tensors(params, home, n)
    spread_warning([sum(col) for col in zip(*fwd_times, *bwd_times, strict=True)])
    fwd_scale, bwd_scale = _pass_scale(fwd_times), _pass_scale(bwd_times)
    frozen = _frozen(model, [candidates[i][1] for i in order])
    layers = [{"name": candidates[order[k]][0],
               "forward_s": statistics.median(fwd_times[k]) * fwd_scale,
               "backward_s": statistics.median(bwd_times[k]) * bwd_scale, "tensors": tensors[k],
               "frozen": frozen[k]}
              for k in range(n)]
    cpu = dev.type != "cuda"  # there the launching thread runs the kernels: never longer
    for k, layer in enumerate(layers if host else []):
        for key, col in (("host_forward_s", host_fwd[k]), ("host_backward_s", host_bwd[k])):
            val = statistics.median(col)
            wall = layer["forward_s" if key == "host_forward_s" else "backward_s"]
            layer[key] = min(val, wall) if cpu else val
    data: dict[str, Any] = {
        "name": name, "batch_size": batch_size,
        "source": f"measured with schedopt.measure.profile.profile_model on {dev}, torch "
                  f"{version}, {repeats} repeats (median); per-layer medians scaled to the "
                  f"median whole pass: forward x{fwd_scale:.3f}, backward x{bwd_scale:.3f}"
                  f"{_faults_note(runs, dev)}",
        "h2d_s": statistics.median(r["h2d"] for r in runs) if dev.type == "cuda" else 0.0,
        "update_s": statistics.median(r["update"] for r in runs),
        "host_update_s": statistics.median(r["host"]["update"] for r in runs) if host else 0.0,
        "layers": layers,
    }
    return _with_ready_order(data, [params[j][0] for j in fired if j in home])


def _layer_tensors(params: list, home: dict[int, int], n: int) -> list[list[dict[str, Any]]]:
    """Each of the ``n`` layers' gradient tensors: the parameters ``params`` (name, tensor)
    whose index ``home`` places in it."""
    tensors: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    for j, (pname, p) in enumerate(params):
        if j in home:
            tensors[home[j]].append({"name": pname, "bytes": p.numel() * p.element_size(),
                                     "dtype": _dtype_name(p.dtype)})
            if p.dim() > 1:  # the leading dimension, for partitioning policies
                tensors[home[j]][-1]["rows"] = int(p.shape[0])
    return tensors


def _with_ready_order(data: dict[str, Any], measured: list[str]) -> Trace:
    """The trace of ``data`` with the gradient order ``measured`` where it differs from the
    layers' (kept inside each layer only, with a warning when autograd interleaved layers)."""
    trace = Trace.model_validate(data)
    if measured != [t.name for t in trace.ready_order]:
        layer_of = trace.tensor_layer_by_name
        consistent = sorted(measured, key=lambda m: -layer_of[m])  # stable: keeps order inside
        if consistent != measured:
            log.warning("autograd's gradient order interleaves layers; the trace keeps it "
                        "inside each layer only")
        if consistent != [t.name for t in trace.ready_order]:
            trace = Trace.model_validate({**data, "grad_ready_order": consistent})
    return trace


def _frozen(model: Any, modules: list[Any]) -> list[list[dict[str, Any]]]:
    """Per layer module, its own parameters without gradients (``requires_grad=False``) as a
    trace's ``frozen`` entries: gathered by sharded plans, never reduced. Frozen parameters of
    modules that are not layers (no parameter needing a gradient) are left out."""
    names: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), name)  # a shared parameter under its first name
    out: list[list[dict[str, Any]]] = []
    for module in modules:
        out.append([{"name": names[id(p)], "bytes": p.numel() * p.element_size(),
                     "dtype": _dtype_name(p.dtype), **({"rows": int(p.shape[0])}
                                                       if p.dim() > 1 else {})}
                    for p in module.parameters(recurse=False) if not p.requires_grad])
    listed = {id(p) for module in modules for p in module.parameters(recurse=False)}
    left = [n for n, p in model.named_parameters() if not p.requires_grad and id(p) not in listed]
    if left:
        log.warning("left out %d frozen parameters of modules that are not layers (no parameter "
                    "needing a gradient): %s", len(left), ", ".join(left[:5]))
    return out


class ProfileWarning(UserWarning):
    """A profile that may not be typical: a loaded machine, no warm-up, a wide spread.

    ``schedopt profile`` prints each as a ``warning:`` line on stderr.
    """


#: Spread (slowest over fastest measured iteration) above which a profile is suspect.
SPREAD_LIMIT = 1.5
#: The 1-minute load average, per CPU, above which the machine counts as loaded.
LOAD_LIMIT = 0.5


def spread_warning(totals: list[float], limit: float = SPREAD_LIMIT) -> float | None:
    """Warn (:class:`ProfileWarning`) when the measured iterations' times spread by more
    than ``limit`` (max / min); return the spread (None with fewer than two positive times)."""
    import warnings

    times = [t for t in totals if t > 0]
    if len(times) < 2:
        return None
    spread = max(times) / min(times)
    if spread > limit:
        warnings.warn(f"the measured iterations spread {spread:.2f}x (slowest over fastest, "
                      f"more than {limit:g}x): something else ran; rerun on a quiet machine or"
                      " with more --repeats", ProfileWarning, stacklevel=2)
    return spread


def start_warnings(warmup: int, load: tuple[float, float, float] | None = None,
                   cpus: int | None = None) -> list[str]:
    """What makes a profile about to start suspect: the machine loaded (1-minute load
    average above :data:`LOAD_LIMIT` per CPU) or no warm-up iteration.

    ``load`` and ``cpus`` default to ``os.getloadavg()`` and ``os.cpu_count()``.
    """
    import os

    out = []
    try:
        load = load if load is not None else os.getloadavg()
    except OSError:  # not available on this platform
        load = None
    cpus = cpus or os.cpu_count() or 1
    if load is not None and load[0] > LOAD_LIMIT * cpus:
        out.append(f"the machine is loaded (load average {load[0]:.1f} on {cpus} CPUs): compute"
                   " times may be several times too long; profile on a quiet machine")
    if warmup == 0:
        out.append("--warmup 0: the first iteration (allocations, kernel selection, caches) is"
                   " measured; use --warmup 2 or more")
    return out


def _pass_scale(times: list[list[float]]) -> float:
    """The factor that makes the per-layer medians of one pass sum to the median of the whole
    pass.

    ``times[k][r]`` is layer ``k``'s time in iteration ``r``. A sum of medians is not the
    median of the sums: with right-skewed layer times (a page fault, a preempted thread in one
    layer of one iteration) it falls a few percent below the typical pass, and the iteration
    time a run measures is the median of whole iterations. The layers keep their shares.
    """
    summed = sum(statistics.median(t) for t in times)
    if not times or summed <= 0:
        return 1.0
    whole = statistics.median(sum(per_layer) for per_layer in zip(*times, strict=True))
    return whole / summed


def _faults_note(runs: list[dict[str, Any]], dev: Any) -> str:
    """On a CPU, the median minor page faults of an iteration, for the trace's ``source``.

    Fresh memory the kernel maps and zeroes is part of what the iterations time: under glibc's
    defaults, freed tensors above its thresholds go back to the kernel and come back every
    iteration (up to a third of a small model's forward and backward on this project's
    machine; docs/cli.md, ``profile``). Runs that allocate otherwise fault otherwise."""
    counts: list[int] = [r["faults"] for r in runs if r.get("faults") is not None]
    if dev.type != "cpu" or len(counts) < len(runs):
        return ""
    n = statistics.median(counts)
    return f"; {faults_text(n)} ({n * mmap.PAGESIZE / 2**20:.1f} MiB of fresh pages)"


def faults_text(per_iteration: float) -> str:
    """How a trace's or a measured row's ``source`` states its page faults (one wording, for
    the readers that compare them)."""
    return f"{per_iteration:,.0f} minor page faults per iteration"


def _forward_times(run: dict[str, Any], pos: dict[int, int], n: int
                   ) -> tuple[list[float], list[float]]:
    """Per layer: forward time (segments ending at its forward hooks) and its last end."""
    f = [0.0] * n
    ends = [0.0] * n
    prev, last = 0.0, None
    for i, t in run["fwd"]:
        if i not in pos:
            continue
        k = pos[i]
        f[k] += max(0.0, t - prev)
        ends[k] = t
        prev, last = t, k
    if last is not None:
        f[last] += max(0.0, run["fwd_end"] - prev)
    return f, ends


def _backward_times(run: dict[str, Any], owner: dict[int, int], n: int
                    ) -> tuple[list[float], list[float]]:
    """Per layer: backward time and end (monotone from the last layer to the first)."""
    ready = [None] * n
    for j, t in run["grads"]:
        k = owner.get(j)
        if k is not None:
            ready[k] = t if ready[k] is None else max(ready[k], t)
    start = run["bwd_start"]
    ends = [0.0] * n
    b = [0.0] * n
    prev = start
    for k in range(n - 1, -1, -1):
        end = max(prev, ready[k]) if ready[k] is not None else prev
        b[k] = end - prev
        ends[k] = end
        prev = end
    b[0] += max(0.0, run["bwd_end"] - prev)
    return b, ends


# ---------------------------------------------------------------------------- DDP


# ---------------------------------------------------------------------------- command line


def load_factory(spec: str) -> Callable[[], Any]:
    """Import ``MODULE:FACTORY`` (the current folder is searched too) and return the callable.

    Raises
    ------
    SchedoptError
        Malformed spec, a module that does not import, or a missing or non-callable name.
    """
    import importlib
    import os
    import sys

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SchedoptError("write MODULE:FACTORY", "factory", spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any failure inside the user's module is the user's input
        raise SchedoptError(f"cannot import module {module_name!r}: {_one_line(exc)}",
                            "factory", spec) from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        raise SchedoptError("no callable of that name", "factory", spec)
    return obj


def random_batch(shape: str, dtype: str = "float32") -> Any:
    """A random input batch of ``shape`` (``"32,3,224,224"``): normal floats or int64 ids in
    [0, 100)."""
    torch = _torch()
    try:
        dims = [int(x) for x in shape.split(",") if x.strip()]
    except ValueError:
        raise SchedoptError("write the shape as comma-separated integers", "input_shape",
                            shape) from None
    if not dims or any(d < 1 for d in dims):
        raise SchedoptError("write the shape as comma-separated positive integers",
                            "input_shape", shape)
    if math.prod(dims) > MAX_INPUT_ELEMENTS:
        raise SchedoptError(f"more than {MAX_INPUT_ELEMENTS:,} elements in one batch",
                            "input_shape", shape)
    if dtype not in ("float32", "int64"):
        raise SchedoptError("must be float32 or int64", "input_dtype", dtype)
    try:
        return torch.randint(0, 100, dims) if dtype == "int64" else torch.randn(dims)
    except (RuntimeError, MemoryError) as exc:
        raise SchedoptError(f"cannot allocate the batch: {_one_line(exc)}", "input_shape",
                            shape) from None


#: Largest input batch ``profile`` builds (elements).
MAX_INPUT_ELEMENTS = 2**31
#: Largest number of measured or discarded iterations.
MAX_REPEATS = 10_000


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    out = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return out if len(out) <= 300 else out[:297] + "..."


def check_profile_options(name: str, batch_size: int | None, repeats: int, warmup: int) -> None:
    """Check ``profile``'s options before any work (a name, a batch, bounded repeats)."""
    from schedopt.model.limits import MAX_BATCH

    if not name.strip():
        raise SchedoptError("must not be empty", "--name", name)
    if batch_size is not None and not 1 <= batch_size <= MAX_BATCH:
        raise SchedoptError(f"must be between 1 and {MAX_BATCH:,}", "--batch-size", batch_size)
    if not 1 <= repeats <= MAX_REPEATS:
        raise SchedoptError(f"must be between 1 and {MAX_REPEATS:,}", "--repeats", repeats)
    if not 0 <= warmup <= MAX_REPEATS:
        raise SchedoptError(f"must be between 0 and {MAX_REPEATS:,}", "--warmup", warmup)


def build_model(spec: str) -> Any:
    """Import ``MODULE:FACTORY``, call the factory and check that it returned a module.

    Raises
    ------
    SchedoptError
        Naming the factory: it does not import, raises, or returns no ``torch.nn.Module``.
    """
    factory = load_factory(spec)
    torch = _torch()
    try:
        model = factory()
    except Exception as exc:  # the user's factory failed
        raise SchedoptError(f"the factory raised {_one_line(exc)}", "factory", spec) from None
    if not isinstance(model, torch.nn.Module):
        raise SchedoptError(f"the factory returned {type(model).__name__}, not a "
                            "torch.nn.Module", "factory", spec)
    return model


def resolve_device(device: Any, option: str = "device") -> Any:
    """A torch device the measurement can run on: a valid name, available, not ``meta``; errors
    name ``option`` (the field or command-line option that gave ``device``)."""
    torch = _torch()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise SchedoptError(f"not a device name ({_one_line(exc)})", option,
                            str(device)) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SchedoptError("CUDA is not available on this machine", option, str(device))
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise SchedoptError(f"this machine has {torch.cuda.device_count()} CUDA devices",
                                option, str(device))
    elif dev.type != "cpu":
        raise SchedoptError("cannot time a model there (use cpu or cuda)", option, str(device))
    return dev
