"""Robust plans and a plan's spread: scenarios built by hand, the robust search's guarantees on
small random instances, ``simulate --perturb`` against direct simulation, bad options, the
time limit and Ctrl-C (docs/robust.md)."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedopt.cli.app import run
from schedopt.errors import SchedoptError
from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import AllReduceFit, Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, Status, solve
from schedopt.optimize.baselines import evaluate_baseline
from schedopt.optimize.instance import build_instance
from schedopt.optimize.robust import (
    LOCAL_SEARCH_FRACTION,
    SOLVES_FRACTION,
    RobustResult,
    robust_scenarios,
    robust_solve,
)
from schedopt.policies import POLICIES, make_plan
from schedopt.simulate.scenarios import (
    check_pct,
    cluster_scenarios,
    corner_scenarios,
    sample_scenarios,
    spread,
    unbound,
)
from schedopt.simulate.simulator import simulate
from tests.interrupt import cli_interrupted_at
from tests.strategies import clusters, traces

robust_mod = sys.modules["schedopt.optimize.robust"]
solve_mod = sys.modules["schedopt.optimize.solver"]

#: The model's period and the simulator agree within this (solve's AGREE): a scenario bound is
#: in the model's ticks.
AGREE = 1e-3


def two_by_two(fit: bool = False) -> Cluster:
    """2 nodes x 2 GPUs, hand-picked links (and a fitted all-reduce with two segments)."""
    data: dict[str, Any] = {
        "name": "hand", "nodes": 2, "gpus_per_node": 2,
        "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 2e-6},
        "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 5e-5},
        "collective_overhead_s": 1e-5,
    }
    if fit:
        data["allreduce"] = {"alpha_s": 1e-4, "beta_s_per_byte": 2e-9, "segments": [
            {"min_bytes": 0, "alpha_s": 1e-4, "beta_s_per_byte": 2e-9},
            {"min_bytes": 1_000_000, "alpha_s": 3e-4, "beta_s_per_byte": 1e-9}]}
    return Cluster.model_validate(data)


def hand_trace() -> Trace:
    return Trace.model_validate({"name": "hand", "batch_size": 8, "layers": [
        {"name": "a", "forward_s": 0.002, "backward_s": 0.004,
         "tensors": [{"name": "a.w", "bytes": 4_000_000}]},
        {"name": "b", "forward_s": 0.001, "backward_s": 0.003,
         "tensors": [{"name": "b.w", "bytes": 400_000}, {"name": "b.b", "bytes": 4_000}]},
    ]})


# ------------------------------------------------------------------------- scenarios by hand
def test_corners_scale_alpha_beta_and_compute_by_hand() -> None:
    tr, cl = hand_trace(), two_by_two()
    sc = corner_scenarios(tr, cl, 10)
    assert [s.name for s in sc[:3]] == [
        "nominal", "alpha+10% beta+10% compute+10%", "alpha+10% beta+10% compute-10%"]
    assert len(sc) == 1 + 8 and len({s.name for s in sc}) == 9
    assert sc[0].trace is tr and sc[0].cluster is cl and sc[0].factors == {}
    c = next(s for s in sc if s.name == "alpha-10% beta+10% compute+10%")
    assert c.factors == {"alpha": pytest.approx(0.9), "beta": pytest.approx(1.1),
                         "compute": pytest.approx(1.1)}
    ctr, ccl = c.instance()
    assert ccl.intra_link.latency_s == pytest.approx(1.8e-6)
    assert ccl.inter_link is not None and ccl.inter_link.latency_s == pytest.approx(4.5e-5)
    assert ccl.intra_link.bandwidth_Bps == pytest.approx(1e10 / 1.1)
    assert ccl.inter_link.bandwidth_Bps == pytest.approx(1e9 / 1.1)
    assert ccl.collective_overhead_s == pytest.approx(0.9e-5)
    assert [la.forward_s for la in ctr.layers] == pytest.approx([0.0022, 0.0011])
    assert [la.backward_s for la in ctr.layers] == pytest.approx([0.0044, 0.0033])
    assert (ctr.update_s, ctr.io_s) == (tr.update_s, tr.io_s)
    # the whole collective follows: ring alpha and beta scale with the links
    a0, b0 = cl.alpha_beta()
    a1, b1 = ccl.alpha_beta()
    assert b1 == pytest.approx(1.1 * b0)
    assert a1 == pytest.approx(0.9 * a0)


def test_per_link_corners_and_a_fitted_all_reduce() -> None:
    tr, cl = hand_trace(), two_by_two(fit=True)
    sc = corner_scenarios(tr, cl, 20, vary=["alpha", "beta"], per_link=True)
    dims = ["alpha.intra", "alpha.inter", "alpha.fit", "beta.intra", "beta.inter", "beta.fit"]
    assert len(sc) == 1 + 2 ** len(dims)
    s = next(s for s in sc[1:] if s.factors["beta.fit"] == pytest.approx(1.2)
             and s.factors["alpha.fit"] == pytest.approx(0.8)
             and s.factors["beta.inter"] == pytest.approx(0.8))
    assert sorted(s.factors) == sorted(dims)
    fit = s.instance()[1].allreduce
    assert fit is not None and fit.segments is not None
    assert (fit.alpha_s, fit.beta_s_per_byte) == pytest.approx((0.8e-4, 2.4e-9))
    flat = [x for g in fit.segments for x in (g.alpha_s, g.beta_s_per_byte)]
    assert flat == pytest.approx([0.8e-4, 2.4e-9, 2.4e-4, 1.2e-9])
    inter = s.instance()[1].inter_link
    assert inter is not None and inter.bandwidth_Bps == pytest.approx(1e9 / 0.8)
    assert s.instance()[0] is tr  # compute not varied


def test_no_perturbation_is_the_nominal_instance_only() -> None:
    tr, cl = hand_trace(), two_by_two()
    assert [s.name for s in corner_scenarios(tr, cl, 0)] == ["nominal"]
    assert sample_scenarios(tr, cl, 0, 3, seed=1)[2].factors == {
        "alpha": 1.0, "beta": 1.0, "compute": 1.0}


def test_samples_are_seeded_and_inside_the_box() -> None:
    tr, cl = hand_trace(), two_by_two()
    a = sample_scenarios(tr, cl, 30, 50, seed=7)
    b = sample_scenarios(tr, cl, 30, 50, seed=7)
    assert [s.factors for s in a] == [s.factors for s in b]
    assert a[0].factors != sample_scenarios(tr, cl, 30, 1, seed=8)[0].factors
    assert all(0.7 <= f <= 1.3 for s in a for f in s.factors.values())


@pytest.mark.parametrize("value", [
    -1,  # negative
    100,  # the whole cost, or more: a factor of zero
    250.0,
    math.nan,  # not a number
    math.inf,
    True,  # a boolean is not a percentage
    "true",
    "",
    None,
    [20],
])
def test_bad_percentages_name_the_option(value: Any) -> None:
    with pytest.raises(SchedoptError, match=r"^--robust: must be a number"):
        check_pct(value, "--robust")


def test_cluster_lists_need_one_rank_count() -> None:
    tr = hand_trace()
    with pytest.raises(SchedoptError, match="same number of ranks"):
        cluster_scenarios(tr, [two_by_two(), two_by_two().with_size(nodes=4)])
    names = [s.name for s in cluster_scenarios(tr, [two_by_two(), two_by_two()])]
    assert names == ["hand", "hand#1"]


# ------------------------------------------------------------------ the robust guarantees
def independent_worst(plan: Plan, scenarios: list[Any]) -> float:
    """The plan's worst time, simulated here on every scenario."""
    free = unbound(plan)
    return max(simulate(*s.instance(), free).iteration_time_s for s in scenarios)


