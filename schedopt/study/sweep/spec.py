"""Sweep specs (YAML or JSON) and their expansion into rows with content-hash keys.

A spec lists traces, clusters (optionally at several node counts), policy specs and optimizer
settings; the rows are traces x clusters (x nodes) x (policies + optimizer settings).

A spec is read as strictly as the command line: at most :data:`MAX_SPEC_BYTES` bytes of UTF-8,
JSON values only (YAML dates, sets and non-text keys are refused), nesting at most
:data:`~schedopt.model.limits.MAX_DEPTH` deep and at most :data:`MAX_SPEC_VALUES` values once
YAML aliases are expanded; numbers strictly typed (``true`` is not 1, ``2.0`` is not an integer)
and within the bounds of ``schedopt optimize``'s options; node counts up to
:data:`~schedopt.model.limits.MAX_NODES`; policy knobs checked as ``--policy`` checks them; at
most :data:`MAX_ROWS` rows.
"""

from __future__ import annotations

import hashlib
import json
import math
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
from schedopt.files import parse_json, read_text
from schedopt.model.limits import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_KNOB,
    MAX_NODES,
    MAX_SECONDS,
    MAX_TOTAL_BYTES,
    check_float_option,
    check_int_option,
    strict_int,
)
from schedopt.optimize import SolveOptions
from schedopt.policies import parse_spec
from schedopt.policies.registry import check_spec

__all__ = [
    "MAX_NODE_COUNTS",
    "MAX_ROWS",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_VALUES",
    "MAX_WORKERS",
    "ClusterEntry",
    "Row",
    "SweepSpec",
    "expand_rows",
    "load_spec",
    "parse_spec_text",
]

#: Largest spec file (bytes).
MAX_SPEC_BYTES = 2**20
#: Most values in a spec (every list item and mapping value, YAML aliases expanded).
MAX_SPEC_VALUES = 100_000
#: Most node counts of one cluster entry (as ``--nodes`` takes).
MAX_NODE_COUNTS = 64
#: Most rows of one sweep.
MAX_ROWS = 1_000_000
#: Most CP-SAT workers of one optimizer setting (as ``optimize --workers`` takes).
MAX_WORKERS = 1024


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
        data = parse_json(text, "spec", source)
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
        except RecursionError:
            raise SchedoptError("not valid YAML here: nested too deeply", "spec",
                                source) from None
    _check_values(data, source)
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
    _check_strict(data)
    rows = len(spec.traces) * (len(spec.policies) + len(spec.optimize)) * sum(
        len(c.nodes) if c.nodes else 1 for c in spec.clusters)
    if rows > MAX_ROWS:
        raise SchedoptError(f"would make {rows:,} rows (at most {MAX_ROWS:,})", "spec", source)
    return spec


def _check_values(data: Any, source: str) -> None:
    """Refuse values that are not JSON, nesting deeper than :data:`MAX_DEPTH` and more than
    :data:`MAX_SPEC_VALUES` values (counting each use of a YAML alias: no billion laughs).

    Iterative, and stops at the first value past a limit, so neither a deep nor a
    self-referencing document recurses or loops.
    """
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_SPEC_VALUES:
            raise SchedoptError(f"more than {MAX_SPEC_VALUES:,} values (YAML aliases counted "
                                "at each use)", "spec", source)
        if depth > MAX_DEPTH:
            raise SchedoptError(f"nested more than {MAX_DEPTH} deep", "spec", source)
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise SchedoptError("every key must be text", "spec", key)
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)
        elif node is not None and not isinstance(node, str | int | float):
            raise SchedoptError(f"not a JSON value ({type(node).__name__})", "spec", str(node))


#: Bounds of the numeric optimizer options, as ``schedopt optimize`` checks its options.
_FLOAT_BOUNDS = {"time_limit_s": MAX_SECONDS, "work_limit_s": MAX_SECONDS}
_INT_BOUNDS = {"workers": (1, MAX_WORKERS), "seed": (0, 2**31 - 1), "prefetch": (0, 1),
               "partition_bytes": (1, MAX_BYTES), "memory_cap_bytes": (1, MAX_TOTAL_BYTES)}
#: Bounds of the CP-SAT parameters that set the work of a solve.
_CP_SAT_BOUNDS = {"max_time_in_seconds": MAX_SECONDS, "max_deterministic_time": MAX_SECONDS,
                  "num_workers": MAX_WORKERS, "num_search_workers": MAX_WORKERS}


def _check_strict(data: dict[str, Any]) -> None:
    """Check the numbers of a spec (already valid in shape) strictly and within bounds, and the
    knobs of its policies as ``--policy`` checks them."""
    for i, pol in enumerate(data.get("policies") or []):
        try:
            check_spec(pol)
        except SchedoptError as exc:
            raise SchedoptError(f"spec.policies[{i}]: {exc}") from None
    for i, entry in enumerate(data.get("clusters") or []):
        nodes = entry.get("nodes") if isinstance(entry, dict) else None
        if nodes is None:
            continue
        if len(nodes) > MAX_NODE_COUNTS:
            raise SchedoptError(f"at most {MAX_NODE_COUNTS} node counts",
                                f"spec.clusters[{i}].nodes", f"{len(nodes):,} counts")
        for j, n in enumerate(nodes):
            field = f"spec.clusters[{i}].nodes[{j}]"
            try:
                strict_int(n)
            except ValueError as exc:
                raise SchedoptError(str(exc), field, n) from None
            check_int_option(n, field, 1, MAX_NODES)
    for i, item in enumerate(data.get("optimize") or []):
        where = f"spec.optimize[{i}]"
        try:
            SolveOptions.model_validate(item, strict=True)
        except ValidationError as exc:
            raise from_validation_error(exc, where) from None
        for key, high in _FLOAT_BOUNDS.items():
            if item.get(key) is not None:
                check_float_option(item[key], f"{where}.{key}", 0.0, high)
        for key, (low, top) in _INT_BOUNDS.items():
            if item.get(key) is not None:
                try:
                    strict_int(item[key])
                except ValueError as exc:
                    raise SchedoptError(str(exc), f"{where}.{key}", item[key]) from None
                check_int_option(item[key], f"{where}.{key}", low, top)
        for key, value in (item.get("cp_sat") or {}).items():
            _check_cp_sat(f"{where}.cp_sat.{key}", key, value)


def _check_cp_sat(field: str, key: str, value: Any) -> None:
    """A CP-SAT parameter: a scalar (or a list of scalars), finite numbers, bounded work."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, dict | list) or item is None:
            raise SchedoptError("must be a number, true/false or text", field, value)
        if isinstance(item, int | float) and not isinstance(item, bool) and not (
                math.isfinite(item) and abs(item) <= MAX_KNOB):
            raise SchedoptError(f"must be a finite number of magnitude at most {MAX_KNOB:g}",
                                field, item)
    if key in _CP_SAT_BOUNDS:
        high = _CP_SAT_BOUNDS[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                0 <= value <= high):
            raise SchedoptError(f"must be a number between 0 and {high:g}", field, value)


def load_spec(path: str | Path) -> SweepSpec:
    """Load a sweep spec from a ``.json``, ``.yaml`` or ``.yml`` file.

    The file must be a regular file (a FIFO or a device is refused before it is opened) of at
    most :data:`MAX_SPEC_BYTES` bytes of UTF-8.
    """
    p = Path(path)
    text = read_text(p, "spec", MAX_SPEC_BYTES)
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
