"""Solver options: :class:`SolveOptions` (the results are in :mod:`.result`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from schedopt.errors import SchedoptError
from schedopt.model.plan import MAX_ACCUMULATE

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
        None: a fraction of ``time_limit_s`` (``budget.WORK_FRACTION``).
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
    sharding
        ``full`` or ``grad-op``: search sharded plans (units, prefetch depths, streams; see
        :mod:`.sharding`) instead of all-reduce buckets. None: all-reduce plans.
    memory_cap_bytes
        With ``sharding``: the plan's peak of unsharded parameters and gradients per rank must
        stay within this many bytes. None: no cap.
    accumulate
        With ``sharding``: micro-batches per step (communication on the last only).
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
    sharding: Literal["full", "grad-op"] | None = Field(
        None, description="Search sharded plans of this mode (None: all-reduce plans).")
    memory_cap_bytes: PositiveInt | None = Field(
        None, description="Largest peak of unsharded parameters and gradients (bytes).")
    accumulate: int = Field(1, ge=1, le=MAX_ACCUMULATE, description="Micro-batches per step.")

    @model_validator(mode="after")
    def _check(self) -> SolveOptions:
        from ortools.sat import sat_parameters_pb2

        known = sat_parameters_pb2.SatParameters.DESCRIPTOR.fields_by_name
        for key in self.cp_sat:
            if key not in known:
                raise SchedoptError("unknown CP-SAT parameter", "options.cp_sat", key)
        self._check_sharding()
        return self

    def _check_sharding(self) -> None:
        """Sharded options only with ``sharding``; all-reduce options only without it."""
        if self.sharding is None:
            if self.memory_cap_bytes is not None:
                raise SchedoptError("a memory cap needs sharding (all-reduce plans keep every "
                                    "parameter)", "options.memory_cap_bytes",
                                    self.memory_cap_bytes)
            if self.accumulate != 1:
                raise SchedoptError("accumulation is searched with sharding only",
                                    "options.accumulate", self.accumulate)
            return
        if self.next_forward != "wait-for-all":
            raise SchedoptError("sharded plans wait for all reduce-scatters",
                                "options.next_forward", self.next_forward)
        if self.reorder or self.partition_bytes is not None:
            field = "options.reorder" if self.reorder else "options.partition_bytes"
            raise SchedoptError("not with sharding (units launch in backward order, whole)",
                                field, self.reorder or self.partition_bytes)
