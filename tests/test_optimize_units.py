"""Units apart from the tick: the numbering and plan translation in seconds, the instance made
once the tick is chosen and never changed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions
from schedopt.optimize.instance import TICK_BUDGET, Instance, build_instance, choose_tick
from schedopt.optimize.units import build_units


def test_units_hold_seconds_and_the_instance_the_ticks(tiny_trace: Trace,
                                                       fitted_cluster: Cluster) -> None:
    """The units are in seconds and bytes, the instance rounds them with its tick; the tick
    keeps every rounding of one period within the budget of the seconds lower bound."""
    opts = SolveOptions(next_forward="per-layer", merge_layers=False)
    units = build_units(tiny_trace, fitted_cluster, opts)
    assert units.tensors == ["c.w", "a.b", "a.w"]  # ready order: last layer first, reversed
    assert units.nbytes.tolist() == [8_000_000, 4000, 4_000_000]
    assert units.release_s.tolist() == pytest.approx([0.002, 0.008, 0.008])
    inst = build_instance(tiny_trace, fitted_cluster, opts)
    assert inst.tick == choose_tick(units)
    assert inst.n == units.n and inst.tensors == units.tensors
    assert inst.r.tolist() == np.rint(units.release_s / inst.tick).astype(int).tolist()
    # (2 + stages) * pieces + 2 * layers + 4 roundings of half a tick each
    tasks = 3 * 3 + 2 * 3 + 4
    assert tasks * inst.tick / 2 == pytest.approx(TICK_BUDGET * units.lower_bound_s)


def test_the_instance_is_frozen_and_coarsen_makes_a_new_one(tiny_trace: Trace,
                                                            fitted_cluster: Cluster) -> None:
    inst = build_instance(tiny_trace, fitted_cluster, SolveOptions(merge_layers=False))
    with pytest.raises(dataclasses.FrozenInstanceError):
        inst.tick = 1.0  # type: ignore[misc]
    period = inst.evaluate([(0, 0), (1, 2)]).period
    coarse = inst.coarsen(np.array([0, 1]))
    assert coarse is not inst and coarse.tick == inst.tick and coarse.n == 2 and inst.n == 3
    assert coarse.p.tolist() == [inst.p[0], inst.p[1] + inst.p[2]]
    assert coarse.evaluate([(0, 0), (1, 1)]).period == period


@pytest.mark.parametrize("tick", [0.0, -1e-6, float("nan"), float("inf")])
def test_a_tick_that_is_not_positive_is_refused(tiny_trace: Trace, fitted_cluster: Cluster,
                                                tick: float) -> None:
    units = build_units(tiny_trace, fitted_cluster, SolveOptions())
    with pytest.raises(SchedoptError, match="tick"):
        Instance(units, tick)


def test_plans_translate_without_a_tick(tiny_trace: Trace, fitted_cluster: Cluster) -> None:
    """Plan translation is the units' job: a plan made from segments reads back to them."""
    units = build_units(tiny_trace, fitted_cluster,
                        SolveOptions(merge_layers=False, partition_bytes=3_000_000))
    segs = [(0, 1), (2, units.n - 1)]
    plan = units.to_plan(segs)
    assert plan.partition  # the pieces of c.w and a.w are named in the plan
    assert units.segments_of_plan(plan) == (segs, "")
