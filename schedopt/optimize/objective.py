"""The objective of the CP-SAT model: the simulator's period in integer ticks."""

from __future__ import annotations

from ortools.sat.python import cp_model

from schedopt.optimize.instance import Instance
from schedopt.optimize.variables import ModelVariables

__all__ = ["add_objective"]


def add_objective(m: cp_model.CpModel, inst: Instance, v: ModelVariables, *,
                  reorder: bool) -> None:
    """Tie ``period`` to the schedule by the next-forward mode's terms
    (:meth:`.period.PeriodTerms.add_to`, the same terms as :meth:`.Instance.evaluate`) and
    minimise it.

    With shared PCIe the copy of the next batch and the gradients share the link: with prefetch
    1 the link is free only from ``link_free`` on, which follows the previous iteration's data
    path and last communication; with prefetch 0 the copy waits for the last communication.
    """
    inst.terms.add_to(m, v, reorder=reorder)
    m.minimize(v.period)
