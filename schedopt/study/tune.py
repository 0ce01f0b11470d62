"""Tune one framework knob: the best value of each framework's own grouping knob.

For each framework the search sweeps its main knob over its whole useful range (a geometric
grid, then finer grids around the best point), tunes a second knob where the framework has one
at the best main value, and compares three times: the framework's defaults, the best setting
found, and the optimized plan (:func:`schedopt.optimize.solve` with its default options: FIFO
launch order, wait-for-all, whole tensors). The difference between the last two is what a single
knob leaves on the table.

=========  ============================  ==================  ================================
framework  main knob (unit)              second knob         range of the main knob
=========  ============================  ==================  ================================
ddp        ``bucket_cap_mb`` (MiB)       ``first_bucket_mb``  smallest tensor .. all gradients
horovod    ``fusion_threshold_mb`` (MiB) ``cycle_time_ms``    smallest tensor .. all gradients
deepspeed  ``reduce_bucket_size`` (el.)  none                 smallest tensor .. all gradients
megatron   ``bucket_size`` (params)      none                 smallest tensor .. all gradients
=========  ============================  ==================  ================================

DeepSpeed is tuned with ``overlap_comm=true`` and Megatron with ``overlap_grad_reduce=true``:
without them their bucket sizes barely matter (no overlap with the backward). Their defaults
(the ``default_time_s``) are the policies' own defaults, overlap off.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies import make_plan
from schedopt.policies.ddp import DEFAULT_BUCKET_CAP_MB
from schedopt.simulate.simulator import simulate

__all__ = ["FRAMEWORKS", "Knob", "TuneResult", "in_default_class", "tune", "tune_all"]

MIB = 2**20
#: Settings within this fraction of the best iteration time tie: the model cannot rank them.
TIE_REL = 1e-3


@dataclass(frozen=True)
class Knob:
    """A tunable knob of one framework.

    Attributes
    ----------
    framework
        Policy name.
    name
        Knob name as the policy spec writes it.
    unit
        Unit shown in tables.
    bounds
        ``(trace) -> (lo, hi)``: the range searched.
    default
        The framework's default value (None: the knob is unset by default).
    fixed
        Knobs set while tuning (other than the one tuned).
    integer
        Round values to integers (element or parameter counts).
    """

    framework: str
    name: str
    unit: str
    bounds: Callable[[Trace], tuple[float, float]]
    default: float | None = None
    fixed: dict[str, Any] = field(default_factory=dict)
    integer: bool = False

    def spec(self, value: float, extra: dict[str, Any] | None = None) -> str:
        """The policy spec with this knob at ``value``."""
        knobs = {**self.fixed, **(extra or {}), self.name: self.value(value)}
        body = ",".join(f"{k}={_text(v)}" for k, v in knobs.items())
        return f"{self.framework}:{body}"

    def value(self, x: float) -> float | int:
        """``x`` as the knob takes it."""
        return max(1, round(x)) if self.integer else float(f"{x:.6g}")


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _mib_range(tr: Trace) -> tuple[float, float]:
    smallest = min(t.bytes for t in tr.tensor_list)
    return max(smallest / MIB, 1e-3), tr.total_bytes / MIB * 1.01


def _elements_range(tr: Trace) -> tuple[float, float]:
    smallest = min(t.numel for t in tr.tensor_list)
    return float(max(smallest, 1)), float(sum(t.numel for t in tr.tensor_list) + 1)


def _cycle_range(tr: Trace) -> tuple[float, float]:
    return 0.0, max(float(tr.backward.sum()) * 1e3, 1e-3)


def _default(framework: str, knob: str) -> float | None:
    """The policy function's own default of ``knob`` (None when it has none or it is unset)."""
    from schedopt.policies.registry import POLICIES

    param = inspect.signature(POLICIES[framework]).parameters.get(knob)
    if param is None or param.default is inspect.Parameter.empty or param.default is None:
        return None
    return float(param.default)


#: Main knob of each framework; defaults are read from the policies themselves.
FRAMEWORKS: dict[str, Knob] = {
    "ddp": Knob("ddp", "bucket_cap_mb", "MiB", _mib_range, DEFAULT_BUCKET_CAP_MB),
    "horovod": Knob("horovod", "fusion_threshold_mb", "MiB", _mib_range,
                    _default("horovod", "fusion_threshold_mb")),
    "deepspeed": Knob("deepspeed", "reduce_bucket_size", "elements", _elements_range,
                      _default("deepspeed", "reduce_bucket_size"),
                      fixed={"overlap_comm": True}, integer=True),
    "megatron": Knob("megatron", "bucket_size", "parameters", _elements_range,
                     fixed={"overlap_grad_reduce": True}, integer=True),
}

