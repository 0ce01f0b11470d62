"""The exact dynamic programmes and the period formula they optimise.

The period formula (:meth:`Instance.evaluate`) must be the simulator's, for every plan; the
programmes must equal brute force over every plan of their class.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.files import load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.plan import interleave
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions
from schedopt.optimize.dp import min_makespan, solve_fifo_per_layer, solve_wait_for_all
from schedopt.optimize.instance import TICK_BUDGET, build_instance, stage_sequence
from schedopt.simulate.simulator import simulate

from .strategies import clusters, traces

TEN_GBE = Cluster.model_validate({
    "name": "10gbe-8", "nodes": 8, "gpus_per_node": 1, "intra_link": {"bandwidth_Bps": 1e10},
    "inter_link": {"bandwidth_Bps": 1.25e9},
    "allreduce": {"alpha_s": 5.23e-4, "beta_s_per_byte": 8.57e-10},
})


def all_fifo_plans(inst):
    """Every contiguous bucketing in readiness order."""
    for bits in itertools.product([False, True], repeat=inst.n - 1):
        yield inst.segments_from_cuts(np.array(bits, dtype=bool))


def all_plans(inst):
    """Every contiguous bucketing in every launch order."""
    for segs in all_fifo_plans(inst):
        for perm in itertools.permutations(range(len(segs))):
            yield [segs[k] for k in perm]


def random_plan(inst, data: st.DataObject):
    """Any bucketing of ``inst``'s units, in any launch order."""
    cuts = np.array(data.draw(st.lists(st.booleans(), min_size=inst.n - 1,
                                       max_size=inst.n - 1)), dtype=bool)
    segs = inst.segments_from_cuts(cuts)
    return [segs[k] for k in data.draw(st.permutations(range(len(segs))))]


options = st.builds(
    SolveOptions,
    next_forward=st.sampled_from(["wait-for-all", "per-layer"]),
    prefetch=st.sampled_from([0, 1]),
    partition_bytes=st.one_of(st.none(), st.integers(400_000, 4_000_000)),
    merge_layers=st.just(False),
)


# ------------------------------------------------------------------------- period formula
@settings(max_examples=120, deadline=None)
@given(trace=traces(), cluster=clusters(fitted=True), opts=options, data=st.data())
def test_period_formula_is_the_simulators(trace: Trace, cluster: Cluster, opts: SolveOptions,
                                          data: st.DataObject) -> None:
    """Any bucketing in any order: the closed form equals the simulated period, in seconds
    exactly and in ticks within the tick budget."""
    inst = build_instance(trace, cluster, opts)
    segs = random_plan(inst, data)
    plan = inst.to_plan(segs)
    sim = simulate(trace, cluster, plan).iteration_time_s
    assert inst.segments_of_plan(plan) == (segs, "")
    model = inst.evaluate(segs, seconds=True).period
    assert model == pytest.approx(sim, rel=1e-9, abs=1e-15)
    assert inst.evaluate(segs).period * inst.tick == pytest.approx(sim, rel=5e-4)


@settings(max_examples=60, deadline=None)
@given(trace=traces(), cluster=clusters(fitted=False), opts=options, data=st.data(),
       servers=st.integers(1, 4), colocated=st.booleans())
def test_push_and_pull_on_one_chain_are_one_task(trace: Trace, cluster: Cluster,
                                                 opts: SolveOptions, data: st.DataObject,
                                                 servers: int, colocated: bool) -> None:
    """Parameter servers whose push and pull share a resource: the optimizer sees one task of
    the summed cost per bucket, and the closed form is still the simulator's."""
    cluster = Cluster.model_validate({
        **cluster.model_dump(), "collective": "ps", "allreduce": None,
        "ps": {"servers": servers, "colocated": colocated}})
    stages = cluster.comm_stages()
    inst = build_instance(trace, cluster, opts)
    same = len(stages) == 2 and bool(set(stages[0].resources) & set(stages[1].resources))
    assert len(inst.stages) == (1 if same else len(stages))
    if not same:
        return
    assert inst.alpha == pytest.approx(stages[0].alpha_s + stages[1].alpha_s)
    segs = random_plan(inst, data)
    sim = simulate(trace, cluster, inst.to_plan(segs)).iteration_time_s
    assert inst.evaluate(segs, seconds=True).period == pytest.approx(sim, rel=1e-9, abs=1e-15)


