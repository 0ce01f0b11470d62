"""Megatron-Core's distributed optimizer (``use_distributed_optimizer``) as a sharded plan.

Read in NVIDIA/Megatron-LM, ``megatron/core/distributed/param_and_grad_buffer.py``
(commit 001199898c4b): parameters and gradients live in buckets (``_ParamAndGradBucket``,
filled in reverse parameter order until ``bucket_size`` elements); with the distributed
optimizer each bucket group reduce-scatters its gradients once all of them are ready
(``start_grad_sync``) and all-gathers its updated parameters before the next forward
(``start_param_sync``); with ``overlap_param_gather``, ``finish_param_sync`` waits for the
current bucket's all-gather and dispatches the next bucket's (one ahead). The model keeps full
parameters between the forward and the backward: only the optimizer state and the gradients'
reduction are sharded.

The plan: units are the buckets rounded to whole layers (walk the layers in backward order,
close a unit once it holds ``bucket_size`` parameters); mode ``grad-op`` (gathered once before
the forward, kept until the backward); forward prefetch 1 with ``overlap_param_gather``, else
0; one stream (one data-parallel communicator).
"""

from __future__ import annotations

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import positive
from schedopt.policies.units import sharded_plan, size_units

__all__ = ["megatron_distopt"]


def megatron_distopt(
    trace: Trace,
    cluster: Cluster,
    *,
    bucket_size: int | None = None,
    overlap_param_gather: bool = True,
) -> Plan:
    """Megatron-Core DDP with the distributed optimizer.

    Parameters
    ----------
    trace, cluster
        The instance.
    bucket_size
        Parameters per bucket; default ``max(40_000_000, 1_000_000 * dp_size)`` (as the
        ``megatron`` policy).
    overlap_param_gather
        Prefetch the next bucket's all-gather during the forward (default True).

    Returns
    -------
    Plan
        A sharded plan bound to ``trace`` and ``cluster``.
    """
    if not isinstance(overlap_param_gather, bool):
        raise SchedoptError("must be true or false", "megatron-distopt.overlap_param_gather",
                            overlap_param_gather)
    size = (max(40_000_000, 1_000_000 * cluster.world_size) if bucket_size is None
            else int(positive(bucket_size, "megatron-distopt.bucket_size")))
    units = size_units(trace, size)
    knobs = {"bucket_size": bucket_size, "bucket_size_used": size,
             "overlap_param_gather": overlap_param_gather}
    return sharded_plan("megatron-distopt", trace, cluster, units, knobs, mode="grad-op",
                        forward_prefetch=1 if overlap_param_gather else 0, backward_prefetch=0,
                        streams=1)