def check_robust(res: RobustResult, scenarios: list[Any], opts: SolveOptions) -> None:
    """Bound below the worst case, the worst case at most every expressible baseline's and the
    nominal optimum's, every figure re-simulated."""
    sp = spread(res.plan, scenarios)
    assert sp.max_s == pytest.approx(res.worst_s, rel=1e-12)
    assert sp.times_s[0] == pytest.approx(res.nominal_s, rel=1e-12)
    assert sp.worst == res.worst_scenario
    assert res.bound_s <= res.worst_s * (1 + 1e-12)
    assert (res.status == Status.OPTIMAL) == (res.gap == 0.0)
    for row, t in zip(res.scenarios, sp.times_s, strict=True):
        assert row.iteration_time_s == pytest.approx(t, rel=1e-12)
        if row.bound_s is not None:  # each scenario's own bound holds for this plan too
            assert t >= row.bound_s * (1 - AGREE)
            assert res.worst_s >= row.bound_s * (1 - AGREE)
    trace0, cluster0 = scenarios[0].instance()
    inst = build_instance(trace0, cluster0, opts, merge=False)
    for name in POLICIES:
        base = evaluate_baseline(name, trace0, cluster0, opts, inst)
        if base is not None and base.row.expressible:
            assert res.worst_s <= independent_worst(base.plan, scenarios) * (1 + 1e-12), name
    share = SOLVES_FRACTION * opts.time_limit_s / len(scenarios)
    nominal = solve(trace0, cluster0, opts.model_copy(update={"time_limit_s": share}))
    if not nominal.wall_stop:  # the same deterministic solve as the robust search's
        assert res.worst_s <= independent_worst(nominal.plan, scenarios) * (1 + 1e-12)
    json.dumps(res.to_dict())


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(max_layers=4), cluster=clusters(),
       pct=st.sampled_from([5.0, 20.0, 50.0]),
       mode=st.sampled_from(["wait-for-all", "per-layer"]))
