"""The stored optimized plans (solutions/): re-simulated, they give their stored figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedopt.files import load_cluster, load_trace
from schedopt.model.plan import Plan
from schedopt.simulate.simulator import simulate
from tests.scripts import load_script

SOLUTIONS = sorted((Path(__file__).resolve().parents[1] / "solutions").glob("*.json"))


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_stored_plan_resimulates_to_its_stored_time(path: Path) -> None:
    data = json.loads(path.read_text())
    inst = data["instance"]
    trace = load_trace(inst["trace"])
    if inst["compute_scale"] is not None:
        trace = trace.scaled(compute=inst["compute_scale"], name=inst["trace_name"])
    cluster = load_cluster(inst["cluster"], inst["nodes"])
    plan = Plan.model_validate(data["plan"])  # bound by hash: refused for another instance
    sim = simulate(trace, cluster, plan).iteration_time_s
    assert sim == pytest.approx(data["iteration_time_s"], rel=1e-9)
    assert data["objective_s"] == pytest.approx(sim, rel=1e-3)
    assert data["bound_s"] <= data["objective_s"] * (1 + 1e-12)
    assert (data["status"] == "OPTIMAL") == (data["gap"] == 0.0)
    for row in data["baselines"]:
        if row["expressible"]:
            assert sim <= row["iteration_time_s"] * (1 + 1e-9), row["policy"]


def test_there_are_stored_solutions() -> None:
    assert len(SOLUTIONS) >= 10


def test_the_generator_writes_exactly_the_stored_files() -> None:
    """``python solutions/generate.py`` rewrites the stored files and writes no other (a file
    it wrote beside them would have to be rebuilt by the test above from its recipe)."""
    gen = load_script("solutions/generate.py", "solutions_generate")
    cases = gen.stored_cases(gen._bench())
    assert {gen.file_name(c) for c in cases} == {p.name for p in SOLUTIONS}
    for case in cases:
        recipe = gen.recipe(case)
        assert load_trace(recipe["trace"]).name and load_cluster(recipe["cluster"],
                                                                 recipe["nodes"]).name
