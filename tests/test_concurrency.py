"""Concurrent collectives (``Cluster.comm_concurrency``): torch's gloo process group runs two
calls at once. Closed forms, the one-call model as a bound, and the refusals."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from schedopt.cli.app import run
from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.policies import make_plan
from schedopt.simulate.dag import build_dag
from schedopt.simulate.simulator import simulate

from .strategies import clusters, traces

MS = 1e-3


def _trace() -> Trace:
    return Trace.model_validate({"name": "two", "batch_size": 1, "layers": [
        {"name": f"l{i}", "forward_s": MS, "backward_s": MS,
         "tensors": [{"name": f"l{i}.t", "bytes": 1_000_000}]} for i in range(2)]})


def _cluster(k: int, **extra: object) -> Cluster:
    """Every 1 MB call takes 3 ms."""
    return Cluster.model_validate({
        "name": "g", "nodes": 1, "gpus_per_node": 2, "intra_link": {"bandwidth_Bps": 1e10},
        "allreduce": {"alpha_s": 0.0, "beta_s_per_byte": 3e-9}, "comm_concurrency": k, **extra})


def _per_tensor(trace: Trace, cluster: Cluster) -> Plan:
    return Plan.model_validate({"policy": "manual", "buckets": [["l1.t"], ["l0.t"]],
                                "trace_hash": trace.fingerprint(),
                                "cluster_hash": cluster.fingerprint()})


@pytest.mark.parametrize(("k", "period_ms"), [(1, 9.0), (2, 7.0), (3, 7.0)])
def test_two_calls_at_once_closed_form(k: int, period_ms: float) -> None:
    """Forward 0-2 ms, backward of l1 2-3 and of l0 3-4 ms. One call at a time: 3-6 and 6-9 ms;
    two at once: 3-6 and 4-7 ms; the next forward waits for both."""
    tr, cl = _trace(), _cluster(k)
    sched = simulate(tr, cl, _per_tensor(tr, cl), record=True)
    assert sched.iteration_time_s == pytest.approx(period_ms * MS, rel=1e-12)
    comm = sorted(v for key, v in sched.tasks.items() if key[0] == "comm" and key[1] == 1)
    starts = [round((a - comm[0][0]) / MS, 9) for a, _ in comm]
    assert starts == ([0.0, 3.0] if k == 1 else [0.0, 1.0])


def test_one_channel_is_the_old_model_and_keeps_the_fingerprint() -> None:
    plain = Cluster.model_validate(_cluster(1).model_dump(exclude={"comm_concurrency"}))
    assert plain.fingerprint() == _cluster(1).fingerprint() != _cluster(2).fingerprint()
    assert "comm_concurrency" not in plain.model_dump_json(exclude_defaults=True)


@settings(max_examples=60, deadline=None)
@given(traces(), clusters(fitted=True), st.integers(2, 4),
       st.sampled_from(["wait-for-all", "per-layer"]))
def test_more_channels_never_slower_and_never_overlap_on_one(
        trace: Trace, cluster: Cluster, k: int, next_forward: str) -> None:
    """Calls start in launch order, each no earlier than its bucket is ready, at most one per
    channel at a time; a step is never slower than with one channel."""
    assume(len(cluster.comm_stages()) == 1)
    wide = cluster.model_copy(update={"comm_concurrency": k})
    spec = f"caffe-mpi:next_forward={next_forward}" if next_forward == "per-layer" else "ddp"
    try:
        one, many = (simulate(trace, c, make_plan(trace, c, spec), record=True)
                     for c in (cluster, wide))
    except SchedoptError:  # a knob this policy does not take
        assume(False)
        return
    assert many.iteration_time_s <= one.iteration_time_s * (1 + 1e-9) + 1e-15
    by_res: dict[str, list[tuple[float, float]]] = {}
    for key, (a, b) in many.tasks.items():
        if key[0] == "comm":
            for r in many.resources[key]:
                assert "#" in r and int(r.rsplit("#", 1)[1]) < k
                by_res.setdefault(r, []).append((a, b))
    for spans in by_res.values():
        spans.sort()
        assert all(b0 <= a1 + 1e-12 for (_, b0), (a1, _) in itertools.pairwise(spans))


def test_refused_where_not_modelled() -> None:
    tr, cl = _trace(), _cluster(2)
    plan = _per_tensor(tr, cl)
    with pytest.raises(SchedoptError, match="one collective at a time") as err:
        solve(tr, cl, SolveOptions(time_limit_s=1, workers=1))
    assert err.value.field == "cluster.comm_concurrency"
    with pytest.raises(SchedoptError, match="one task at a time"):
        build_dag(tr, cl, plan)
    slow = _cluster(2, overlap_slowdown=1.5)
    with pytest.raises(SchedoptError, match="contention slowdowns"):
        simulate(tr, slow, make_plan(tr, slow, "ddp"))
    staged = Cluster.model_validate({
        "name": "h", "nodes": 2, "gpus_per_node": 2, "intra_link": {"bandwidth_Bps": 1e10},
        "inter_link": {"bandwidth_Bps": 1e9}, "collective": "hierarchical",
        "pipelined_hierarchical": True, "comm_concurrency": 2})
    with pytest.raises(SchedoptError, match="3 stages"):
        simulate(tr, staged, make_plan(tr, staged, "ddp"))
    with pytest.raises(SchedoptError, match="sharded plans"):
        simulate(tr, cl, make_plan(tr, cl, "fsdp"))


@pytest.mark.parametrize("value", [0, 65, True, 1.5, "2", -1])
def test_bad_values_are_one_line_errors(tmp_path: Path, value: object,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**_cluster(1).model_dump(mode="json"), "comm_concurrency": value}))
    assert run(["simulate", "resnet50-v100-b64", str(path), "-p", "ddp"]) == 2
    err = capsys.readouterr().err.strip()
    assert "comm_concurrency" in err and "\n" not in err and "Traceback" not in err
