"""MXNet KVStore: layer-wise push to parameter servers, each pull right after its push."""

from __future__ import annotations

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import layer_buckets, new_plan


def mxnet(trace: Trace, cluster: Cluster) -> Plan:
    """One push and one pull per layer in readiness order; layer l's next forward waits for its
    own pull (MXNet's dependency engine)."""
    return new_plan(
        "mxnet", trace, cluster, layer_buckets(trace), collective="ps", next_forward="per-layer"
    )
