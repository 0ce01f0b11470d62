"""Plan -> schedopt's own plan JSON, bound to its trace (and cluster) by fingerprint."""

from __future__ import annotations

import json

from schedopt.emit.common import Emitted
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace

__all__ = ["emit_json"]


def emit_json(trace: Trace, cluster: Cluster | None, plan: Plan) -> Emitted:
    """Write the plan itself (``plan.json``), always exact.

    The plan is checked against ``trace`` (and ``cluster``) and carries their fingerprints, so
    ``schedopt simulate --plan plan.json`` refuses it for another instance.

    Parameters
    ----------
    plan, trace
        The plan and the trace it was made for.
    cluster
        The cluster (optional); without one, a cluster hash the plan already has is kept.

    Returns
    -------
    Emitted
        ``plan.json``.
    """
    plan.check_against(trace, cluster)
    update = {"trace_hash": trace.fingerprint()}
    if cluster is not None:
        update["cluster_hash"] = cluster.fingerprint()
    bound = plan.model_copy(update=update)
    data = bound.model_dump(mode="json")
    return Emitted(target="json", files={"plan.json": json.dumps(data, indent=1) + "\n"},
                   exact=True, config=data)
