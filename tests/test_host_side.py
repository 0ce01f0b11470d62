"""The host side of an iteration (docs/model.md, "Host side"): launches, hooks, collective calls
and the optimizer step's host time."""

from __future__ import annotations

import math

import pytest

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

LAYERS = [(1e-3, 2e-3, 1), (2e-3, 3e-3, 2), (1e-3, 1e-3, 1)]


def _trace(host: float = 0.0, update: float = 0.0) -> Trace:
    return Trace.model_validate({
        "name": "h", "batch_size": 1, "host_update_s": update,
        "layers": [{"name": f"l{i}", "forward_s": f, "backward_s": b,
                    "host_forward_s": host * f, "host_backward_s": host * b,
                    "tensors": [{"name": f"l{i}.t{j}", "bytes": 4 << 20} for j in range(n)]}
                   for i, (f, b, n) in enumerate(LAYERS)]})


def _cluster(gpus: int = 1, **extra: float) -> Cluster:
    return Cluster.model_validate({"name": "c", "nodes": 1, "gpus_per_node": gpus,
                                   "intra_link": {"bandwidth_Bps": 1e10}, **extra})


def test_zero_host_costs_are_the_old_model() -> None:
    tr, cl = _trace(), _cluster(2)
    plain = Trace.model_validate(tr.model_dump())
    assert "host_forward_s" not in tr.model_dump_json()  # hashes unchanged
    assert simulate(tr, cl, make_plan("ddp", tr, cl)) .iteration_time_s == simulate(
        plain, cl, make_plan("ddp", plain, cl)).iteration_time_s


def test_a_host_bound_step_is_the_host_time_plus_the_last_kernel() -> None:
    """Host twice as slow as the GPU on every layer, one GPU: the GPU runs each kernel right
    after its launch, so the step is every launch plus the last backward (docs/model.md)."""
    tr = _trace(host=2.0, update=5e-4)
    cl = _cluster(1, hook_overhead_s=1e-4)
    sched = simulate(tr, cl, make_plan("ddp", tr, cl))
    hooks = 1e-4 * sum(n for *_, n in LAYERS)
    launches = 2 * sum(f + b for f, b, _ in LAYERS) + hooks
    last = LAYERS[0][1]  # the backward of layer 0 runs after its launch; the step's host
    expect = max(launches + last, launches + 5e-4)  # time hides behind it (update_s = 0)
    assert sched.iteration_time_s == pytest.approx(expect, rel=1e-12)
    assert sched.breakdown.host_stall_s > 0
    assert sum(sched.breakdown.as_dict().values()) == pytest.approx(sched.iteration_time_s)


def test_launch_costs_can_rank_many_small_buckets_behind() -> None:
    """Without launch costs 1 MiB buckets (4 calls) beat 25 MiB (1 call) here; at 1 ms per call
    on the host, which delays the later backward launches, the ranking flips."""
    tr = _trace(host=1.0)

    def ranked(launch: float) -> bool:
        cl = _cluster(4, launch_overhead_s=launch)
        small, large = (simulate(tr, cl, make_plan(f"ddp:bucket_cap_mb={c}", tr, cl))
                        .iteration_time_s for c in (1, 25))
        return small < large

    assert ranked(0.0) and not ranked(1e-3)


@pytest.mark.parametrize("value", [-1e-6, math.nan, math.inf, 1.5])
@pytest.mark.parametrize("name", ["launch_overhead_s", "hook_overhead_s"])
def test_bad_host_costs_name_the_field(name: str, value: float) -> None:
    with pytest.raises((SchedoptError, ValueError), match=name):
        _cluster(2, **{name: value})
