"""The contention bound (:func:`schedopt.optimize.relax.contention_bound`) never cuts off a plan.

Checked by brute force against the simulator on small random instances: every plan of four
gradient tensors (every grouping into buckets, in every launch order, with and without overlap
and data prefetch) simulates no faster than the bound, on a fitted all-reduce, on a PCIe ring
whose link the batch copy shares, and on a measured cost curve; then ``solve`` (one worker, a
work limit) on the same instances reports a bound below the best plan of its class. The per-layer
bound's sides (:func:`schedopt.optimize.relax.per_layer_overlap`: whole tensors, or pieces of a
partition) are checked the same way on instances with one large tensor high in the network (the
case of VGG-16 on 16 GPUs) and on hypothesis-drawn ones.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.files import load_cluster
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, Status, solve
from schedopt.optimize import relax as relax_module
from schedopt.optimize.instance import build_instance
from schedopt.optimize.relax import (
    PER_LAYER_MARGIN,
    contention_bound,
    count_candidates,
    per_layer_overlap,
    relaxation,
    split_candidates,
)
from schedopt.simulate.simulator import simulate

#: (s, s_c): both sides of gamma = 1/s + 1/s_c - 1 = 0, and the corners of the benchmark
SLOWDOWNS = [(1.2, 1.0), (1.5, 1.5), (2.0, 2.0), (1.0, 2.0), (3.0, 1.1), (1.05, 4.0)]

SEEDS = range(4)

TOL = 1e-9  # relative: the simulator's floating-point rounding


def _trace(name: str, rng: np.random.Generator, n_layers: int, owners: list[int],
           size: Callable[[int], int]) -> Trace:
    """Layers of 0.2-2 ms forward and 1-3 times that backward, tensor ``k`` in layer
    ``owners[k]`` of ``4 * size(k)`` bytes (drawn in that order), and random update, io and
    host-to-device times."""
    layers = []
    for i in range(n_layers):
        fwd = float(rng.uniform(0.2e-3, 2e-3))
        tensors = [{"name": f"l{i}.t{k}", "bytes": 4 * size(k)}
                   for k, o in enumerate(owners) if o == i]
        layers.append({"name": f"l{i}", "forward_s": fwd,
                       "backward_s": fwd * float(rng.uniform(1.0, 3.0)), "tensors": tensors})
    return Trace.model_validate({
        "name": name, "batch_size": 8, "layers": layers,
        "update_s": float(rng.uniform(0.0, 1e-3)), "io_s": float(rng.uniform(0.0, 2e-3)),
        "h2d_s": float(rng.uniform(0.0, 1e-3))})


def random_trace(seed: int) -> Trace:
    """Three or four layers, four gradient tensors (a layer may hold none), times and sizes
    spread so that communication is from a tenth to twice the compute."""
    rng = np.random.default_rng([40, seed])
    n_layers = int(rng.integers(3, 5))
    owners = sorted(int(x) for x in rng.integers(0, n_layers, size=4))
    return _trace(f"rand-{seed}", rng, n_layers, owners,
                  lambda _k: int(rng.integers(2_500, 750_000)))


def split_trace(seed: int) -> Trace:
    """Five or six layers, four gradient tensors: a large one high in the network (its call
    longer than much of the backward below it), a small one in the lowest layer, two of any
    size between: plans gain from launching some calls after the lowest layer's."""
    rng = np.random.default_rng([41, seed])
    n_layers = int(rng.integers(5, 7))
    owners = [0, *sorted(int(x) for x in rng.integers(1, n_layers - 1, size=2)),
              int(rng.integers(n_layers - 2, n_layers))]
    sizes = [int(rng.integers(2_500, 50_000)), *(int(x) for x in rng.integers(2_500, 500_000, 2)),
             int(rng.integers(750_000, 2_000_000))]
    return _trace(f"split-{seed}", rng, n_layers, owners, lambda k: sizes[k])


TRACES = {"random": random_trace, "split": split_trace}


def fitted() -> Cluster:
    """One all-reduce task of 0.5 ms + 1 ms/MB."""
    return Cluster.model_validate({
        "name": "fit", "nodes": 4, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9},
        "allreduce": {"alpha_s": 5e-4, "beta_s_per_byte": 1e-9}})


def curved() -> Cluster:
    """A measured cost curve below its line at some sizes (tests/test_optimize_relax.py)."""
    return Cluster.model_validate({
        "name": "curve", "nodes": 8, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9},
        "allreduce": {"alpha_s": 8.17e-4, "beta_s_per_byte": 3.356e-10, "segments": [
            {"min_bytes": 0, "alpha_s": 7.4e-5, "beta_s_per_byte": 1.71e-9},
            {"min_bytes": 10241, "alpha_s": 9.56e-4, "beta_s_per_byte": 2.45e-10},
            {"min_bytes": 522241, "alpha_s": 2.17e-3, "beta_s_per_byte": 1.76e-10}]}})


