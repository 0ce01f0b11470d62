"""Hypothesis strategies that build valid traces, clusters and paper-policy plans."""

from __future__ import annotations

from hypothesis import strategies as st

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace

seconds = st.floats(min_value=0.0, max_value=0.02, allow_nan=False, allow_infinity=False)


@st.composite
def traces(draw: st.DrawFn, max_layers: int = 6, data_costs: bool = True,
           host: bool = False) -> Trace:
    """A small trace: 1..max_layers layers, 0..3 tensors each (at least one in all); with
    ``host``, host launch times per layer and for the optimizer step (docs/model.md)."""
    n = draw(st.integers(1, max_layers))
    layers = []
    for i in range(n):
        k = draw(st.integers(1 if i == 0 else 0, 3))
        tensors = [
            {"name": f"l{i}.t{j}", "bytes": 4 * draw(st.integers(1, 2_000_000)),
             "dtype": "float32"}
            for j in range(k)
        ]
        layers.append({"name": f"l{i}", "forward_s": draw(seconds), "backward_s": draw(seconds),
                       "tensors": tensors})
        if host:
            layers[-1] |= {"host_forward_s": draw(seconds), "host_backward_s": draw(seconds)}
    costs = {}
    if data_costs:
        costs = {"io_s": draw(seconds), "h2d_s": draw(seconds), "update_s": draw(seconds)}
    if host:
        costs["host_update_s"] = draw(seconds)
    return Trace.model_validate({"name": "h", "batch_size": 8, "layers": layers, **costs})


@st.composite
def clusters(draw: st.DrawFn, fitted: bool | None = None, host: bool = False) -> Cluster:
    """A small cluster with any collective (or a fitted alpha-beta); with ``host``, per-call
    and per-tensor host costs."""
    nodes = draw(st.integers(1, 4))
    gpn = draw(st.integers(1, 4))
    use_fit = draw(st.booleans()) if fitted is None else fitted
    data = {
        "name": "h",
        "nodes": nodes,
        "gpus_per_node": gpn,
        "intra_link": {"bandwidth_Bps": draw(st.floats(1e9, 3e11)),
                       "latency_s": draw(st.floats(0, 1e-5))},
        "inter_link": {"bandwidth_Bps": draw(st.floats(1e8, 5e10)),
                       "latency_s": draw(st.floats(0, 1e-3))},
        "collective": draw(st.sampled_from(["ring", "tree", "hierarchical", "ps"])),
        "pipelined_hierarchical": draw(st.booleans()),
        "shared_pcie": draw(st.booleans()),
    }
    if use_fit:
        data["allreduce"] = {"alpha_s": draw(st.floats(0, 1e-3)),
                             "beta_s_per_byte": draw(st.floats(1e-11, 2e-9))}
    if host:
        data["launch_overhead_s"] = draw(st.floats(0, 5e-3))
        data["hook_overhead_s"] = draw(st.floats(0, 2e-3))
    return Cluster.model_validate(data)


@st.composite
def comparable_layers(draw: st.DrawFn, max_bytes: int) -> list[dict]:
    """1-3 layers of 1-2 tensors (at most ``4 * max_bytes`` bytes each) whose compute, 0.1 to
    3 ms a pass, is comparable with their communication: layer documents of a trace."""
    n_layers = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.lists(st.integers(1, max_bytes), min_size=1, max_size=2),
                          min_size=n_layers, max_size=n_layers))
    ms = st.floats(1e-4, 3e-3)
    return [{"name": f"l{i}", "forward_s": draw(ms), "backward_s": draw(ms),
             "tensors": [{"name": f"l{i}.t{j}", "bytes": 4 * b} for j, b in enumerate(ts)]}
            for i, ts in enumerate(sizes)]
