"""Ctrl-C and the time limit anywhere in a solve: the best plan known so far comes back, valid,
FEASIBLE with its gap (or OPTIMAL when already proven), and on time.

The SIGINT tests send the signal from inside the solve (a wrapped step, or the progress hook
while CP-SAT runs), so that it lands at a known moment and never outside :func:`solve`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schedopt.files import load_cluster, load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, SolveResult, Status, solve
from schedopt.optimize.budget import WORK_FRACTION, Budget, Share
from schedopt.simulate.simulator import simulate
from tests.interrupt import cli_interrupted_at

solve_mod = sys.modules["schedopt.optimize.solver"]
PER_LAYER = {"next_forward": "per-layer", "reorder": True}


def resnet(compute: float = 0.4) -> Trace:
    """ResNet-50 with compute scaled so that the reordered class needs a search."""
    return load_trace("resnet50-v100-b64").scaled(compute=compute)


def sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def wrap(monkeypatch: pytest.MonkeyPatch, name: str, before: Callable[[], None]) -> None:
    """Call ``before`` at the start of the portfolio's ``name``."""
    real = getattr(solve_mod, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        before()
        return real(*args, **kwargs)

    monkeypatch.setattr(solve_mod, name, wrapped)


def check_stopped(trace: Trace, cluster: Cluster, res: SolveResult) -> None:
    """A valid plan, its simulated time, a bound below it and a consistent status."""
    sim = simulate(trace, cluster, res.plan).iteration_time_s
    assert sim == pytest.approx(res.iteration_time_s, rel=1e-12)
    assert res.bound_s <= res.objective_s * (1 + 1e-12)
    assert 0.0 <= res.gap < 1.0
    assert (res.status == Status.OPTIMAL) == (res.gap == 0.0)
    for row in res.baselines:
        if row.expressible:
            assert res.iteration_time_s <= row.iteration_time_s * (1 + 1e-9), row.policy
    json.dumps(res.to_dict())


# --------------------------------------------------------------------------------- SIGINT
@pytest.mark.parametrize("moment", ["evaluate_baseline", "solve_fifo_per_layer",
                                    "local_search", "unimodal_exact", "windowed_lns"])
def test_sigint_in_a_step_returns_the_best_plan_so_far(monkeypatch: pytest.MonkeyPatch,
                                                       moment: str) -> None:
    calls = {"n": 0}

    def third_call() -> None:  # the third baseline, the first call of the others
        calls["n"] += 1
        if calls["n"] == (3 if moment == "evaluate_baseline" else 1):
            sigint()

    wrap(monkeypatch, moment, third_call)
    trace, cluster = resnet(), load_cluster("k80-4x4-10gbe")
    res = solve(trace, cluster, SolveOptions(time_limit_s=20.0, lns=True, **PER_LAYER))
    assert calls["n"] >= 1 and res.interrupted and not res.wall_stop
    assert any("interrupted" in note for note in res.notes)
    check_stopped(trace, cluster, res)
    if moment == "evaluate_baseline":
        assert len(res.baselines) == 2  # the third was stopped
    else:  # every baseline was simulated before the search
        assert len(res.baselines) > 2


def test_sigint_while_cp_sat_runs_keeps_its_best_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The programme is left out so that CP-SAT runs; the progress hook (called every half
    second while CP-SAT runs) sends Ctrl-C once CP-SAT has started."""
    monkeypatch.setattr(solve_mod, "unimodal_exact", lambda *a, **k: None)
    started = {"cp_sat": False, "sent": False}
    wrap(monkeypatch, "CommModel", lambda: started.update(cp_sat=True))
    seen: list[tuple[float, float, float]] = []

    def progress(elapsed: float, objective: float, bound: float) -> None:
        seen.append((elapsed, objective, bound))
        if started["cp_sat"] and not started["sent"]:
            started["sent"] = True
            sigint()

    trace, cluster = resnet(), load_cluster("k80-4x4-10gbe")
    opts = SolveOptions(time_limit_s=30.0, lns=False, **PER_LAYER)
    res = solve(trace, cluster, opts, progress=progress)
    if not started["sent"]:
        pytest.skip("solved before CP-SAT ran for half a second")
    assert res.interrupted and not res.wall_stop
    check_stopped(trace, cluster, res)
    # the hook saw plans that only get better and bounds that only get higher
    objs, bounds = [s[1] for s in seen], [s[2] for s in seen]
    assert objs == sorted(objs, reverse=True) and bounds == sorted(bounds)
    assert res.objective_s == pytest.approx(objs[-1], rel=1e-12)


def test_sigint_in_the_cli_prints_and_writes_the_plan_and_exits_130(tmp_path: Path) -> None:
    """``schedopt optimize`` stopped by Ctrl-C (sent as the unimodal programme starts): the
    JSON result on stdout, the --out file written, exit status 130."""
    out = tmp_path / "res.json"
    proc = cli_interrupted_at("schedopt.optimize.solver", "unimodal_exact", [
        "optimize", "resnet50-v100-b64", "k80-4x4-10gbe", "--next-forward", "per-layer",
        "--reorder", "--time-limit", "60", "--out", str(out), "--json"])
    assert proc.returncode == 130, proc.stderr
    data = json.loads(proc.stdout)
    assert data["interrupted"] is True and data["plan"]["buckets"]
    assert json.loads(out.read_text())["iteration_time_s"] == data["iteration_time_s"]
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- time limit
PATHS = {
    # the portfolio with the LNS on 5,000 tensors
    "lns": ("synthetic-5000", "10gbe-k80-family", PER_LAYER),
    # several stages: the DP on summed costs, the local search, the stage relaxations
    "multi-stage": ("synthetic-5000", "dgx-a100-4n-hierarchical", PER_LAYER),
    # many pieces: the programme and CP-SAT on a partitioned instance
    "partition": ("resnet50-v100-b64", "k80-4x4-10gbe", {**PER_LAYER,
                                                          "partition_bytes": 200_000}),
    # the exact DP of the default class (fast: well within any limit)
    "default": ("synthetic-5000", "10gbe-k80-family", {}),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_time_limit_is_honoured_on_every_path(path: str) -> None:
    trace_name, cluster_name, kw = PATHS[path]
    trace = load_trace(trace_name)
    cluster = load_cluster(cluster_name, nodes=8 if "family" in cluster_name else None)
    limit = 1.0
    res = solve(trace, cluster, SolveOptions(time_limit_s=limit, **kw))
    # the search's deterministic work stays within its share of the limit, whatever the load
    # (the wall-clock figures are in benchmarks/bench_stops.py)
    assert 0 <= res.work_s <= WORK_FRACTION * limit * (1 + 1e-9)
    assert res.solve_time_s > 0
    assert not res.interrupted
    check_stopped(trace, cluster, res)


def test_time_limit_during_the_baselines_keeps_those_done(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Slow baselines get half of the limit; the search still runs and the plan is valid."""
    wrap(monkeypatch, "evaluate_baseline", lambda: time.sleep(0.2))
    trace, cluster = resnet(), load_cluster("k80-4x4-10gbe")
    res = solve(trace, cluster, SolveOptions(time_limit_s=1.0, **PER_LAYER))
    assert 1 <= len(res.baselines) < 11
    assert any("baselines stopped" in note for note in res.notes)
    check_stopped(trace, cluster, res)


def test_solve_outside_the_main_thread_needs_no_signals(tiny_trace: Trace) -> None:
    """Signal handlers can only be installed in the main thread: elsewhere the deadline is
    kept between steps, and the result is the same as in the main thread."""
    import threading

    cluster = load_cluster("k80-4x4-10gbe")
    opts = SolveOptions(time_limit_s=2.0, **PER_LAYER)
    out: dict[str, SolveResult] = {}
    worker = threading.Thread(target=lambda: out.update(res=solve(tiny_trace, cluster, opts)))
    worker.start()
    worker.join(30)
    assert "res" in out and not out["res"].interrupted
    check_stopped(tiny_trace, cluster, out["res"])
    here = solve(tiny_trace, cluster, opts)
    assert here.iteration_time_s == out["res"].iteration_time_s


def test_budget_shares_take_their_fraction_of_the_time_left() -> None:
    budget = Budget(10.0)
    share = Share(0.1, 2.0)
    now = time.perf_counter()
    assert budget.until(share) - now == pytest.approx(min(2.0, 0.1 * budget.left()), abs=0.05)
    assert budget.of_limit(solve_mod.BASELINES) == pytest.approx(budget.t0 + 5.0)
    assert budget.until(Share(1.0)) <= budget.deadline


class _RaisesWhenFreed:
    """An object whose finaliser raises ``exc`` (Python reports it to ``sys.unraisablehook``)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __del__(self) -> None:
        raise self.exc


def test_a_swallowed_stop_is_not_reported_but_other_errors_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop raised where Python swallows it (a finaliser, a gc callback) is repeated by the
    timer, so it is not printed as "Exception ignored"; any other swallowed error still is."""
    from schedopt.optimize.control import Control, Halt, StepTimeout

    seen: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(type(u.exc_value)))
    before = sys.unraisablehook
    with Control(time.perf_counter() + 60.0):
        for exc in (StepTimeout(), Halt(), ValueError("a real bug")):
            _RaisesWhenFreed(exc)  # freed at once: its finaliser raises
    assert seen == [ValueError]
    assert sys.unraisablehook is before  # restored
    _RaisesWhenFreed(StepTimeout())  # outside a solve: reported as before
    assert seen == [ValueError, StepTimeout]
