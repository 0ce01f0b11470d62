"""Apply a plan to a PyTorch model: ``DistributedDataParallel`` with the plan's buckets.

torch is imported inside the functions, so this module imports without it. The bucket sizes come
from the ddp emitter (:func:`schedopt.emit.ddp.emit_ddp`); :func:`apply_plan` checks that the
model's parameters are the trace's tensors (names, bytes, dtypes) before it wraps the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    from torch.nn.parallel import DistributedDataParallel

__all__ = ["apply_plan", "check_model", "ddp_kwargs", "model_tensors", "rebuilt_buckets"]


def torch_module() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the environment
        raise SchedoptError("needs PyTorch (pip install 'schedopt[torch]')", "torch",
                            None) from None
    return torch


def _dtype_name(dtype: Any) -> str:
    """The trace's name of a torch dtype."""
    torch = torch_module()
    names = {torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
             torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32",
             torch.int8: "int8"}
    for attr in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = "float8"
    if dtype not in names:
        raise SchedoptError("no trace dtype for this parameter dtype", "dtype", str(dtype))
    return names[dtype]


def model_tensors(model: Any) -> dict[str, tuple[int, str]]:
    """Name -> (bytes, dtype) of every parameter that gets a gradient, in DDP's order.

    Tied parameters appear once, under their first name (``named_parameters`` order, which is
    also the order of DDP's parameter indices).
    """
    return {name: (p.numel() * p.element_size(), _dtype_name(p.dtype))
            for name, p in model.named_parameters() if p.requires_grad}



def ddp_kwargs(trace: Trace, cluster: Cluster | None, plan: Plan, *,
               require_exact: bool = False) -> dict[str, Any]:
    """The ``DistributedDataParallel`` keyword arguments the ddp emitter computes for ``plan``.

    Parameters
    ----------
    plan, trace
        The plan and its trace.
    cluster
        Optional; lets the emitter choose by simulated time when the plan is not exact.
    require_exact
        Raise unless DDP reproduces the plan exactly.

    Raises
    ------
    SchedoptError
        The plan does not fit the trace, or (with ``require_exact``) DDP cannot express it.
    """
    from schedopt.emit.ddp import emit_ddp

    emitted = emit_ddp(trace, cluster, plan)
    if require_exact and not emitted.exact:
        raise SchedoptError("DDP cannot express this plan exactly: "
                            + "; ".join(emitted.notes), "plan", plan.policy)
    return dict(emitted.config)


def check_model(model: Any, trace: Trace) -> None:
    have = model_tensors(model)
    for t in trace.tensor_list:
        got = have.get(t.name)
        if got is None:
            raise SchedoptError("the model has no such parameter (or it needs no gradient)",
                                "trace.tensors", t.name)
        if got != (t.bytes, t.dtype):
            raise SchedoptError(f"the model's parameter has {got[0]} bytes of {got[1]}, the "
                                f"trace {t.bytes} bytes of {t.dtype}", "trace.tensors", t.name)
    extra = [n for n in have if n not in trace.tensor_layer_by_name]
    if extra:
        raise SchedoptError("the model has a parameter the trace does not list", "model",
                            extra[0])


def apply_plan(
    model: Any, trace: Trace, plan: Plan, *, cluster: Cluster | None = None,
    require_exact: bool = True, **kwargs: Any,
) -> DistributedDataParallel:
    """Wrap ``model`` in ``DistributedDataParallel`` with the plan's buckets.

    The buckets take effect at DDP's rebuild after the first iteration, provided the model's
    gradients become ready in the trace's gradient-ready order (as in a trace measured with
    :func:`schedopt.measure.profile.profile_model`); :func:`rebuilt_buckets` shows what DDP built.

    Parameters
    ----------
    model
        The module; its parameters needing gradients must be the trace's tensors (names,
        bytes, dtypes).
    plan, trace
        The plan and its trace.
    cluster
        Optional (see :func:`ddp_kwargs`).
    require_exact
        Refuse plans DDP cannot express exactly (default); False applies the closest setting.
    **kwargs
        Further ``DistributedDataParallel`` arguments (``device_ids``, ...); the bucket sizes
        come from the plan.

    Raises
    ------
    SchedoptError
        No initialised process group, a model that does not match the trace, bucket-size
        arguments in ``kwargs``, or a plan DDP cannot express (with ``require_exact``).
    """
    torch = torch_module()
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise SchedoptError("needs an initialised process group "
                            "(torch.distributed.init_process_group)", "process_group", None)
    clash = sorted({"bucket_cap_mb", "bucket_cap_mb_list"} & set(kwargs))
    if clash:
        raise SchedoptError("bucket sizes come from the plan", "kwargs", clash[0])
    check_model(model, trace)
    config = ddp_kwargs(trace, cluster, plan, require_exact=require_exact)
    return torch.nn.parallel.DistributedDataParallel(model, **{**config, **kwargs})


def rebuilt_buckets(ddp_model: Any) -> list[list[str]] | None:
    """The buckets DDP built at its rebuild, as parameter names in launch order.

    Returns
    -------
    list of list of str or None
        None before the rebuild (run at least two iterations first).
    """
    data = ddp_model._get_ddp_logging_data()
    text = data.get("rebuilt_per_bucket_param_indices") or ""
    if not data.get("has_rebuilt_buckets") or not text.strip():
        return None
    names = [n for n, p in ddp_model.module.named_parameters() if p.requires_grad]
    return [[names[int(x)] for x in chunk.split()] for chunk in text.split(",") if chunk.strip()]


