"""Synchronous EASGD: one aggregation of all gradients after the backward."""

from __future__ import annotations

from ..cluster import Cluster
from ..plan import Plan
from ..trace import Trace
from .common import new_plan, single_bucket


def sync_easgd(trace: Trace, cluster: Cluster) -> Plan:
    """All gradients in one bucket: ``sum f + sum b + T(all bytes)``."""
    return new_plan("sync-easgd", trace, cluster, single_bucket(trace))
