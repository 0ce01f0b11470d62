"""CNTK: layer-wise all-reduce after the whole backward (no overlap)."""

from __future__ import annotations

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import layer_buckets, new_plan


def cntk(trace: Trace, cluster: Cluster) -> Plan:
    """One bucket per layer, launched only after the whole backward ends.

    Closed form (no io, update): ``sum f + sum b + sum_l T(bytes_l)``.
    """
    return new_plan("cntk", trace, cluster, layer_buckets(trace), overlap=False)
