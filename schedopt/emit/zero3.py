"""Sharded plan -> DeepSpeed ZeRO stage 3 config (``-t deepspeed`` with a sharded plan).

DeepSpeed 0.19.8 has no units. ZeRO-3 gathers the parameters of each submodule in its forward
(and backward) pre-hook, prefetches upcoming parameters in the recorded module trace until
``stage3_prefetch_bucket_size`` elements are in flight (0 disables prefetching), keeps at most
``stage3_max_live_parameters`` elements gathered, does not release a parameter reused within
``stage3_max_reuse_distance`` elements, and reduce-scatters gradients in buckets of
``reduce_bucket_size`` elements in the order they become ready
(``runtime/zero/partitioned_param_coordinator.py``, ``stage3.py``). So a unit plan maps to
sizes only:

- ``stage3_prefetch_bucket_size``: the most elements of ``p`` consecutive units after a unit
  (``p`` the forward prefetch; 0 when ``p = 0``).
- ``stage3_max_live_parameters``: the most elements the plan holds gathered at once (a unit and
  the ``max(p, q)`` units prefetched after it in ``full`` mode; the whole model in ``grad-op``).
- ``stage3_max_reuse_distance``: 0 in ``full`` mode (release after the forward, gather again in
  the backward); the whole model in ``grad-op`` (keep parameters until their backward).
- ``reduce_bucket_size``: the largest unit's gradient elements (frozen parameters, gathered but
  not reduced, count in the gathered sizes only).

A plan's root group (:attr:`~schedopt.model.plan.Sharding.root`, FSDP2's) counts as a last unit
in the sizes, with a note: DeepSpeed has no such group.
- ``stage3_param_persistence_threshold``: 0 (the plan shards every tensor; DeepSpeed's default
  keeps tensors under 100,000 elements unsharded).
- ``gradient_accumulation_steps``: the plan's ``accumulate``; ``communication_data_type``: its
  ``comm_dtype`` (fp32, fp16 or bf16).

Never exact: the gathers follow modules, not units, and the reduce-scatter buckets follow the
size, not the unit boundaries (equal only when every unit has the same size), and streams are
not a DeepSpeed setting.
"""

from __future__ import annotations

import json
import pprint

from schedopt.emit.common import Emitted
from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace

__all__ = ["emit_zero3", "zero3_config"]

_DS_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def _window(sizes: list[int], start: int, count: int) -> int:
    return sum(sizes[start: start + count])


def zero3_config(trace: Trace, plan: Plan) -> dict:
    """The ``zero_optimization`` stage 3 settings (and accumulation, dtype) of a sharded plan.

    Raises
    ------
    SchedoptError
        The plan is not sharded, does not fit the trace, or reduces in a dtype DeepSpeed lacks.
    """
    sharding = plan.sharding
    if sharding is None:
        raise SchedoptError("ZeRO stage 3 needs a sharded plan", "plan.sharding", None)
    grads = sharding.check_against(trace)  # per group (units, then the root group)
    numel = {t.name: t.numel for t in [*trace.tensor_list, *trace.frozen_list]}
    # tied tensors count once, in the group of their owning layer; frozen ones are gathered
    reduced = [sum(numel[t] for t in names) for names in grads]
    sizes = [r + sum(numel[t] for t in names)
             for r, names in zip(reduced, sharding.unit_frozen(trace), strict=True)]
    total = sum(sizes)
    p, q = sharding.forward_prefetch, sharding.backward_prefetch
    ahead = max((_window(sizes, u + 1, p) for u in range(len(sizes))), default=0)
    if sharding.mode == "full":
        live = max(_window(sizes, u, max(p, q) + 1) for u in range(len(sizes)))
        reuse = 0
    else:
        live = reuse = total
    zero = {
        "stage": 3,
        "overlap_comm": True,
        "stage3_prefetch_bucket_size": ahead,
        "stage3_max_live_parameters": live,
        "stage3_max_reuse_distance": reuse,
        "stage3_param_persistence_threshold": 0,
        "reduce_bucket_size": max(reduced),
    }
    config: dict = {"zero_optimization": zero, "gradient_accumulation_steps": plan.accumulate}
    if plan.comm_dtype is not None:
        if plan.comm_dtype not in _DS_DTYPE:
            raise SchedoptError("DeepSpeed reduces in fp32, fp16 or bf16 only", "plan.comm_dtype",
                                plan.comm_dtype)
        config["communication_data_type"] = _DS_DTYPE[plan.comm_dtype]
    return config


def _notes(plan: Plan, sizes_equal: bool) -> list[str]:
    notes = ["DeepSpeed ZeRO-3 gathers parameters per submodule at its hooks, not per unit: the"
             " units become sizes (prefetch bucket, live parameters, reuse distance)"]
    if not sizes_equal:
        notes.append("units differ in size; reduce_bucket_size (the largest unit) cuts the "
                     "reduce-scatter buckets by size, not at the unit boundaries")
    assert plan.sharding is not None
    if plan.sharding.root is not None:
        notes.append("the root group (gathered once, kept through the backward, reduced last)"
                     " counts as a last unit in the sizes; DeepSpeed gathers the root's "
                     "submodules at their hooks like any other")
    if plan.sharding.streams == 1:
        notes.append("streams is 1; DeepSpeed has no setting for it")
    if plan.next_forward != "wait-for-all":
        notes.append(f"next_forward is {plan.next_forward}; DeepSpeed's step waits for every "
                     "reduce-scatter")
    return notes


def emit_zero3(trace: Trace, cluster: Cluster | None, plan: Plan) -> Emitted:
    """Express a sharded ``plan`` as a DeepSpeed ZeRO-3 config fragment (never exact).

    Returns
    -------
    Emitted
        ``deepspeed.json`` (a fragment to merge into ds_config) and ``deepspeed_snippet.py``.
    """
    plan.check_against(trace, cluster)
    config = zero3_config(trace, plan)
    units = plan.members(trace).bucket_bytes()
    notes = _notes(plan, bool(len(set(units.tolist())) == 1))
    fragment = pprint.pformat(config, width=96, sort_dicts=False)
    snippet = "\n".join([
        f'"""DeepSpeed ZeRO-3 settings for the {plan.policy} sharded plan of {trace.name} '
        f"(trace {trace.fingerprint()}).",
        "",
        "Merge the fragment into your ds_config; sizes count elements. Approximate: see the notes",
        "of `schedopt emit` (DeepSpeed has no units).",
        '"""',
        "",
        f"DS_FRAGMENT = {fragment}",
        "",
        "",
        "def merge(ds_config):",
        '    """Return ``ds_config`` with the fragment\'s keys set (zero_optimization merged)."""',
        "    out = {**ds_config, **{k: v for k, v in DS_FRAGMENT.items()",
        '                           if k != "zero_optimization"}}',
        '    out["zero_optimization"] = {**ds_config.get("zero_optimization", {}),',
        '                                **DS_FRAGMENT["zero_optimization"]}',
        "    return out",
        "",
    ])
    files = {"deepspeed.json": json.dumps(config, indent=1) + "\n",
             "deepspeed_snippet.py": snippet}
    return Emitted(target="deepspeed", files=files, exact=False, notes=notes, config=config)
