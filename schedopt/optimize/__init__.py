"""Optimal gradient-communication plans: exact dynamic programmes and a CP-SAT model.

>>> from schedopt.optimize import solve, SolveOptions
>>> opts = SolveOptions(next_forward="per-layer", reorder=True)
>>> res = solve(trace, cluster, opts)  # doctest: +SKIP

See docs/formulation.md for the model and :func:`solve` for the method chosen per class. The
names below load on first use, so that importing the package does not load OR-Tools.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from schedopt.optimize.options import SolveOptions as SolveOptions
    from schedopt.optimize.result import BaselineRow as BaselineRow
    from schedopt.optimize.result import Method as Method
    from schedopt.optimize.result import SolveResult as SolveResult
    from schedopt.optimize.result import Status as Status
    from schedopt.optimize.solver import solve as solve

_EXPORTS = {"SolveOptions": "schedopt.optimize.options", "BaselineRow": "schedopt.optimize.result",
            "Method": "schedopt.optimize.result", "SolveResult": "schedopt.optimize.result",
            "Status": "schedopt.optimize.result", "solve": "schedopt.optimize.solver"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'schedopt.optimize' has no attribute {name!r}")


__all__ = ["BaselineRow", "Method", "SolveOptions", "SolveResult", "Status", "solve"]
