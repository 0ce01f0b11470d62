"""Apply a sharded plan to a real module with PyTorch FSDP2 (``fully_shard``), and read back the
groups FSDP built.

The settings are the ``fsdp`` emitter's (:func:`schedopt.emit.fsdp.fsdp_config`): one
``fully_shard`` call per unit (module names from the trace's layer names), applied bottom-up,
then the root (it manages the plan's root group, not resharded after the forward); reshard
after forward from the mode; explicit prefetch lists for depths above FSDP2's default of one;
``MixedPrecisionPolicy(reduce_dtype=...)`` from ``comm_dtype``.
:func:`train_step` runs the plan's ``accumulate`` micro-batches with the reduce-scatters on the
last only. FSDP2 runs on CPU with the gloo backend (torch 2.13: gloo has the all-gather into one
tensor and the reduce-scatter FSDP2 issues), which tests/test_fsdp_torch.py uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from schedopt.emit.ddp_torch import check_model as _check_model
from schedopt.emit.ddp_torch import torch_module as _torch
from schedopt.errors import SchedoptError
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace

__all__ = ["apply_sharded_plan", "fsdp_groups", "train_step"]


def _module(model: Any, name: str) -> Any:
    try:
        return model if name == "" else model.get_submodule(name)
    except AttributeError as exc:
        raise SchedoptError("the model has no such module", "plan.sharding.units", name) from exc


def _depth(names: Sequence[str]) -> int:
    return min(n.count(".") + (n != "") for n in names)


def apply_sharded_plan(model: Any, trace: Trace, plan: Plan, *, mesh: Any = None) -> Any:
    """Shard ``model`` in place with FSDP2 as the plan's units say, and return it.

    Parameters
    ----------
    model
        The module; its parameters must be the trace's tensors (names, bytes, dtypes) and the
        trace's layers its module names.
    plan, trace
        A sharded plan and its trace.
    mesh
        FSDP2's device mesh (None: the default one over the initialised process group).

    Returns
    -------
    torch.nn.Module
        ``model``, now an ``FSDPModule`` with one parameter group per unit.

    Raises
    ------
    SchedoptError
        No initialised process group, a plan that is not sharded, or a model that does not
        match the trace.
    """
    from schedopt.emit.fsdp import fsdp_config

    torch = _torch()
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not (dist.is_available() and dist.is_initialized()):
        raise SchedoptError("needs an initialised process group "
                            "(torch.distributed.init_process_group)", "process_group", None)
    config, _ = fsdp_config(trace, plan)
    _check_model(model, trace)
    reduce = config["reduce_dtype"]
    kw = {"mesh": mesh, "reshard_after_forward": config["reshard_after_forward"],
          "mp_policy": MixedPrecisionPolicy(reduce_dtype=getattr(torch, reduce) if reduce
                                            else None)}
    groups: list[list[str]] = config["groups"]
    for k in sorted(range(len(groups)), key=lambda k: -_depth(groups[k])):
        modules = [_module(model, n) for n in groups[k]]
        fully_shard(modules if len(modules) > 1 else modules[0], **kw)
    if "" not in {n for g in groups for n in g}:  # the root group, if any
        fully_shard(model, **{**kw, "reshard_after_forward": config["root_reshard_after_forward"]})
    heads = [_module(model, g[0]) for g in groups]
    p, q = config["forward_prefetch"], config["backward_prefetch"]
    for u, head in enumerate(heads):
        if p > 1 and u + 1 < len(heads):
            head.set_modules_to_forward_prefetch(heads[u + 1: u + 1 + p])
        if q > 1 and u > 0:
            head.set_modules_to_backward_prefetch(heads[max(0, u - q): u][::-1])
    return model


def fsdp_groups(model: Any) -> list[list[str]]:
    """The parameter groups FSDP2 built in ``model``: parameter names per group.

    Groups are in the order of their first parameter in ``model.named_parameters()`` (forward
    order for a model defined in that order); a group lists its parameters in that order. The
    root's group is left out when it manages no parameter.
    """
    from torch.distributed.fsdp import FSDPModule

    module_name = {id(m): n for n, m in model.named_modules()}
    position = {n: i for i, (n, _) in enumerate(model.named_parameters())}
    seen: set[int] = set()
    out: list[list[str]] = []
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        state = module._get_fsdp_state()
        for group in state._fsdp_param_groups:
            if id(group) in seen:
                continue
            seen.add(id(group))
            names = []
            for fp in group.fsdp_params:
                owner = module_name[id(fp._module_info.module)]
                names.append(f"{owner}.{fp._module_info.param_name}" if owner
                             else fp._module_info.param_name)
            if names:
                out.append(sorted(names, key=lambda n: position.get(n, len(position))))
    return sorted(out, key=lambda g: position.get(g[0], len(position)))


def train_step(model: Any, micro_batches: Sequence[Any], loss_fn: Callable[[Any, Any], Any],
               optimizer: Any, plan: Plan | None = None) -> float:
    """One optimizer step over ``micro_batches``, gradients reduce-scattered on the last only.

    Parameters
    ----------
    model
        A model sharded by :func:`apply_sharded_plan`.
    micro_batches
        The step's micro-batches (the plan's ``accumulate`` of them).
    loss_fn
        ``loss_fn(model, batch)`` -> scalar loss tensor of one micro-batch.
    optimizer
        Built over ``model.parameters()`` after sharding.
    plan
        The sharded plan (optional): its ``accumulate`` must be the number of micro-batches,
        and in ``grad-op`` mode parameters stay gathered across the micro-batches
        (``set_reshard_after_backward`` on the last only).

    Returns
    -------
    float
        The step's loss (mean over the micro-batches).
    """
    if not micro_batches:
        raise SchedoptError("a step needs at least one micro-batch", "micro_batches", 0)
    if plan is not None and plan.accumulate != len(micro_batches):
        raise SchedoptError(f"the plan accumulates {plan.accumulate} micro-batches per step",
                            "micro_batches", len(micro_batches))
    keep = plan is not None and plan.sharding is not None and plan.sharding.mode == "grad-op"
    last = len(micro_batches) - 1
    total = 0.0
    for i, batch in enumerate(micro_batches):
        model.set_requires_gradient_sync(i == last)
        if keep:
            model.set_reshard_after_backward(i == last)
        loss = loss_fn(model, batch) / len(micro_batches)
        loss.backward()
        total += float(loss.detach())
    optimizer.step()
    optimizer.zero_grad()
    return total
