"""Fit a cluster's physical parameters to measured iteration times; validate predictions.

:func:`calibrate` groups the rows of a measurements file (:mod:`schedopt.measure.measurements`) by
cluster document (a cluster or a family) and fits, per group, the parameters shared by all its
rows: link bandwidths and latencies, the overlap slowdown and the per-collective overhead
(:data:`PARAMS`). The fit is bounded least squares on the relative error of the simulated
iteration time (``scipy.optimize.least_squares``), from several starts. Parameters the rows
cannot identify (no effect, or an effect that another parameter already explains) keep their
prior and are reported. Confidence intervals come from the Jacobian at the solution; the
leave-one-row-out error refits without each row and predicts it (docs/model.md, "Calibration").

:func:`validate` predicts every row with the cluster as written and reports the errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.files import OutputFiles
from schedopt.measure.measurements import ClusterRef, Measurement
from schedopt.model.cluster import Cluster, ClusterFamily
from schedopt.simulate.simulator import Model, recost, simulate, simulate_model

__all__ = [
    "PARAMS",
    "Calibration",
    "ParamFit",
    "ParamSpec",
    "RowFit",
    "ValidationReport",
    "calibrate",
    "calibration_files",
    "parse_fit",
    "planned_names",
    "validate",
    "write_calibrations",
]


@dataclass(frozen=True)
class ParamSpec:
    """A fitted parameter: where it lives in a cluster document and how it is searched.

    ``log`` parameters are searched as ``log(value / prior)`` within ``[lower, upper]`` times the
    prior; ``linear`` ones as ``value / unit`` within ``[lower, upper]`` (absolute values).
    """

    name: str
    path: tuple[str, ...]
    kind: Literal["log", "linear"]
    lower: float
    upper: float
    unit: float = 1.0
    description: str = ""
    per_trace: bool = False
    opt_in: bool = False  # fitted only when named in --fit


PARAMS: dict[str, ParamSpec] = {p.name: p for p in (
    ParamSpec("intra_bandwidth", ("intra_link", "bandwidth_Bps"), "log", 1e-2, 1e2,
              description="intra-node link bandwidth (B/s)"),
    ParamSpec("intra_latency", ("intra_link", "latency_s"), "linear", 0.0, 1e-2, 1e-6,
              description="intra-node link latency per step (s)"),
    ParamSpec("inter_bandwidth", ("inter_link", "bandwidth_Bps"), "log", 1e-2, 1e2,
              description="inter-node link bandwidth per NIC (B/s)"),
    ParamSpec("inter_latency", ("inter_link", "latency_s"), "linear", 0.0, 1e-2, 1e-5,
              description="inter-node link latency per step (s)"),
    ParamSpec("overlap_slowdown", ("overlap_slowdown",), "linear", 1.0, 5.0, 1.0,
              description="compute slowdown while communication runs (>= 1)"),
    ParamSpec("comm_slowdown", ("comm_slowdown",), "linear", 1.0, 5.0, 1.0,
              description="communication slowdown while compute runs (>= 1)"),
    ParamSpec("collective_overhead", ("collective_overhead_s",), "linear", 0.0, 0.05, 1e-4,
              description="fixed time per collective call (s)"),
    ParamSpec("launch_overhead", ("launch_overhead_s",), "linear", 0.0, 0.01, 1e-5,
              opt_in=True, description="host time to launch one collective call (s; only when "
                                       "named in --fit)"),
    ParamSpec("hook_overhead", ("hook_overhead_s",), "linear", 0.0, 0.01, 1e-5,
              opt_in=True, description="host time of the reducer's hook per gradient tensor "
                                       "(s; only when named in --fit)"),
    ParamSpec("bucket_compute", ("bucket_compute_s",), "linear", 0.0, 0.01, 1e-5,
              opt_in=True, description="compute-stream time per bucket (s; only when named in "
                                       "--fit)"),
    ParamSpec("compute_scale", (), "log", 0.2, 5.0, per_trace=True,
              description="the runs' compute time over the trace's, one per trace (only when "
                          "named in --fit)"),
)}

#: The search variable of a per-trace parameter: ``compute_scale[<trace as written>]``.
_PER_TRACE = re.compile(r"^(\w+)\[(.+)\]$")


def _spec(name: str) -> ParamSpec:
    """The :class:`ParamSpec` of a parameter or of a per-trace search variable."""
    m = _PER_TRACE.match(name)
    return PARAMS[m.group(1) if m else name]

#: A Jacobian column below this (relative error per unit of the search variable) is no effect.
_NO_EFFECT = 1e-7
#: A column whose part not explained by the columns chosen before it is below this fraction of
#: its norm is collinear with them.
_COLLINEAR = 1e-3


def parse_fit(text: str | None) -> list[str]:
    """The ``--fit`` list (comma-separated names of :data:`PARAMS`; None: every cluster
    parameter, the per-trace ones only when named)."""
    if text is None or not text.strip():
        return [n for n, p in PARAMS.items() if not (p.per_trace or p.opt_in)]
    names = [t.strip() for t in text.split(",") if t.strip()]
    for n in names:
        if n not in PARAMS:
            raise SchedoptError(f"unknown parameter (known: {', '.join(PARAMS)})", "--fit", n)
    return list(dict.fromkeys(names))


# ------------------------------------------------------------------------------- documents
def _cluster_doc(ref: ClusterRef) -> dict[str, Any]:
    """The validated document with every default filled in."""
    model = ClusterFamily if ref.kind == "cluster-family" else Cluster
    return model.model_validate(ref.data).model_dump(mode="json")


def _base(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return doc["base"] if kind == "cluster-family" else doc


def _get(doc: dict[str, Any], kind: str, spec: ParamSpec) -> float | None:
    node: Any = _base(doc, kind)
    for key in spec.path:
        if node is None:
            return None
        node = node.get(key)
    return None if node is None else float(node)


def _with_values(doc: dict[str, Any], kind: str, values: dict[str, float]) -> dict[str, Any]:
    out = {**doc}
    if kind == "cluster-family":
        out["base"] = {**doc["base"]}
    base = _base(out, kind)
    for name, value in values.items():
        spec = _spec(name)
        if spec.per_trace:
            continue
        if len(spec.path) == 1:
            base[spec.path[0]] = value
        else:
            base[spec.path[0]] = {**base[spec.path[0]], spec.path[1]: value}
    return out


# ------------------------------------------------------------------------------ evaluation
class _Group:
    """The rows of one cluster document and their models (plans fixed at the prior)."""

    def __init__(self, ref: ClusterRef, rows: list[Measurement]) -> None:
        self.ref, self.rows = ref, rows
        self.doc = _cluster_doc(ref)
        self.measured = np.array([m.row.iteration_time_s for m in rows])
        self.models: list[Model] = []
        for m in rows:
            cl = m.cluster()
            self.models.append(Model.build(m.trace_obj, cl, m.plan_for(cl)))
        self.scaled: dict[int, tuple[float, Model]] = {}
        self.evaluations = 0
        self.cache: dict[tuple[Any, ...], float] = {}

    def traces(self) -> list[str]:
        """The rows' traces as written, each once, in order of first appearance."""
        return list(dict.fromkeys(m.row.trace for m in self.rows))

    def model(self, i: int, scale: float) -> Model:
        """Row ``i``'s model with its trace's compute times multiplied by ``scale`` (a policy
        row is planned again on the scaled trace, as the framework sees the run's times)."""
        if scale == 1.0:
            return self.models[i]
        last = self.scaled.get(i)
        if last is None or last[0] != scale:  # the search moves: keep the last scale only
            m = self.rows[i]
            cl = self.models[i].cluster
            trace = m.trace_obj.scaled(compute=scale, update=True)
            last = self.scaled[i] = (scale, Model.build(trace, cl, m.plan_for(cl, trace)))
        return last[1]

    def predict(self, values: dict[str, float], idx: Sequence[int] | None = None) -> np.ndarray:
        """Simulated iteration times of rows ``idx`` (default all) under ``values``."""
        doc = _with_values(self.doc, self.ref.kind, values)
        clusters: dict[int | None, Cluster] = {}
        out = []
        for i in range(len(self.rows)) if idx is None else idx:
            nodes = self.rows[i].row.nodes
            if nodes not in clusters:
                clusters[nodes] = self.ref.at(nodes, doc)
            cl = clusters[nodes]
            scale = values.get(f"compute_scale[{self.rows[i].row.trace}]", 1.0)
            model = self.model(i, scale)
            # a row whose costs a parameter does not change (the inter link of one node)
            # is not simulated again
            key = (i, scale, cl.comm_stages(model.plan.collective), cl.overlap_slowdown,
                   cl.comm_slowdown, cl.launch_overhead_s, cl.hook_overhead_s,
                   cl.bucket_compute_s)
            if key not in self.cache:
                self.cache[key] = simulate_model(recost(model, cl)).iteration_time_s
            out.append(self.cache[key])
        self.evaluations += 1
        pred = np.array(out)
        if not np.isfinite(pred).all():
            raise SchedoptError("a simulated iteration time is not finite", "cluster",
                                self.ref.name)
        return pred


