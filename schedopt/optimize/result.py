"""What :func:`~schedopt.optimize.solve` returns: :class:`SolveResult`, :class:`Status`,
:class:`Method` and :class:`BaselineRow`.

The result is a frozen pydantic model: ``SolveResult.to_dict()`` is its ``model_dump`` (the
JSON of ``schedopt optimize --json`` and ``--out``), and ``SolveResult.model_validate`` reads
such a file back.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schedopt.model.plan import Plan

__all__ = ["BaselineRow", "Method", "SolveResult", "Status"]


class Status(StrEnum):
    """Outcome of :func:`~schedopt.optimize.solve`: it always returns a plan.

    ``OPTIMAL`` is reported only when the plan's objective meets a proven lower bound and the
    model's period agrees with the simulator's; ``FEASIBLE`` otherwise (the gap says how far
    the plan may be from the optimum), including after a time limit or an interruption.
    """

    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"


class Method(StrEnum):
    """What produced a plan, or proved a bound (docs/formulation.md)."""

    #: An exact dynamic programme (wait-for-all DP, bisected per-layer DP), or the trivial
    #: answer without communication.
    DP = "dp"
    #: The DP on the summed costs of several communication stages (a heuristic there).
    DP_HEURISTIC = "dp-heuristic"
    #: Schrage's list scheduling of the DP plan's buckets (largest tail first).
    LIST_SCHEDULING = "list-scheduling"
    #: The local search over cuts.
    LOCAL_SEARCH = "local-search"
    #: Simulated annealing over bucketings and launch orders (:mod:`.anneal`).
    ANNEAL = "anneal"
    #: The unimodal programme (exact without an update step; a bound otherwise).
    UNIMODAL = "unimodal"
    #: The windowed large-neighbourhood search (CP-SAT on coarse windows).
    LNS = "lns"
    #: The full CP-SAT model.
    CP_SAT = "cp-sat"
    #: The best baseline the options can express (the warm start).
    HINT = "hint"
    #: The best plan of the unpartitioned class (solved first with ``partition_bytes``).
    UNPARTITIONED = "unpartitioned"
    #: Closed-form lower bounds (compute, one pass of all bytes, the data path, Jackson) and
    #: the DP lower bound over bucketings.
    BOUNDS = "bounds"
    #: One-stage relaxations of a multi-stage collective.
    STAGE_RELAXATION = "stage-relaxation"
    #: The flow-shop view of a multi-stage collective: per-resource bounds with heads and
    #: tails (:mod:`.flowshop`), and plans of the bottleneck stage's programme.
    FLOW_SHOP = "flow-shop"
    #: A link shared by the batch copy and the gradients (:mod:`.shared_link`): its work with
    #: the fewest buckets a period allows (a bound), and plans of fewer buckets.
    SHARED_LINK = "shared-link"
    #: Every plan evaluated (small instances; proves the optimum): sharded configurations,
    #: and every bucketing and launch order of several communication stages.
    ENUMERATION = "enumeration"
    #: Sharded plans: units of the same number of tensor-holding layers, small depths.
    UNIFORM_UNITS = "uniform-units"
    #: The host side (:mod:`.host_side`): the launching thread's work with the fewest buckets
    #: a period allows, and its cycle with the device.
    HOST_SIDE = "host-side"


class BaselineRow(BaseModel):
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

    model_config = ConfigDict(frozen=True)

    policy: str = Field(description="Policy name.")
    iteration_time_s: float = Field(description="Simulated iteration time of its plan (s).")
    expressible: bool = Field(description="Whether the options can express its plan.")
    reason: str = Field("", description="Why it is not expressible.")

    def as_dict(self) -> dict[str, Any]:
        """Plain dictionary."""
        return self.model_dump(mode="json")


class SolveResult(BaseModel):
    """What :func:`~schedopt.optimize.solve` found.

    Attributes
    ----------
    status
        ``OPTIMAL`` (proven) or ``FEASIBLE`` (a plan, with a gap).
    iteration_time_s
        The simulator's verdict on ``plan``.
    objective_s
        The optimizer's own figure for ``plan``: its integer-tick period times the tick.
    bound_s
        Proven lower bound on the iteration time of every plan the options allow (same ticks).
    gap
        ``(objective - bound) / objective``.
    solve_time_s
        Wall-clock time of :func:`solve`.
    method
        What produced the plan returned (:class:`Method`).
    bound_method
        What proved the bound (:class:`Method`).
    interrupted
        The search was stopped by Ctrl-C (SIGINT): the plan is the best known at that moment.
    wall_stop
        The wall-clock safety stop (the time limit) ended the search before its deterministic
        limits: the result may then depend on the machine's load.
    partition_gain_s
        With ``partition_bytes``: how much faster the plan is than the best plan of the
        unpartitioned class, solved first within a share of the budget (None otherwise).
    work_s
        Deterministic work of the search steps (s): CP-SAT's deterministic time, the local
        search's candidates and the unimodal programme's states, each at a fixed charge.
    hint_policy, hint_iteration_time_s
        The best baseline the options can express (the warm start), and its simulated time.
    improvement_s
        ``hint_iteration_time_s - iteration_time_s`` (0 when the hint was already optimal).
    tick_s
        The time unit of the integer model.
    notes
        Remarks on the model class (restrictions, approximations) for this instance.
    baselines
        Every baseline with its simulated time and whether the options can express it.
    schedopt_version
        The version that solved it.
    plan
        The best plan (policy ``optimal``), bound to the trace and cluster.
    """

    model_config = ConfigDict(frozen=True)

    status: Status = Field(description="OPTIMAL (proven) or FEASIBLE.")
    iteration_time_s: float = Field(description="Simulated iteration time of the plan (s).")
    objective_s: float = Field(description="The model's period of the plan (s).")
    bound_s: float = Field(description="Proven lower bound (s).")
    gap: float = Field(description="(objective - bound) / objective.")
    solve_time_s: float = Field(description="Wall-clock time of the solve (s).")
    method: Method = Field(description="What produced the plan.")
    bound_method: Method = Field(Method.BOUNDS, description="What proved the bound.")
    interrupted: bool = Field(False, description="Stopped by Ctrl-C.")
    hint_policy: str | None = Field(None, description="Best expressible baseline.")
    hint_iteration_time_s: float | None = Field(None, description="Its simulated time (s).")
    improvement_s: float = Field(0.0, description="Hint time minus the plan's time (s).")
    tick_s: float = Field(0.0, description="Time unit of the integer model (s).")
    wall_stop: bool = Field(False, description="The wall-clock safety stop fired (not Ctrl-C).")
    partition_gain_s: float | None = Field(
        None, description="With partitioning: the best unpartitioned plan's period minus this "
        "plan's (s).")
    work_s: float = Field(0.0, description="Deterministic work of the search (s).")
    notes: list[str] = Field(default_factory=list, description="Remarks on the model class.")
    baselines: list[BaselineRow] = Field(default_factory=list, description="Every baseline.")
    schedopt_version: str = Field(default_factory=lambda: _version(),
                                  description="Version that solved it.")
    plan: Plan = Field(description="The best plan (policy 'optimal').")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dictionary (``model_dump`` in JSON mode)."""
        return self.model_dump(mode="json")


def _version() -> str:
    from schedopt import __version__

    return str(__version__)