def pcie() -> Cluster:
    """A ring on the PCIe link that the batch copy also uses (shipped, scaled to milliseconds
    of communication)."""
    return load_cluster("k80-pcie-4gpu")


CLUSTERS = {"fitted": fitted, "curve": curved, "pcie": pcie}


def slowed(cluster: Cluster, s: float, s_c: float) -> Cluster:
    return Cluster.model_validate({**cluster.model_dump(), "overlap_slowdown": s,
                                   "comm_slowdown": s_c})


def ordered_partitions(items: list[str]) -> Iterator[list[list[str]]]:
    """Every grouping of ``items`` into non-empty buckets, each in every order."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in ordered_partitions(rest):
        for k in range(len(part)):  # join an existing bucket
            yield [*part[:k], [first, *part[k]], *part[k + 1:]]
        for k in range(len(part) + 1):  # a bucket of its own, at every position
            yield [*part[:k], [first], *part[k:]]


def bound_of(trace: Trace, cluster: Cluster, mode: str = "wait-for-all",
             pieces: int | str | None = None) -> float | None:
    opts = SolveOptions(next_forward=mode, reorder=mode == "per-layer")
    inst = build_instance(trace, cluster, opts)
    relax = relaxation(cluster, trace=trace)
    factor = 1.0 if relax is None else relax.factor
    assert inst.stages == tuple(cluster.comm_stages())
    return contention_bound(trace, cluster, cluster.comm_stages(), mode=mode,
                            total_bytes=inst.total_bytes, factor=factor, pieces=pieces)


def best_per_layer(trace: Trace, cluster: Cluster, partition_bytes: int | None = None,
                   prefetch: tuple[int, ...] = (1, 0)) -> float:
    """The best simulated period of every per-layer plan: every grouping of the tensors (or of
    their pieces) into buckets, in every launch order, with each data prefetch."""
    opts = SolveOptions(next_forward="per-layer", reorder=True, partition_bytes=partition_bytes)
    inst = build_instance(trace, cluster, opts)
    one = inst.to_plan([(i, i) for i in range(inst.n)])
    members = [b[0] for b in one.buckets]
    return min(simulate(trace, cluster, Plan(policy="brute", buckets=b, next_forward="per-layer",
                                             prefetch=p, partition=one.partition))
               .iteration_time_s for b in ordered_partitions(members) for p in prefetch)


def test_ordered_partitions_counts() -> None:
    # the ordered Bell (Fubini) numbers 1, 3, 13, 75
    assert [sum(1 for _ in ordered_partitions(list("abcd")[:n])) for n in (1, 2, 3, 4)] == [
        1, 3, 13, 75]


@pytest.mark.parametrize("name", sorted(CLUSTERS))
@pytest.mark.parametrize("seed", SEEDS)
def test_bound_below_every_plan(name: str, seed: int) -> None:
    trace = random_trace(seed)
    names = [t.name for t in trace.tensor_list]
    plans = [Plan(policy="brute", buckets=b, overlap=o, prefetch=p)
             for b in ordered_partitions(names) for o, p in ((True, 1), (True, 0), (False, 1))]
    for s, s_c in SLOWDOWNS:
        cluster = slowed(CLUSTERS[name](), s, s_c)
        bound = bound_of(trace, cluster)
        assert bound is not None and bound > 0
        best = min(simulate(trace, cluster, plan).iteration_time_s for plan in plans)
        assert bound <= best * (1 + TOL), (name, seed, s, s_c, bound, best)


@pytest.mark.parametrize("kind", sorted(TRACES))
@pytest.mark.parametrize("name", sorted(CLUSTERS))
@pytest.mark.parametrize("seed", SEEDS)
def test_per_layer_bound_below_every_plan(kind: str, name: str, seed: int) -> None:
    # the next forward per layer: communication runs beside the next forward too; whole
    # tensors (the sides of the largest ones tried) bound no less than shares of the bytes
    trace = TRACES[kind](seed)
    for s, s_c in SLOWDOWNS:
        cluster = slowed(CLUSTERS[name](), s, s_c)
        shares = bound_of(trace, cluster, "per-layer")
        whole = bound_of(trace, cluster, "per-layer", "tensors")
        assert shares is not None and whole is not None and 0 < shares <= whole
        best = best_per_layer(trace, cluster)
        assert whole <= best * (1 + TOL), (kind, name, seed, s, s_c, whole, best)


@pytest.mark.parametrize("seed", SEEDS)
def test_per_layer_bound_below_every_partitioned_plan(seed: int) -> None:
    # pieces of a partition: the large tensor cut in two, each piece on either side
    trace = split_trace(seed)
    trace = trace.model_copy(update={"layers": [
        layer.model_copy(update={"tensors": layer.tensors[:1]}) for layer in trace.layers]})
    big = max(t.bytes for t in trace.tensor_list)
    part = (big + 1) // 2
    for s, s_c in [(1.0, 2.0), (1.2, 1.0), (1.05, 4.0)]:
        cluster = slowed(fitted(), s, s_c)
        pieces = bound_of(trace, cluster, "per-layer", part)
        assert pieces is not None
        assert pieces >= bound_of(trace, cluster, "per-layer")  # type: ignore[operator]
        best = best_per_layer(trace, cluster, part)
        assert pieces <= best * (1 + TOL), (seed, s, s_c, pieces, best)


@st.composite
def small_traces(draw: st.DrawFn) -> Trace:
    """Two to five layers, two or three tensors of 10 kB to 4 MB (a layer may hold none)."""
    n_layers = draw(st.integers(2, 5))
    owners = sorted(draw(st.lists(st.integers(0, n_layers - 1), min_size=2, max_size=3)))
    times = st.floats(0.1e-3, 3e-3)
    layers = [{"name": f"l{i}", "forward_s": draw(times), "backward_s": draw(times),
               "tensors": [{"name": f"t{k}", "bytes": 4 * draw(st.integers(2_500, 1_000_000))}
                           for k, o in enumerate(owners) if o == i]} for i in range(n_layers)]
    return Trace.model_validate({"name": "drawn", "batch_size": 8, "layers": layers,
                                 "update_s": draw(st.floats(0.0, 1e-3)),
                                 "io_s": draw(st.floats(0.0, 1e-3)),
                                 "h2d_s": draw(st.floats(0.0, 1e-3))})


@settings(max_examples=40, deadline=None)
@given(trace=small_traces(), s=st.sampled_from([1.0, 1.1, 1.5, 2.0, 3.0]),
       s_c=st.sampled_from([1.0, 1.1, 1.5, 2.0, 4.0]))
def test_per_layer_bound_below_every_plan_drawn(trace: Trace, s: float, s_c: float) -> None:
    if s == 1.0 and s_c == 1.0:
        s_c = 2.0
    cluster = slowed(fitted(), s, s_c)
    whole = bound_of(trace, cluster, "per-layer", "tensors")
    assert whole is not None
    assert whole <= best_per_layer(trace, cluster) * (1 + TOL)


def test_per_layer_overlap_relaxations_only_raise_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # fewer pieces tried on their sides, or fewer layers checked: a larger overlap
    rng = np.random.default_rng(7)
    layer = np.sort(rng.integers(0, 60, size=30))
    u = rng.uniform(0.0, 5e-3, size=30)
    fwd, bwd = rng.uniform(0.0, 1e-3, size=60), rng.uniform(0.0, 2e-3, size=60)
    xs = [per_layer_overlap(layer, u, fwd, bwd, 1e-3, 1.3, k) for k in (8, 4, 0)]
    assert xs[0] <= xs[1] <= xs[2] <= u.sum()
    monkeypatch.setattr(relax_module, "MAX_WINDOW_LEVELS", 5)
    assert per_layer_overlap(layer, u, fwd, bwd, 1e-3, 1.3, 8) >= xs[0]


def test_split_bound_raises_a_vgg_like_bound() -> None:
    # a large tensor high in the network: trying its sides raises the bound above the shares'
    # bound (24.968 -> 25.662 ms; the best plan of all takes 26.639 ms)
    trace, cluster = split_trace(0), slowed(fitted(), 1.0, 2.0)
    shares = bound_of(trace, cluster, "per-layer")
    whole = bound_of(trace, cluster, "per-layer", "tensors")
    assert shares is not None and whole is not None and whole > shares
    assert whole <= best_per_layer(trace, cluster) * (1 + TOL)


@pytest.mark.parametrize("mode", ["wait-for-all", "per-layer"])
def test_split_candidates_are_plans_of_the_class(mode: str) -> None:
    # every candidate covers every unit once; without reordering (or wait-for-all) only FIFO
    trace, cluster = split_trace(0), slowed(fitted(), 1.0, 2.0)
    inst = build_instance(trace, cluster, SolveOptions(next_forward=mode, reorder=True))
    for reorder in (False, True):
        plans = count_candidates(inst, reorder=reorder)
        for segs in plans:
            assert sorted(u for lo, hi in segs for u in range(lo, hi + 1)) == list(range(inst.n))
        fifo = all(inst.is_fifo(segs) for segs in plans)
        assert fifo == (not reorder or mode == "wait-for-all")
    split = split_candidates(inst)
    assert bool(split) == (mode == "per-layer")
    assert all(segs in count_candidates(inst, reorder=True) for segs in split)


def test_per_layer_margin_covers_the_simulators_window() -> None:
    # without a repeating state the simulator averages the second half of max_iterations
    # iterations; PER_LAYER_MARGIN assumes that half holds at least 1/margin of them
    default = inspect.signature(simulate).parameters["max_iterations"].default
    assert (default - 1 - default // 2) * PER_LAYER_MARGIN >= 1


def test_exact_with_symmetric_slowdowns(tiny_trace: Trace, fitted_cluster: Cluster) -> None:
    # s = s_c = 2: every wait-for-all plan takes F + B + U + its communication, so one bucket
    # meets the bound (docs/model.md, "Overlap slowdown")
    cluster = slowed(fitted_cluster, 2.0, 2.0)
    bound = bound_of(tiny_trace, cluster)
    one = Plan(policy="one", buckets=[[t.name for t in tiny_trace.tensor_list]])
    period = simulate(tiny_trace, cluster, one).iteration_time_s
    assert bound == pytest.approx(period, rel=1e-12)
    assert bound == pytest.approx(0.004 + 0.008 + 0.001 + 0.012004, rel=1e-12)  # F B alpha beta*n


def test_none_where_it_does_not_apply(tiny_trace: Trace, fitted_cluster: Cluster) -> None:
    assert bound_of(tiny_trace, fitted_cluster) is None  # no slowdown
    assert bound_of(tiny_trace, fitted_cluster, "per-layer") is None
    hier = slowed(load_cluster("dgx-a100-4n-hierarchical"), 1.5, 1.5)
    assert len(hier.comm_stages()) > 1
    assert bound_of(tiny_trace, hier) is None  # several stages


@pytest.mark.parametrize("name", sorted(CLUSTERS))
@pytest.mark.parametrize(("s", "s_c"), [(1.2, 1.0), (2.0, 2.0), (1.0, 2.0)])
@pytest.mark.parametrize("mode", ["wait-for-all", "per-layer"])
def test_solve_bound_below_the_best_plan_of_its_class(name: str, s: float, s_c: float,
                                                      mode: str) -> None:
    # the class of the options: contiguous buckets in readiness order, overlapped, prefetch 1
    # (the baselines' plans are judged too and only lower the plan, not the bound)
    trace = random_trace(0)
    cluster = slowed(CLUSTERS[name](), s, s_c)
    res = solve(trace, cluster, SolveOptions(next_forward=mode, time_limit_s=30.0,
                                             work_limit_s=1.0, workers=1, seed=0))
    names = [t.name for t in trace.ready_order]
    best = np.inf
    for cuts in itertools.product((False, True), repeat=len(names) - 1):
        buckets, cur = [], [names[0]]
        for cut, tensor in zip(cuts, names[1:], strict=True):
            if cut:
                buckets.append(cur)
                cur = []
            cur.append(tensor)
        buckets.append(cur)
        plan = Plan(policy="brute", buckets=buckets, next_forward=mode)
        best = min(best, simulate(trace, cluster, plan).iteration_time_s)
    assert res.bound_s <= best * (1 + TOL)
    assert res.bound_s <= res.iteration_time_s * (1 + TOL)
    assert res.iteration_time_s == pytest.approx(simulate(trace, cluster, res.plan)
                                                 .iteration_time_s, rel=1e-12)
    assert res.gap == pytest.approx(1 - res.bound_s / res.iteration_time_s)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("s", "s_c"), [(1.0, 2.0), (1.5, 1.5), (1.2, 1.0)])
def test_per_layer_reordered_solve_against_brute_force(seed: int, s: float, s_c: float) -> None:
    # the class of the options: whole tensors in any grouping and launch order, prefetch 1;
    # the bound is below its best plan, and an OPTIMAL result is that best plan
    trace, cluster = split_trace(seed), slowed(fitted(), s, s_c)
    res = solve(trace, cluster, SolveOptions(next_forward="per-layer", reorder=True,
                                             time_limit_s=30.0, work_limit_s=1.0, workers=1,
                                             seed=0))
    best = best_per_layer(trace, cluster, prefetch=(1,))
    assert res.bound_s <= best * (1 + TOL)
    assert res.iteration_time_s >= best * (1 - TOL)
    if res.status == Status.OPTIMAL:
        assert res.iteration_time_s <= best * (1 + TOL)


@pytest.mark.parametrize("seed", SEEDS)
def test_symmetric_slowdowns_closed_by_one_call(seed: int) -> None:
    # s = s_c = 2, wait-for-all: every plan takes W + its communication, so the one-bucket
    # candidate meets the bound W + alpha + beta N, which the full-speed model's bound does not
    trace = random_trace(seed)
    cluster = slowed(fitted(), 2.0, 2.0)
    res = solve(trace, cluster, SolveOptions(time_limit_s=30.0, work_limit_s=1.0, workers=1,
                                             seed=0))
    assert res.gap <= 1e-9
    assert len(res.plan.buckets) == 1
    assert any("contention" in note for note in res.notes)
