"""Readers of measured all-reduce latencies (OSU and nccl-tests output).

Two input formats are read, and told apart automatically:

``osu``
    Output of the OSU micro-benchmark ``osu_allreduce``: ``#`` header lines, then rows
    ``size  avg_latency_us [...]``. The variant written by the B-Caffe scripts prefixes every row
    with the number of processes (``8,1048576  4678.91``).
``nccl-tests``
    Output of ``all_reduce_perf`` from NVIDIA's nccl-tests: rows ``size count type redop [root]
    time algbw busbw #wrong time algbw busbw #wrong``; the out-of-place time (µs) is used. The
    number of ranks is the number of ``Rank  i ... device`` lines.
``csv``
    A measured table with the header ``bytes,time_s`` or ``bytes,time_s,ranks`` (times in
    seconds; ``import kineto --out-points`` writes one), one row per measurement.

Fitting a cost model to the samples is :mod:`schedopt.measure.commfit`'s job.
"""

from __future__ import annotations

import math
import re
import stat
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import MAX_CALL_S
from schedopt.model.limits import MAX_BYTES, MAX_SECONDS

__all__ = [
    "OSU_MIN_BYTES",
    "CommSamples",
    "parse_comm_file",
    "parse_comm_text",
    "pool_samples",
    "ranks_from_filename",
]

#: Default smallest message size of a fit to OSU data: below it, latency is dominated by
#: per-message overheads that the linear model does not describe (the B-Caffe README fits from
#: 64 KB as well).
OSU_MIN_BYTES = 65536

_NUM = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_RANK_LINE = re.compile(r"^#?\s*Rank\s+\d+\b.*\bdevice\b")
_OSU_BANNER = re.compile(r"^#\s*OSU\b", re.IGNORECASE)
_NCCL_MARKERS = ("out-of-place", "algbw", "busbw", "nThread", "nccl-tests")


@dataclass(frozen=True)
class CommSamples:
    """Measured all-reduce times of one file.

    Attributes
    ----------
    sizes
        Message sizes in bytes (int array), in file order.
    times
        Measured times in seconds (float array), aligned with ``sizes``.
    format
        ``osu``, ``nccl-tests`` or another producer's name (``bcaffe-layerwise``).
    ranks
        Number of ranks stated in the file or its name, or None.
    source
        The file the samples were read from (or a description).
    """

    sizes: np.ndarray
    times: np.ndarray
    format: str
    ranks: int | None = None
    source: str = ""

    def __len__(self) -> int:
        return int(self.sizes.size)


# ---------------------------------------------------------------------------------------- parsing
def ranks_from_filename(path: str | Path) -> int | None:
    """Rank count written at the end of a file name (``allreduce8.log`` -> 8), or None.

    Accepted endings: digits, optionally followed by ``n``, ``p``, ``np``, ``gpus``, ``ranks``,
    ``nodes`` or ``procs`` (``osu_16ranks.txt`` -> 16).
    """
    stem = Path(path).name.split(".")[0]
    m = re.search(r"(\d+)[-_]?(n|p|np|gpus?|ranks?|nodes?|procs?)?$", stem, re.IGNORECASE)
    return int(m.group(1)) if m else None


def _is_num(token: str) -> bool:
    return bool(_NUM.match(token))


