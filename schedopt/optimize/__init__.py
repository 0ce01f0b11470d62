"""Optimal gradient-communication plans: exact dynamic programmes and a CP-SAT model.

>>> from schedopt.optimize import solve, SolveOptions
>>> opts = SolveOptions(next_forward="per-layer", reorder=True)
>>> res = solve(trace, cluster, opts)  # doctest: +SKIP

See docs/formulation.md for the model and :func:`solve` for the method chosen per class.
"""

from schedopt.optimize.options import SolveOptions as SolveOptions
from schedopt.optimize.result import BaselineRow as BaselineRow
from schedopt.optimize.result import Method as Method
from schedopt.optimize.result import SolveResult as SolveResult
from schedopt.optimize.result import Status as Status
from schedopt.optimize.solve import solve as solve

__all__ = ["BaselineRow", "Method", "SolveOptions", "SolveResult", "Status", "solve"]
