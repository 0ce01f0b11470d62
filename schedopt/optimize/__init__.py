"""Optimal gradient-communication plans: exact dynamic programmes and a CP-SAT model.

>>> from schedopt.optimize import solve, SolveOptions
>>> opts = SolveOptions(next_forward="per-layer", reorder=True)
>>> res = solve(trace, cluster, opts)  # doctest: +SKIP

See docs/formulation.md for the model and :func:`solve` for the method chosen per class.
"""

from .options import BaselineRow as BaselineRow
from .options import SolveOptions as SolveOptions
from .options import SolveResult as SolveResult
from .options import Status as Status
from .solve import solve as solve

__all__ = ["BaselineRow", "SolveOptions", "SolveResult", "Status", "solve"]
