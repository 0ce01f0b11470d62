"""Scenarios: the instance with its costs scaled, for robust plans and a plan's spread.

A scenario scales three kinds of cost of the nominal trace and cluster by a factor each:

* ``alpha``: every start-up cost (each link's ``latency_s``, a fitted ``allreduce.alpha_s`` and
  its segments' intercepts, ``collective_overhead_s``);
* ``beta``: every cost per byte (each link's ``1 / bandwidth_Bps``, a fitted
  ``allreduce.beta_s_per_byte`` and its segments' slopes), so ``beta+20%`` is a bandwidth
  divided by 1.2;
* ``compute``: every layer's ``forward_s`` and ``backward_s`` (I/O, batch copy and update step
  are left alone).

:func:`corner_scenarios` gives the nominal scenario first, then the ``2**d`` corners of the box
``[1 - pct/100, 1 + pct/100]`` over the ``d`` dimensions varied; with ``per_link`` alpha and
beta are varied link by link (``alpha.intra``, ``beta.inter``, ``beta.fit`` for a fitted
all-reduce, ...). :func:`sample_scenarios` draws factors uniformly from the same box.
:func:`cluster_scenarios` takes a list of clusters instead (several calibrations of one
machine). :func:`spread` judges one plan over scenarios with the simulator.

With every resource order fixed by the plan, the simulated iteration time never decreases when
a duration grows, so over a box the all-high corner is every plan's worst case; the corners are
kept all the same (other scenarios matter with a list of clusters, and the spread reports
them).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from schedopt.errors import SchedoptError, from_validation_error
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.simulate.simulator import simulate

__all__ = ["DIMENSIONS", "MAX_CORNER_DIMENSIONS", "Scenario", "Spread", "check_pct",
           "cluster_scenarios", "corner_scenarios", "dimensions", "parse_vary",
           "perturbation_spread", "perturbations", "sample_scenarios", "scale_cluster",
           "scale_trace", "spread", "unbound"]

#: What a scenario may scale.
DIMENSIONS = ("alpha", "beta", "compute")

#: Most dimensions whose corners are enumerated (``2**8`` corners).
MAX_CORNER_DIMENSIONS = 8

#: Most Monte Carlo samples.
MAX_SAMPLES = 100_000


@dataclass(frozen=True)
class Scenario:
    """One scenario: its name, the factors applied (dimension -> factor) and the instance.

    Attributes
    ----------
    name
        ``nominal``, a corner such as ``alpha+20% beta-20% compute+20%``, ``sample 3``, or the
        name of a cluster of a list.
    factors
        Dimension (``alpha``, ``beta.inter``, ``compute``, ...) -> factor; empty for the
        nominal scenario and for a cluster of a list.
    trace, cluster
        The scaled instance.
    """

    name: str
    factors: dict[str, float] = field(default_factory=dict)
    trace: Trace | None = None
    cluster: Cluster | None = None

    def instance(self) -> tuple[Trace, Cluster]:
        """``(trace, cluster)`` (both set by the builders)."""
        assert self.trace is not None and self.cluster is not None
        return self.trace, self.cluster


def check_pct(value: Any, option: str) -> float:
    """A percentage in ``[0, 100)``; anything else (a boolean, text, NaN, a negative number,
    100 or more) raises :class:`SchedoptError` naming ``option`` and ``value``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SchedoptError("must be a number from 0 to below 100 (percent)", option, value)
    try:
        pct = float(value)
    except ValueError:
        raise SchedoptError("must be a number from 0 to below 100 (percent)", option,
                            value) from None
    if not (math.isfinite(pct) and 0.0 <= pct < 100.0):
        raise SchedoptError("must be a number from 0 to below 100 (percent)", option, value)
    return pct


def _links(cluster: Cluster) -> list[str]:
    """The cost sources of ``cluster`` that per-link scaling varies separately."""
    out = ["intra"]
    if cluster.inter_link is not None and cluster.nodes > 1:
        out.append("inter")
    if cluster.allreduce is not None:
        out.append("fit")
    return out


def dimensions(cluster: Cluster, vary: Sequence[str] = DIMENSIONS,
               per_link: bool = False) -> list[str]:
    """The dimensions of the box: ``vary`` in the order of :data:`DIMENSIONS`, alpha and beta
    split by link when ``per_link``."""
    for v in vary:
        if v not in DIMENSIONS:
            raise SchedoptError(f"must name some of {', '.join(DIMENSIONS)}", "vary", v)
    if not vary:
        raise SchedoptError("must name at least one dimension", "vary", list(vary))
    out: list[str] = []
    for dim in DIMENSIONS:
        if dim not in vary:
            continue
        if per_link and dim != "compute":
            out += [f"{dim}.{link}" for link in _links(cluster)]
        else:
            out.append(dim)
    return out


def _factor(factors: dict[str, float], dim: str, link: str) -> float:
    """The factor of ``dim`` (alpha or beta) on ``link``: its own, else the grouped one."""
    return factors.get(f"{dim}.{link}", factors.get(dim, 1.0))


