"""Solver options: :class:`SolveOptions` (the results are in :mod:`.result`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from ..errors import SchedoptError

__all__ = ["SolveOptions"]


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
        Wall-clock limit of the search: a safety stop when ``work_limit_s`` is set.
    work_limit_s
        Deterministic work limit of the search steps (deterministic seconds: CP-SAT's
        deterministic time and the steps' fixed charges, docs/formulation.md). The same
        inputs, seed, one worker and work limit give the same plan and bound on any machine.
        None: a fraction of ``time_limit_s`` (``solve.WORK_FRACTION``).
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
    work_limit_s: float | None = Field(
        None, gt=0.0, allow_inf_nan=False,
        description="Deterministic work limit (s); None: a fraction of the time limit.")
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
