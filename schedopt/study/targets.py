"""Name the optimizer's classes of plans by what executes them (``optimize --target``).

A target is a set of :class:`schedopt.optimize.SolveOptions` fields: the plans of that class can
be run by the named framework (or, for ``any``, the widest class the optimizer searches). The
options given on the command line widen a target, never narrow it.

=============  =====================================================================
target         options
=============  =====================================================================
ddp, horovod   FIFO launch order, wait-for-all, whole tensors (the default class:
               DDP's ``bucket_cap_mb_list`` and Horovod's ``groups`` express any plan)
bytescheduler  per-layer next forward, any launch order, tensors cut into
               ByteScheduler's pieces (``partition_params`` 1,000,000 elements)
any            the same as ``bytescheduler``: the widest class
=============  =====================================================================
"""

from __future__ import annotations

from typing import Any

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies import make_plan

__all__ = ["TARGETS", "beyond_class", "target_options"]

TARGETS = ("ddp", "horovod", "bytescheduler", "any")


def _piece_bytes(plan: Plan) -> int | None:
    pieces = [p for sizes in plan.partition.values() for p in sizes]
    return max(pieces) if pieces else None


def target_options(target: str | None, trace: Trace, cluster: Cluster, *, next_forward: str,
                   reorder: bool, partition: int | None) -> dict[str, Any]:
    """SolveOptions fields for ``target``, widened by the options given.

    Raises
    ------
    SchedoptError
        An unknown target.
    """
    if target is not None and target not in TARGETS:
        raise SchedoptError(f"unknown target (known: {', '.join(TARGETS)})", "target", target)
    if target in (None, "ddp", "horovod"):
        return {"next_forward": next_forward, "reorder": reorder, "partition_bytes": partition}
    piece = _piece_bytes(make_plan(trace, cluster, "bytescheduler"))
    return {"next_forward": "per-layer", "reorder": True,
            "partition_bytes": partition if partition is not None else piece}


def beyond_class(policy: str, trace: Trace, cluster: Cluster, opts: dict[str, Any]) -> str:
    """How to reach a faster baseline ``policy`` that the options cannot express.

    Returns
    -------
    str
        The options that make a class containing the policy's plan, or why none does.
    """
    plan = make_plan(trace, cluster, policy)
    if not plan.overlap:
        return "it does not overlap communication with the backward; no option expresses that"
    if plan.collective is not None and (cluster.comm_stages(plan.collective)
                                        != cluster.comm_stages()):
        return (f"it uses another collective ({plan.collective}) than the cluster's "
                f"({cluster.collective}); pass a cluster with that collective")
    if plan.stage_orders:
        return "it orders the stages of its collective separately; no option expresses that"
    flags = []
    if plan.next_forward != opts["next_forward"]:
        flags.append(f"--next-forward {plan.next_forward}")
    if not opts["reorder"]:
        flags.append("--reorder")
    piece = _piece_bytes(plan)
    if piece is not None and not opts["partition_bytes"]:
        flags.append(f"--partition {piece}")
    if policy == "bytescheduler" and flags:
        return f"`--target {policy}` ({' '.join(flags)}) searches a class that contains it"
    return f"{' '.join(flags) or '--reorder'} searches a class that contains it"
