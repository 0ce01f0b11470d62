"""Fit the all-reduce cost ``t(n) = alpha + beta * n`` to measured latencies.

The samples come from :mod:`schedopt.measure.comm_tables` (OSU or nccl-tests output). The fit is
ordinary
least squares over the message sizes at or above ``min_bytes``; when the unconstrained solution has
a negative coefficient, that coefficient is fixed at zero and the other is refitted (an all-reduce
cost model cannot have a negative start-up time).

:func:`fit_piecewise` fits a piecewise-linear cost instead: message-size protocol switches (eager
to rendezvous, ring to another algorithm) make measured curves jump, and one line through them is
off by tens of percent near the jump (docs/model.md, "Measured cost curves").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from schedopt.errors import SchedoptError, from_validation_error
from schedopt.measure.comm_tables import OSU_MIN_BYTES, CommSamples
from schedopt.model.cluster import AllReduceFit, Cluster, CostSegment, Link

__all__ = [
    "cluster_from_fit",
    "default_min_bytes",
    "fit_alpha_beta",
    "fit_piecewise",
    "fit_times",
    "relative_errors",
    "residual_rms",
    "table_curve",
]


#: Smallest coefficient of determination a fit may have (below 0 the line explains the times
#: worse than their mean does).
MIN_R2 = 0.0


def _link(bandwidth: float, latency: float) -> Link:
    """The inter-node link derived from a fit (its figures checked like any link's)."""
    try:
        return Link(name="fitted", bandwidth_Bps=bandwidth, latency_s=latency)
    except ValidationError as exc:
        raise from_validation_error(exc, "fitted link") from None


def _cluster(data: dict[str, Any]) -> Cluster:
    try:
        return Cluster.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, "fitted cluster") from None


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


#: Why a fit whose slope is not positive cannot give a link of its own.
FLAT_FIT = ("must be positive to derive a link: the measured times do not grow with the message"
            " size; measure larger sizes or more iterations, or give a base cluster")


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
    where = samples.source or "data"
    if r2 < MIN_R2:
        raise SchedoptError(
            f"the fit t = alpha + beta*n explains the times of {where} worse than their mean"
            " (R^2 < 0): the times do not grow linearly with the size; check the file, its"
            " units, or --min-bytes", "r2", round(r2, 4))
    try:
        return AllReduceFit(
            alpha_s=float(alpha),
            beta_s_per_byte=float(beta),
            r2=r2,
            min_bytes=int(x.min()),
            max_bytes=int(x.max()),
        )
    except ValidationError as exc:
        raise from_validation_error(exc, f"fit of {where}") from None


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


def _describe_fit(fit: AllReduceFit) -> str:
    """The fit in words, for a cluster's ``source``."""
    desc = (
        f"alpha-beta fit: alpha = {fit.alpha_s * 1e6:.1f} us, beta = {fit.beta_s_per_byte:.4g} s/B"
        f" ({fit.beta_s_per_byte * 1e12:.0f} us/MB)"
    )
    if fit.r2 is not None:
        desc += f", R^2 = {fit.r2:.4f}"
    if fit.min_bytes is not None and fit.max_bytes is not None:
        desc += f", sizes {fit.min_bytes}..{fit.max_bytes} B"
    return desc


