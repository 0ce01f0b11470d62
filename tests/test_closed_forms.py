"""The simulator reproduces the closed forms of docs/model.md exactly."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

from .strategies import clusters, traces


def T(cluster: Cluster, n: float) -> float:
    return cluster.allreduce_time(n)


def layer_bytes(trace: Trace) -> list[int]:
    """Gradient bytes per layer that owns tensors, in backward order."""
    out = []
    for layer in reversed(trace.layers):
        if layer.tensors:
            out.append(sum(t.bytes for t in layer.tensors))
    return out


def test_tiny_by_hand(tiny_trace: Trace, fitted_cluster: Cluster) -> None:
    # f = 4 ms, b = 8 ms; layer c: 8 MB -> 9 ms; layer a: 4.004 MB -> 5.004 ms
    # cntk: 4 + 8 + 9 + 5.004 = 26.004 ms
    cntk = simulate(tiny_trace, fitted_cluster, make_plan(tiny_trace, fitted_cluster, "cntk"))
    assert cntk.iteration_time_s == pytest.approx(0.026004, rel=1e-12)
    # caffe-mpi: backward starts at 0; c ready at 2 ms, comm 2..11; a ready at 8, comm 11..16.004
    caffe = simulate(tiny_trace, fitted_cluster,
                     make_plan(tiny_trace, fitted_cluster, "caffe-mpi"))
    assert caffe.iteration_time_s == pytest.approx(0.004 + 0.016004, rel=1e-12)
    # sync-easgd: 4 + 8 + (1 + 12.004) ms
    easgd = simulate(tiny_trace, fitted_cluster,
                     make_plan(tiny_trace, fitted_cluster, "sync-easgd"))
    assert easgd.iteration_time_s == pytest.approx(0.025004, rel=1e-12)
    assert caffe.breakdown.exposed_comm_s == pytest.approx(0.016004 - 0.008, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(trace=traces(data_costs=False), cluster=clusters(fitted=True))
def test_cntk_closed_form(trace: Trace, cluster: Cluster) -> None:
    expected = trace.compute_s + sum(T(cluster, n) for n in layer_bytes(trace))
    got = simulate(trace, cluster, make_plan(trace, cluster, "cntk")).iteration_time_s
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(trace=traces(data_costs=False), cluster=clusters(fitted=True))
def test_caffe_mpi_closed_form(trace: Trace, cluster: Cluster) -> None:
    end, t_b, k = -math.inf, 0.0, 0
    sizes = layer_bytes(trace)
    for layer in reversed(trace.layers):
        t_b += layer.backward_s
        if layer.tensors:
            end = max(end, t_b) + T(cluster, sizes[k])
            k += 1
    expected = float(trace.forward.sum()) + max(end, t_b)
    got = simulate(trace, cluster, make_plan(trace, cluster, "caffe-mpi")).iteration_time_s
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(trace=traces(data_costs=False), cluster=clusters(fitted=True))
def test_sync_easgd_closed_form(trace: Trace, cluster: Cluster) -> None:
    expected = trace.compute_s + T(cluster, trace.total_bytes)
    got = simulate(trace, cluster, make_plan(trace, cluster, "sync-easgd")).iteration_time_s
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_ring_formula() -> None:
    c = Cluster.model_validate({
        "name": "r", "nodes": 2, "gpus_per_node": 4,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 2e-6},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 5e-5}, "nics_per_node": 2,
    })
    p, n = 8, 1e6
    # alpha = largest latency on the ring; beta = 1 / min(intra, inter x NICs)
    assert c.allreduce_time(n) == pytest.approx(2 * (p - 1) * 5e-5 + 2 * (p - 1) / p * n / 2e9)


@pytest.mark.parametrize("nics", [1, 2, 8])
def test_hierarchical_formula(nics: int) -> None:
    c = Cluster.model_validate({
        "name": "h", "nodes": 4, "gpus_per_node": 8, "collective": "hierarchical",
        "intra_link": {"bandwidth_Bps": 1e11, "latency_s": 1e-6},
        "inter_link": {"bandwidth_Bps": 1e10, "latency_s": 1e-5}, "nics_per_node": nics,
    })
    g, N, n = 8, 4, 8e6
    # each GPU all-reduces n/g across nodes; the g of them share the node's NICs
    beta_g = 1 / (1e10 * nics / g)
    expected = (2 * (g - 1) * 1e-6 + 2 * (g - 1) / g * n / 1e11
                + 2 * (N - 1) * 1e-5 + 2 * (N - 1) / N * (n / g) * beta_g)
    assert c.allreduce_time(n) == pytest.approx(expected)
    assert len(c.comm_stages()) == 1
    piped = c.model_copy(update={"pipelined_hierarchical": True})
    assert [s.name for s in piped.comm_stages()] == ["reduce-scatter", "inter-allreduce",
                                                       "all-gather"]
    assert piped.allreduce_time(n) == pytest.approx(expected)


def test_single_gpu_has_no_communication(tiny_trace: Trace, fitted_cluster: Cluster) -> None:
    one = fitted_cluster.single_gpu()
    for spec in ("cntk", "caffe-mpi", "mxnet"):
        sched = simulate(tiny_trace, one, make_plan(tiny_trace, one, spec))
        assert sched.iteration_time_s == pytest.approx(tiny_trace.compute_s)
