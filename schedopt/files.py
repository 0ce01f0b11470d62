"""Loading traces, clusters and plans by path or by shipped name; listing shipped instances.

Shipped instances live in ``instances/traces`` and ``instances/clusters`` at the repository root,
installed as the data package ``schedopt._instances`` (override with the ``SCHEDOPT_INSTANCES``
environment variable).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from schedopt.errors import SchedoptError, from_validation_error
from schedopt.model.cluster import Cluster, ClusterFamily
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace

__all__ = [
    "OutputFiles",
    "instances_dir",
    "list_instances",
    "load_cluster",
    "load_json",
    "load_plan",
    "load_trace",
    "load_trace_or_cluster",
    "output_files",
    "parse_json",
    "read_text",
    "safe_file_stem",
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


def read_text(path: str | Path, what: str, max_bytes: int | None = None) -> str:
    """Read a UTF-8 text file; every way this fails becomes a one-line :class:`SchedoptError`.

    A path that is not a regular file (a folder, a FIFO, a device) is refused before it is
    opened, so nothing blocks; bytes that are not UTF-8 are reported with their offset.

    Parameters
    ----------
    path
        The file.
    what
        The kind of file, named in messages (``trace``, ``spec``).
    max_bytes
        Refuse a file larger than this (None: no limit).
    """
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise SchedoptError(f"cannot read: {kind}", what, _short(path))
        with p.open("rb") as fh:
            data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", what,
                            _short(path)) from None
    if max_bytes is not None and len(data) > max_bytes:
        raise SchedoptError(f"file larger than {max_bytes:,} bytes", what, _short(path))
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise SchedoptError("UTF-16 text: save the file as UTF-8", what, _short(path))
    try:
        return data.decode("utf-8-sig")  # a byte-order mark is tolerated
    except UnicodeDecodeError as exc:
        raise SchedoptError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", what,
            _short(path)) from None


def _short(path: str | Path) -> str:
    text = str(path)
    return text if len(text) <= 200 else f"{text[:100]}...({len(text):,} characters)"


def load_json(path: Path, what: str) -> Any:
    """Read a JSON document, turning I/O, encoding, syntax and nesting errors into
    :class:`SchedoptError`."""
    return parse_json(read_text(path, what), what, str(path))


def parse_json(text: str, what: str, source: str) -> Any:
    """Parse JSON text, turning syntax and nesting errors into :class:`SchedoptError`.

    Parameters
    ----------
    text
        The document.
    what
        The kind of document, named in messages.
    source
        Where the text comes from (a path), named in messages.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchedoptError(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", what,
            _short(source)) from None
    except RecursionError:
        raise SchedoptError("not valid JSON here: nested too deeply", what,
                            _short(source)) from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise SchedoptError(f"not valid JSON here: {exc}", what, _short(source)) from None


def _resolve(ref: str | Path, kind: str) -> Path:
    try:
        return _resolve_path(ref, kind)
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", kind,
                            _short(ref)) from None


def _resolve_path(ref: str | Path, kind: str) -> Path:
    p = Path(ref)
    if p.suffix == ".json" or p.exists():
        if not p.exists():
            raise SchedoptError("file not found", kind, _short(ref))
        return p
    shipped = instances_dir() / f"{kind}s" / f"{ref}.json"
    if shipped.exists():
        return shipped
    raise SchedoptError(
        f"unknown {kind}: neither a file nor a shipped name (see `schedopt list`)", kind,
        _short(ref))


def _validate(model: type[M], data: Any, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, what) from None


def load_trace(ref: str | Path) -> Trace:
    """Load a trace from a JSON file or a shipped name.

    A trace whose every time is zero is refused: no iteration can take zero time, and every
    figure derived from it (throughput, efficiency) would be infinite.
    """
    return _trace_from(load_json(_resolve(ref, "trace"), "trace"))


def _trace_from(data: Any) -> Trace:
    trace = _validate(Trace, data, "trace")
    if trace.compute_s + trace.io_s + trace.h2d_s + trace.update_s <= 0:
        raise SchedoptError("every time of the trace is zero (forward_s, backward_s, io_s, "
                            "h2d_s, update_s)", "trace", trace.name)
    return trace


def load_trace_or_cluster(ref: str | Path) -> Trace | Cluster:
    """Load a trace or a cluster, told apart by the document (a trace has ``layers``)."""
    path = _resolve_any(ref)
    data = load_json(path, "file")
    if isinstance(data, dict) and "layers" in data:
        return _trace_from(data)
    return _cluster_from(data, None)


def _resolve_any(ref: str | Path) -> Path:
    try:
        return _resolve(ref, "trace")
    except SchedoptError as first:
        try:
            return _resolve(ref, "cluster")
        except SchedoptError:
            raise first from None


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
    return _cluster_from(load_json(_resolve(ref, "cluster"), "cluster"), nodes)


def _cluster_from(data: Any, nodes: int | None) -> Cluster:
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


#: Characters kept in a file name made from a name in an input; the others become ``_``.
_UNSAFE = re.compile(r"[^\w.+-]")