def test_robust_plan_beats_nominal_optimum_and_baselines(trace: Trace, cluster: Cluster,
                                                         pct: float, mode: str) -> None:
    scenarios = corner_scenarios(trace, cluster, pct, vary=["beta", "compute"])
    opts = SolveOptions(time_limit_s=1.0, next_forward=mode, reorder=mode == "per-layer")
    res = robust_solve(scenarios, opts)
    check_robust(res, scenarios, opts)


def test_cluster_list_on_shipped_instance() -> None:
    """Two calibrations of one machine (a fitted all-reduce against the link model)."""
    tr = load_trace("bert-base-v100-fp16")
    fitted = load_cluster("10gbe-k80-family", nodes=8)
    links = fitted.model_copy(update={"allreduce": None, "name": "links"})
    scenarios = robust_scenarios(tr, fitted, None, [links])
    assert [s.name for s in scenarios] == ["nominal", "links"]
    opts = SolveOptions(time_limit_s=2.0)
    res = robust_solve(scenarios, opts)
    check_robust(res, scenarios, opts)
    assert res.status == Status.OPTIMAL  # wait-for-all: each scenario's DP proves
    src = [c for c in res.candidates if c.source == res.source]
    assert src and src[0].worst_s == pytest.approx(res.worst_s, rel=1e-12)


def conflicting_calibrations() -> list[Any]:
    """Two fits of one machine that disagree (start-up heavy against bandwidth heavy): no
    scenario's optimum is the robust one, so the local search runs."""
    tr, base = load_trace("bert-base-v100-fp16"), load_cluster("k80-4x4-10gbe")
    a, b = base.alpha_beta()
    fits = [("startup", a * 100, b * 0.5), ("bandwidth", a * 0.05, b * 0.75)]
    return cluster_scenarios(tr, [base.model_copy(update={"name": n, "allreduce": AllReduceFit(
        alpha_s=fa, beta_s_per_byte=fb)}) for n, fa, fb in fits])


def test_robust_is_deterministic_with_one_worker() -> None:
    scenarios = conflicting_calibrations()
    opts = SolveOptions(time_limit_s=2.0)
    a, b = robust_solve(scenarios, opts), robust_solve(scenarios, opts)
    if a.wall_stop or b.wall_stop:
        pytest.skip("the wall-clock safety stop fired (a loaded machine)")
    assert a.simulations > 20 and any(c.source == "local search" for c in a.candidates)
    assert a.plan.buckets == b.plan.buckets
    assert (a.worst_s, a.bound_s, a.simulations) == (b.worst_s, b.bound_s, b.simulations)
    check_robust(a, scenarios, opts)
    # the local search found a better worst case than any scenario's own optimum
    own = [c.worst_s for c in a.candidates if c.source.startswith("optimum of")]
    assert a.worst_s < min(own) and a.status == Status.FEASIBLE and a.gap > 0


