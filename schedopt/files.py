"""Loading traces, clusters and plans by path or by shipped name; listing shipped instances.

Shipped instances live in ``instances/traces`` and ``instances/clusters`` at the repository root,
installed as the data package ``schedopt._instances`` (override with the ``SCHEDOPT_INSTANCES``
environment variable).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .cluster import Cluster, ClusterFamily
from .errors import SchedoptError, from_validation_error
from .plan import Plan
from .trace import Trace

__all__ = [
    "instances_dir",
    "list_instances",
    "load_cluster",
    "load_json",
    "load_plan",
    "load_trace",
    "write_json_atomic",
]

M = TypeVar("M", bound=BaseModel)


def instances_dir() -> Path:
    """Folder of the shipped instances.

    ``SCHEDOPT_INSTANCES`` when set; else the data package ``schedopt/_instances`` of an
    installed wheel; else ``instances/`` at the root of a source checkout (editable install).
    """
    env = os.environ.get("SCHEDOPT_INSTANCES")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    packaged = here / "_instances"
    if packaged.is_dir():
        return packaged
    return here.parent / "instances"


def load_json(path: Path, what: str) -> Any:
    """Read a JSON document, turning I/O and syntax errors into :class:`SchedoptError`."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", what, str(path)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchedoptError(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", what, str(path)
        ) from None


def _resolve(ref: str | Path, kind: str) -> Path:
    p = Path(ref)
    if p.suffix == ".json" or p.exists():
        if not p.exists():
            raise SchedoptError("file not found", kind, str(ref))
        return p
    shipped = instances_dir() / f"{kind}s" / f"{ref}.json"
    if shipped.exists():
        return shipped
    raise SchedoptError(
        f"unknown {kind}: neither a file nor a shipped name (see `schedopt list`)", kind, str(ref)
    )


def _validate(model: type[M], data: Any, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, what) from None


def load_trace(ref: str | Path) -> Trace:
    """Load a trace from a JSON file or a shipped name."""
    return _validate(Trace, load_json(_resolve(ref, "trace"), "trace"), "trace")


def load_cluster(ref: str | Path, nodes: int | None = None) -> Cluster:
    """Load a cluster (or a cluster family at ``nodes`` nodes) from a file or a shipped name.

    Parameters
    ----------
    ref
        Path or shipped name.
    nodes
        Derive the cluster of this many nodes (from a family, or by resizing a cluster, which
        drops its fitted ``allreduce``).
    """
    data = load_json(_resolve(ref, "cluster"), "cluster")
    if isinstance(data, dict) and "base" in data:
        fam = _validate(ClusterFamily, data, "cluster")
        return fam.at(nodes if nodes is not None else fam.base.nodes)
    cluster = _validate(Cluster, data, "cluster")
    if nodes is not None and nodes != cluster.nodes:
        if nodes < 1:
            raise SchedoptError("must be a positive integer", "nodes", nodes)
        return cluster.with_size(nodes=nodes)
    return cluster


def load_plan(path: str | Path) -> Plan:
    """Load a plan written by ``schedopt optimize --out`` (or any tool following the schema)."""
    p = Path(path)
    if not p.exists():
        raise SchedoptError("file not found", "plan", str(path))
    data = load_json(p, "plan")
    if isinstance(data, dict) and "plan" in data and "buckets" not in data:
        data = data["plan"]
    return _validate(Plan, data, "plan")


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to ``path`` through a temporary file and a rename (no partial files)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def list_instances() -> list[dict[str, Any]]:
    """Every shipped instance: name, kind (trace | cluster | cluster-family), size, source."""
    rows: list[dict[str, Any]] = []
    root = instances_dir()
    for path in sorted((root / "traces").glob("*.json")):
        t = load_trace(path)
        rows.append({
            "name": path.stem,
            "kind": "trace",
            "size": f"{len(t.layers)} layers, {t.num_tensors} tensors, "
                    f"{t.total_bytes / 2**20:.1f} MiB",
            "source": t.source,
        })
    for path in sorted((root / "clusters").glob("*.json")):
        data = load_json(path, "cluster")
        if isinstance(data, dict) and "base" in data:
            fam = _validate(ClusterFamily, data, "cluster")
            size = f"N x {fam.base.gpus_per_node} GPUs (family; fits for {sorted(fam.fits)})"
            rows.append({"name": path.stem, "kind": "cluster-family", "size": size,
                         "source": fam.source})
        else:
            c = _validate(Cluster, data, "cluster")
            size = f"{c.nodes} x {c.gpus_per_node} GPUs, {c.collective}"
            rows.append({"name": path.stem, "kind": "cluster", "size": size, "source": c.source})
    return rows
