"""Start-up stays light: the package and the command line load no heavy library until a
command needs it (the seconds themselves are in benchmarks/bench_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("ortools", "matplotlib", "torch", "ray", "scipy", "networkx", "yaml", "numpy")


def _loaded_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\nimport json\n"
             f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("code", [
    "import schedopt",
    "import schedopt.cli.app",
    "from schedopt.cli.app import run; run(['--version'])",
    "from schedopt.cli.app import run; run(['--help'])",
    "from schedopt.cli.app import run; run(['optimize', '--help'])",
    "import schedopt.optimize, schedopt.emit, schedopt.simulate",
])
def test_no_heavy_import(code: str) -> None:
    assert _loaded_after(code) == []


def test_the_probe_sees_an_import() -> None:
    assert _loaded_after("import networkx") == ["networkx"]


def test_stage_packages_are_callable_and_import_as_packages() -> None:
    code = ("import types, schedopt\n"
            "import schedopt.optimize.unimodal as u, schedopt.simulate.dag as d\n"
            "import schedopt.emit.registry as r, schedopt.optimize.solver as s\n"
            "stages = (schedopt.simulate, schedopt.optimize, schedopt.emit)\n"
            "print(all(isinstance(m, types.ModuleType) and callable(m) for m in stages),"
            " u.__name__, d.__name__, s.solve is schedopt.optimize.solve)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split() == ["True", "schedopt.optimize.unimodal", "schedopt.simulate.dag", "True"]


def test_calling_a_stage_runs_its_api_function() -> None:
    import schedopt

    trace = schedopt.load_trace("resnet50-k80-b32")
    cluster = schedopt.load_cluster("k80-4x4-10gbe")
    plan = schedopt.make_plan(trace, cluster, "cntk")
    direct = schedopt.api.simulate(trace, cluster, plan).iteration_time_s
    assert schedopt.simulate(trace, cluster, plan).iteration_time_s == direct
    assert schedopt.emit(trace, cluster, plan, "json").target == "json"


def test_lazy_names_resolve() -> None:
    import schedopt
    from schedopt.emit import EMITTERS, emit_ddp
    from schedopt.optimize import SolveOptions

    assert schedopt.Trace.__name__ == "Trace" and EMITTERS["ddp"] is emit_ddp
    assert SolveOptions().time_limit_s > 0
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = schedopt.nothing  # type: ignore[attr-defined]