@settings(max_examples=80, deadline=None)
@given(trace=traces(), cluster=clusters(fitted=False), opts=options, data=st.data(),
       layout=st.sampled_from(["hierarchical", "ps"]), servers=st.integers(1, 4))
def test_several_stages_are_evaluated_as_the_simulator_serves_them(
        trace: Trace, cluster: Cluster, opts: SolveOptions, data: st.DataObject, layout: str,
        servers: int) -> None:
    """The pipelined hierarchical all-reduce and dedicated servers: every bucket's stages go
    through the shared resources in the simulator's order, and the closed form on the last
    stage's ends is the simulated period (without a PCIe link shared with the batch copy)."""
    cluster = Cluster.model_validate({
        **cluster.model_dump(), "collective": layout, "allreduce": None, "shared_pcie": False,
        "pipelined_hierarchical": True, "ps": {"servers": servers, "colocated": False}})
    inst = build_instance(trace, cluster, opts)
    if len(inst.stages) < 2:
        return
    assert not inst.pcie_coupled
    segs = random_plan(inst, data)
    sim = simulate(trace, cluster, inst.to_plan(segs)).iteration_time_s
    assert inst.evaluate(segs, seconds=True).period == pytest.approx(sim, rel=1e-9, abs=1e-15)
    assert inst.evaluate(segs).period * inst.tick == pytest.approx(sim, rel=5e-4)


@pytest.mark.parametrize("stages", [2, 3])
def test_the_kept_stage_sequence_is_the_simulators_interleaving(stages: int) -> None:
    """The serving order kept per plan size is :func:`interleave` of launch-order stages, for
    every size, in any order of asking (sizes do not share an entry)."""
    sizes = [5, 1, 12, 5, 2, 12, 30, 1]
    for m in sizes:
        assert list(stage_sequence(m, stages)) == interleave([list(range(m))] * stages)
    # pipelined all-reduce: reduce-scatter of the next bucket before the all-gather
    if stages == 3:
        assert list(stage_sequence(3, 3))[:5] == [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)]


# ------------------------------------------------------------------------------ the DPs
@settings(max_examples=80, deadline=None)
@given(trace=traces(max_layers=5), cluster=clusters(fitted=True),
       prefetch=st.sampled_from([0, 1]))
def test_wait_for_all_dp_equals_brute_force(trace: Trace, cluster: Cluster,
                                            prefetch: int) -> None:
    """The O(n) programme finds the best FIFO bucketing of the tensors."""
    opts = SolveOptions(prefetch=prefetch, merge_layers=False)
    inst = build_instance(trace, cluster, opts)
    if inst.n > 10:
        return
    brute = min(inst.evaluate(s).period for s in all_fifo_plans(inst))
    val, segs = solve_wait_for_all(inst)
    assert val == brute == inst.evaluate(segs).period


@settings(max_examples=25, deadline=None)
@given(trace=traces(max_layers=4), cluster=clusters(fitted=True),
       prefetch=st.sampled_from([0, 1]), piece=st.integers(1_000_000, 6_000_000))