def _detect(lines: list[str]) -> str:
    """``csv``, ``nccl-tests`` or ``osu``: a ``bytes,time_s`` header, an OSU banner (a comment
    may mention busbw), then the nccl-tests headers, then the shape of the data rows."""
    first = next((ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")), "")
    if first.replace(" ", "").lower().startswith("bytes,time_s"):
        return "csv"
    if any(_OSU_BANNER.search(line) for line in lines):
        return "osu"
    for line in lines:
        if any(marker in line for marker in _NCCL_MARKERS):
            return "nccl-tests"
    for line in lines:
        tok = line.split()
        if len(tok) >= 8 and _is_num(tok[0]) and _is_num(tok[1]) and tok[2].isalpha():
            return "nccl-tests"
    return "osu"


def _parse_osu(lines: list[str], where: str) -> tuple[list[int], list[float], int | None]:
    sizes: list[int] = []
    times: list[float] = []
    ranks: set[int] = set()
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tok = line.replace(",", " , ").split()
        if not (_is_num(tok[0])):
            continue  # free text (banners, warnings)
        try:
            if len(tok) >= 4 and tok[1] == ",":  # N,size latency
                n_ranks, size, latency = int(tok[0]), int(tok[2]), float(tok[3])
                if n_ranks < 1:
                    raise ValueError
                ranks.add(n_ranks)
            else:
                size, latency = int(tok[0]), float(tok[1])
        except (ValueError, IndexError):
            raise SchedoptError(
                "expected `size latency_us` or `ranks,size latency_us`", f"{where}:{lineno}", line
            ) from None
        if not 0 <= size <= MAX_BYTES or not 0 <= latency <= MAX_SECONDS * 1e6:
            raise SchedoptError("size or time negative, not finite or too large",
                                f"{where}:{lineno}", line)
        sizes.append(size)
        times.append(latency * 1e-6)
    if len(ranks) > 1:
        raise SchedoptError("rows disagree on the number of ranks", where, sorted(ranks))
    return sizes, times, (ranks.pop() if ranks else None)


def _nccl_time_column(lines: list[str]) -> int | None:
    """Index of the out-of-place ``time`` column from the header line, if there is one."""
    for line in lines:
        tok = line.lstrip("#").split()
        if len(tok) > 4 and tok[0] == "size" and "time" in tok:
            return tok.index("time")
    return None


def _parse_nccl(lines: list[str], where: str) -> tuple[list[int], list[float], int | None]:
    col = _nccl_time_column(lines)
    sizes: list[int] = []
    times: list[float] = []
    n_rank_lines = 0
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if _RANK_LINE.match(line):
            n_rank_lines += 1
            continue
        if not line or line.startswith("#"):
            continue
        tok = line.split()
        if not _is_num(tok[0]):
            continue  # NCCL INFO lines, banners
        if col is not None:
            t_col = col
        elif len(tok) in (12, 13):  # without / with the root column
            t_col = len(tok) - 8
        else:
            t_col = -1
        try:
            if t_col < 0 or len(tok) <= t_col:
                raise ValueError
            size, t_us = int(tok[0]), float(tok[t_col])
        except ValueError:
            raise SchedoptError(
                "expected an all_reduce_perf row (size count type redop [root] time algbw busbw"
                " #wrong ...)",
                f"{where}:{lineno}",
                line,
            ) from None
        if not 0 <= size <= MAX_BYTES or not 0 <= t_us <= MAX_SECONDS * 1e6:
            raise SchedoptError("size or time negative, not finite or too large",
                                f"{where}:{lineno}", line)
        if size == 0:
            continue  # zero-byte rows time only the launch
        sizes.append(size)
        times.append(t_us * 1e-6)
    return sizes, times, (n_rank_lines or None)


def _parse_csv(lines: list[str], where: str) -> tuple[list[int], list[float], int | None]:
    """Rows ``bytes,time_s[,ranks]`` after the header (``#`` lines are comments)."""
    sizes: list[int] = []
    times: list[float] = []
    ranks: set[int] = set()
    header = True
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tok = [t.strip() for t in line.split(",")]
        if header:
            if tok[:2] != ["bytes", "time_s"] or len(tok) > 3 or tok[2:] not in ([], ["ranks"]):
                raise SchedoptError("expected the header bytes,time_s[,ranks]",
                                    f"{where}:{lineno}", line)
            header = False
            continue
        try:
            size, t = int(tok[0]), float(tok[1])
            if len(tok) > 3 or len(tok) < 2:
                raise ValueError
            if len(tok) == 3:
                ranks.add(int(tok[2]))
        except ValueError:
            raise SchedoptError("expected a row bytes,time_s[,ranks]", f"{where}:{lineno}",
                                line) from None
        if not (0 < size <= MAX_BYTES and 0 < t <= MAX_SECONDS) or min(ranks, default=2) < 1:
            raise SchedoptError("size, time or ranks not positive, not finite or too large",
                                f"{where}:{lineno}", line)
        sizes.append(size)
        times.append(t)
    if len(ranks) > 1:
        raise SchedoptError("rows disagree on the number of ranks", where, sorted(ranks))
    return sizes, times, (ranks.pop() if ranks else None)


#: A data row ``bytes,time_s[,ranks]`` in its plain form (the rows :func:`_parse_csv_fast`
#: reads in bulk; any other form goes through :func:`_parse_csv`, which accepts or names it).
_CSV_ROW = re.compile(r"^[ \t]*(\d{1,18})[ \t]*,[ \t]*([0-9.eE+-]{1,40})[ \t]*"
                      r"(?:,[ \t]*(\d{1,9})[ \t]*)?$", re.MULTILINE)
#: A blank or comment line.
_CSV_OTHER = re.compile(r"^[ \t]*(?:#.*)?$", re.MULTILINE)
#: Line ends other than ``\n`` that :meth:`str.splitlines` also splits at.
_OTHER_LINE_ENDS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
                    "\u2029")
#: Characters of text the bulk reader handles at a time (bounds its temporary lists).
_CSV_CHUNK = 1 << 20


def _csv_body(text: str) -> str | None:
    """The text after a valid ``bytes,time_s[,ranks]`` header (comments and blank lines
    before it skipped), or None when the first data line is not such a header."""
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        line = text[pos:end]
        if line.strip() and not line.startswith("#"):
            tok = [t.strip() for t in line.strip().split(",")]
            ok = tok[:2] == ["bytes", "time_s"] and tok[2:] in ([], ["ranks"])
            return text[end + 1:] if ok else None
        pos = end + 1
    return None


def _parse_csv_fast(text: str) -> tuple[np.ndarray, np.ndarray, int | None] | None:
    """Read a measured table in bulk (linear time, one array per column, the text read a
    chunk at a time); None when any line is not in the plain form or any value is out of
    bounds, for :func:`_parse_csv` to read line by line and name the offending line."""
    if any(end in text for end in _OTHER_LINE_ENDS):
        return None
    body = _csv_body(text)
    if body is None:
        return None
    body = body.removesuffix("\n")
    sizes: list[np.ndarray] = []
    times: list[np.ndarray] = []
    ranks: set[int] = set()
    pos = 0
    try:
        while pos < len(body):
            end = body.find("\n", min(pos + _CSV_CHUNK, len(body)))
            end = len(body) if end < 0 else end
            chunk = body[pos:end]
            pos = end + 1
            rows = _CSV_ROW.findall(chunk)
            if len(rows) + len(_CSV_OTHER.findall(chunk)) != chunk.count("\n") + 1:
                return None
            if not rows:
                continue
            sizes.append(np.array([r[0] for r in rows]).astype(np.int64))
            times.append(np.array([r[1] for r in rows]).astype(np.float64))
            ranks.update(int(r) for r in {r[2] for r in rows} if r)
    except (ValueError, OverflowError):
        return None
    if not sizes:
        return None
    n = np.concatenate(sizes)
    t = np.concatenate(times)
    if not (((n > 0) & (n <= MAX_BYTES)).all() and ((t > 0) & (t <= MAX_SECONDS)).all()
            and min(ranks, default=2) >= 1 and len(ranks) <= 1):
        return None
    return n, t, (ranks.pop() if ranks else None)


def parse_comm_text(text: str, *, where: str = "<text>", fmt: str | None = None) -> CommSamples:
    """Parse benchmark output held in a string (see :func:`parse_comm_file`).

    Parameters
    ----------
    text
        The file's content.
    where
        Name used in error messages and stored as the samples' ``source``.
    fmt
        ``osu`` or ``nccl-tests``; None detects it.
    """
    fast = _parse_csv_fast(text) if fmt in (None, "csv") else None
    if fast is not None:  # a plain measured table, however long
        return CommSamples(sizes=fast[0], times=fast[1], format="csv", ranks=fast[2],
                           source=where)
    lines = text.splitlines()
    kind = fmt or _detect(lines)
    if kind == "osu":
        sizes, times, ranks = _parse_osu(lines, where)
    elif kind == "nccl-tests":
        sizes, times, ranks = _parse_nccl(lines, where)
    elif kind == "csv":
        sizes, times, ranks = _parse_csv(lines, where)
    else:
        raise SchedoptError("unknown format (known: osu, nccl-tests, csv)", "format", fmt)
    if not sizes:
        raise SchedoptError(f"no {kind} data rows found", where, f"{len(lines)} lines")
    return CommSamples(
        sizes=np.asarray(sizes, dtype=np.int64),
        times=np.asarray(times, dtype=float),
        format=kind,
        ranks=ranks,
        source=where,
    )


def parse_comm_file(path: str | Path, *, fmt: str | None = None) -> CommSamples:
    """Read all-reduce latencies from an OSU ``osu_allreduce`` or nccl-tests ``all_reduce_perf``
    output file.

    Parameters
    ----------
    path
        The file.
    fmt
        ``osu``, ``nccl-tests`` or ``csv``; None detects it.

    Returns
    -------
    CommSamples
        Sizes in bytes and times in seconds. ``ranks`` comes from the file (``N,size`` rows, the
        nccl-tests ``Rank`` lines) or else from a number ending the file name.

    Raises
    ------
    SchedoptError
        Unreadable file, or a data row that does not parse (the message names file and line).
    """
    p = Path(path)
    try:
        if not stat.S_ISREG(p.stat().st_mode):
            raise SchedoptError("cannot read: not a regular file", "file", str(p))
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "file", str(p)) from None
    samples = parse_comm_text(text, where=str(p), fmt=fmt)
    if samples.ranks is None:
        ranks = ranks_from_filename(p)
        if ranks is not None and ranks > 0:
            samples = CommSamples(samples.sizes, samples.times, samples.format, ranks, str(p))
    return samples


