"""Measured iteration times of real runs: the CSV format that `calibrate` and `validate` read.

A measurements file is a CSV with the header ``trace,cluster,nodes,policy,iteration_time_s`` and
optionally ``iteration_time_std_s``, ``samples`` and ``source`` (any order; docs/formats.md).
Each row names one run: a trace and a cluster (paths, relative to the CSV's folder, or shipped
names; a cluster may be a family), an optional node count, the plan that ran (a policy spec such as
``ddp:bucket_cap_mb=5`` or ``plan:PATH``) and the measured iteration time in seconds. A bad row
raises a one-line :class:`~schedopt.errors.SchedoptError` naming the file, the row and the column.

The file is read as strictly as every other input: UTF-8 text of at most
:data:`MAX_FILE_BYTES` bytes and :data:`MAX_ROWS` data rows, one row per line (a cell holds no line
break and no control character, and at most :data:`MAX_CELL_CHARS` characters), plain decimal
numbers (no ``nan``, ``inf``, ``true`` or ``1_000``), node counts up to
:data:`~schedopt.model.limits.MAX_NODES` and iteration times between :data:`MIN_TIME_S` and
:data:`~schedopt.model.limits.MAX_SECONDS` seconds.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schedopt.errors import SchedoptError, from_validation_error
from schedopt.files import instances_dir, load_json, load_plan, load_trace, read_text
from schedopt.model.cluster import Cluster, ClusterFamily
from schedopt.model.limits import MAX_COUNT, MAX_NODES, MAX_SECONDS
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies import make_plan

__all__ = [
    "MAX_CELL_CHARS",
    "MAX_FILE_BYTES",
    "MAX_ROWS",
    "MIN_TIME_S",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "ClusterRef",
    "Measurement",
    "MeasurementRow",
    "read_measurements",
]

REQUIRED_COLUMNS = ("trace", "cluster", "nodes", "policy", "iteration_time_s")
OPTIONAL_COLUMNS = ("iteration_time_std_s", "samples", "source")

#: Largest measurements file (bytes).
MAX_FILE_BYTES = 16 * 2**20
#: Most data rows in one file.
MAX_ROWS = 10_000
#: Longest cell (characters; a path is at most 4,096 bytes on Linux).
MAX_CELL_CHARS = 4096
#: Shortest measured iteration time (seconds): a microsecond, far below any real step.
MIN_TIME_S = 1e-6

_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_INTEGER = re.compile(r"\+?[0-9]{1,18}")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class MeasurementRow(BaseModel):
    """One measured run (one CSV row; the schema of ``schedopt schema measurements``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str = Field(min_length=1, description="Trace: a JSON path or a shipped name.")
    cluster: str = Field(min_length=1, description="Cluster or cluster family: path or name.")
    nodes: int | None = Field(None, gt=0, description="Node count (empty: the cluster's).")
    policy: str = Field(min_length=1, description="Policy spec NAME[:k=v,...] or plan:PATH.")
    iteration_time_s: float = Field(gt=0.0, allow_inf_nan=False,
                                    description="Measured iteration time (s).")
    iteration_time_std_s: float | None = Field(None, ge=0.0, allow_inf_nan=False,
                                               description="Standard deviation (s), optional.")
    samples: int | None = Field(None, gt=0, description="Iterations averaged, optional.")
    source: str = Field("", description="Where the number comes from, optional.")


@dataclass(frozen=True)
class ClusterRef:
    """A cluster document as written: a plain cluster or a family (``kind``)."""

    key: str  # the resolved path, or the shipped name
    kind: str  # cluster | cluster-family
    data: dict[str, Any]

    @property
    def name(self) -> str:
        """The document's ``name``."""
        return str(self.data["name"])

    def at(self, nodes: int | None, data: dict[str, Any] | None = None) -> Cluster:
        """The cluster of ``nodes`` nodes described by ``data`` (default: the document)."""
        doc = self.data if data is None else data
        if self.kind == "cluster-family":
            fam = ClusterFamily.model_validate(doc)
            return fam.at(nodes if nodes is not None else fam.base.nodes)
        cl = Cluster.model_validate(doc)
        if nodes is not None and nodes != cl.nodes:
            return cl.with_size(nodes=nodes)
        return cl


@dataclass
class Measurement:
    """A row with its trace, cluster document and plan loaded.

    ``plan`` is None for a policy spec (planned for the cluster it is evaluated on, see
    :meth:`plan_for`); a ``plan:PATH`` plan is fixed.
    """

    row: MeasurementRow
    line: int
    where: str
    trace_obj: Trace
    cluster_ref: ClusterRef
    plan: Plan | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``FILE:LINE``."""
        return f"{self.where}:{self.line}"

    def plan_for(self, cluster: Cluster, trace: Trace | None = None) -> Plan:
        """The plan that ran, for ``cluster``, without a cluster fingerprint (calibration
        re-parameterises the same hardware); with ``trace`` (the row's trace re-timed, as
        calibration scales it), a policy is planned on it and the plan is not bound to a
        trace fingerprint either."""
        tr = self.trace_obj if trace is None else trace
        plan = self.plan if self.plan is not None else make_plan(tr, cluster, self.row.policy)
        update: dict[str, Any] = {"cluster_hash": None}
        if trace is not None:
            update["trace_hash"] = None
        return plan.model_copy(update=update)

    def cluster(self) -> Cluster:
        """The cluster of the row as written."""
        return self.cluster_ref.at(self.row.nodes)


def _cluster_path(ref: str) -> Path:
    """A cluster file, or the shipped cluster of that name."""
    p = Path(ref)
    try:
        exists = p.exists()
        shipped = instances_dir() / "clusters" / f"{ref}.json"
        shipped_exists = not exists and p.suffix != ".json" and shipped.exists()
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "cluster", ref) from None
    if p.suffix == ".json" or exists:
        if not exists:
            raise SchedoptError("file not found", "cluster", ref)
        return p
    if shipped_exists:
        return shipped
    raise SchedoptError("unknown cluster: neither a file nor a shipped name (see `schedopt "
                        "list`)", "cluster", ref)


def _err(where: str, line: int, column: str, message: str, value: Any) -> SchedoptError:
    return SchedoptError(message, f"{where}:{line} column {column}", value)


def _resolve_path(value: str, base: Path) -> str:
    """A relative path that exists next to the CSV is taken from there."""
    p = Path(value)
    try:
        if not p.is_absolute() and (base / p).exists():
            return str(base / p)
    except OSError:  # a name too long for the file system: the loader reports it
        pass
    return value


def _cell(raw: dict[str, str | None], col: str) -> str:
    value = raw.get(col)
    return "" if value is None else value.strip()


def _parse_row(raw: dict[str, str | None], where: str, line: int) -> MeasurementRow:
    """Type-check one row; errors name the column."""
    out: dict[str, Any] = {}
    for col in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
        text = _cell(raw, col)
        if len(text) > MAX_CELL_CHARS:
            raise _err(where, line, col, f"cell longer than {MAX_CELL_CHARS:,} characters", text)
        if col in ("trace", "cluster", "policy"):
            if not text:
                raise _err(where, line, col, "must not be empty", text)
            out[col] = text
        elif col == "source":
            out[col] = text
        elif col in ("nodes", "samples"):
            if text:
                high = MAX_NODES if col == "nodes" else MAX_COUNT
                if not _INTEGER.fullmatch(text) or not 1 <= int(text) <= high:
                    raise _err(where, line, col, f"must be an integer between 1 and {high:,}",
                               text)
                out[col] = int(text)
        else:  # times
            if not text:
                if col == "iteration_time_s":
                    raise _err(where, line, col, "must not be empty", text)
                continue
            low = MIN_TIME_S if col == "iteration_time_s" else 0.0
            value = float(text) if _NUMBER.fullmatch(text) else None
            if value is None or not low <= value <= MAX_SECONDS:
                raise _err(where, line, col, f"must be a number of seconds between {low:g} and "
                           f"{MAX_SECONDS:g}", text)
            out[col] = value
    return MeasurementRow.model_validate(out)


class _Loader:
    """Loads traces, cluster documents and plans once each; errors name the row and column."""

    def __init__(self, base: Path, where: str) -> None:
        self.base, self.where = base, where
        self.traces: dict[str, Trace] = {}
        self.clusters: dict[str, ClusterRef] = {}
        self.plans: dict[str, Plan] = {}

    def trace(self, ref: str, line: int) -> Trace:
        key = _resolve_path(ref, self.base)
        if key not in self.traces:
            try:
                self.traces[key] = load_trace(key)
            except SchedoptError as exc:
                raise SchedoptError(f"{self.where}:{line} column trace: {exc}") from None
        return self.traces[key]

    def cluster(self, ref: str, line: int) -> ClusterRef:
        key = _resolve_path(ref, self.base)
        if key not in self.clusters:
            try:
                path = _cluster_path(key)
                data = load_json(path, "cluster")
                kind = "cluster-family" if isinstance(data, dict) and "base" in data else (
                    "cluster")
                doc = ClusterRef(str(path), kind, data)
                try:
                    doc.at(None)  # validates
                except ValidationError as exc:
                    raise from_validation_error(exc, "cluster") from None
            except SchedoptError as exc:
                raise SchedoptError(f"{self.where}:{line} column cluster: {exc}") from None
            self.clusters[key] = doc
        return self.clusters[key]

    def plan(self, ref: str, line: int) -> Plan:
        key = _resolve_path(ref, self.base)
        if key not in self.plans:
            try:
                self.plans[key] = load_plan(key)
            except SchedoptError as exc:
                raise SchedoptError(f"{self.where}:{line} column policy: {exc}") from None
        return self.plans[key]


def _header(fields: list[str] | None, where: str) -> None:
    if not fields:
        raise SchedoptError("empty file: expected the header "
                            f"{','.join(REQUIRED_COLUMNS)}", f"{where}:1", "")
    names = [f.strip() for f in fields]
    for col in names:
        if col not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
            raise _err(where, 1, col, "unknown column (known: "
                       f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)})", col)
    for col in REQUIRED_COLUMNS:
        if col not in names:
            raise _err(where, 1, col, "required column missing from the header", ",".join(names))
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise _err(where, 1, dup, "column repeated in the header", dup)


def _split_rows(lines: list[str], where: str) -> list[tuple[int, list[str]]]:
    """``(line number, cells)`` of every line that is not blank or a comment.

    Each line is one row: a quoted cell that does not end on its line (a line break inside a
    cell), a control character or an over-long line is refused, naming the line.
    """
    limit = MAX_CELL_CHARS * (len(REQUIRED_COLUMNS) + len(OPTIONAL_COLUMNS))
    rows = []
    for number, raw in enumerate(lines, start=1):
        ln = raw.removesuffix("\r")
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        if len(ln) > limit:
            raise SchedoptError(f"line longer than {limit:,} characters", f"{where}:{number}",
                                ln)
        bad = _CONTROL.search(ln)
        if bad is not None:
            raise SchedoptError(f"control character {bad.group()!r} in a cell (one row per "
                                "line; cells hold no line breaks)", f"{where}:{number}", ln)
        try:
            cells = next(csv.reader([ln], strict=True))
        except csv.Error as exc:
            why = ("a quoted cell does not end on its line (cells hold no line breaks)"
                   if "end of data" in str(exc) else f"not a CSV row ({exc})")
            raise SchedoptError(why, f"{where}:{number}", ln) from None
        rows.append((number, cells))
    return rows


def read_measurements(path: str | Path, *, label: str | None = None) -> list[Measurement]:
    """Read and check a measurements CSV; load every trace, cluster and plan it names.

    Parameters
    ----------
    path
        The CSV file.
    label
        How messages and row labels name the file (default: ``path`` as given).

    Returns
    -------
    list of Measurement
        One per data row, in file order (blank lines and lines starting with ``#`` skipped).

    Raises
    ------
    SchedoptError
        One line naming the file, the row (its line number) and the column.
    """
    p = Path(path)
    where = label or str(p)
    text = read_text(p, "measurements", MAX_FILE_BYTES)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    rows = _split_rows(lines, where)
    if not rows:
        _header(None, where)
    header = [c.strip() for c in rows[0][1]]
    _header(header, where)
    if len(rows) - 1 > MAX_ROWS:
        raise SchedoptError(f"more than {MAX_ROWS:,} data rows", where, f"{len(rows) - 1:,} rows")
    loader = _Loader(p.parent, where)
    out: list[Measurement] = []
    for line, cells in rows[1:]:
        if len(cells) > len(header):
            raise _err(where, line, f"#{len(header) + 1}", f"row has {len(cells)} cells, the "
                       f"header {len(header)}", cells[len(header)])
        raw: dict[str, str | None] = dict(zip(header, cells, strict=False))
        row = _parse_row(raw, where, line)
        tr = loader.trace(row.trace, line)
        cref = loader.cluster(row.cluster, line)
        plan = None
        if row.policy.startswith("plan:"):
            plan = loader.plan(row.policy.removeprefix("plan:"), line)
        m = Measurement(row, line, where, tr, cref, plan)
        try:
            cl = m.cluster()
            plan_ok = m.plan_for(cl)
            plan_ok.check_against(tr)
        except SchedoptError as exc:
            col = "nodes" if "nodes" in str(exc) and row.nodes is not None else "policy"
            raise SchedoptError(f"{where}:{line} column {col}: {exc}") from None
        out.append(m)
    if not out:
        raise SchedoptError("no data rows", where, f"{len(lines)} lines")
    return out


def with_cluster(rows: list[Measurement], cluster: str | Path) -> list[Measurement]:
    """The rows run on another cluster: ``validate --cluster``.

    Parameters
    ----------
    rows
        Rows from :func:`read_measurements`.
    cluster
        A cluster (or family) file or shipped name: every row's cluster becomes it. Or a folder
        written by ``calibrate --out DIR``: each row's cluster becomes ``DIR/<its cluster's
        name>.json``, and its trace ``DIR/traces/<its trace's stem>.json`` where
        ``compute_scale`` re-timed it (a plan row made for the trace binds to the re-timed one).

    Returns
    -------
    list of Measurement
        New rows; their node counts and plans are those written.

    Raises
    ------
    SchedoptError
        ``--cluster`` named with the value: unknown, unreadable, no calibrated cluster of a
        row's name in the folder, or a row that does not fit the new cluster.
    """
    from dataclasses import replace

    from schedopt.files import safe_file_stem

    folder = Path(cluster)
    loader = _Loader(Path(), "--cluster")
    out: list[Measurement] = []
    for m in rows:
        tr = m.trace_obj
        if folder.is_dir():
            path = folder / f"{safe_file_stem(m.cluster_ref.name, 'cluster')}.json"
            if not path.is_file():
                raise SchedoptError(f"no calibrated cluster {m.cluster_ref.name!r} in the folder"
                                    f" (row {m.label}; `calibrate --out` writes one per cluster"
                                    " name)", "--cluster", str(cluster))
            ref = loader.cluster(str(path), m.line)
            retimed = folder / "traces" / f"{safe_file_stem(Path(m.row.trace).stem, 'trace')}.json"
            if retimed.is_file():
                candidate = loader.trace(str(retimed), m.line)
                if candidate.retimed_from == (tr.retimed_from or tr.fingerprint()):
                    tr = candidate
        else:
            ref = _given_cluster(loader, str(cluster), m.line)
        new = replace(m, cluster_ref=ref, trace_obj=tr)
        try:
            new.plan_for(new.cluster()).check_against(tr)
        except SchedoptError as exc:
            raise SchedoptError(f"row {m.label} does not fit this cluster: {exc}", "--cluster",
                                str(cluster)) from None
        out.append(new)
    return out


def _given_cluster(loader: _Loader, cluster: str, line: int) -> ClusterRef:
    """The cluster document ``--cluster`` names (a file or a shipped name)."""
    try:
        return loader.cluster(cluster, line)
    except SchedoptError as exc:
        why = str(exc).split(" column cluster: ", 1)[-1].removeprefix("cluster: ")
        if "neither a file nor a shipped name" in why:
            why = ("unknown cluster: neither a file, a folder of `calibrate --out` nor a shipped"
                   " name")
            raise SchedoptError(why, "--cluster", cluster) from None
        raise SchedoptError(f"--cluster: {why}") from None
