"""The repository's scripts (benchmarks/, instances/generate.py, solutions/generate.py),
imported as modules by the tests that check them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str) -> ModuleType:
    """The script at ``relative`` (a path from the repository's root), executed as the module
    ``name`` and registered in ``sys.modules`` under it (its dataclasses and pickles need it)."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
