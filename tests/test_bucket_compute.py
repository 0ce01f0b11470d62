"""``bucket_compute_s``: the buckets' time on the compute stream (a framework's scaling kernel per
bucket), against the DAG oracle, in closed forms, in the optimizer's relaxation, and as input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, Status, solve
from schedopt.optimize.relax import relaxation
from schedopt.policies import make_plan
from schedopt.simulate.dag import build_dag, check_schedule, longest_path_starts
from schedopt.simulate.simulator import simulate

from .host_instances import brute_force_optimum
from .strategies import clusters, traces
from .test_host_dp import host_cases

SPECS = st.sampled_from(["cntk", "caffe-mpi", "mxnet", "ddp:bucket_cap_mb=1",
                         "ddp:bucket_cap_mb=1,prefetch=0"])
VARIANTS = st.sampled_from([{}, {"accumulate": 2}, {"next_forward": "per-layer"}])


def _with(cluster: Cluster, c: float) -> Cluster:
    return cluster.model_copy(update={"bucket_compute_s": c})


def _unbound(plan: Plan) -> Plan:
    return plan.model_copy(update={"cluster_hash": None})


@settings(max_examples=80, deadline=None)
@given(trace=traces(host=True), cluster=clusters(host=True), spec=SPECS, variant=VARIANTS,
       c=st.floats(1e-6, 5e-3), host=st.booleans())
def test_matches_the_dag_and_only_adds_time(trace: Trace, cluster: Cluster, spec: str,
                                            variant: dict, c: float, host: bool) -> None:
    if not host:
        cluster = cluster.model_copy(update={"launch_overhead_s": 0.0, "hook_overhead_s": 0.0})
    plan = _unbound(Plan.model_validate(make_plan(trace, cluster, spec).model_dump() | variant))
    slow = _with(cluster, c)
    sched = simulate(trace, slow, plan, record=True, max_iterations=12)
    assert sum(sched.breakdown.as_dict().values()) == pytest.approx(sched.iteration_time_s,
                                                                     abs=1e-12)
    assert check_schedule(trace, slow, plan, sched) == []
    starts = longest_path_starts(build_dag(trace, slow, plan, iterations=sched.iterations))
    for key, start in starts.items():
        assert sched.tasks[key][0] == pytest.approx(start, abs=1e-12), key
    base = simulate(trace, cluster, plan).iteration_time_s
    assert sched.iteration_time_s >= base - 1e-12
    # each bucket's scaling precedes its communication: it starts after the backward that
    # completes it ends, that backward now lasting c longer per bucket it completes
    first = plan.members(trace).ready_layer()
    for k, lay in enumerate(first):
        bwd = sched.tasks[("bwd", 0, int(lay))]
        if plan.overlap and ("comm", 0, k, 0) in sched.tasks:  # one GPU: no communication
            assert sched.tasks[("comm", 0, k, 0)][0] >= bwd[1] - 1e-12
    n_at = {int(lay): int((first == lay).sum()) for lay in set(first.tolist())}
    for lay, count in n_at.items():
        start, end = sched.tasks[("bwd", 0, lay)]
        assert end - start == pytest.approx(trace.backward[lay] + c * count, abs=1e-12)


def _compute_bound() -> tuple[Trace, Cluster]:
    """Three layers whose communication is negligible beside the compute."""
    trace = Trace.model_validate({"name": "cb", "batch_size": 8, "update_s": 1e-3, "layers": [
        {"name": f"l{i}", "forward_s": 2e-3, "backward_s": 4e-3,
         "tensors": [{"name": f"l{i}.w", "bytes": 4_000}, {"name": f"l{i}.b", "bytes": 400}]}
        for i in range(3)]})
    cluster = Cluster.model_validate({"name": "fast", "nodes": 1, "gpus_per_node": 2,
                                      "intra_link": {"bandwidth_Bps": 1e14}})
    return trace, cluster


@pytest.mark.parametrize("spec", ["caffe-mpi", "cntk", "ddp:bucket_cap_mb=0.001"])
def test_closed_form_when_compute_bound(spec: str) -> None:
    trace, cluster = _compute_bound()
    plan = _unbound(make_plan(trace, cluster, spec))
    c = 2.5e-4
    base = simulate(trace, cluster, plan).iteration_time_s
    slow = simulate(trace, _with(cluster, c), plan).iteration_time_s
    assert len(plan.buckets) > 1
    assert slow - base == pytest.approx(c * len(plan.buckets), rel=1e-9)


def test_fewer_buckets_win_once_buckets_cost_compute() -> None:
    trace, cluster = _compute_bound()
    one, many = (_unbound(make_plan(trace, cluster, s)) for s in ("ddp", "caffe-mpi"))
    assert (len(one.buckets), len(many.buckets)) == (1, 3)
    assert simulate(trace, cluster, one).iteration_time_s > simulate(
        trace, cluster, many).iteration_time_s - 1e-12
    slow = _with(cluster, 1e-3)
    assert simulate(trace, slow, one).iteration_time_s < simulate(
        trace, slow, many).iteration_time_s


def test_the_optimizer_weighs_it_and_never_claims_more_than_the_simulator() -> None:
    trace, cluster = _compute_bound()
    slow = _with(cluster, 1e-3)
    relax = relaxation(slow, trace=trace)
    assert relax is not None and relax.per_call and relax.only_added_time and not relax.host
    assert any("compute-stream" in e for e in relax.effects)
    opts = SolveOptions(time_limit_s=10, workers=1, seed=0, baselines=False)
    res = solve(trace, slow, opts)
    sim = simulate(trace, slow, res.plan).iteration_time_s
    assert res.iteration_time_s == pytest.approx(sim, rel=1e-12)
    # wait-for-all on one stage: the exact programme proves it (tests/test_host_dp.py checks
    # the programme against brute force with this cost)
    assert res.status == Status.OPTIMAL and res.bound_method == "dp"
    assert res.bound_s == pytest.approx(sim, rel=1e-9)
    # one bucket per layer pays 3 ms of scaling, one bucket 1 ms: the search must see it
    assert len(res.plan.buckets) == 1
    best_many = simulate(trace, slow, _unbound(make_plan(trace, slow, "caffe-mpi")))
    assert res.iteration_time_s < best_many.iteration_time_s


@pytest.mark.parametrize("value", [-1e-6, 2.0, float("nan"), float("inf"), True, "1e-5"])
def test_bad_values_name_the_field(tmp_path: Path, value: object) -> None:
    doc = json.loads(Path("instances/clusters/dgx1-v100.json").read_text())
    doc["bucket_compute_s"] = value
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them
    res = CliRunner().invoke(app, ["simulate", "instances/traces/resnet152-v100-b32.json",
                                   str(path), "--policy", "ddp", "--json"])
    assert res.exit_code == 2, res.output
    assert "bucket_compute_s" in res.output and "Traceback" not in res.output


def test_zero_keeps_the_fingerprint() -> None:
    cluster = Cluster.model_validate(json.loads(Path(
        "instances/clusters/dgx1-v100.json").read_text()))
    assert _with(cluster, 0.0).fingerprint() == cluster.fingerprint()
    assert _with(cluster, 1e-5).fingerprint() != cluster.fingerprint()


@settings(max_examples=40, deadline=None)
@given(case=host_cases(), mode=st.sampled_from(["wait-for-all", "per-layer"]),
       c=st.sampled_from([3e-5, 5e-4, 2e-3]))
def test_solve_bounds_every_plan_and_claims_only_the_optimum(case, mode: str, c: float) -> None:
    """With a compute time per bucket (and host costs at times), in both modes: ``solve``'s
    bound is at most every plan's simulated period (every bucketing, launch order and
    partition), its plan is a plan of the class, and OPTIMAL is the brute-force optimum."""
    trace, cluster, opts, _ = case
    cluster = _with(cluster, c)
    opts = opts.model_copy(update={"time_limit_s": 5, "workers": 1, "seed": 0,
                                   "next_forward": mode})
    brute = brute_force_optimum(trace, cluster, opts)
    if brute is None:
        return
    res = solve(trace, cluster, opts)
    assert res.bound_s <= brute * (1 + 1e-9)
    assert res.iteration_time_s >= brute * (1 - 1e-9)
    if res.status == Status.OPTIMAL:
        assert res.iteration_time_s == pytest.approx(brute, rel=1e-9)
