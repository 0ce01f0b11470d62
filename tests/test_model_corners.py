"""Corner cases of the model that docs/model.md decides (section "Corner cases, decided")."""

from __future__ import annotations

import itertools
import random

import pytest

from schedopt.model.cluster import Cluster
from schedopt.model.plan import interleave
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate


def cluster(**kw: object) -> Cluster:
    base: dict[str, object] = {
        "name": "c", "nodes": 4, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 5e-6},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 5e-5}}
    base.update(kw)
    return Cluster.model_validate(base)


@pytest.mark.parametrize("collective", ["ring", "tree"])
def test_one_gpu_per_node_uses_the_network_only(collective: str) -> None:
    a = cluster(collective=collective).comm_stages()
    b = cluster(collective=collective,
                intra_link={"bandwidth_Bps": 1.0, "latency_s": 1.0}).comm_stages()
    assert a == b and [s.resources for s in a] == [("inter",)]
    p = 4
    if collective == "ring":  # 2(p-1) latencies and 2(p-1)/p of the bytes over the inter link
        assert a[0].alpha_s == pytest.approx(2 * (p - 1) * 5e-5)
        assert a[0].beta_s_per_byte == pytest.approx(2 * (p - 1) / p / 1e9)


def test_parameter_server_on_one_node_ignores_colocated() -> None:
    one = {"nodes": 1, "gpus_per_node": 4, "collective": "ps", "inter_link": None}
    a = cluster(**one, ps={"servers": 2, "colocated": True}).comm_stages()
    b = cluster(**one, ps={"servers": 2, "colocated": False}).comm_stages()
    assert a == b
    assert [s.resources for s in a] == [("ps-up",), ("ps-down",)]
    # 4 GPUs, 2 servers on the host: each moves max(1, 4/2) = 2 x n over the intra link
    assert a[0].beta_s_per_byte == pytest.approx(2 / 1e10)


@pytest.mark.parametrize(("workers", "servers"), [(2, 1), (4, 1), (4, 2), (4, 4), (3, 3)])
def test_colocated_servers_carry_the_server_nodes_inbound_traffic(workers: int,
                                                                   servers: int) -> None:
    stages = cluster(nodes=workers, collective="ps",
                     ps={"servers": servers, "colocated": True}).comm_stages()
    # a server's node receives n / k from each of the w - 1 other nodes
    for s in stages:
        assert s.beta_s_per_byte == pytest.approx((workers - 1) / servers / 1e9)
        assert s.beta_s_per_byte > 0


def test_one_colocated_server_costs_what_the_dedicated_one_saves() -> None:
    """One colocated server is one dedicated server minus its own node's local push."""
    col = cluster(collective="ps", ps={"servers": 1, "colocated": True}).comm_stages()
    ded = cluster(collective="ps", ps={"servers": 1, "colocated": False}).comm_stages()
    assert col[0].beta_s_per_byte == pytest.approx(ded[0].beta_s_per_byte * 3 / 4)


def _precedes(seq: list[tuple[int, int]]) -> bool:
    pos = {t: i for i, t in enumerate(seq)}
    return all(pos[(s - 1, k)] < pos[(s, k)] for s, k in seq if s > 0)


@pytest.mark.parametrize("seed", range(20))
def test_interleaving_key_keeps_stage_orders_and_never_deadlocks(seed: int) -> None:
    rng = random.Random(seed)
    n, stages = rng.randint(1, 7), rng.randint(2, 3)
    orders = [list(range(n))] + [rng.sample(range(n), n) for _ in range(stages - 1)]
    seq = interleave(orders)
    assert sorted(seq) == sorted(itertools.product(range(stages), range(n)))
    assert _precedes(seq)
    for s, order in enumerate(orders):  # each stage is served in its own order
        assert [k for t, k in seq if t == s] == order


def test_the_simple_key_would_deadlock() -> None:
    """The key (position + stage/2, stage) serves a stage before its predecessor stage."""
    orders = [[0, 1, 2], [2, 1, 0]]
    simple = sorted(((j + s / 2, s), (s, k)) for s, o in enumerate(orders)
                    for j, k in enumerate(o))
    assert not _precedes([t for _, t in simple])
    assert _precedes(interleave(orders))
    # pipelined hierarchical, one order: on the intra link RS0, RS1, AG0, RS2, AG1, AG2
    seq = interleave([[0, 1, 2]] * 3)
    assert [(s, k) for s, k in seq if s != 1] == [(0, 0), (0, 1), (2, 0), (0, 2), (2, 1), (2, 2)]


def _scaled(k: float) -> tuple[Trace, Cluster]:
    tr = Trace.model_validate({
        "name": "t", "batch_size": 4, "io_s": 3e-3 * k, "h2d_s": 1e-3 * k, "update_s": 2e-3 * k,
        "layers": [{"name": f"l{i}", "forward_s": (1 + i) * 1e-3 * k,
                    "backward_s": (2 + i % 3) * 1e-3 * k,
                    "tensors": [{"name": f"l{i}.w", "bytes": 4 * (1000 + 500 * i)}]}
                   for i in range(6)]})
    cl = cluster(nodes=3, gpus_per_node=2, collective="ps",
                 intra_link={"bandwidth_Bps": 4e6 / k, "latency_s": 1e-4 * k},
                 inter_link={"bandwidth_Bps": 2e6 / k, "latency_s": 2e-4 * k})
    return tr, cl


@pytest.mark.parametrize("policy", ["caffe-mpi", "mxnet", "tensorflow", "bytescheduler", "cntk"])
def test_steady_state_is_scale_free(policy: str) -> None:
    """Scaling every time by k scales the period by k, down to tens of picoseconds."""
    tr, cl = _scaled(1.0)
    base = simulate(tr, cl, make_plan(tr, cl, policy))
    for k in (1e-3, 1e-6, 1e-8):  # bandwidths stay within the 1e15 B/s limit
        tr, cl = _scaled(k)
        sched = simulate(tr, cl, make_plan(tr, cl, policy))
        assert sched.iteration_time_s / k == pytest.approx(base.iteration_time_s, rel=1e-9)
        assert sched.first_iteration_s / k == pytest.approx(base.first_iteration_s, rel=1e-9)
