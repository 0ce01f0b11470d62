"""Fit the all-reduce cost ``t(n) = alpha + beta * n`` to measured latencies.

Two input formats are read, and told apart automatically:

``osu``
    Output of the OSU micro-benchmark ``osu_allreduce``: ``#`` header lines, then rows
    ``size  avg_latency_us [...]``. The variant written by the B-Caffe scripts prefixes every row
    with the number of processes (``8,1048576  4678.91``).
``nccl-tests``
    Output of ``all_reduce_perf`` from NVIDIA's nccl-tests: rows ``size count type redop [root]
    time algbw busbw #wrong time algbw busbw #wrong``; the out-of-place time (µs) is used. The
    number of ranks is the number of ``Rank  i ... device`` lines.

The fit is ordinary least squares over the message sizes at or above ``min_bytes``; when the
unconstrained solution has a negative coefficient, that coefficient is fixed at zero and the other
is refitted (an all-reduce cost model cannot have a negative start-up time).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cluster import AllReduceFit, Cluster, Link
from .errors import SchedoptError

__all__ = [
    "OSU_MIN_BYTES",
    "CommSamples",
    "cluster_from_fit",
    "default_min_bytes",
    "fit_alpha_beta",
    "parse_comm_file",
    "parse_comm_text",
    "ranks_from_filename",
    "residual_rms",
]

#: Default smallest message size of a fit to OSU data: below it, latency is dominated by
#: per-message overheads that the linear model does not describe (the B-Caffe README fits from
#: 64 KB as well).
OSU_MIN_BYTES = 65536

_NUM = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_RANK_LINE = re.compile(r"^#?\s*Rank\s+\d+\b.*\bdevice\b")
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
    """``nccl-tests`` or ``osu`` (headers first, then the shape of the data rows)."""
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
                ranks.add(n_ranks)
            else:
                size, latency = int(tok[0]), float(tok[1])
        except (ValueError, IndexError):
            raise SchedoptError(
                "expected `size latency_us` or `ranks,size latency_us`", f"{where}:{lineno}", line
            ) from None
        if size < 0 or not math.isfinite(latency) or latency < 0:
            raise SchedoptError("negative or non-finite value", f"{where}:{lineno}", line)
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
        if size < 0 or not math.isfinite(t_us) or t_us < 0:
            raise SchedoptError("negative or non-finite value", f"{where}:{lineno}", line)
        if size == 0:
            continue  # zero-byte rows time only the launch
        sizes.append(size)
        times.append(t_us * 1e-6)
    return sizes, times, (n_rank_lines or None)


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
    lines = text.splitlines()
    kind = fmt or _detect(lines)
    if kind == "osu":
        sizes, times, ranks = _parse_osu(lines, where)
    elif kind == "nccl-tests":
        sizes, times, ranks = _parse_nccl(lines, where)
    else:
        raise SchedoptError("unknown format (known: osu, nccl-tests)", "format", fmt)
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
        ``osu`` or ``nccl-tests``; None detects it.

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
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "file", str(p)) from None
    samples = parse_comm_text(text, where=str(p), fmt=fmt)
    if samples.ranks is None:
        ranks = ranks_from_filename(p)
        if ranks is not None and ranks > 0:
            samples = CommSamples(samples.sizes, samples.times, samples.format, ranks, str(p))
    return samples


# ---------------------------------------------------------------------------------------- fitting
def default_min_bytes(samples: CommSamples) -> int:
    """The default lower size bound of a fit.

    :data:`OSU_MIN_BYTES` for OSU data that has small messages below it and at least two sizes at
    or above it; otherwise 0 (every size).
    """
    if samples.format == "osu":
        above = np.unique(samples.sizes[samples.sizes >= OSU_MIN_BYTES])
        if above.size >= 2 and bool((samples.sizes < OSU_MIN_BYTES).any()):
            return OSU_MIN_BYTES
    return 0


def fit_alpha_beta(samples: CommSamples, min_bytes: int | None = None) -> AllReduceFit:
    """Least-squares fit of ``t = alpha + beta * n`` over the sizes ``n >= min_bytes``.

    Parameters
    ----------
    samples
        Measured sizes (bytes) and times (seconds).
    min_bytes
        Smallest size used; None applies :func:`default_min_bytes`.

    Returns
    -------
    AllReduceFit
        ``alpha_s``, ``beta_s_per_byte``, the coefficient of determination ``r2`` over the sizes
        used, and the smallest and largest size used.

    Raises
    ------
    SchedoptError
        Fewer than two distinct sizes at or above ``min_bytes``.
    """
    lo = default_min_bytes(samples) if min_bytes is None else int(min_bytes)
    if lo < 0:
        raise SchedoptError("must be non-negative", "min_bytes", min_bytes)
    keep = samples.sizes >= lo
    x = samples.sizes[keep].astype(float)
    y = samples.times[keep]
    if np.unique(x).size < 2:
        raise SchedoptError(
            f"fewer than two distinct message sizes at or above it in {samples.source or 'data'}",
            "min_bytes",
            lo,
        )
    design = np.column_stack([np.ones_like(x), x])
    (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
    if beta < 0:
        alpha, beta = float(y.mean()), 0.0
    elif alpha < 0:
        alpha, beta = 0.0, float(x @ y / (x @ x))
    pred = alpha + beta * x
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return AllReduceFit(
        alpha_s=float(alpha),
        beta_s_per_byte=float(beta),
        r2=r2,
        min_bytes=int(x.min()),
        max_bytes=int(x.max()),
    )


def residual_rms(samples: CommSamples, fit: AllReduceFit) -> float:
    """Root-mean-square residual (seconds) of ``fit`` over the sizes it was fitted on."""
    lo = fit.min_bytes or 0
    hi = fit.max_bytes if fit.max_bytes is not None else int(samples.sizes.max())
    keep = (samples.sizes >= lo) & (samples.sizes <= hi)
    pred = fit.alpha_s + fit.beta_s_per_byte * samples.sizes[keep]
    return float(np.sqrt(np.mean((samples.times[keep] - pred) ** 2)))


# ---------------------------------------------------------------------------------------- cluster
#: Intra-node link of the default one-GPU-per-node cluster (unused by its communication; the
#: PCIe Gen3 x16 figure of reference/FACTS.md).
_DEFAULT_INTRA = Link(name="pcie3", bandwidth_Bps=10e9, latency_s=5e-6)


def cluster_from_fit(
    fit: AllReduceFit,
    *,
    name: str,
    ranks: int,
    base: Cluster | None = None,
    source: str = "",
    gpu: str = "",
) -> Cluster:
    """A cluster whose all-reduce costs ``fit`` (its ``allreduce`` field).

    Parameters
    ----------
    fit
        The fitted cost, valid for ``ranks`` ranks.
    name
        Cluster name.
    ranks
        Number of ranks the fit was measured with (at least 2).
    base
        Cluster to copy (links, collective, GPU); it is resized to ``ranks`` ranks when it has
        another size and ``ranks`` is a multiple of its GPUs per node. None builds one GPU per node
        and ``ranks`` nodes, with an inter-node link derived from the fit by inverting the ring
        formula ``alpha = 2(p-1) * latency`` and ``beta = 2(p-1)/p / bandwidth`` (so resizing the
        cluster, which drops the fit, keeps a consistent link model).
    source
        Text stored in the cluster's ``source`` (a description of the fit is appended).
    gpu
        GPU model (informational), used when ``base`` is None.

    Raises
    ------
    SchedoptError
        ``ranks < 2``, a base that cannot be resized to ``ranks``, or ``beta = 0`` without a base.
    """
    if ranks < 2:
        raise SchedoptError("a fitted all-reduce needs at least 2 ranks", "ranks", ranks)
    desc = (
        f"alpha-beta fit: alpha = {fit.alpha_s * 1e6:.1f} us, beta = {fit.beta_s_per_byte:.4g} s/B"
        f" ({fit.beta_s_per_byte * 1e12:.0f} us/MB)"
    )
    if fit.r2 is not None:
        desc += f", R^2 = {fit.r2:.4f}"
    if fit.min_bytes is not None and fit.max_bytes is not None:
        desc += f", sizes {fit.min_bytes}..{fit.max_bytes} B"
    text = f"{source}; {desc}" if source else desc
    if base is not None:
        data = base.model_dump()
        if base.world_size != ranks:
            g = base.gpus_per_node
            if ranks % g:
                raise SchedoptError(
                    f"is not a multiple of the base cluster's {g} GPUs per node", "ranks", ranks
                )
            data["nodes"] = ranks // g
        data.update(name=name, allreduce=fit.model_dump(), source=text)
        return Cluster.model_validate(data)
    if fit.beta_s_per_byte <= 0:
        raise SchedoptError("must be positive to derive a link (give a base cluster)",
                            "beta_s_per_byte", fit.beta_s_per_byte)
    p = ranks
    inter = Link(
        name="fitted",
        bandwidth_Bps=2 * (p - 1) / p / fit.beta_s_per_byte,
        latency_s=fit.alpha_s / (2 * (p - 1)),
    )
    text += (
        f"; inter link derived from the fit by the ring formula: latency alpha/(2(p-1)) ="
        f" {inter.latency_s * 1e6:.2f} us, bandwidth 2(p-1)/p/beta ="
        f" {inter.bandwidth_Bps / 1e9:.3f} GB/s; one GPU per node"
    )
    return Cluster.model_validate({
        "name": name,
        "source": text,
        "nodes": p,
        "gpus_per_node": 1,
        "gpu": gpu,
        "intra_link": _DEFAULT_INTRA,
        "inter_link": inter,
        "collective": "ring",
        "allreduce": fit,
    })