@dataclass
class _Space:
    """The search variables: names, priors and the map to and from parameter values."""

    names: list[str]
    prior: dict[str, float]

    def to_x(self, values: dict[str, float]) -> np.ndarray:
        out = []
        for n in self.names:
            spec = _spec(n)
            v = values[n]
            out.append(math.log(v / self.prior[n]) if spec.kind == "log" else v / spec.unit)
        return np.array(out, dtype=float)

    def to_values(self, x: np.ndarray) -> dict[str, float]:
        vals = dict(self.prior)
        for n, xi in zip(self.names, x, strict=True):
            spec = _spec(n)
            vals[n] = self.prior[n] * math.exp(xi) if spec.kind == "log" else xi * spec.unit
        return vals

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = [], []
        for n in self.names:
            spec = _spec(n)
            if spec.kind == "log":
                lo.append(math.log(spec.lower))
                hi.append(math.log(spec.upper))
            else:
                lo.append(spec.lower / spec.unit)
                hi.append(spec.upper / spec.unit)
        return np.array(lo), np.array(hi)


# ----------------------------------------------------------------------------- results
@dataclass
class ParamFit:
    """One parameter: prior, fitted value, 95% confidence interval, whether identified."""

    name: str
    prior: float
    value: float
    low: float | None
    high: float | None
    identified: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"name": self.name, "prior": self.prior, "value": self.value, "ci95_low": self.low,
                "ci95_high": self.high, "identified": self.identified, "note": self.note}


