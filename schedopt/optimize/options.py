"""Solver options and results: :class:`SolveOptions`, :class:`Status`, :class:`SolveResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from ..errors import SchedoptError
from ..plan import Plan

__all__ = ["BaselineRow", "SolveOptions", "SolveResult", "Status"]


class Status(StrEnum):
    """Outcome of :func:`~schedopt.optimize.solve`.

    ``OPTIMAL`` is reported only when the plan's objective meets a proven lower bound.
    """

    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"
    INFEASIBLE = "INFEASIBLE"
    UNKNOWN = "UNKNOWN"
    MODEL_INVALID = "MODEL_INVALID"


class SolveOptions(BaseModel):
    """What plans the optimizer may choose from, and how long it may search.

    Attributes
    ----------
    next_forward
        ``wait-for-all`` or ``per-layer`` (see docs/model.md); every plan the optimizer returns
        uses this mode.
    reorder
        Allow a launch order other than readiness order (non-preemptive).
    partition_bytes
        Cut tensors into pieces of at most this many bytes (rounded down to whole elements);
        pieces of one tensor may go to different buckets. None: tensors are never cut.
    prefetch
        I/O prefetch depth of the plan (the baselines' default is 1).
    method
        ``auto`` picks the exact dynamic programme where it is exact and CP-SAT otherwise;
        ``dp`` or ``cp-sat`` force one (``dp`` outside its exact class is a heuristic).
    merge_layers
        Treat the tensors of one layer as one unit (never cut a layer). None: merge where it is
        exact (wait-for-all); True forces it (a restriction in per-layer mode).
    time_limit_s
        Wall-clock limit of the search.
    workers
        CP-SAT search workers (1 is deterministic for a fixed seed).
    seed
        Random seed of the search.
    relative_gap
        Stop once the relative gap between objective and bound is at most this.
    lns
        Use the windowed large-neighbourhood search: None decides by instance size.
    baselines
        Simulate the registered baselines (for the comparison and the hint); False skips them.
    cp_sat
        Raw CP-SAT parameters (``SatParameters`` field names), applied last.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    next_forward: Literal["wait-for-all", "per-layer"] = Field(
        "wait-for-all", description="Next-forward mode of the plans."
    )
    reorder: bool = Field(False, description="Allow launch orders other than readiness order.")
    partition_bytes: PositiveInt | None = Field(
        None, description="Largest tensor piece in bytes; None: no partitioning."
    )
    prefetch: Literal[0, 1] = Field(1, description="I/O prefetch depth of the plan.")
    method: Literal["auto", "dp", "cp-sat"] = Field("auto", description="Solution method.")
    merge_layers: bool | None = Field(None, description="One unit per layer (None: where exact).")
    time_limit_s: float = Field(10.0, gt=0.0, allow_inf_nan=False, description="Time limit (s).")
    workers: PositiveInt = Field(1, description="CP-SAT search workers.")
    seed: int = Field(0, ge=0, description="Random seed.")
    relative_gap: float = Field(0.0, ge=0.0, le=1.0, description="Relative gap to stop at.")
    lns: bool | None = Field(None, description="Windowed LNS (None: by instance size).")
    baselines: bool = Field(True, description="Simulate the baselines (comparison and hint).")
    cp_sat: dict[str, Any] = Field(default_factory=dict, description="Raw CP-SAT parameters.")

    @model_validator(mode="after")
    def _check(self) -> SolveOptions:
        from ortools.sat import sat_parameters_pb2

        known = sat_parameters_pb2.SatParameters.DESCRIPTOR.fields_by_name
        for key in self.cp_sat:
            if key not in known:
                raise SchedoptError("unknown CP-SAT parameter", "options.cp_sat", key)
        return self


@dataclass(frozen=True)
class BaselineRow:
    """One baseline policy as the optimizer saw it.

    Attributes
    ----------
    policy
        Policy name.
    iteration_time_s
        Simulated iteration time of its default plan.
    expressible
        Whether the solve options can express the same plan (so it could serve as the hint).
    reason
        Why it is not expressible (empty when it is).
    """

    policy: str
    iteration_time_s: float
    expressible: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain dictionary."""
        return {
            "policy": self.policy,
            "iteration_time_s": self.iteration_time_s,
            "expressible": self.expressible,
            "reason": self.reason,
        }


@dataclass
class SolveResult:
    """What :func:`~schedopt.optimize.solve` found.

    Attributes
    ----------
    status
        ``OPTIMAL`` (proven), ``FEASIBLE`` (a plan, with a gap), ...
    plan
        The best plan (policy ``optimal``), bound to the trace and cluster.
    objective_s
        The optimizer's own figure for ``plan``: its integer-tick period times the tick.
    iteration_time_s
        The simulator's verdict on ``plan``.
    bound_s
        Proven lower bound on the iteration time of every plan the options allow (same ticks).
    gap
        ``(objective - bound) / objective``.
    solve_time_s
        Wall-clock time of :func:`solve`.
    method
        Which method produced the plan and the bound (``dp``, ``cp-sat``, ``cp-sat+lns``, ...).
    hint_policy, hint_iteration_time_s
        The best baseline the options can express (the warm start), and its simulated time.
    improvement_s
        ``hint_iteration_time_s - iteration_time_s`` (0 when the hint was already optimal).
    baselines
        Every baseline with its simulated time and whether the options can express it.
    tick_s
        The time unit of the integer model.
    notes
        Remarks on the model class (restrictions, approximations) for this instance.
    """

    status: Status
    plan: Plan
    objective_s: float
    iteration_time_s: float
    bound_s: float
    gap: float
    solve_time_s: float
    method: str
    hint_policy: str | None = None
    hint_iteration_time_s: float | None = None
    improvement_s: float = 0.0
    baselines: list[BaselineRow] = field(default_factory=list)
    tick_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dictionary (the plan as ``model_dump``)."""
        from .. import __version__

        return {
            "status": str(self.status),
            "iteration_time_s": self.iteration_time_s,
            "objective_s": self.objective_s,
            "bound_s": self.bound_s,
            "gap": self.gap,
            "solve_time_s": self.solve_time_s,
            "method": self.method,
            "hint_policy": self.hint_policy,
            "hint_iteration_time_s": self.hint_iteration_time_s,
            "improvement_s": self.improvement_s,
            "tick_s": self.tick_s,
            "notes": list(self.notes),
            "baselines": [b.as_dict() for b in self.baselines],
            "schedopt_version": __version__,
            "plan": self.plan.model_dump(mode="json"),
        }
