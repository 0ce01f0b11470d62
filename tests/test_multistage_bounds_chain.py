"""Every bucket's own chain of stages in the flow-shop programme (:func:`.bounds.fewest_buckets`
with a resource view) never cuts off a plan.

Checked by brute force on small random instances of the two multi-stage layouts the flow-shop
view serves (the pipelined hierarchical all-reduce, dedicated parameter servers without a
local reduce): three layers of two gradient tensors each (six units), every bucketing in every
launch order simulated by :func:`schedopt.simulate.simulator.simulate`. Every bucket ends its
last stage no earlier than its release plus all of its stages one after the other, the
programme accepts every plan's own period with every view, and the resource bound stays below
the best plan; the chain lifts the bound on some of these instances. Then ``solve`` (one
worker, a deterministic work limit) on eight units, past the enumeration, reports a bound
below the brute-force optimum.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize import bounds as bounds_mod
from schedopt.optimize.bounds import fewest_buckets
from schedopt.optimize.flowshop import resource_bound, resource_views
from schedopt.optimize.instance import TICK_BUDGET, Instance, build_instance
from schedopt.simulate.simulator import simulate

SEEDS = range(2)  # every plan of each instance is enumerated and simulated

LAYOUTS = ("pipelined", "ps-dedicated")

MODES = ("per-layer", "wait-for-all")

TOL = 1e-9  # relative: the simulator's floating-point rounding


def random_trace(seed: int, layers: int = 3) -> Trace:
    """``layers`` layers of a weight (0.05-4 MB) and a bias (1-16 KB), forward times of
    0.1-1 ms, the backward twice the forward, an update step (the shape of
    ``benchmarks/bench_multistage.py``'s instances, small)."""
    rng = np.random.default_rng([41, seed, layers])
    docs = []
    for i in range(layers):
        fwd = float(np.exp(rng.uniform(np.log(1e-4), np.log(1e-3))))
        docs.append({"name": f"l{i}", "forward_s": fwd, "backward_s": 2 * fwd, "tensors": [
            {"name": f"l{i}.w", "bytes": 4 * int(np.exp(rng.uniform(np.log(12_500),
                                                                    np.log(1_000_000))))},
            {"name": f"l{i}.b", "bytes": 4 * int(rng.integers(256, 4_096))}]})
    return Trace.model_validate({"name": f"chain-{seed}", "batch_size": 8, "layers": docs,
                                 "update_s": float(rng.uniform(0.0, 2e-4))})


def bench_instance(layout: str, seed: int, mode: str = "per-layer", layers: int = 3
                   ) -> tuple[Trace, Cluster, SolveOptions]:
    """A small instance of ``benchmarks/bench_multistage.py``'s generator: ``layers`` layers of
    two tensors on the benchmark's ``layout`` cluster, with :func:`options` of ``mode``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_multistage

    cluster = bench_multistage.layout_cluster(layout)
    return bench_multistage.random_trace(seed, 2, cluster, layers=layers), cluster, options(mode)


def layout_cluster(layout: str) -> Cluster:
    """Two DGX-like nodes (pipelined hierarchical all-reduce: reduce-scatter and all-gather on
    the intra-node link, the all-reduce on the network), or four single-GPU nodes with two
    dedicated servers (push and pull on different links); start-up costs that matter."""
    if layout == "pipelined":
        return Cluster.model_validate({
            "name": "pipe", "nodes": 2, "gpus_per_node": 8, "collective": "hierarchical",
            "pipelined_hierarchical": True, "allreduce": None, "shared_pcie": False,
            "intra_link": {"bandwidth_Bps": 1.2e11, "latency_s": 1e-5},
            "inter_link": {"bandwidth_Bps": 2.5e10, "latency_s": 3e-5}})
    return Cluster.model_validate({
        "name": "ps", "nodes": 4, "gpus_per_node": 1, "collective": "ps", "allreduce": None,
        "shared_pcie": False, "ps": {"servers": 2, "colocated": False},
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 1e-5},
        "inter_link": {"bandwidth_Bps": 1.25e9, "latency_s": 5e-5}})


def options(mode: str) -> SolveOptions:
    return SolveOptions(next_forward=mode, reorder=True, merge_layers=False, workers=1,
                        seed=0, baselines=False)


def every_plan(n: int, cuts_of) -> list[list[tuple[int, int]]]:
    """Every bucketing of ``n`` units in every launch order."""
    plans = []
    for bits in itertools.product((False, True), repeat=n - 1):
        segs = cuts_of(np.array(bits, dtype=bool))
        plans += [list(p) for p in itertools.permutations(segs)]
    return plans


def solve_past_the_enumeration(trace: Trace, cluster: Cluster) -> tuple[Any, Instance, int]:
    """``solve`` (per-layer with reordering, 1 s of work) on an instance of eight units, more
    plans than the enumeration takes: its bound stays below the best period over every
    bucketing and launch order, and its plan at or above its bound. The result, the instance
    and that best period (ticks)."""
    opts = options("per-layer").model_copy(update={"time_limit_s": 60.0, "work_limit_s": 1.0})
    inst = build_instance(trace, cluster, opts, merge=False)
    assert inst.n == 8
    best = min(int(inst.evaluate(s).period) for s in every_plan(inst.n, inst.segments_from_cuts))
    res = solve(trace, cluster, opts)
    assert res.bound_s <= best * inst.tick + TICK_BUDGET * inst.lower_bound_s
    assert res.iteration_time_s >= res.bound_s * (1 - TOL)
    return res, inst, best


#: ``check(segs, lam, ends, sim)`` of one plan: its segments, ``lam`` (its own period, per-layer,
#: or the end of its communication, wait-for-all), its buckets' communication ends (ticks) and
#: its simulated iteration time (seconds).
PlanCheck = Callable[[list[tuple[int, int]], int, np.ndarray, float], None]


def check_plans(trace: Trace, cluster: Cluster, opts: SolveOptions,
                make_check: Callable[[Instance], PlanCheck]) -> tuple[Instance, int, float]:
    """Every plan of the instance, simulated: the model's period within the tick budget of the
    simulator's (per-layer), ``make_check(inst)`` on each (:data:`PlanCheck`), and the flow-shop
    bound below the best plan. The instance and the best period over every plan (ticks,
    seconds)."""
    inst = build_instance(trace, cluster, opts, merge=False)
    check = make_check(inst)
    knobs = {"next_forward": opts.next_forward, "reorder": True, "partition_bytes": None}
    best_s, best_t = np.inf, np.iinfo(np.int64).max
    for segs in every_plan(inst.n, inst.segments_from_cuts):
        sim = simulate(trace, cluster, inst.to_plan(segs, knobs=knobs)).iteration_time_s
        ev = inst.evaluate(segs)
        period = int(ev.period)
        best_s, best_t = min(best_s, sim), min(best_t, period)
        assert ev.stage_times is not None
        ends = ev.stage_times[1][-1]
        lam = period if inst.per_layer else int(ends.max())
        check(segs, lam, ends, sim)
        if inst.per_layer:  # the model's period is the simulator's, within the tick budget
            assert lam * inst.tick <= sim * (1 + TOL) + TICK_BUDGET * inst.lower_bound_s
    bound = resource_bound(inst, 10 * best_t)
    assert bound <= best_t
    assert bound * inst.tick <= best_s + TICK_BUDGET * inst.lower_bound_s
    return inst, best_t, best_s


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_chain_never_cuts_off_a_plan(layout: str, mode: str, seed: int) -> None:
    """Against every plan, simulated: each bucket's chain, the programme at the plan's own
    period with every view, and the resource bound below the best plan."""

    def make_check(inst: Instance) -> PlanCheck:
        assert len(inst.stages) > 1 and inst.n == 6
        prefix = np.r_[0, np.cumsum(inst.nbytes)].astype(float)
        fwd_s = inst.forward_from_s[inst.layer] if mode == "per-layer" else np.zeros(inst.n)
        views = resource_views(inst)
        tails = inst.terms.bucket_tails

        def check(segs: list[tuple[int, int]], lam: int, ends: np.ndarray, sim: float) -> None:
            for k, (lo, hi) in enumerate(segs):
                chain_s = sum(st.alpha_s + st.beta_s_per_byte * (prefix[hi + 1] - prefix[lo])
                              for st in inst.stages)
                chain_t = int(inst.stage_a.sum() + inst.stage_p[:, lo:hi + 1].sum())
                assert ends[k] >= inst.r[hi] + chain_t  # the exact ticks
                if mode == "per-layer":  # the simulator: the bucket's end, then its forward
                    assert sim >= (inst.release_s[hi] + chain_s + fwd_s[hi]) * (1 - TOL)
            if mode == "per-layer":  # the programme bounds the period; otherwise the comm end
                for view in views:
                    assert fewest_buckets(inst, tails, lam, view), (segs, view.on)

        return check

    check_plans(random_trace(seed), layout_cluster(layout), options(mode), make_check)


def test_chain_lifts_the_bound() -> None:
    """Without the chains (``_chains`` of zeros) the bound is never higher, and on some of
    these instances lower."""
    lifted = 0
    for layout, seed in itertools.product(LAYOUTS, SEEDS):
        inst = build_instance(random_trace(seed), layout_cluster(layout), options("per-layer"),
                              merge=False)
        with_chain = resource_bound(inst, 1 << 40, paths=False)
        zeros = (np.zeros(inst.n + 1, np.int64), 0)
        with mock.patch.object(bounds_mod, "_chains", return_value=zeros):
            without = resource_bound(inst, 1 << 40, paths=False)
        assert with_chain >= without
        lifted += with_chain > without
    assert lifted >= 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_solve_bound_below_brute_force_past_the_enumeration(layout: str) -> None:
    """Eight units (more plans than the enumeration takes): ``solve``'s bound stays below
    the best period over every bucketing and launch order, and its plan is that period's."""
    solve_past_the_enumeration(random_trace(7, layers=4), layout_cluster(layout))
