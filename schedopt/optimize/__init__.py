"""Optimal gradient-communication plans: exact dynamic programmes and a CP-SAT model.

>>> from schedopt.optimize import solve, SolveOptions
>>> opts = SolveOptions(next_forward="per-layer", reorder=True)
>>> res = solve(trace, cluster, opts)  # doctest: +SKIP

See docs/formulation.md for the model and :func:`solve` for the method chosen per class. The
names below load on first use, so that importing the package does not load OR-Tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedopt.lazy import lazy_names

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


__getattr__ = lazy_names(__name__, _EXPORTS)


__all__ = ["BaselineRow", "Method", "SolveOptions", "SolveResult", "Status", "solve"]
