"""TensorFlow 1.x parameter server: push per layer, pull each layer before its next forward."""

from __future__ import annotations

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import layer_buckets, new_plan


def tensorflow(trace: Trace, cluster: Cluster) -> Plan:
    """Pushes in readiness order; pulls in forward order (the pull stage's order is reversed), so
    the first layer's pull comes first and its forward starts as soon as it lands."""
    buckets = layer_buckets(trace)
    pull_order = list(range(len(buckets) - 1, -1, -1))
    return new_plan(
        "tensorflow", trace, cluster, buckets, collective="ps", next_forward="per-layer",
        stage_orders={1: pull_order},
    )