@dataclass
class RowFit:
    """One row: measured, fitted prediction and residual, leave-one-row-out prediction."""

    label: str
    policy: str
    measured_s: float
    predicted_s: float
    loo_predicted_s: float | None

    @property
    def error(self) -> float:
        """Relative residual of the fit."""
        return self.predicted_s / self.measured_s - 1.0

    @property
    def loo_error(self) -> float | None:
        """Relative error of the prediction made without this row."""
        if self.loo_predicted_s is None:
            return None
        return self.loo_predicted_s / self.measured_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"row": self.label, "policy": self.policy, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "error": self.error,
                "loo_predicted_s": self.loo_predicted_s, "loo_error": self.loo_error}


@dataclass
class Calibration:
    """The fit of one cluster document."""

    name: str
    kind: str
    input: str
    params: list[ParamFit]
    rows: list[RowFit]
    document: dict[str, Any]
    starts: int
    evaluations: int
    loo_method: str
    notes: list[str] = field(default_factory=list)
    #: Re-timed traces (``compute_scale`` fitted): trace as written -> trace document.
    traces: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Where :func:`write_calibrations` wrote them: trace as written -> path.
    trace_files: dict[str, str] = field(default_factory=dict)

    @property
    def mean_abs_error(self) -> float:
        """Mean |residual| of the fit."""
        return float(np.mean([abs(r.error) for r in self.rows]))

    @property
    def loo_mean_abs_error(self) -> float | None:
        """Mean |leave-one-row-out error|, or None when not computed."""
        errs = [r.loo_error for r in self.rows if r.loo_error is not None]
        return float(np.mean(np.abs(errs))) if errs else None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``schedopt calibrate --json``)."""
        return {"cluster": self.name, "kind": self.kind, "input": self.input,
                "params": [p.to_dict() for p in self.params],
                "rows": [r.to_dict() for r in self.rows],
                "mean_abs_error": self.mean_abs_error,
                "loo_mean_abs_error": self.loo_mean_abs_error, "loo_method": self.loo_method,
                "starts": self.starts, "evaluations": self.evaluations, "notes": self.notes,
                "traces": [{"trace": t, "out": self.trace_files.get(t)} for t in self.traces]}


# ----------------------------------------------------------------------------------- fitting
#: Most starts of the search (each is one least-squares fit of every row).
MAX_STARTS = 1000

#: Exact leave-one-row-out refits up to this many rows per cluster; above, the linearised
#: (PRESS) estimate ``r_i / (1 - h_ii)``.
LOO_EXACT_MAX_ROWS = 20


def _fd_jacobian(fun: Any, x: np.ndarray, f0: np.ndarray, lo: np.ndarray, hi: np.ndarray
                 ) -> np.ndarray:
    """Forward differences with steps of 5% of a unit (backward at the upper bound)."""
    jac = np.zeros((f0.size, x.size))
    for j in range(x.size):
        h = 0.05 * max(1.0, abs(x[j]))
        if x[j] + h > hi[j]:
            h = -h
        xp = x.copy()
        xp[j] = min(max(x[j] + h, lo[j]), hi[j])
        jac[:, j] = (fun(xp) - f0) / (xp[j] - x[j])
    return jac


def _identify(jac: np.ndarray, names: list[str]) -> tuple[list[int], dict[str, str]]:
    """Columns the rows identify (greedy pivoted Gram-Schmidt) and why the others are not."""
    notes: dict[str, str] = {}
    norms = np.linalg.norm(jac, axis=0)
    cand = [j for j in range(len(names)) if norms[j] >= _NO_EFFECT]
    for j in range(len(names)):
        if j not in cand:
            notes[names[j]] = "no effect on these rows"
    chosen: list[int] = []
    basis = np.zeros((jac.shape[0], 0))
    while cand and len(chosen) < jac.shape[0]:
        frac = [np.linalg.norm(jac[:, j] - basis @ (basis.T @ jac[:, j])) / norms[j]
                for j in cand]
        best = int(np.argmax(frac))
        if frac[best] < _COLLINEAR:
            break
        j = cand.pop(best)
        v = jac[:, j] - basis @ (basis.T @ jac[:, j])
        basis = np.column_stack([basis, v / np.linalg.norm(v)])
        chosen.append(j)
    for j in cand:
        notes[names[j]] = ("not separable from " + ", ".join(names[c] for c in chosen)
                           if chosen else "not separable")
    return sorted(chosen), notes


def _starts(x0: np.ndarray, names: list[str], prior: dict[str, float], lo: np.ndarray,
            hi: np.ndarray, count: int, seed: int) -> list[np.ndarray]:
    """The prior and ``count - 1`` random starts around it (seeded)."""
    rng = np.random.default_rng(seed)
    out = [np.clip(x0, lo, hi)]
    for _ in range(count - 1):
        x = x0.copy()
        for j, n in enumerate(names):
            spec = _spec(n)
            if spec.kind == "log":
                x[j] += rng.uniform(-math.log(3.0), math.log(3.0))
            elif n in ("overlap_slowdown", "comm_slowdown"):
                x[j] = rng.uniform(1.0, 2.0)
            else:
                x[j] = rng.uniform(0.0, 3.0 * max(prior[n] / spec.unit, 1.0))
        out.append(np.clip(x, lo, hi))
    return out


def _solve(fun: Any, starts: list[np.ndarray], lo: np.ndarray, hi: np.ndarray) -> Any:
    """Bounded least squares from every start; the best result."""
    from scipy.optimize import least_squares

    best = None
    for x0 in starts:
        res = least_squares(fun, x0, bounds=(lo, hi), method="trf", diff_step=1e-2,
                            x_scale=1.0, max_nfev=200)
        if best is None or res.cost < best.cost - 1e-15:
            best = res
    return best


#: Search variables within this fraction of their range from a bound are put on the bound:
#: the solver stops a variable pressed against its bound anywhere in the last few ulps above it,
#: and where exactly depends on the floating-point kernels of the machine.
_ON_BOUND = 1e-9
#: Singular values of the column-scaled Jacobian below this fraction of the largest are dropped
#: from the covariance (directions the rows do not determine).
_RCOND = 1e-10


def _snap(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``x`` with every variable within :data:`_ON_BOUND` of its range from a bound on it."""
    tol = _ON_BOUND * (hi - lo)
    return np.where(x - lo <= tol, lo, np.where(hi - x <= tol, hi, x))