def scale_cluster(cluster: Cluster, factors: dict[str, float]) -> Cluster:
    """``cluster`` with alpha and beta scaled by ``factors`` (see the module docstring)."""
    data = cluster.model_dump()
    for link in ("intra", "inter"):
        key = f"{link}_link"
        if data.get(key) is None:
            continue
        data[key]["latency_s"] *= _factor(factors, "alpha", link)
        data[key]["bandwidth_Bps"] /= _factor(factors, "beta", link)
    fit = data.get("allreduce")
    if fit is not None:
        fa, fb = _factor(factors, "alpha", "fit"), _factor(factors, "beta", "fit")
        fit["alpha_s"] *= fa
        fit["beta_s_per_byte"] *= fb
        for seg in fit.get("segments") or ():
            seg["alpha_s"] *= fa
            seg["beta_s_per_byte"] *= fb
    data["collective_overhead_s"] *= factors.get("alpha", 1.0)
    try:
        return Cluster.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, "scenario cluster") from None


def scale_trace(trace: Trace, compute: float) -> Trace:
    """``trace`` with every layer's forward and backward time scaled by ``compute``."""
    if compute == 1.0:
        return trace
    data = trace.model_dump(exclude={"layers"})
    # the tensors are kept as they are (already checked): only the layers' times are new
    data["layers"] = [{"name": layer.name, "forward_s": layer.forward_s * compute,
                       "backward_s": layer.backward_s * compute, "tensors": layer.tensors,
                       "host_forward_s": layer.host_forward_s,
                       "host_backward_s": layer.host_backward_s} for layer in trace.layers]
    try:
        return Trace.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, "scenario trace") from None


def _scenario(name: str, trace: Trace, cluster: Cluster, factors: dict[str, float],
              traces: dict[float, Trace] | None = None) -> Scenario:
    """One scenario; ``traces`` keeps the trace scaled by each compute factor, so that the
    scenarios that share a factor share one trace."""
    compute = factors.get("compute", 1.0)
    cache = {} if traces is None else traces
    if compute not in cache:
        cache[compute] = scale_trace(trace, compute)
    return Scenario(name, dict(factors), cache[compute], scale_cluster(cluster, factors))


def _corner_name(dims: list[str], signs: tuple[int, ...], pct: float) -> str:
    return " ".join(f"{d}{'+' if s > 0 else '-'}{pct:g}%" for d, s in zip(dims, signs,
                                                                         strict=True))


def corner_scenarios(trace: Trace, cluster: Cluster, pct: float,
                     vary: Sequence[str] = DIMENSIONS, per_link: bool = False) -> list[Scenario]:
    """The nominal scenario, then the ``2**d`` corners of the box (``+`` before ``-`` in each
    dimension, the first dimension slowest); only the nominal one when ``pct`` is 0.

    Raises
    ------
    SchedoptError
        A bad ``pct`` or ``vary``, or more than :data:`MAX_CORNER_DIMENSIONS` dimensions.
    """
    pct = check_pct(pct, "pct")
    dims = dimensions(cluster, vary, per_link)
    if len(dims) > MAX_CORNER_DIMENSIONS:
        raise SchedoptError(f"at most {MAX_CORNER_DIMENSIONS} dimensions have their corners "
                            f"enumerated", "dimensions", dims)
    out = [Scenario("nominal", {}, trace, cluster)]
    if pct == 0.0:
        return out
    step = pct / 100.0
    traces: dict[float, Trace] = {1.0: trace}
    for signs in itertools.product((1, -1), repeat=len(dims)):
        factors = {d: 1.0 + s * step for d, s in zip(dims, signs, strict=True)}
        out.append(_scenario(_corner_name(dims, signs, pct), trace, cluster, factors, traces))
    return out


def sample_scenarios(trace: Trace, cluster: Cluster, pct: float, samples: int, seed: int = 0,
                     vary: Sequence[str] = DIMENSIONS, per_link: bool = False
                     ) -> list[Scenario]:
    """``samples`` scenarios with factors drawn uniformly from the box (numpy's default
    generator seeded with ``seed``; dimension by dimension, sample by sample)."""
    pct = check_pct(pct, "pct")
    if isinstance(samples, bool) or not isinstance(samples, int) or not (
            0 <= samples <= MAX_SAMPLES):
        raise SchedoptError(f"must be an integer from 0 to {MAX_SAMPLES:,}", "samples", samples)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SchedoptError("must be a non-negative integer", "seed", seed)
    dims = dimensions(cluster, vary, per_link)
    rng = np.random.default_rng(seed)
    draws = rng.uniform(1.0 - pct / 100.0, 1.0 + pct / 100.0, size=(samples, len(dims)))
    return [_scenario(f"sample {i}", trace, cluster,
                      {d: float(f) for d, f in zip(dims, row, strict=True)})
            for i, row in enumerate(draws)]


