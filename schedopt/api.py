"""The Python API in one place: load, plan, simulate, optimize, emit, calibrate.

Every function takes its arguments in one order, ``(trace, cluster, plan, ...)``, and imports
the stage it calls only when called, so ``import schedopt`` stays light::

    import schedopt

    trace = schedopt.load_trace("resnet50-k80-b32")          # a shipped name or a JSON file
    cluster = schedopt.load_cluster("k80-4x4-10gbe")
    plan = schedopt.make_plan(trace, cluster, "ddp:bucket_cap_mb=25")
    print(schedopt.simulate(trace, cluster, plan).iteration_time_s)
    best = schedopt.optimize(trace, cluster, time_limit_s=5)
    print(best.status, best.iteration_time_s, best.gap)
    ddp = schedopt.emit(trace, cluster, best.plan, "ddp")
    print(ddp.config["bucket_cap_mb_list"])

docs/api.md walks through it; each function below names the module that does the work.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from schedopt.emit.common import Emitted
    from schedopt.measure.calibrate import Calibration, ValidationReport
    from schedopt.model.cluster import Cluster
    from schedopt.model.plan import Plan, Schedule
    from schedopt.model.trace import Trace
    from schedopt.optimize.result import SolveResult

__all__ = ["Stage", "calibrate", "emit", "load_cluster", "load_plan", "load_trace", "make_plan",
           "optimize", "simulate", "validate"]


class Stage(types.ModuleType):
    """A stage package that can be called as its API function.

    ``schedopt.simulate``, ``schedopt.optimize`` and ``schedopt.emit`` are packages (their
    modules import as usual: ``import schedopt.simulate.dag``) and, called, run the function of
    this module of the same name: ``schedopt.simulate(trace, cluster, plan)`` is
    :func:`simulate`. ``schedopt/__init__.py`` gives the three packages this class.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return globals()[self.__name__.rsplit(".", 1)[1]](*args, **kwargs)


def load_trace(ref: str | Path) -> Trace:
    """A trace from a JSON file or a shipped name (:func:`schedopt.files.load_trace`)."""
    from schedopt.files import load_trace as load

    return load(ref)


def load_cluster(ref: str | Path, nodes: int | None = None) -> Cluster:
    """A cluster from a JSON file or a shipped name; ``nodes`` derives the cluster of that
    many nodes from a family (:func:`schedopt.files.load_cluster`)."""
    from schedopt.files import load_cluster as load

    return load(ref, nodes)


def load_plan(path: str | Path) -> Plan:
    """A plan JSON, as ``optimize --out`` writes it (:func:`schedopt.files.load_plan`)."""
    from schedopt.files import load_plan as load

    return load(path)


def make_plan(trace: Trace, cluster: Cluster, spec: str) -> Plan:
    """The plan of a framework policy ``NAME[:key=value,...]``, e.g. ``ddp:bucket_cap_mb=25``
    (:func:`schedopt.policies.make_plan`; ``schedopt list`` names the policies)."""
    from schedopt.policies import make_plan as make

    return make(trace, cluster, spec)


def simulate(trace: Trace, cluster: Cluster, plan: Plan, **kwargs: Any) -> Schedule:
    """The schedule of ``plan``: iteration time, breakdown, first iteration
    (:func:`schedopt.simulate.simulator.simulate`; ``record=True`` keeps every task)."""
    from schedopt.simulate.simulator import simulate as run

    return run(trace, cluster, plan, **kwargs)


def optimize(trace: Trace, cluster: Cluster, **options: Any) -> SolveResult:
    """The best plan with its proof: status, bound, gap (:func:`schedopt.optimize.solve`).

    ``options`` are the fields of :class:`schedopt.optimize.SolveOptions`, e.g.
    ``next_forward="per-layer"``, ``reorder=True``, ``time_limit_s=10``, ``workers=1``.
    """
    from schedopt.optimize.solver import solve

    return solve(trace, cluster, **options)


def emit(trace: Trace, cluster: Cluster | None, plan: Plan, target: str) -> Emitted:
    """``plan`` as a framework's settings: ``ddp``, ``fsdp``, ``horovod``, ``deepspeed``,
    ``megatron`` or ``json`` (:func:`schedopt.emit.emit`)."""
    from schedopt.emit.registry import emit as run

    return run(trace, cluster, plan, target)


def calibrate(measurements: str | Path, fit: list[str] | None = None, *, starts: int = 3,
              seed: int = 0) -> list[Calibration]:
    """Fit each cluster's parameters to a measurements CSV (docs/formats.md); one
    :class:`~schedopt.measure.calibrate.Calibration` per cluster document
    (:func:`schedopt.measure.calibrate.calibrate`; ``write_calibrations`` writes them)."""
    from schedopt.measure.calibrate import calibrate as fit_rows
    from schedopt.measure.measurements import read_measurements

    rows = read_measurements(measurements)
    return fit_rows(rows, fit, starts=starts, seed=seed, where=Path(measurements).name)


def validate(measurements: str | Path) -> ValidationReport:
    """Predict every row of a measurements CSV; errors per row, per policy and overall
    (:func:`schedopt.measure.calibrate.validate`)."""
    from schedopt.measure.calibrate import validate as check
    from schedopt.measure.measurements import read_measurements

    return check(read_measurements(measurements))