#: Second knob, tuned at the best value of the main one (linear grid from its lower bound).
SECOND: dict[str, Knob] = {
    "ddp": Knob("ddp", "first_bucket_mb", "MiB", _mib_range, 1.0),
    "horovod": Knob("horovod", "cycle_time_ms", "ms", _cycle_range, 1.0),
}


@dataclass
class TuneResult:
    """What tuning one framework found.

    Attributes
    ----------
    framework, knob, unit, default
        The framework, its main knob and the knob's default value (None: unset).
    default_time_s
        Iteration time with the framework's defaults.
    best, best_time_s, best_spec
        Best value of the main knob, its iteration time, and the full spec (with the second
        knob where tuned); the defaults (``best`` is then ``default``) when nothing searched
        beats them, so ``best_time_s <= default_time_s`` always.
    optimum_time_s
        Iteration time of the optimized plan (default solve options).
    in_class
        Whether the best setting's plan lies in the class the optimizer searched (then
        ``best_time_s >= optimum_time_s`` when the optimum is proven).
    curve
        ``(value, iteration time)`` of every main-knob setting tried, sorted by value.
    tied_range
        ``(lowest, highest)`` main-knob value whose time is within :data:`TIE_REL` of the best
        (the flat part of the curve; equal ends when one value is best).
    """

    framework: str
    knob: str
    unit: str
    default: float | None
    default_time_s: float
    best: float | int | None
    best_time_s: float
    best_spec: str
    optimum_time_s: float | None
    in_class: bool
    curve: list[tuple[float, float]]
    tied_range: tuple[float, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON object ``tune --json`` prints per framework."""
        return {
            "framework": self.framework, "knob": self.knob, "unit": self.unit,
            "default": self.default, "default_time_s": self.default_time_s, "best": self.best,
            "best_time_s": self.best_time_s, "best_spec": self.best_spec,
            "optimum_time_s": self.optimum_time_s, "in_class": self.in_class,
            "curve": [list(p) for p in self.curve],
            "tied_range": None if self.tied_range is None else list(self.tied_range),
        }


def in_default_class(plan: Plan, trace: Trace, cluster: Cluster) -> bool:
    """Whether ``plan`` is in the optimizer's default class.

    FIFO launch order of whole-tensor buckets, contiguous in gradient-ready order (ties inside
    one ready time in any order), overlapped with the backward, wait-for-all, the cluster's own
    collective, prefetch 1.
    """
    if (plan.partition or plan.next_forward != "wait-for-all" or not plan.overlap
            or plan.prefetch != 1 or any(o != sorted(o) for o in plan.stage_orders.values())):
        return False
    if plan.collective is not None and (cluster.comm_stages(plan.collective)
                                        != cluster.comm_stages()):
        return False
    layer_of = trace.tensor_layer_by_name
    prev = -math.inf
    for bucket in plan.buckets:
        keys = [-layer_of[m] for m in bucket]  # the backward readies the last layer first
        if min(keys) < prev:
            return False
        prev = max(keys)
    return True


def _evaluate(trace: Trace, cluster: Cluster, spec: str) -> tuple[float, Plan]:
    plan = make_plan(trace, cluster, spec)
    t = simulate(trace, cluster, plan).iteration_time_s
    if not math.isfinite(t):
        raise SchedoptError("the simulated iteration time is not finite", "tune", spec)
    return t, plan


def _geomgrid(lo: float, hi: float, n: int) -> list[float]:
    if lo <= 0:  # a knob whose range starts at zero: zero, then geometric from hi / 1000
        return [0.0, *_geomgrid(hi / 1000.0, hi, n - 1)]
    r = (hi / lo) ** (1.0 / max(n - 1, 1))
    return [lo * r**i for i in range(n)]


def _search(knob: Knob, evaluate: Callable[[float], float], lo: float, hi: float,
            grid: int, rounds: int) -> dict[float | int, float]:
    """Grid over ``[lo, hi]``, then ``rounds`` finer grids between the best point's neighbours."""
    seen: dict[float | int, float] = {}

    def run(points: Sequence[float]) -> None:
        for x in points:
            v = knob.value(x)
            if v not in seen:
                seen[v] = evaluate(v)

    run(_geomgrid(lo, hi, grid))
    for _ in range(rounds):
        xs = sorted(seen)
        i = min(range(len(xs)), key=lambda j: (seen[xs[j]], xs[j]))
        a, b = xs[max(i - 1, 0)], xs[min(i + 1, len(xs) - 1)]
        if a == b:
            break
        run(_geomgrid(a, b, grid // 2 + 2) if a > 0 else _geomgrid(0.0, b, grid // 2 + 2))
    return seen


def _pick(seen: dict[float | int, float], default: float | None
          ) -> tuple[float | int, tuple[float, float]]:
    """The setting to recommend among those tied with the best (within :data:`TIE_REL`): the
    one nearest the framework's default (by ratio; the largest when the knob has no default,
    i.e. the fewest calls), and the tied range. A degenerate value the model cannot tell from
    the default's side is never recommended."""
    low = min(seen.values())
    tied = [v for v in seen if seen[v] <= low + TIE_REL * abs(low)]
    if default is None or default <= 0:
        pick = max(tied)
    else:
        pick = min(tied, key=lambda v: (abs(math.log(max(float(v), 1e-300) / default)), -v))
    return pick, (float(min(tied)), float(max(tied)))


def tune(trace: Trace, cluster: Cluster, framework: str, *, grid: int = 24, rounds: int = 2,
         optimum_time_s: float | None = None) -> TuneResult:
    """Tune ``framework``'s own knob on ``trace`` and ``cluster``.

    Parameters
    ----------
    trace, cluster
        The instance.
    framework
        ``ddp``, ``horovod``, ``deepspeed`` or ``megatron``.
    grid
        Points of the first grid (the refinement grids have ``grid // 2 + 2``).
    rounds
        Refinement rounds around the best point.
    optimum_time_s
        The optimized plan's iteration time, copied into the result.

    Returns
    -------
    TuneResult
        Settings within :data:`TIE_REL` (0.1%) of the best tie: the one nearest the framework's
        default is recommended (for DDP the largest tied cap below 25 MiB) and the tied range
        is reported.
    """
    if framework not in FRAMEWORKS:
        raise SchedoptError(f"unknown framework (known: {', '.join(FRAMEWORKS)})", "framework",
                            framework)
    if grid < 3 or rounds < 0:
        raise SchedoptError("grid needs at least 3 points and rounds >= 0", "grid",
                            (grid, rounds))
    knob = FRAMEWORKS[framework]
    default_time, _ = _evaluate(trace, cluster, framework)
    lo, hi = knob.bounds(trace)
    seen = _search(knob, lambda v: _evaluate(trace, cluster, knob.spec(v))[0], lo, hi, grid,
                   rounds)
    best_grid, tied = _pick(seen, knob.default)
    best: float | int | None = best_grid
    best_time, best_spec = seen[best_grid], knob.spec(best_grid)
    second = SECOND.get(framework)
    if second is not None:
        base = {knob.name: knob.value(best_grid)}
        lo2, hi2 = second.bounds(trace)
        seen2 = _search(second, lambda v: _evaluate(
            trace, cluster, second.spec(v, base))[0], lo2, hi2, grid // 2 + 2, rounds)
        v2, _ = _pick(seen2, second.default)
        if seen2[v2] < best_time:
            best_time, best_spec = seen2[v2], second.spec(v2, base)
    if default_time < best_time:  # the defaults may lie outside the family searched
        best, best_time, best_spec = knob.default, default_time, framework
    _, best_plan = _evaluate(trace, cluster, best_spec)
    return TuneResult(
        framework=framework, knob=knob.name, unit=knob.unit, default=knob.default,
        default_time_s=default_time,
        best=best, best_time_s=best_time, best_spec=best_spec, optimum_time_s=optimum_time_s,
        in_class=in_default_class(best_plan, trace, cluster),
        curve=sorted((float(v), t) for v, t in seen.items()), tied_range=tied,
    )


def tune_all(trace: Trace, cluster: Cluster, frameworks: Sequence[str], *,
             time_limit_s: float = 10.0, optimum: bool = True,
             grid: int = 24, rounds: int = 2) -> tuple[list[TuneResult], dict[str, Any] | None]:
    """Tune every framework of ``frameworks``; solve once for the optimum.

    Returns
    -------
    results, optimum
        One :class:`TuneResult` per framework, and the optimizer's summary (``status``,
        ``iteration_time_s``, ``gap``, ``method``) or None when ``optimum`` is False.
    """
    import logging

    log = logging.getLogger("schedopt")
    opt: dict[str, Any] | None = None
    if optimum:
        from schedopt.optimize import SolveOptions, solve

        log.info("searching the optimum (up to %g s)", time_limit_s)
        opts = SolveOptions.model_validate({"time_limit_s": time_limit_s, "workers": 1, "seed": 0})
        res = solve(trace, cluster, opts)
        opt = {"status": str(res.status), "iteration_time_s": res.iteration_time_s,
               "gap": res.gap, "method": res.method}
    t_opt = opt["iteration_time_s"] if opt else None
    results = []
    for f in frameworks:
        log.info("tuning %s's %s", f, FRAMEWORKS[f].name)
        results.append(tune(trace, cluster, f, grid=grid, rounds=rounds, optimum_time_s=t_opt))
    return results, opt
