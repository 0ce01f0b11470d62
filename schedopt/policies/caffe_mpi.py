"""Caffe-MPI: wait-free backpropagation, one all-reduce per layer, FIFO."""

from __future__ import annotations

from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import layer_buckets, new_plan


def caffe_mpi(trace: Trace, cluster: Cluster) -> Plan:
    """One bucket per layer, each launched when its layer's backward ends (WFBP)."""
    return new_plan("caffe-mpi", trace, cluster, layer_buckets(trace))