def pool_samples(runs: list[CommSamples]) -> CommSamples:
    """Several measurements of the same all-reduce as one: per size, the median over the runs.

    One benchmark run on a shared or busy machine can be off by tens of percent; repeating it
    (before every round of training runs, say) and pooling the runs gives a cost that is not
    one moment's. A size measured in only some of the runs keeps the median of those.

    Parameters
    ----------
    runs
        At least one; every run must state the same rank count, or none.

    Returns
    -------
    CommSamples
        Sorted sizes, their median times, the rank count of the runs, and the format (the
        runs' common one, else ``mixed``). One run is returned unchanged.

    Raises
    ------
    SchedoptError
        No runs, or runs of different rank counts (the message names every file's count).
    """
    if not runs:
        raise SchedoptError("no measurements to pool", "file", [])
    if len(runs) == 1:
        return runs[0]
    counts = {r.ranks for r in runs if r.ranks is not None}
    if len(counts) > 1:
        raise SchedoptError("the files measure different rank counts", "file",
                            ", ".join(f"{r.source}: {r.ranks}" for r in runs))
    by_size: dict[int, list[float]] = {}
    for r in runs:
        for n, t in zip(r.sizes.tolist(), r.times.tolist(), strict=True):
            by_size.setdefault(int(n), []).append(float(t))
    sizes = sorted(by_size)
    formats = {r.format for r in runs}
    return CommSamples(
        sizes=np.asarray(sizes, dtype=np.int64),
        times=np.asarray([float(np.median(by_size[n])) for n in sizes], dtype=float),
        format=formats.pop() if len(formats) == 1 else "mixed",
        ranks=counts.pop() if counts else None,
        source=f"median of {len(runs)} runs: " + ", ".join(r.source for r in runs),
    )


