"""The baselines as the optimizer sees them: simulated, and expressible or not.

A baseline is *expressible* under the solve options when its default plan could be returned by
the optimizer: same next-forward mode, overlap, collective and prefetch, no per-stage orders, and
buckets that are contiguous runs of the optimizer's units (whole tensors, or pieces on the
``partition_bytes`` grid) launched in readiness order unless reordering is allowed. The best
expressible baseline is the hint; the optimizer never returns a plan that simulates worse.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize.instance import Instance, Segments
from schedopt.optimize.options import SolveOptions
from schedopt.optimize.result import BaselineRow
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

__all__ = ["Baseline", "evaluate_baseline", "expressible"]

log = logging.getLogger("schedopt.optimize")


@dataclass
class Baseline:
    """One baseline: its row, its plan and its segments in the instance's units (or None)."""

    row: BaselineRow
    plan: Plan
    segs: Segments | None


def expressible(plan: Plan, inst: Instance, opts: SolveOptions,
                cluster: Cluster) -> tuple[Segments | None, str]:
    """Segments of ``plan`` in ``inst``'s units when ``opts`` can express it, else the reason."""
    if plan.next_forward != opts.next_forward:
        return None, f"next_forward is {plan.next_forward}"
    if not plan.overlap:
        return None, "communication does not overlap the backward"
    if cluster.comm_stages(plan.collective) != cluster.comm_stages():
        return None, f"collective {plan.collective} differs from the cluster's"
    if any(order != list(range(plan.num_buckets)) for order in plan.stage_orders.values()):
        return None, "per-stage launch orders"
    if plan.prefetch != opts.prefetch:
        return None, f"prefetch {plan.prefetch}"
    if plan.accumulate != opts.accumulate:
        return None, f"accumulate {plan.accumulate}"
    segs, reason = inst.segments_of_plan(plan)
    if not segs:
        return None, reason
    if not opts.reorder and not inst.is_fifo(segs):
        return None, "launch order differs from readiness order (needs --reorder)"
    return segs, ""


def evaluate_baseline(name: str, trace: Trace, cluster: Cluster, opts: SolveOptions,
                      inst: Instance) -> Baseline | None:
    """Simulate policy ``name``'s default plan and decide whether it is expressible (None when
    the policy does not apply or fails)."""
    try:
        plan = make_plan(trace, cluster, name)
        sched = simulate(trace, cluster, plan)
    except SchedoptError as exc:  # a policy that does not apply to this cluster
        log.info("baseline %s skipped: %s", name, exc)
        return None
    except Exception as exc:  # a failing baseline must not stop the optimizer
        log.warning("baseline %s failed: %r", name, exc)
        return None
    segs, reason = expressible(plan, inst, opts, cluster)
    row = BaselineRow(policy=name, iteration_time_s=sched.iteration_time_s,
                      expressible=segs is not None, reason=reason)
    return Baseline(row, plan, segs)