# ---------------------------------------------------------------------- time and Ctrl-C
def test_time_limit_holds() -> None:
    tr, cl = load_trace("bert-large-a100-bf16"), load_cluster("10gbe-k80-family", nodes=8)
    scenarios = corner_scenarios(tr, cl, 20)
    opts = SolveOptions(time_limit_s=1.5, next_forward="per-layer", reorder=True)
    res = robust_solve(scenarios, opts)
    assert res.solve_time_s > 0 and not res.interrupted
    assert res.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert spread(res.plan, scenarios).max_s == pytest.approx(res.worst_s, rel=1e-12)


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("where", ["baselines", "scenario solve"])
def test_sigint_returns_the_best_plan_so_far(monkeypatch: pytest.MonkeyPatch,
                                             where: str) -> None:
    calls = {"n": 0}
    mod, name, at = ((robust_mod, "evaluate_baseline", 3) if where == "baselines"
                     else (solve_mod, "local_search", 1))
    real = getattr(mod, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == at:
            sigint()
        return real(*args, **kwargs)

    monkeypatch.setattr(mod, name, wrapped)
    tr = load_trace("resnet50-v100-b64").scaled(compute=0.4)
    cl = load_cluster("k80-4x4-10gbe")
    scenarios = corner_scenarios(tr, cl, 20)
    opts = SolveOptions(time_limit_s=60.0, next_forward="per-layer", reorder=True)
    res = robust_solve(scenarios, opts)
    assert calls["n"] >= at and res.interrupted and not res.wall_stop
    # the stopped solve's plan (or a baseline) came back, not the fallback of one bucket
    assert res.source != "one bucket"
    assert any("interrupted" in n for n in res.notes)
    assert spread(res.plan, scenarios).max_s == pytest.approx(res.worst_s, rel=1e-12)
    assert res.bound_s <= res.worst_s


# ------------------------------------------------------------------------------ the CLI
def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = run(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_perturb_equals_direct_simulation_of_scaled_clusters(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(["simulate", "resnet50-v100-b64", "k80-4x4-10gbe", "-p", "mgwfbp",
                        "--perturb", "20", "--vary", "beta,compute", "--samples", "2",
                        "--seed", "3", "--json"], capsys)
    assert rc == 0, err
    sp = json.loads(out)["spread"]
    tr, cl = load_trace("resnet50-v100-b64"), load_cluster("k80-4x4-10gbe")
    plan = unbound(make_plan(tr, cl, "mgwfbp"))
    expect = {"nominal": simulate(tr, cl, plan).iteration_time_s}
    for b in (1.2, 0.8):
        for c in (1.2, 0.8):
            cd, td = cl.model_dump(), tr.model_dump()  # rebuilt: no cached arrays
            for key in ("intra_link", "inter_link"):
                cd[key]["bandwidth_Bps"] = getattr(cl, key).bandwidth_Bps / b
            for la, orig in zip(td["layers"], tr.layers, strict=True):
                la["forward_s"], la["backward_s"] = orig.forward_s * c, orig.backward_s * c
            scl, str_ = Cluster.model_validate(cd), Trace.model_validate(td)
            name = f"beta{'+' if b > 1 else '-'}20% compute{'+' if c > 1 else '-'}20%"
            expect[name] = simulate(str_, scl, plan).iteration_time_s
    assert len(sp["times_s"]) == 1 + 4 + 2
    for name, t in expect.items():
        assert sp["times_s"][name] == pytest.approx(t, rel=1e-12), name
    assert sp["max_s"] == pytest.approx(max(sp["times_s"].values()), rel=1e-15)
    assert sp["worst"] == "beta+20% compute+20%"  # every duration at its largest
    assert sp["min_s"] == pytest.approx(expect["beta-20% compute-20%"], rel=1e-12)
    rc, text, _ = cli(["simulate", "resnet50-v100-b64", "k80-4x4-10gbe", "-p", "mgwfbp",
                       "--perturb", "20", "--vary", "beta,compute"], capsys)
    assert rc == 0
    assert (f"spread over 5 scenarios: min {expect['beta-20% compute-20%'] * 1e3:.3f} ms"
            in text)


@pytest.mark.parametrize(("argv", "message"), [
    (["optimize", "--robust", "-5"], "--robust: must be a number"),
    (["optimize", "--robust", "100"], "--robust: must be a number"),
    (["optimize", "--robust", "nan"], "--robust: must be a number"),
    (["optimize", "--robust", "true"], "--robust: must be a number"),
    (["optimize", "--robust", "10", "--vary", "alpha,alpha"], "--vary: must be"),
    (["optimize", "--robust-clusters", ","], "--robust-clusters: must name"),
    (["optimize", "--robust-clusters", "dgx-a100"], "--robust-clusters: every cluster needs"),
    (["optimize", "--robust-clusters", "dgx-a100-4n,nonesuch"], "--robust-clusters: cannot load"),
    (["optimize", "--robust", "10", "--sharding", "full"], "--sharding: robust plans are"),
    (["simulate", "-p", "ddp", "--perturb", "-1"], "--perturb: must be a number"),
    (["simulate", "-p", "ddp", "--perturb", "true"], "--perturb: must be a number"),
    (["simulate", "-p", "ddp", "--samples", "4"], "--samples: needs --perturb"),
    (["simulate", "-p", "ddp", "--perturb", "5", "--samples", "-4"], "--samples: must be"),
    (["simulate", "-p", "ddp", "--perturb", "5", "--vary", "gamma"], "--vary: must be"),
])
def test_bad_options_give_one_line(argv: list[str], message: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli([argv[0], "resnet50-v100-b64", "dgx-a100-4n", *argv[1:]], capsys)
    assert rc == 2 and out == ""
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_optimize_robust_writes_and_reports(tmp_path: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "robust.json"
    rc, text, err = cli(["optimize", "bert-base-v100-fp16", "10gbe-k80-family", "--nodes", "8",
                         "--robust", "20", "--vary", "beta", "--time-limit", "5",
                         "--out", str(out)], capsys)
    assert rc == 0, err
    res = RobustResult.model_validate_json(out.read_text())
    assert f"status {res.status}  worst {res.worst_s * 1e3:.3f} ms" in text
    assert f"wrote {out}" in text
    tr, cl = load_trace("bert-base-v100-fp16"), load_cluster("10gbe-k80-family", nodes=8)
    assert simulate(tr, cl, res.plan).iteration_time_s == pytest.approx(res.nominal_s,
                                                                         rel=1e-12)
    assert res.plan.policy == "robust" and res.plan.cluster_hash == cl.fingerprint()
    nom = next(c for c in res.candidates if c.source == "nominal optimum")
    assert res.worst_s <= nom.worst_s
    assert 0 < LOCAL_SEARCH_FRACTION + SOLVES_FRACTION <= 1


def test_sigint_in_the_cli_prints_and_writes_the_robust_plan_and_exits_130(tmp_path: Any
                                                                           ) -> None:
    """``optimize --robust`` stopped by Ctrl-C (sent as the second baseline is judged): the JSON
    result on stdout, the --out file written, exit status 130."""
    out = tmp_path / "robust.json"
    proc = cli_interrupted_at("schedopt.optimize.robust", "evaluate_baseline", [
        "optimize", "resnet50-v100-b64", "k80-4x4-10gbe", "--robust", "20", "--time-limit",
        "60", "--out", str(out), "--json"], nth=2)
    assert proc.returncode == 130, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["interrupted"] is True and shown["status"] == "FEASIBLE"
    assert json.loads(out.read_text()) == shown
    tr, cl = load_trace("resnet50-v100-b64"), load_cluster("k80-4x4-10gbe")
    plan = Plan.model_validate(shown["plan"])
    assert simulate(tr, cl, plan).iteration_time_s == pytest.approx(shown["nominal_s"],
                                                                     rel=1e-12)
