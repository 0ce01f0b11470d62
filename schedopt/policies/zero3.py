"""DeepSpeed ZeRO stage 3 as a sharded plan.

Read in deepspeed 0.19.8 (``pip download deepspeed==0.19.8``), ``deepspeed/runtime/zero/``:

- ``config.py``: ``stage3_prefetch_bucket_size`` (default 5e7 elements, "maximum number of
  parameter elements to fetch ahead of use"), ``stage3_max_live_parameters`` (1e9),
  ``stage3_param_persistence_threshold`` (1e5: smaller parameters are not partitioned),
  ``reduce_bucket_size`` (5e8 elements reduced at a time).
- ``partitioned_param_coordinator.py`` (``fetch_sub_module``): parameters are gathered per
  submodule on ``allgather_stream``; after fetching the current submodule, the next submodules'
  parameters are queued for prefetch while fewer than
  ``min(max_live_parameters - available, prefetch_bucket_size)`` elements are queued.
- ``stage3.py``: gradients go into an IPG bucket reduced on ``reduce_and_partition_stream``
  when the next gradient would overflow ``reduce_bucket_size`` (``__add_grad_to_ipg_bucket``).

The plan: a unit per layer that owns tensors, a layer whose tensors are all below the
persistence threshold folded into the next unit; mode ``full``; the prefetch depth is the
median number of units DeepSpeed's loop queues ahead (:func:`~.units.prefetch_depth`), in the
forward and, over the reversed units, the backward; two streams. ``reduce_bucket_size`` cannot
be expressed (the plan reduce-scatters per unit) and is only recorded (docs/policies.md).
"""

from __future__ import annotations

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import positive
from schedopt.policies.units import merge_tensorless, prefetch_depth, sharded_plan

__all__ = ["zero3"]


def zero3(
    trace: Trace,
    cluster: Cluster,
    *,
    stage3_prefetch_bucket_size: int = 50_000_000,
    stage3_max_live_parameters: int = 1_000_000_000,
    stage3_param_persistence_threshold: int = 100_000,
    reduce_bucket_size: int = 500_000_000,
) -> Plan:
    """DeepSpeed ZeRO-3 per submodule.

    Parameters
    ----------
    trace, cluster
        The instance.
    stage3_prefetch_bucket_size
        Elements fetched ahead of use (0: no prefetch).
    stage3_max_live_parameters
        Elements resident before release; bounds the prefetch with the current unit's.
    stage3_param_persistence_threshold
        Layers whose every tensor has fewer elements are not gathered on their own.
    reduce_bucket_size
        Recorded only (see the module docstring).

    Returns
    -------
    Plan
        A sharded plan bound to ``trace`` and ``cluster``.
    """
    positive(reduce_bucket_size, "zero3.reduce_bucket_size")
    for name, value in (("stage3_prefetch_bucket_size", stage3_prefetch_bucket_size),
                        ("stage3_max_live_parameters", stage3_max_live_parameters),
                        ("stage3_param_persistence_threshold",
                         stage3_param_persistence_threshold)):
        positive(value, f"zero3.{name}", allow_zero=True)
    own = trace.tensor_layer_by_name
    numel = [0] * len(trace.layers)
    largest = [0] * len(trace.layers)
    for t in trace.tensor_list:
        numel[own[t.name]] += t.numel
        largest[own[t.name]] = max(largest[own[t.name]], t.numel)
    runs: list[list[int]] = []
    carry: list[int] = []
    for lay in range(len(trace.layers)):
        carry.append(lay)
        if largest[lay] >= stage3_param_persistence_threshold:
            runs.append(carry)
            carry = []
    if carry:
        runs.append(carry)
    units = merge_tensorless(trace, runs)
    sizes = [sum(numel[lay] for lay in unit) for unit in units]
    limit = min(stage3_prefetch_bucket_size, max(0, stage3_max_live_parameters - max(sizes)))
    knobs = {"stage3_prefetch_bucket_size": stage3_prefetch_bucket_size,
             "stage3_max_live_parameters": stage3_max_live_parameters,
             "stage3_param_persistence_threshold": stage3_param_persistence_threshold,
             "reduce_bucket_size": reduce_bucket_size}
    return sharded_plan("zero3", trace, cluster, units, knobs, mode="full",
                        forward_prefetch=prefetch_depth(sizes, limit),
                        backward_prefetch=prefetch_depth(sizes[::-1], limit), streams=2)