# ------------------------------------------------------------ bench-comm's stated lines
#: How bench-comm times its calls: each alone after a barrier, or launched back to back.
PATTERNS = ("isolated", "queued")
#: A ``# schedopt KEY VALUE`` comment line of a bench-comm file (the pattern, the slowdowns).
_STATED_LINE = re.compile(r"^#\s*schedopt\s+(\w+)\s+(\S+)")


def _stated(path: str | Path) -> dict[str, str]:
    """The ``# schedopt KEY VALUE`` lines of a bench-comm file, the first of each key (none
    when the file cannot be read)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    if "schedopt" not in text:
        return out
    for line in text.splitlines():
        m = _STATED_LINE.match(line.strip())
        if m:
            out.setdefault(m.group(1), m.group(2))
    return out


def read_pattern(path: str | Path) -> str | None:
    """The ``# schedopt pattern P`` line of a bench-comm file (None when absent or unreadable;
    files from before the line were ``queued``).

    Raises
    ------
    SchedoptError
        A pattern that is not one of :data:`PATTERNS`.
    """
    value = _stated(path).get("pattern")
    if value is not None and value not in PATTERNS:
        raise SchedoptError(f"must be one of {', '.join(PATTERNS)}", f"{path}: pattern", value)
    return value


#: Cluster fields a bench-comm file may state (``# schedopt FIELD VALUE``): their lowest and
#: highest values (a launch cost above 1 s is a unit mistake, as in the cluster).
STATED_FIELDS = {"overlap_slowdown": (1.0, 1e3), "comm_slowdown": (1.0, 1e3),
                 "launch_overhead_s": (0.0, MAX_CALL_S)}


def read_slowdowns(path: str | Path) -> dict[str, float]:
    """The ``# schedopt overlap_slowdown S``, ``# schedopt comm_slowdown S`` and ``# schedopt
    launch_overhead_s T`` lines of a bench-comm file: the cluster fields they give (none when
    absent or unreadable).

    Raises
    ------
    SchedoptError
        A value that is not a finite number within its field's range
        (:data:`STATED_FIELDS`).
    """
    out: dict[str, float] = {}
    for key, text in _stated(path).items():
        if key not in STATED_FIELDS:
            continue
        low, high = STATED_FIELDS[key]
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (math.isfinite(value) and low <= value <= high):
            raise SchedoptError(f"must be a finite number from {low:g} to {high:g}",
                                f"{path}: {key}", text)
        out[key] = value
    return out



def call_pattern(paths: list[Path]) -> str | None:
    """How bench-comm timed the calls of ``paths`` (None when no file says).

    Raises
    ------
    SchedoptError
        The files were measured with different patterns (their times do not pool).
    """
    found = {Path(p).name: read_pattern(p) for p in paths}
    stated = {v for v in found.values() if v is not None}
    if len(stated) > 1:
        raise SchedoptError("the files time their calls differently (bench-comm --pattern);"
                            " pool files of one pattern", "file",
                            ", ".join(f"{k}: {v or 'not stated'}" for k, v in found.items()))
    return stated.pop() if stated else None


def pooled_slowdowns(paths: list[Path]) -> dict[str, float]:
    """The slowdowns bench-comm recorded in ``paths``: each the median over the files that
    state it (none when no file does)."""
    found: dict[str, list[float]] = {}
    for p in paths:
        for key, value in read_slowdowns(p).items():
            found.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in found.items()}
