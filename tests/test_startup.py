"""Start-up stays light: the package and the command line load no heavy library until a
command needs it (the seconds themselves are in benchmarks/bench_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("ortools", "matplotlib", "torch", "ray", "scipy", "networkx", "yaml")


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


def test_api_names_stay_functions_after_their_stages_load() -> None:
    code = ("import schedopt, schedopt.simulate.simulator, schedopt.optimize.solve, "
            "schedopt.emit.registry\n"
            "print(all(callable(f) and f.__module__ == 'schedopt.api' for f in "
            "(schedopt.simulate, schedopt.optimize, schedopt.emit)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "True"


def test_lazy_names_resolve() -> None:
    import schedopt
    from schedopt.emit import EMITTERS, emit_ddp
    from schedopt.optimize import SolveOptions

    assert schedopt.Trace.__name__ == "Trace" and EMITTERS["ddp"] is emit_ddp
    assert SolveOptions().time_limit_s > 0
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = schedopt.nothing  # type: ignore[attr-defined]