def test_wait_for_all_needs_no_reorder_nor_partition(trace: Trace, cluster: Cluster,
                                                     prefetch: int, piece: int) -> None:
    """In wait-for-all mode the DP over whole layers beats every order of every bucketing of
    tensor pieces (the class reduction of docs/formulation.md), judged by the simulator."""
    fine = build_instance(trace, cluster, SolveOptions(prefetch=prefetch, partition_bytes=piece,
                                                       merge_layers=False))
    if fine.n > 5:
        return
    best = min(simulate(trace, cluster, fine.to_plan(s)).iteration_time_s
               for s in all_plans(fine))
    inst = build_instance(trace, cluster, SolveOptions(prefetch=prefetch))
    _, segs = solve_wait_for_all(inst)
    got = simulate(trace, cluster, inst.to_plan(segs)).iteration_time_s
    # the programme is exact on the integer model, whose ticks round every time: within the
    # tick budget of the simulator's seconds (a 1.7 ns backward beside 15.6 ms once tipped it)
    assert got <= best * (1 + 1e-12) + TICK_BUDGET * inst.lower_bound_s


@settings(max_examples=50, deadline=None)
@given(trace=traces(max_layers=5), cluster=clusters(fitted=True),
       prefetch=st.sampled_from([0, 1]), with_update=st.booleans())
def test_per_layer_dp_equals_brute_force(trace: Trace, cluster: Cluster, prefetch: int,
                                         with_update: bool) -> None:
    """Per-layer FIFO: exact without an update step; with one, the best plan with one bucket
    end per layer (never better than brute force)."""
    if not with_update:
        trace = trace.model_copy(update={"update_s": 0.0})
    inst = build_instance(trace, cluster, SolveOptions(next_forward="per-layer",
                                                       prefetch=prefetch))
    if inst.n > 10:
        return
    val, segs, exact = solve_fifo_per_layer(inst)
    assert val == inst.evaluate(segs).period
    brute = min(inst.evaluate(s).period for s in all_fifo_plans(inst))
    one_end = min(inst.evaluate(s).period for s in all_fifo_plans(inst)
                  if len({int(inst.layer[hi]) for _, hi in s}) == len(s))
    if inst.pcie_coupled:  # the shared-PCIe terms are not in the programme's tails
        assert val >= one_end
    else:
        assert val == one_end
    assert val >= brute
    if exact:
        assert val == brute


def test_makespan_dp_small_example() -> None:
    """Three units released at 0, 5, 6 of sizes 4, 1, 1 with start-up 2: one bucket per unit
    ends at 6, 8, 11; (0)(1,2) ends at 6, 6+2+2=10; (0,1,2) ends at 6+2+6=14: the best is 10."""
    val, segs = min_makespan(np.array([0, 5, 6]), np.array([4, 1, 1]), 2)
    assert val == 10
    assert segs == [(0, 0), (1, 2)]


def test_dp_on_the_hand_made_instance(tiny_trace: Trace, fitted_cluster: Cluster) -> None:
    """Forward 4 ms; c.w (8 MB) ready 2 ms into the backward, a's tensors at 8 ms; T(n) = 1 ms
    + 1 ms/MB. Layer-wise: c ends at 2 + 9 = 11, a at 11 + 5.004 = 16.004; one bucket ends at
    8 + 13.004 = 21.004. The optimum is layer-wise: 4 + 16.004 = 20.004 ms."""
    inst = build_instance(tiny_trace, fitted_cluster, SolveOptions())
    val, segs = solve_wait_for_all(inst)
    assert val * inst.tick == pytest.approx(0.020004, rel=5e-4)
    assert len(segs) == 2
    sim = simulate(tiny_trace, fitted_cluster, inst.to_plan(segs)).iteration_time_s
    assert sim == pytest.approx(0.020004, rel=1e-9)


def test_dp_5000_tensors_agrees_with_the_simulator() -> None:
    """The default class on 5,000 tensors (its speed: benchmarks/bench_stops.py)."""
    trace = load_trace("synthetic-5000")
    inst = build_instance(trace, TEN_GBE, SolveOptions())
    val, segs = solve_wait_for_all(inst)
    sim = simulate(trace, TEN_GBE, inst.to_plan(segs)).iteration_time_s
    assert val * inst.tick == pytest.approx(sim, rel=1e-3)