def cluster_scenarios(trace: Trace, clusters: Sequence[Cluster]) -> list[Scenario]:
    """One scenario per cluster (the first is the nominal one), named after the clusters
    (``#k`` appended to repeated names)."""
    if not clusters:
        raise SchedoptError("needs at least one cluster", "clusters", [])
    ranks = {c.world_size for c in clusters}
    if len(ranks) > 1:
        raise SchedoptError("the clusters must have the same number of ranks", "clusters",
                            sorted(ranks))
    seen: dict[str, int] = {}
    out = []
    for c in clusters:
        k = seen.get(c.name, 0)
        seen[c.name] = k + 1
        out.append(Scenario(c.name if k == 0 else f"{c.name}#{k}", {}, trace, c))
    return out


def parse_vary(text: str, option: str = "--vary") -> list[str]:
    """Comma-separated dimensions (some of :data:`DIMENSIONS`, each once)."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items or len(set(items)) != len(items) or any(x not in DIMENSIONS for x in items):
        raise SchedoptError(f"must be comma-separated names among {','.join(DIMENSIONS)}, "
                            f"each once", option, text)
    return items


def perturbations(trace: Trace, cluster: Cluster, pct: float, *, samples: int = 0,
                  seed: int = 0, vary: Sequence[str] = DIMENSIONS, per_link: bool = False
                  ) -> list[Scenario]:
    """:func:`corner_scenarios` followed by ``samples`` of :func:`sample_scenarios`."""
    return (corner_scenarios(trace, cluster, pct, vary, per_link)
            + sample_scenarios(trace, cluster, pct, samples, seed, vary, per_link))


# ------------------------------------------------------------------------------ the spread
def unbound(plan: Plan) -> Plan:
    """``plan`` without its trace and cluster fingerprints (to judge it on a scenario)."""
    return plan.model_copy(update={"trace_hash": None, "cluster_hash": None})


@dataclass(frozen=True)
class Spread:
    """A plan judged over scenarios.

    Attributes
    ----------
    names, times_s
        Scenario names and the plan's simulated iteration time in each (same order).
    """

    names: list[str]
    times_s: list[float]

    @property
    def min_s(self) -> float:
        """Fastest iteration time."""
        return min(self.times_s)

    @property
    def median_s(self) -> float:
        """Median iteration time."""
        return float(np.median(self.times_s))

    @property
    def max_s(self) -> float:
        """Slowest iteration time (the worst case)."""
        return max(self.times_s)

    @property
    def worst(self) -> str:
        """Name of the first scenario with the slowest time."""
        return self.names[int(np.argmax(self.times_s))]

    @property
    def best(self) -> str:
        """Name of the first scenario with the fastest time."""
        return self.names[int(np.argmin(self.times_s))]

    def line(self) -> str:
        """One line: the spread and the worst scenario."""
        n = len(self.names)
        return (f"spread over {n} scenario{'s' if n > 1 else ''}: min {self.min_s * 1e3:.3f} ms, "
                f"median {self.median_s * 1e3:.3f} ms, max {self.max_s * 1e3:.3f} ms "
                f"(worst: {self.worst})")

    def as_dict(self) -> dict[str, Any]:
        """JSON-able summary plus every scenario's time."""
        return {"scenarios": len(self.names), "min_s": self.min_s, "median_s": self.median_s,
                "max_s": self.max_s, "worst": self.worst, "best": self.best,
                "times_s": dict(zip(self.names, self.times_s, strict=True))}


def spread(plan: Plan, scenarios: Sequence[Scenario]) -> Spread:
    """Simulate ``plan`` on every scenario (its fingerprints checked against the first)."""
    if not scenarios:
        raise SchedoptError("needs at least one scenario", "scenarios", [])
    trace0, cluster0 = scenarios[0].instance()
    plan.check_against(trace0, cluster0)
    free = unbound(plan)
    times = [simulate(*s.instance(), free).iteration_time_s for s in scenarios]
    return Spread([s.name for s in scenarios], times)


def perturbation_spread(trace: Trace, cluster: Cluster, plan: Plan, perturb: Any,
                        samples: Any = 0, seed: Any = 0, vary: str = "alpha,beta,compute",
                        per_link: bool = False) -> Spread:
    """The spread of ``simulate --perturb``: the options checked (errors name them), then
    :func:`spread` over :func:`perturbations`."""
    if perturb is None:
        raise SchedoptError("needs --perturb", "--samples", samples)
    pct = check_pct(perturb, "--perturb")
    if isinstance(samples, bool) or not isinstance(samples, int) or not (
            0 <= samples <= MAX_SAMPLES):
        raise SchedoptError(f"must be an integer from 0 to {MAX_SAMPLES:,}", "--samples",
                            samples)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise SchedoptError("must be a non-negative integer", "--seed", seed)
    dims = parse_vary(vary)
    if len(dimensions(cluster, dims, per_link)) > MAX_CORNER_DIMENSIONS:
        raise SchedoptError(f"at most {MAX_CORNER_DIMENSIONS} dimensions with their corners",
                            "--per-link", per_link)
    return spread(plan, perturbations(trace, cluster, pct, samples=samples, seed=seed,
                                      vary=dims, per_link=per_link))