def safe_file_stem(name: str, default: str) -> str:
    """A file name (without suffix) made from a name found in an input file.

    A name from an input never chooses a folder: path separators and every character other than
    letters, digits, ``.``, ``_``, ``+`` and ``-`` become ``_``, leading dots are dropped (no
    ``..``, no hidden file), and the stem is cut to 100 characters; an empty result is
    ``default``.
    """
    stem = _UNSAFE.sub("_", name).lstrip(".")[:100]
    return stem or default


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to ``path`` through a temporary file and a rename (no partial files)."""
    with output_files({"out": path}) as out:
        out.write_json(path, data)


def json_text(data: Any, *, indent: int | None = 1) -> str:
    """``data`` as strict JSON text (a NaN or infinite number is an error, not a bare NaN)."""
    try:
        return json.dumps(data, indent=indent, allow_nan=False) + "\n"
    except ValueError:
        raise SchedoptError("result holds a NaN or infinite number; nothing written", "output",
                            "NaN") from None


class OutputFiles:
    """The output files of one command: checked and reserved first, then all renamed or none.

    Use :func:`output_files`. Each path is reserved as an empty temporary file next to it (so a
    folder that cannot be written is refused before any work); the writers fill the temporary
    files; :meth:`commit` renames them into place. Files are created with mode ``0666`` less
    the umask, as any other program's output.
    """

    def __init__(self) -> None:
        self._tmp: dict[Path, Path] = {}
        self._option: dict[Path, str] = {}
        self._made_dirs: list[Path] = []

    def add(self, path: str | Path, option: str) -> None:
        """Check ``path`` and reserve its temporary file."""
        final = Path(path)
        if str(path) == "" or final in self._tmp:
            why = "empty path" if str(path) == "" else f"also given to {self._option.get(final)}"
            raise SchedoptError(f"cannot write: {why}", option, str(path))
        try:
            if final.exists() and not final.is_file():
                kind = "a folder" if final.is_dir() else "not a regular file"
                raise SchedoptError(f"cannot write: {kind}", option, _short(path))
            self._mkdirs(final.parent)
            token = secrets.token_hex(4)
            tmp = final.parent / f".{final.name[:64]}.{token}.tmp{final.suffix[:16]}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            os.close(fd)
        except OSError as exc:
            raise SchedoptError(f"cannot write: {exc.strerror or exc}", option,
                                _short(path)) from None
        self._tmp[final] = tmp
        self._option[final] = option

    def _mkdirs(self, folder: Path) -> None:
        missing = []
        while not folder.exists() and folder != folder.parent:
            missing.append(folder)
            folder = folder.parent
        for d in reversed(missing):
            d.mkdir()
            self._made_dirs.append(d)

    def drop(self, path: str | Path) -> None:
        """Give up ``path``: its temporary file is removed and nothing is written there."""
        tmp = self._tmp.pop(Path(path), None)
        self._option.pop(Path(path), None)
        if tmp is not None:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)

    def temp(self, path: str | Path) -> Path:
        """The temporary file to write for ``path`` (for writers that take a path)."""
        return self._tmp[Path(path)]

    def write_text(self, path: str | Path, text: str) -> None:
        """Write ``text`` (UTF-8) for ``path``."""
        with self.writing(path) as tmp:
            tmp.write_text(text, encoding="utf-8")

    def write_json(self, path: str | Path, data: Any) -> None:
        """Write ``data`` as strict JSON for ``path``."""
        self.write_text(path, json_text(data))

    @contextmanager
    def writing(self, path: str | Path) -> Iterator[Path]:
        """Give the temporary file of ``path``; a failure to write it becomes one line."""
        final = Path(path)
        try:
            yield self._tmp[final]
        except OSError as exc:
            raise SchedoptError(f"cannot write: {exc.strerror or exc}", self._option[final],
                                _short(path)) from None

    def commit(self) -> list[Path]:
        """Rename every temporary file into place (on failure, remove the ones renamed)."""
        done: list[Path] = []
        for final, tmp in self._tmp.items():
            try:
                os.replace(tmp, final)
            except OSError as exc:
                for p in done:
                    p.unlink(missing_ok=True)
                raise SchedoptError(f"cannot write: {exc.strerror or exc}", self._option[final],
                                    _short(final)) from None
            done.append(final)
        self._tmp.clear()
        self._made_dirs.clear()
        return done

    def discard(self) -> None:
        """Remove every temporary file not committed, and the folders made for them."""
        for tmp in self._tmp.values():
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
        self._tmp.clear()
        for d in reversed(self._made_dirs):
            with suppress(OSError):
                d.rmdir()
        self._made_dirs.clear()


@contextmanager
def output_files(paths: Mapping[str, str | Path | None]) -> Iterator[OutputFiles]:
    """Check and reserve every output path before any work; write all of them or none.

    Parameters
    ----------
    paths
        Option name (``--out``) -> path, or None when the option was not given.

    Yields
    ------
    OutputFiles
        Write each file with :meth:`OutputFiles.write_json`, :meth:`~OutputFiles.write_text`
        or a writer given :meth:`OutputFiles.temp`; leaving the block without an exception
        renames them all into place, an exception (or Ctrl-C) removes them all.
    """
    out = OutputFiles()
    try:
        for option, path in paths.items():
            if path is not None:
                out.add(path, option)
        yield out
        out.commit()
    finally:
        out.discard()


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
