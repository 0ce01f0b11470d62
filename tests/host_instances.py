"""Instances and plans for the optimizer's tests with a host side: a shipped ResNet-50 with host
times, and every plan of a small instance (the brute force)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
from hypothesis import strategies as st

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions
from schedopt.optimize.instance import Instance, Segments


def resnet_with_host(host: float) -> tuple[Trace, Cluster]:
    """ResNet-50 (V100) on one DGX-1 with host times ``host`` times the device's (layer by layer
    and for the optimizer step), 20 us per call and 15 us per hook."""
    from schedopt.files import load_cluster, load_trace

    tr, cl = load_trace("resnet50-v100-b64"), load_cluster("dgx1-v100")
    doc = tr.model_dump(mode="json", exclude_none=True)
    for layer in doc["layers"]:
        layer["host_forward_s"] = host * layer["forward_s"]
        layer["host_backward_s"] = host * layer["backward_s"]
    doc["host_update_s"] = host * doc["update_s"]
    return Trace.model_validate(doc), Cluster.model_validate(
        {**cl.model_dump(), "launch_overhead_s": 2e-5, "hook_overhead_s": 1.5e-5})


def draw_host_times(draw: st.DrawFn, layers: list[dict]) -> None:
    """Set host times on layer documents: from none to twice the device's (one scale, with a
    jitter of 0.5-1.5 per layer)."""
    scale = draw(st.sampled_from([0.0, 0.3, 0.9, 1.1, 2.0]))
    for layer in layers:
        jitter = draw(st.floats(0.5, 1.5))
        layer["host_forward_s"] = scale * jitter * layer["forward_s"]
        layer["host_backward_s"] = scale * jitter * layer["backward_s"]


def every_plan(inst: Instance, reorder: bool = True) -> Iterator[Segments]:
    """Every bucketing of ``inst``'s units, in every launch order with ``reorder``."""
    for bits in itertools.product([False, True], repeat=inst.n - 1):
        segs = inst.segments_from_cuts(np.array(bits, dtype=bool))
        orders = itertools.permutations(range(len(segs))) if reorder else [range(len(segs))]
        for perm in orders:
            yield [segs[k] for k in perm]


def brute_force_optimum(trace: Trace, cluster: Cluster, opts: SolveOptions,
                        max_units: int = 5) -> float | None:
    """The least simulated period over every plan of the class of ``opts`` (every bucketing,
    launch order and partition) of a small instance; None above ``max_units`` units."""
    from schedopt.optimize.instance import build_instance
    from schedopt.simulate.simulator import simulate

    inst = build_instance(trace, cluster, opts, merge=False)
    if inst.n > max_units:
        return None
    knobs = {"next_forward": opts.next_forward, "reorder": opts.reorder,
             "partition_bytes": opts.partition_bytes}
    return min(simulate(trace, cluster, inst.to_plan(segs, knobs=knobs)).iteration_time_s
               for segs in every_plan(inst))