def cluster_from_fit(
    fit: AllReduceFit,
    *,
    name: str,
    ranks: int,
    base: Cluster | None = None,
    source: str = "",
    gpu: str = "",
    overlap_slowdown: float = 1.0,
    comm_slowdown: float = 1.0,
    launch_overhead_s: float = 0.0,
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
    overlap_slowdown, comm_slowdown, launch_overhead_s
        The cluster's fields of those names, measured by ``schedopt bench-comm`` (1, 1 and 0:
        none).

    Raises
    ------
    SchedoptError
        ``ranks < 2``, a base that cannot be resized to ``ranks``, or ``beta = 0`` without a base.
    """
    if ranks < 2:
        raise SchedoptError("a fitted all-reduce needs at least 2 ranks", "ranks", ranks)
    desc = _describe_fit(fit)
    text = f"{source}; {desc}" if source else desc
    measured = {"overlap_slowdown": overlap_slowdown, "comm_slowdown": comm_slowdown,
                "launch_overhead_s": launch_overhead_s}
    if base is not None:
        data = base.model_dump()
        if base.world_size != ranks:
            g = base.gpus_per_node
            if ranks % g:
                raise SchedoptError(
                    f"is not a multiple of the base cluster's {g} GPUs per node", "ranks", ranks
                )
            data["nodes"] = ranks // g
        data.update(name=name, allreduce=fit.model_dump(), source=text, **measured)
        return _cluster(data)
    if fit.beta_s_per_byte <= 0:
        raise SchedoptError(FLAT_FIT, "beta_s_per_byte", fit.beta_s_per_byte)
    p = ranks
    inter = _link(2 * (p - 1) / p / fit.beta_s_per_byte, fit.alpha_s / (2 * (p - 1)))
    text += (
        f"; inter link derived from the fit by the ring formula: latency alpha/(2(p-1)) ="
        f" {inter.latency_s * 1e6:.2f} us, bandwidth 2(p-1)/p/beta ="
        f" {inter.bandwidth_Bps / 1e9:.3f} GB/s; one GPU per node"
    )
    return _cluster({
        "name": name,
        "source": text,
        "nodes": p,
        "gpus_per_node": 1,
        "gpu": gpu,
        "intra_link": _DEFAULT_INTRA,
        "inter_link": inter,
        "collective": "ring",
        "allreduce": fit,
        **measured,
    })


# ------------------------------------------------------------------------------ piecewise
#: Default accuracy of :func:`fit_piecewise`: the fewest segments whose median relative error
#: over the fitted sizes is at most this.
PIECEWISE_TOLERANCE = 0.02
#: Default largest number of segments of :func:`fit_piecewise`.
MAX_SEGMENTS = 8
#: Fewest sizes one segment is fitted on.
MIN_SEGMENT_POINTS = 3


#: Most candidate breakpoints of :func:`fit_piecewise` (its tables grow as their square).
MAX_BREAKPOINTS = 1024


def _breakpoints(x: np.ndarray) -> np.ndarray:
    """Indices into the sorted sizes ``x`` where a segment may start or end (0 and ``n``
    included): every index when there are at most :data:`MAX_BREAKPOINTS` points; else only
    between distinct sizes, and, past :data:`MAX_BREAKPOINTS` distinct sizes, between the
    sizes at evenly spaced quantiles."""
    n = len(x)
    if n <= MAX_BREAKPOINTS:
        return np.arange(n + 1)
    cuts = np.r_[0, np.flatnonzero(np.diff(x) > 0) + 1, n]
    if len(cuts) > MAX_BREAKPOINTS + 1:
        pick = np.unique(np.linspace(0, len(cuts) - 1, MAX_BREAKPOINTS + 1).round()
                         .astype(np.int64))
        cuts = cuts[pick]
    return cuts


def _segment_table(x: np.ndarray, y: np.ndarray, min_points: int,
                   bounds: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares (weights ``1/y^2``: relative error) of a line over every run
    ``x[bounds[g]:bounds[h]]`` of at least ``min_points`` sizes: squared-error sums and
    coefficients, each of shape ``(m, m + 1)`` for ``m + 1`` bounds (every index by default;
    infinite cost where a run is too short)."""
    bounds = np.arange(len(x) + 1) if bounds is None else bounds
    w = 1.0 / (y * y)
    sums = [np.r_[0.0, np.cumsum(v)][bounds]
            for v in (w, w * x, w * x * x, w * y, w * x * y, w * y * y)]
    m = len(bounds) - 1
    i, j = np.meshgrid(np.arange(m), np.arange(m + 1), indexing="ij")
    sw, sx, sxx, sy, sxy, syy = (s[j] - s[i] for s in sums)
    ok = (j > i) & (bounds[j] - bounds[i] >= min_points)
    with np.errstate(divide="ignore", invalid="ignore"):
        det = sw * sxx - sx * sx
        b = np.where(det > 1e-12 * sw * sxx, (sw * sxy - sx * sy) / det, 0.0)
        b = np.where(np.isfinite(b) & (b > 0), b, 0.0)  # a cost does not fall with size
        a = np.where(ok, (sy - b * sx) / np.where(ok, sw, 1.0), 0.0)
    rss = syy - 2 * a * sy - 2 * b * sxy + a * a * sw + 2 * a * b * sx + b * b * sxx
    cost = np.where(ok, np.maximum(rss, 0.0), np.inf)
    return cost, a, b