def _gram_pinv(jac: np.ndarray) -> np.ndarray:
    """``(J^T J)^+`` through the SVD of ``J`` with unit columns (no squared condition number)."""
    norms = np.linalg.norm(jac, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    _, s, vt = np.linalg.svd(jac / scale, full_matrices=False)
    keep = s > _RCOND * (s[0] if s.size else 0.0)
    inner = (vt[keep].T / s[keep] ** 2) @ vt[keep]
    return inner / np.outer(scale, scale)


def _intervals(space: _Space, x: np.ndarray, jac: np.ndarray, resid: np.ndarray
               ) -> list[tuple[float | None, float | None]]:
    """95% confidence intervals (Student t, covariance ``s^2 (J^T J)^+``)."""
    m, p = jac.shape
    if m <= p:
        return [(None, None)] * p
    from scipy.stats import t as student

    s2 = float(resid @ resid) / (m - p)
    cov = s2 * _gram_pinv(jac)
    q = float(student.ppf(0.975, m - p))
    out: list[tuple[float | None, float | None]] = []
    lo_b, hi_b = space.bounds()
    for j, n in enumerate(space.names):
        half = q * math.sqrt(max(float(cov[j, j]), 0.0))
        a, b = max(x[j] - half, lo_b[j]), min(x[j] + half, hi_b[j])
        va = space.to_values(np.where(np.arange(p) == j, a, x))[n]
        vb = space.to_values(np.where(np.arange(p) == j, b, x))[n]
        out.append((va, vb))
    return out


def _policy_label(m: Measurement) -> str:
    return "plan" if m.plan is not None else m.row.policy.split(":", 1)[0]


def _loo(group: _Group, space: _Space, x: np.ndarray, jac: np.ndarray, resid: np.ndarray,
         lo: np.ndarray, hi: np.ndarray) -> tuple[list[float | None], str]:
    """Leave-one-row-out predictions: exact refits for small groups, else linearised."""
    m = len(group.rows)
    if not space.names:
        return [float(v) for v in group.measured * (1 + resid)], "none fitted"
    if m <= LOO_EXACT_MAX_ROWS:
        out: list[float | None] = []
        for i in range(m):
            keep = [k for k in range(m) if k != i]

            def fun(xx: np.ndarray, keep: list[int] = keep) -> np.ndarray:
                return group.predict(space.to_values(xx), keep) / group.measured[keep] - 1.0

            res = _solve(fun, [x], lo, hi)
            out.append(float(group.predict(space.to_values(res.x), [i])[0]))
        return out, "exact refits"
    hat = jac @ _gram_pinv(jac) @ jac.T
    h = np.clip(np.diag(hat), 0.0, 1.0)
    loo: list[float | None] = []
    for i in range(m):
        if h[i] > 1 - 1e-9:
            loo.append(None)
        else:
            loo.append(float(group.measured[i] * (1 + resid[i] / (1 - h[i]))))
    return loo, "linearised (PRESS)"


def _calibrate_group(group: _Group, fit: list[str], starts: int, seed: int,
                     where: str) -> Calibration:
    """Fit one cluster document's parameters to its rows."""
    kind = group.ref.kind
    prior: dict[str, float] = {}
    notes: dict[str, str] = {}
    fit = [v for n in fit for v in (
        [f"{n}[{t}]" for t in group.traces()] if PARAMS[n].per_trace else [n])]
    for n in fit:
        v = 1.0 if _spec(n).per_trace else _get(group.doc, kind, PARAMS[n])
        if v is None:
            notes[n] = "the cluster has no such link"
        else:
            prior[n] = v
    cand = [n for n in fit if n in prior]
    full = _Space(cand, prior)
    lo, hi = full.bounds()
    x_prior = np.clip(full.to_x(prior), lo, hi) if cand else np.zeros(0)

    def fun_all(xx: np.ndarray) -> np.ndarray:
        return group.predict(full.to_values(xx)) / group.measured - 1.0

    f0 = fun_all(x_prior)
    chosen, why = _identify(_fd_jacobian(fun_all, x_prior, f0, lo, hi), cand) if cand else (
        [], {})
    notes.update(why)
    space = _Space([cand[j] for j in chosen], prior)
    lo, hi = space.bounds()
    if space.names:
        x0 = np.clip(space.to_x(prior), lo, hi)

        def fun(xx: np.ndarray) -> np.ndarray:
            return group.predict(space.to_values(xx)) / group.measured - 1.0

        res = _solve(fun, _starts(x0, space.names, prior, lo, hi, starts, seed), lo, hi)
        # the solver's own Jacobian is scaled down for variables at a bound (to a value that
        # depends on the last ulps of the variable): the intervals and the leverages take the
        # plain forward-difference Jacobian at the solution instead
        x = _snap(res.x, lo, hi)
        resid = fun(x)
        jac = _fd_jacobian(fun, x, resid, lo, hi)
    else:
        x, resid, jac = np.zeros(0), f0, np.zeros((len(group.rows), 0))
    values = space.to_values(x)
    cis = _intervals(space, x, jac, resid)
    params = []
    for n in fit:
        if n in space.names:
            j = space.names.index(n)
            params.append(ParamFit(n, prior[n], values[n], cis[j][0], cis[j][1], True))
        else:
            params.append(ParamFit(n, prior.get(n, math.nan), prior.get(n, math.nan), None,
                                   None, False, notes.get(n, "")))
    loo, method = _loo(group, space, x, jac, resid, lo, hi)
    rows = [RowFit(m.label, _policy_label(m), float(group.measured[i]),
                   float(group.measured[i] * (1 + resid[i])), loo[i])
            for i, m in enumerate(group.rows)]
    cal = Calibration(group.ref.name, kind, group.ref.key, params, rows, {}, starts,
                      group.evaluations, method)
    cal.document = _document(group, values, cal, where)
    cal.traces = _retimed_traces(group, cal, where)
    return cal


def _retimed_traces(group: _Group, cal: Calibration, where: str) -> dict[str, dict[str, Any]]:
    """The rows' traces with their fitted ``compute_scale`` (identified ones only)."""
    out: dict[str, dict[str, Any]] = {}
    for p in cal.params:
        m = _PER_TRACE.match(p.name)
        if m is None or not p.identified:
            continue
        ref = m.group(2)
        trace = next(r.trace_obj for r in group.rows if r.row.trace == ref)
        doc = trace.scaled(compute=p.value, update=True).model_dump(mode="json",
                                                                   exclude_none=True)
        note = (f"compute times multiplied by {p.value:.4g}, fitted by `schedopt calibrate` on "
                f"{where} ({len(cal.rows)} rows)")
        doc["source"] = f"{trace.source}; {note}" if trace.source else note
        doc["retimed_from"] = trace.retimed_from or trace.fingerprint()  # plans still bind
        out[ref] = doc
    return out


def _document(group: _Group, values: dict[str, float], cal: Calibration,
              where: str) -> dict[str, Any]:
    """The calibrated cluster document; its ``source`` records the fit."""
    doc = _with_values(group.doc, group.ref.kind, values)
    parts = []
    for p in cal.params:
        if p.identified:
            ci = (f" [{p.low:.4g}, {p.high:.4g}]" if p.low is not None and p.high is not None
                  else " [no interval]")
            parts.append(f"{p.name} = {p.value:.4g}{ci}")
    kept = [f"{p.name} ({p.note})" for p in cal.params if not p.identified]
    res = ", ".join(f"{r.label.rsplit(':', 1)[-1]}: {100 * r.error:+.1f}%" for r in cal.rows)
    loo = cal.loo_mean_abs_error
    text = (f"calibrated by `schedopt calibrate` on {where} ({len(cal.rows)} rows): "
            f"{'; '.join(parts) or 'nothing identified'}"
            f"{'; prior kept for ' + ', '.join(kept) if kept else ''}; 95% intervals; "
            f"residuals by line: {res}; mean |residual| {100 * cal.mean_abs_error:.2f}%"
            + (f"; leave-one-row-out mean |error| {100 * loo:.2f}% ({cal.loo_method})"
               if loo is not None else ""))
    old = doc.get("source") or ""
    doc["source"] = f"{old}; {text}" if old else text
    model = ClusterFamily if group.ref.kind == "cluster-family" else Cluster
    return model.model_validate(doc).model_dump(mode="json", exclude_none=True)


def calibrate(rows: list[Measurement], fit: list[str] | None = None, *, starts: int = 3,
              seed: int = 0, where: str = "") -> list[Calibration]:
    """Fit every cluster document's parameters to its rows.

    Parameters
    ----------
    rows
        Measurements (:func:`schedopt.measure.measurements.read_measurements`).
    fit
        Names of :data:`PARAMS` to fit (None: all).
    starts
        Starts of the least-squares search (the prior, then seeded random ones).
    seed
        Seed of the random starts.
    where
        Name of the measurements file (recorded in the documents' ``source``).

    Returns
    -------
    list of Calibration
        One per distinct cluster document, in order of first appearance.
    """
    if not 1 <= starts <= MAX_STARTS:
        raise SchedoptError(f"must be between 1 and {MAX_STARTS:,}", "--starts", starts)
    names = parse_fit(None) if fit is None else fit
    groups: dict[str, list[Measurement]] = {}
    refs: dict[str, ClusterRef] = {}
    for m in rows:
        groups.setdefault(m.cluster_ref.key, []).append(m)
        refs[m.cluster_ref.key] = m.cluster_ref
    return [_calibrate_group(_Group(refs[k], g), names, starts, seed, where)
            for k, g in groups.items()]


def calibration_files(names: list[tuple[str, list[str]]], out_dir: str | Path
                      ) -> tuple[list[Path], list[dict[str, Path]]]:
    """The files of the calibrations of ``names`` under ``out_dir``.

    Parameters
    ----------
    names
        Per cluster document, in order: its name and the traces (as written) whose
        ``compute_scale`` may be fitted.
    out_dir
        The ``--out`` folder.

    Returns
    -------
    tuple
        ``DIR/<cluster name>.json`` per document (a suffix ``-2`` ... on a clash) and, per
        document, trace as written -> ``DIR/traces/<its file's stem>.json``. Names from the
        input never choose a folder (:func:`schedopt.files.safe_file_stem`).
    """
    from schedopt.files import safe_file_stem

    out = Path(out_dir)
    if str(out_dir) == "":
        raise SchedoptError("must not be an empty path", "--out", str(out_dir))
    if out.exists() and not out.is_dir():
        raise SchedoptError("exists and is not a folder", "--out", str(out))
    paths: list[Path] = []
    used: set[str] = set()
    for name, _ in names:
        base = safe_file_stem(name, "cluster")
        stem, k = base, 2
        while stem in used:
            stem, k = f"{base}-{k}", k + 1
        used.add(stem)
        paths.append(out / f"{stem}.json")
    traces: list[dict[str, Path]] = []
    for _, refs in names:
        mine: dict[str, Path] = {}
        for ref in refs:
            base = safe_file_stem(Path(ref).stem, "trace")
            stem, k = base, 2
            while f"traces/{stem}" in used:
                stem, k = f"{base}-{k}", k + 1
            used.add(f"traces/{stem}")
            mine[ref] = out / "traces" / f"{stem}.json"
        traces.append(mine)
    return paths, traces


def planned_names(rows: list[Measurement], fit: list[str]) -> list[tuple[str, list[str]]]:
    """What :func:`calibration_files` needs, from the rows before the fit: per cluster document
    its name and, when ``compute_scale`` is fitted, its rows' traces."""
    groups: dict[str, tuple[str, list[str]]] = {}
    per_trace = any(PARAMS[n].per_trace for n in fit)
    for m in rows:
        _, refs = groups.setdefault(m.cluster_ref.key, (m.cluster_ref.name, []))
        if per_trace and m.row.trace not in refs:
            refs.append(m.row.trace)
    return list(groups.values())


def _names_of(cals: list[Calibration]) -> list[tuple[str, list[str]]]:
    out = []
    for cal in cals:
        refs = [m.group(2) for m in (_PER_TRACE.match(p.name) for p in cal.params) if m]
        out.append((cal.name, refs))
    return out


def write_calibrations(cals: list[Calibration], out_dir: str | Path,
                       files: OutputFiles | None = None) -> list[Path]:
    """Write ``DIR/<cluster name>.json`` per calibration (a suffix ``-2`` ... on a clash),
    and every re-timed trace as ``DIR/traces/<its file's stem>.json`` (recorded in the
    calibration's ``trace_files``); names as :func:`calibration_files`.

    All files are written or none (:func:`schedopt.files.output_files`). With ``files``, the
    paths were reserved before the fit (``calibration_files`` of ``planned_names``): they are
    written there, and the traces whose factor was not identified are given up.
    """
    from schedopt.files import output_files

    paths, traces = calibration_files(_names_of(cals), out_dir)
    if files is None:
        targets = {f"--out ({p.name})": p for p in paths}
        targets.update({f"--out (traces/{p.name})": p for cal, mine in zip(cals, traces,
                                                                         strict=True)
                        for ref, p in mine.items() if ref in cal.traces})
        with output_files(targets) as own:
            _write(own, cals, paths, traces)
    else:
        _write(files, cals, paths, traces)
    return paths


def _write(files: OutputFiles, cals: list[Calibration], paths: list[Path],
           traces: list[dict[str, Path]]) -> None:
    for cal, p, mine in zip(cals, paths, traces, strict=True):
        files.write_json(p, cal.document)
        for ref, tp in mine.items():
            if ref in cal.traces:
                files.write_json(tp, cal.traces[ref])
                cal.trace_files[ref] = str(tp)
            else:
                files.drop(tp)


# -------------------------------------------------------------------------------- validate
@dataclass
class ValidationReport:
    """Predicted against measured, per row, per policy and overall."""

    rows: list[dict[str, Any]]

    def _stats(self, errs: list[float]) -> dict[str, float]:
        a = np.abs(np.array(errs))
        return {"rows": len(errs), "mean_abs_error": float(a.mean()),
                "max_abs_error": float(a.max())}

    def by_policy(self) -> dict[str, dict[str, float]]:
        """Mean and max |error| of each policy."""
        groups: dict[str, list[float]] = {}
        for r in self.rows:
            groups.setdefault(r["policy_name"], []).append(r["error"])
        return {k: self._stats(v) for k, v in groups.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``schedopt validate --json``)."""
        overall = self._stats([r["error"] for r in self.rows])
        return {"rows": self.rows, "policies": self.by_policy(),
                "mean_abs_error": overall["mean_abs_error"],
                "max_abs_error": overall["max_abs_error"]}


def validate(rows: list[Measurement]) -> ValidationReport:
    """Predict every row with its cluster as written (policies planned for that cluster)."""
    out = []
    for m in rows:
        cl = m.cluster()
        pred = simulate(m.trace_obj, cl, m.plan_for(cl)).iteration_time_s
        if not math.isfinite(pred):
            raise SchedoptError("the simulated iteration time is not finite", m.label, pred)
        meas = m.row.iteration_time_s
        out.append({"row": m.label, "line": m.line, "trace": m.row.trace,
                    "cluster": m.row.cluster, "nodes": m.row.nodes, "policy": m.row.policy,
                    "policy_name": _policy_label(m), "predicted_s": pred, "measured_s": meas,
                    "error": pred / meas - 1.0})
    return ValidationReport(out)
