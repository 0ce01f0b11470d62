"""Sweep specs (YAML or JSON) and their expansion into rows with content-hash keys.

A spec lists traces, clusters (optionally at several node counts), policy specs and optimizer
settings; the rows are traces x clusters (x nodes) x (policies + optimizer settings).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
)

from schedopt.errors import SchedoptError, from_validation_error
from schedopt.optimize import SolveOptions
from schedopt.policies import parse_spec

__all__ = ["ClusterEntry", "Row", "SweepSpec", "expand_rows", "load_spec", "parse_spec_text"]


class ClusterEntry(BaseModel):
    """One cluster of a sweep, at its own size or at each of ``nodes``.

    Attributes
    ----------
    cluster
        Shipped name or JSON path of a cluster or a cluster family.
    nodes
        Node counts to derive; None: the cluster as written (a family at its base size).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(min_length=1, description="Cluster name or path.")
    nodes: list[PositiveInt] | None = Field(None, min_length=1, description="Node counts.")


def _check_policy(spec: str) -> str:
    """Refuse a policy spec the registry does not know (the message without field and value)."""
    try:
        parse_spec(spec)
    except SchedoptError as exc:
        msg = str(exc).removeprefix(f"{exc.field}: ") if exc.field else str(exc)
        raise ValueError(msg.rsplit(" (got ", 1)[0]) from None
    return spec


class SweepSpec(BaseModel):
    """What a sweep runs.

    Attributes
    ----------
    traces
        Trace names or paths.
    clusters
        Clusters; a bare string is a cluster at its own size.
    policies
        Policy specs ``NAME[:key=value,...]`` (checked against the registry).
    optimize
        Optimizer settings, each a :class:`~schedopt.optimize.SolveOptions` mapping.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    traces: list[str] = Field(min_length=1, description="Trace names or paths.")
    clusters: list[ClusterEntry] = Field(min_length=1, description="Clusters and node counts.")
    policies: list[Annotated[str, AfterValidator(_check_policy)]] = Field(
        default_factory=list, description="Policy specs."
    )
    optimize: list[SolveOptions] = Field(default_factory=list, description="Optimizer settings.")

    @field_validator("clusters", mode="before")
    @classmethod
    def _bare_names(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"cluster": v} if isinstance(v, str) else v for v in value]
        return value



def parse_spec_text(text: str, fmt: Literal["json", "yaml"], source: str = "spec") -> SweepSpec:
    """Parse and validate a sweep spec given as text.

    Raises
    ------
    SchedoptError
        Syntax errors and invalid fields, in one line naming the field (``spec.clusters[1].nodes``).
    """
    data: Any
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchedoptError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: "
                                f"{exc.msg})", "spec", source) from None
    else:
        try:
            import yaml
        except ImportError:
            raise SchedoptError("reading YAML needs pyyaml (pip install 'schedopt[yaml]'); "
                                "or write the spec as JSON", "spec", source) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            raise SchedoptError(f"not valid YAML{line}", "spec", source) from None
    if not isinstance(data, dict):
        raise SchedoptError("must be a mapping with traces, clusters, policies, optimize",
                            "spec", source)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, "spec") from None
    if not spec.policies and not spec.optimize:
        raise SchedoptError("give at least one policy or one optimize setting",
                            "spec.policies", [])
    return spec


def load_spec(path: str | Path) -> SweepSpec:
    """Load a sweep spec from a ``.json``, ``.yaml`` or ``.yml`` file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "spec", str(p)) from None
    fmt: Literal["json", "yaml"] = "json" if p.suffix.lower() == ".json" else "yaml"
    return parse_spec_text(text, fmt, str(p))


@dataclass(frozen=True)
class Row:
    """One unit of work: a trace on a cluster under a policy or an optimizer setting.

    Attributes
    ----------
    trace, cluster, nodes
        The references as written in the spec (``nodes`` None: the cluster as written).
    kind
        ``policy`` or ``optimize``.
    policy
        The policy spec (``policy`` rows); empty for ``optimize`` rows.
    options
        The optimizer options as a JSON-able mapping (``optimize`` rows); empty otherwise.
    key
        Content hash of the trace, the cluster, the policy or options and the schedopt version.
    """

    trace: str
    cluster: str
    nodes: int | None
    kind: Literal["policy", "optimize"]
    policy: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    key: str = ""

    @property
    def label(self) -> str:
        """Short human-readable name of the row."""
        where = self.cluster if self.nodes is None else f"{self.cluster}@{self.nodes}"
        what = self.policy or "optimize" + json.dumps(self.options, sort_keys=True)
        return f"{self.trace} / {where} / {what}"

    def cpus(self) -> int:
        """CPUs one run of the row uses (the CP-SAT workers of an optimize row)."""
        return int(self.options.get("workers", 1)) if self.kind == "optimize" else 1

    def as_dict(self) -> dict[str, Any]:
        """Plain dictionary (what executors ship to workers)."""
        return {"trace": self.trace, "cluster": self.cluster, "nodes": self.nodes,
                "kind": self.kind, "policy": self.policy, "options": self.options,
                "key": self.key}


def row_key(trace_fp: str, cluster_fp: str, kind: str, what: Any, version: str) -> str:
    """Content hash of one row (24 hex digits of SHA-256 over canonical JSON)."""
    doc = {"trace": trace_fp, "cluster": cluster_fp, "kind": kind, "what": what,
           "schedopt": version}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def _canonical_policy(spec: str) -> dict[str, Any]:
    name, knobs = parse_spec(spec)
    return {"policy": name, "knobs": knobs}


def expand_rows(spec: SweepSpec) -> list[Row]:
    """Every row of ``spec``, each with its content-hash key, in a deterministic order.

    Traces and clusters are loaded once to fingerprint them (so bad names fail here, before any
    row runs). Two spellings of the same work (``ddp`` and ``ddp:`` ...) share one key and run once.
    """
    from schedopt import __version__
    from schedopt.files import load_cluster, load_trace

    trace_fps = {t: load_trace(t).fingerprint() for t in dict.fromkeys(spec.traces)}
    rows: list[Row] = []
    seen: set[str] = set()
    for entry in spec.clusters:
        sizes: list[int | None] = list(entry.nodes) if entry.nodes else [None]
        for nodes in sizes:
            cluster_fp = load_cluster(entry.cluster, nodes).fingerprint()
            for trace, trace_fp in trace_fps.items():
                for pol in spec.policies:
                    key = row_key(trace_fp, cluster_fp, "policy", _canonical_policy(pol),
                                  __version__)
                    if key not in seen:
                        seen.add(key)
                        rows.append(Row(trace, entry.cluster, nodes, "policy", pol, {}, key))
                for opts in spec.optimize:
                    dumped = opts.model_dump(mode="json", exclude_defaults=True)
                    key = row_key(trace_fp, cluster_fp, "optimize",
                                  opts.model_dump(mode="json"), __version__)
                    if key not in seen:
                        seen.add(key)
                        rows.append(Row(trace, entry.cluster, nodes, "optimize", "", dumped, key))
    return rows