def _best_segmentations(cost: np.ndarray, k_max: int) -> list[list[tuple[int, int]]]:
    """For ``k = 1..k_max``: the runs ``[(i, j), ...]`` of ``k`` segments of least total cost
    (segmented least squares by dynamic programming); an empty list where none exists."""
    n = cost.shape[0]
    best = np.full((k_max + 1, n + 1), np.inf)
    arg = np.zeros((k_max + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for k in range(1, k_max + 1):
        total = best[k - 1, :n, None] + cost  # (i, j): first k-1 segments end at i
        arg[k] = np.argmin(total, axis=0)
        best[k] = total[arg[k], np.arange(n + 1)]
    out: list[list[tuple[int, int]]] = []
    for k in range(1, k_max + 1):
        if not np.isfinite(best[k, n]):
            out.append([])
            continue
        runs, j = [], n
        for kk in range(k, 0, -1):
            i = int(arg[kk, j])
            runs.append((i, j))
            j = i
        out.append(runs[::-1])
    return out


def _segments_of(runs: list[tuple[int, int, float, float]], x: np.ndarray
                 ) -> tuple[CostSegment, ...]:
    """Cost segments of ``runs`` (``x[i:j]`` and the line ``alpha + beta n`` fitted on it):
    each starts half-way between its first size and the last size of the run before (the
    first at 0)."""
    segs = []
    for r, (i, _, alpha, beta) in enumerate(runs):
        start = 0 if r == 0 else int((x[i - 1] + x[i]) // 2) + 1
        alpha = max(alpha, -beta * start)  # never a negative cost inside the segment
        segs.append(CostSegment(min_bytes=start, alpha_s=alpha, beta_s_per_byte=beta))
    return tuple(segs)


def fit_piecewise(samples: CommSamples, min_bytes: int | None = None, *,
                  segments: int | None = None, tolerance: float = PIECEWISE_TOLERANCE,
                  max_segments: int = MAX_SEGMENTS) -> AllReduceFit:
    """Fit a piecewise-linear all-reduce cost; its breakpoints are the protocol switches.

    Each segment is a line fitted by least squares on relative error; the breakpoints are
    chosen jointly by dynamic programming (segmented least squares). With ``segments`` None,
    the number of segments is the smallest whose median relative error over the fitted sizes
    is at most ``tolerance`` (at most ``max_segments``, each fitted on at least
    :data:`MIN_SEGMENT_POINTS` sizes). Past :data:`MAX_BREAKPOINTS` samples, segments break
    only between distinct sizes (at most :data:`MAX_BREAKPOINTS` of them, evenly spaced), so
    that time and memory stay linear in the samples.

    Parameters
    ----------
    samples
        Measured sizes and times.
    min_bytes
        Smallest size fitted (default 0: every size; the first segment extends down to 0).
    segments
        Exact number of segments (None: chosen by ``tolerance``).
    tolerance, max_segments
        The automatic choice.

    Returns
    -------
    AllReduceFit
        ``segments`` set; ``alpha_s`` and ``beta_s_per_byte`` are the single line of
        :func:`fit_alpha_beta` (for consumers of one line); ``r2`` is the piecewise cost's.

    Raises
    ------
    SchedoptError
        Too few sizes, or a bad ``segments``, ``tolerance`` or ``max_segments``.
    """
    lo = 0 if min_bytes is None else int(min_bytes)
    if segments is not None and segments < 1:
        raise SchedoptError("must be a positive integer", "segments", segments)
    if not (tolerance > 0 and np.isfinite(tolerance)):
        raise SchedoptError("must be a positive number", "tolerance", tolerance)
    if max_segments < 1:
        raise SchedoptError("must be a positive integer", "max_segments", max_segments)
    line = fit_alpha_beta(samples, min_bytes)
    keep = samples.sizes >= lo
    order = np.argsort(samples.sizes[keep], kind="stable")
    x = samples.sizes[keep][order].astype(float)
    y = samples.times[keep][order]
    if (y <= 0).any():
        raise SchedoptError("a measured time is zero; relative errors are undefined",
                            "times", samples.source)
    k_max = segments or max_segments
    bounds = _breakpoints(x)
    cost, a, b = _segment_table(x, y, min(MIN_SEGMENT_POINTS, len(x)), bounds)
    table = _best_segmentations(cost, k_max)
    candidates = [(k + 1, [(int(bounds[g]), int(bounds[h]), float(a[g, h]), float(b[g, h]))
                           for g, h in runs]) for k, runs in enumerate(table) if runs]
    if segments is not None:
        candidates = [c for c in candidates if c[0] == segments] or candidates[-1:]
    chosen = candidates[-1][1]
    for _, runs in candidates:
        rel = np.abs(_predict(_segments_of(runs, x), x) - y) / y
        if segments is not None or float(np.median(rel)) <= tolerance:
            chosen = runs
            break
    segs = _segments_of(chosen, x)
    pred = _predict(segs, x)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
    return AllReduceFit(alpha_s=line.alpha_s, beta_s_per_byte=line.beta_s_per_byte, r2=r2,
                        min_bytes=int(x.min()), max_bytes=int(x.max()), segments=segs)


def _predict(segs: tuple[CostSegment, ...], x: np.ndarray) -> np.ndarray:
    starts = np.array([s.min_bytes for s in segs], dtype=float)
    k = np.clip(np.searchsorted(starts, x, side="right") - 1, 0, len(segs) - 1)
    alpha = np.array([s.alpha_s for s in segs])
    beta = np.array([s.beta_s_per_byte for s in segs])
    return alpha[k] + beta[k] * x


def fit_times(fit: AllReduceFit, sizes: np.ndarray) -> np.ndarray:
    """Cost of ``fit`` (its segments when it has them, else its line) at ``sizes`` bytes."""
    x = np.asarray(sizes, dtype=float)
    if fit.segments:
        return _predict(fit.segments, x)
    return fit.alpha_s + fit.beta_s_per_byte * x


def relative_errors(samples: CommSamples, fit: AllReduceFit) -> np.ndarray:
    """``|predicted - measured| / measured`` of ``fit`` over the sizes it was fitted on."""
    lo = fit.min_bytes or 0
    hi = fit.max_bytes if fit.max_bytes is not None else int(samples.sizes.max())
    keep = (samples.sizes >= lo) & (samples.sizes <= hi)
    y = samples.times[keep]
    return np.abs(fit_times(fit, samples.sizes[keep]) - y) / y


def fit_comm_cli(samples: CommSamples, min_bytes: int | None, segments: str,
                 tolerance: float) -> AllReduceFit:
    """The fit of ``schedopt fit-comm``: ``segments`` is ``auto``, ``table`` (the measured
    table itself, :func:`table_curve`) or a number (``1``: the
    single line of :func:`fit_alpha_beta`; ``auto`` keeps one line when one segment suffices or
    when the curve, fitted on relative error, explains the times worse than their mean, the
    floor :data:`MIN_R2` that every fit written must pass).
    """
    text = segments.strip().lower()
    if text == "table":
        return table_curve(samples, min_bytes)
    if text == "auto":
        count = None
    else:
        try:
            count = int(text)
        except ValueError:
            raise SchedoptError("must be auto, table or a positive integer", "--segments",
                                segments) from None
        if count < 1:
            raise SchedoptError("must be auto, table or a positive integer", "--segments",
                                segments)
    if count == 1:
        return fit_alpha_beta(samples, min_bytes)
    if not (tolerance > 0 and np.isfinite(tolerance)):
        raise SchedoptError("must be a positive number", "--tolerance", tolerance)
    fit = fit_piecewise(samples, min_bytes, segments=count, tolerance=tolerance)
    worse_than_mean = fit.r2 is not None and fit.r2 < MIN_R2
    if count is None and (worse_than_mean or (fit.segments is not None
                                              and len(fit.segments) == 1)):
        # auto: one line when it suffices, or when the curve (fitted on relative error)
        # explains the times worse than their mean
        return fit_alpha_beta(samples, min_bytes)
    if worse_than_mean:
        raise SchedoptError(
            f"the {count}-segment curve explains the times of {samples.source or 'data'} worse"
            " than their mean (R^2 below the floor): try --segments auto or 1", "r2",
            round(float(fit.r2 or 0.0), 4))
    return fit


def piecewise_summary(samples: CommSamples, fit: AllReduceFit) -> dict[str, Any]:
    """``segments`` (list of dicts), ``switches_bytes`` and ``median_rel_error`` of a fit."""
    segs = [s.model_dump() for s in fit.segments or ()]
    return {
        "segments": segs,
        "switches_bytes": [s["min_bytes"] for s in segs[1:]],
        "median_rel_error": float(np.median(relative_errors(samples, fit))),
    }


def table_curve(samples: CommSamples, min_bytes: int | None = None) -> AllReduceFit:
    """The measured table itself as the cost curve: linear interpolation between the sizes.

    Per size the median time is taken, made non-decreasing in the size (a larger message never
    costs less: a measured dip is flattened), and every interval between two consecutive sizes
    becomes one :class:`~schedopt.model.cluster.CostSegment` through its two end points; the
    first segment extends the first interval's line down to 0 bytes (or, where that line would
    go negative, a line through the origin up to the first size), the last extends beyond the
    largest size.

    Parameters
    ----------
    samples
        Measured sizes and times.
    min_bytes
        Smallest size used (default 0: every size).

    Returns
    -------
    AllReduceFit
        ``segments`` hold the interpolation; ``alpha_s`` and ``beta_s_per_byte`` are the least
        squares line over the sizes (for consumers of one line); ``r2`` is None.

    Raises
    ------
    SchedoptError
        Fewer than two distinct sizes at or above ``min_bytes``.
    """
    lo = 0 if min_bytes is None else int(min_bytes)
    keep = samples.sizes >= lo
    sizes = np.unique(samples.sizes[keep])
    if sizes.size < 2:
        raise SchedoptError(
            f"fewer than two distinct message sizes at or above it in {samples.source or 'data'}",
            "min_bytes", lo)
    order = np.lexsort((samples.times[keep], samples.sizes[keep]))
    by_size, by_time = samples.sizes[keep][order], samples.times[keep][order]
    first = np.searchsorted(by_size, sizes, side="left")
    count = np.searchsorted(by_size, sizes, side="right") - first
    times = (by_time[first + (count - 1) // 2] + by_time[first + count // 2]) / 2  # medians
    times = np.maximum.accumulate(times)
    x = sizes.astype(float)
    segs: list[CostSegment] = []
    for i in range(sizes.size - 1):
        beta = (times[i + 1] - times[i]) / (x[i + 1] - x[i])
        alpha = float(times[i] - beta * x[i])
        start = int(sizes[i]) if i else 0
        if i == 0 and alpha < 0:
            segs.append(CostSegment(min_bytes=0, alpha_s=0.0,
                                    beta_s_per_byte=float(times[0] / x[0])))
            start = int(sizes[0])
        segs.append(CostSegment(min_bytes=start, alpha_s=alpha, beta_s_per_byte=float(beta)))
    slope, icept = np.polyfit(x, times, 1)
    if not slope * x[-1] > 1e-3 * times[-1]:  # flat: the line through 0 and the largest size
        slope, icept = float(times[-1] / x[-1]), 0.0
    return AllReduceFit(alpha_s=max(float(icept), 0.0), beta_s_per_byte=float(slope), r2=None,
                        min_bytes=int(sizes[0]), max_bytes=int(sizes[-1]), segments=tuple(segs))


def cluster_from_points(points: list[tuple[int, float]], ranks: int | None, name: str, source: str,
                        concurrency: int = 1) -> Any:
    """A cluster whose all-reduce is the line through measured collectives ``(bytes, s)``
    (``import kineto --out-cluster``); one size, or times no line fits, give the mean seconds
    per byte. ``concurrency`` is its ``comm_concurrency`` (the process group's calls in flight).

    Raises
    ------
    SchedoptError
        Fewer than 2 ranks.
    """

    if ranks is None or ranks < 2:
        raise SchedoptError("the traces do not state a process group of 2 or more ranks",
                            "ranks", ranks)
    sizes = np.array([p[0] for p in points], dtype=np.int64)
    times = np.array([p[1] for p in points], dtype=float)
    samples = CommSamples(sizes, times, "kineto", ranks, source)
    where = f"measured collectives of {source}"
    try:
        cluster = cluster_from_fit(fit_alpha_beta(samples, 0), name=name, ranks=ranks,
                                   source=where)
    except SchedoptError:  # one bucket size, or times no line fits: the mean seconds per byte
        fit = AllReduceFit.model_validate({
            "alpha_s": 0.0, "beta_s_per_byte": float(times.sum() / sizes.sum()),
            "min_bytes": int(sizes.min()), "max_bytes": int(sizes.max())})
        cluster = cluster_from_fit(fit, name=name, ranks=ranks, source=where)
    if concurrency == 1:
        return cluster
    return cluster.model_copy(update={"comm_concurrency": concurrency})


def cluster_from_files(fit: AllReduceFit, samples: CommSamples, paths: list[Path], *,
                       names: str, name: str, ranks: int | None) -> Cluster:
    """The cluster ``fit-comm --out`` writes: the fit of ``samples`` (pooled from ``paths``),
    with the slowdowns and the launch cost bench-comm stated in the files (each the median
    over the files that state it) and how it timed its calls.

    Raises
    ------
    SchedoptError
        No rank count, or files that time their calls differently.
    """
    from schedopt.measure.comm_tables import call_pattern, pooled_slowdowns

    if ranks is None:
        raise SchedoptError("the rank count is not in the file or its name: pass --ranks",
                            "ranks", None)
    slow = pooled_slowdowns(paths)
    pooled = f"the median of {len(paths)} runs: " if len(paths) > 1 else ""
    calls = call_pattern(paths)
    return cluster_from_fit(
        fit, name=name, ranks=ranks,
        source=f"fitted by `schedopt fit-comm` to {pooled}{names} ({samples.format}"
               f"{f'; bench-comm calls {calls}' if calls else ''})",
        overlap_slowdown=slow.get("overlap_slowdown", 1.0),
        comm_slowdown=slow.get("comm_slowdown", 1.0),
        launch_overhead_s=slow.get("launch_overhead_s", 0.0),
    )
