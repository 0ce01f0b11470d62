"""Synchronous EASGD: one aggregation of all gradients after the backward."""

from __future__ import annotations

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import new_plan, single_bucket


def sync_easgd(trace: Trace, cluster: Cluster) -> Plan:
    """All gradients in one bucket: ``sum f + sum b + T(all bytes)``."""
    return new_plan("sync-easgd", trace, cluster, single_bucket(trace))
