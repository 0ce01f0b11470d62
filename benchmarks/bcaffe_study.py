"""Accuracy of the communication model against the measured B-Caffe logs.

The B-Caffe logs (GoogleNet on Tesla K80 over 10GbE, 2, 4 and 8 nodes; see
``reference/mgwfbp-traces/README.md`` of the shared data) hold the measured all-reduce time of
every gradient blob, layer-wise (column 4) and, in the five-column files, after merging
(column 5). This module compares them with the alpha-beta costs of the shipped clusters, and
propagates both through the wait-free backpropagation schedule to an exposed-communication
figure. ``benchmarks/validate_bcaffe.py`` prints the figures and docs/validation.md discusses
them.

Grouping convention. A zero in a time column marks a blob sent together with another one. A
zero row belongs to the nearest non-zero row *before* it (smaller blob index), whose time covers
the whole group: the bias of a layer (index ``2k+1``) is then sent with its weight (index
``2k``) in the layer-wise column, a merged group is ready when its smallest-index blob is (the
backward runs from the last blob to the first; MG-WFBP merges layer ``l`` into ``l-1``), and
group boundaries fall between layers (one exception, blob 37, in both columns). The opposite
reading (``carrier="last"``) would cut most layers in two; it is kept for sensitivity checks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from schedopt.errors import SchedoptError
from schedopt.files import load_cluster
from schedopt.measure.bcaffe import BCaffeLog, load_bcaffe_log, read_bcaffe_log
from schedopt.measure.comm_tables import CommSamples, parse_comm_file
from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace
from schedopt.policies.common import new_plan
from schedopt.simulate.simulator import chain_ends, simulate

__all__ = [
    "BCAFFE_LOGS",
    "LARGE_BYTES",
    "SIZE_CLASSES",
    "Comparison",
    "ErrorStats",
    "Replay",
    "Scalar",
    "ValidationReport",
    "comm_groups",
    "error_stats",
    "group_buckets",
    "group_samples",
    "osu_curve_times",
    "predicted_times",
    "reference_clusters",
    "relative_fit",
    "validate_bcaffe",
    "wfbp_replay",
]

Carrier = Literal["first", "last"]

#: The B-Caffe logs with a stated node count (``tmpcomm.log`` states none and is left out).
BCAFFE_LOGS: dict[str, int] = {
    "tmp2comm.log": 2,
    "tmp4comm.log": 4,
    "tmp4ocomm.log": 4,
    "tmp8comm.log": 8,
    "tmp8ocomm.log": 8,
}

#: Size classes (bytes, ``lo <= n < hi``; KB = 1024 B, MB = 2**20 B) of the per-class errors.
#: The OSU curves end at 1 MB, so the last class is beyond their range.
SIZE_CLASSES: tuple[tuple[str, int, float], ...] = (
    ("< 4 KB", 0, 4096),
    ("4-64 KB", 4096, 65536),
    ("64 KB-1 MB", 65536, 2**20 + 1),
    ("> 1 MB", 2**20 + 1, float("inf")),
)

#: Messages below this size (bytes) are reported separately: their time is dominated by
#: per-message latency and its noise (the OSU fits start at this size too).
LARGE_BYTES = 65536


# ------------------------------------------------------------------------------------- errors
@dataclass(frozen=True)
class ErrorStats:
    """Errors of predicted against measured times.

    Attributes
    ----------
    n
        Number of messages compared.
    mape
        Mean of ``|predicted - measured| / measured`` (a fraction: 0.25 is 25%).
    median_ape
        Median of the same.
    median_pe
        Median of the signed ``(predicted - measured) / measured`` (negative: the model is
        optimistic).
    total_error
        Signed relative error of the sums, ``(Σ predicted - Σ measured) / Σ measured``.
    predicted_s, measured_s
        The two sums (seconds).
    """

    n: int
    mape: float
    median_ape: float
    median_pe: float
    total_error: float
    predicted_s: float
    measured_s: float

    def describe(self) -> str:
        """One line: ``MAPE 31.9%, median 26.1% (signed -25.0%), total -33.4% (n = 128)``."""
        return (
            f"MAPE {100 * self.mape:.1f}%, median {100 * self.median_ape:.1f}%"
            f" (signed {100 * self.median_pe:+.1f}%), total {100 * self.total_error:+.1f}%"
            f" (n = {self.n})"
        )


def error_stats(predicted: ArrayLike, measured: ArrayLike) -> ErrorStats:
    """Absolute percentage errors of ``predicted`` against ``measured``.

    Parameters
    ----------
    predicted, measured
        Aligned times (any unit); every measured time must be positive.

    Returns
    -------
    ErrorStats

    Raises
    ------
    SchedoptError
        Empty or misaligned inputs, or a measured time that is not positive.
    """
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    if p.shape != m.shape or p.ndim != 1 or m.size == 0:
        raise SchedoptError("need two aligned, non-empty 1-d arrays", "predicted", p.shape)
    if not bool((m > 0).all()):
        raise SchedoptError("must all be positive", "measured", float(m.min()))
    ape = np.abs(p - m) / m
    return ErrorStats(
        n=int(m.size),
        mape=float(ape.mean()),
        median_ape=float(np.median(ape)),
        median_pe=float(np.median((p - m) / m)),
        total_error=float((p.sum() - m.sum()) / m.sum()),
        predicted_s=float(p.sum()),
        measured_s=float(m.sum()),
    )


# ------------------------------------------------------------------------------------- groups
def comm_groups(times: ArrayLike, *, carrier: Carrier = "first") -> list[slice]:
    """Blob ranges sent together, read from a time column whose zeros mark merged blobs.

    Parameters
    ----------
    times
        Per-blob times in blob (forward) order; zero for a blob sent with another one.
    carrier
        ``first``: a zero row belongs to the nearest non-zero row before it, which carries the
        group's time (the convention of the B-Caffe logs, see the module docstring); ``last``:
        to the nearest non-zero row after it. Zero rows with no carrier on that side (leading
        ones for ``first``, trailing ones for ``last``) join the nearest group.

    Returns
    -------
    list of slice
        Contiguous blob ranges in blob order covering every blob. The carrier of a group is its
        first non-zero row (``first``) or its last (``last``).

    Raises
    ------
    SchedoptError
        No non-zero time, or an unknown ``carrier``.
    """
    t = np.asarray(times, dtype=float)
    nz = np.flatnonzero(t > 0)
    if nz.size == 0:
        raise SchedoptError("no blob has a non-zero time", "times", t.size)
    if carrier == "first":
        starts = [0, *nz[1:].tolist()]
        stops = [*nz[1:].tolist(), t.size]
    elif carrier == "last":
        starts = [0, *(nz[:-1] + 1).tolist()]
        stops = [*(nz[:-1] + 1).tolist(), t.size]
    else:
        raise SchedoptError("must be 'first' or 'last'", "carrier", carrier)
    return [slice(int(a), int(b)) for a, b in zip(starts, stops, strict=True)]


def _carrier(times: np.ndarray, group: slice, carrier: Carrier) -> int:
    """Index of the non-zero row that carries ``group``'s time."""
    nz = np.flatnonzero(times[group] > 0)
    return group.start + int(nz[0] if carrier == "first" else nz[-1])


def group_samples(
    log: BCaffeLog, *, merged: bool = False, carrier: Carrier = "first"
) -> tuple[list[slice], CommSamples]:
    """The messages of one column of a B-Caffe log: groups, their bytes and measured times.

    Parameters
    ----------
    log
        A parsed log (:func:`schedopt.measure.bcaffe.read_bcaffe_log`).
    merged
        Use column 5 (after merging) instead of column 4 (layer-wise).
    carrier
        Grouping convention, see :func:`comm_groups`.

    Returns
    -------
    groups : list of slice
        Blob ranges, in blob order.
    samples : CommSamples
        ``sizes`` = the summed bytes of every group, ``times`` = its carrier's time (seconds).
    """
    col = log.comm_us
    if merged:
        if log.merged_us is None:
            raise SchedoptError("the log has no merged-time column", "file", str(log.path))
        col = log.merged_us
    groups = comm_groups(col, carrier=carrier)
    nbytes = log.bytes
    pick = [_carrier(col, g, carrier) for g in groups]
    samples = CommSamples(
        sizes=np.array([int(nbytes[g].sum()) for g in groups], dtype=np.int64),
        times=col[pick] * 1e-6,
        format="bcaffe-merged-groups" if merged else "bcaffe-layerwise-groups",
        ranks=log.nodes,
        source=str(log.path),
    )
    return groups, samples


def relative_fit(sizes: ArrayLike, times: ArrayLike) -> tuple[float, float]:
    """Fit ``t = alpha + beta * n`` minimising the squared *relative* errors.

    Weighted least squares with weights ``1 / t``: unlike
    :func:`schedopt.measure.commfit.fit_alpha_beta`
    (absolute errors, dominated by the largest messages), it treats every message alike, which
    is what the percentage errors of this module measure. A negative coefficient is fixed at
    zero and the other refitted.

    Parameters
    ----------
    sizes, times
        Message sizes (bytes) and measured times (seconds, positive); two distinct sizes or more.

    Returns
    -------
    tuple of float
        ``(alpha_s, beta_s_per_byte)``.
    """
    x = np.asarray(sizes, dtype=float)
    y = np.asarray(times, dtype=float)
    if np.unique(x).size < 2 or not bool((y > 0).all()):
        raise SchedoptError("needs two distinct sizes and positive times", "sizes", x.size)
    w = 1.0 / y
    (alpha, beta), *_ = np.linalg.lstsq(np.column_stack([w, x * w]), np.ones_like(y), rcond=None)
    if beta < 0:  # t = alpha: minimise sum (alpha/y - 1)^2
        alpha, beta = float((w @ np.ones_like(y)) / (w @ w)), 0.0
    elif alpha < 0:  # t = beta n
        xw = x * w
        alpha, beta = 0.0, float(xw.sum() / (xw @ xw))
    return float(alpha), float(beta)


def osu_curve_times(curve: CommSamples, sizes: ArrayLike) -> np.ndarray:
    """Times read off a measured latency curve by linear interpolation (seconds).

    Parameters
    ----------
    curve
        Measured sizes and times (an OSU ``osu_allreduce`` file, :func:`parse_comm_file`).
    sizes
        Message sizes (bytes).

    Returns
    -------
    numpy.ndarray
        Interpolated times; NaN outside the measured range.
    """
    order = np.argsort(curve.sizes, kind="stable")
    xs, ys = curve.sizes[order].astype(float), curve.times[order]
    x = np.asarray(sizes, dtype=float)
    out = np.interp(x, xs, ys)
    out[(x < xs[0]) | (x > xs[-1])] = np.nan
    return out


def predicted_times(cluster: Cluster, sizes: ArrayLike) -> np.ndarray:
    """Modelled time (seconds) of one all-reduce of each size on ``cluster``."""
    return np.array([cluster.allreduce_time(float(n)) for n in np.asarray(sizes, dtype=float)],
                    dtype=float)


def reference_clusters(nodes: int) -> dict[str, Cluster]:
    """The shipped cost models of the B-Caffe cluster at ``nodes`` nodes (one K80 each).

    Returns
    -------
    dict
        ``osu``: ``bcaffe-osu-{nodes}n`` (least squares on the OSU curve of the same size), when
        shipped; ``mgwfbp``: ``10gbe-k80-family`` at ``nodes``, when it has a fit there (the
        MG-WFBP fits of Shi et al.); ``link``: ``k80-4x4-10gbe`` resized to ``nodes`` × 1, whose
        all-reduce is then a ring over 10GbE links (1.1 GB/s, 35 µs per step).
    """
    out: dict[str, Cluster] = {}
    with contextlib.suppress(SchedoptError):  # OSU fits are shipped for 2, 4 and 8 nodes
        out["osu"] = load_cluster(f"bcaffe-osu-{nodes}n")
    family = load_cluster("10gbe-k80-family", nodes=nodes)
    if family.allreduce is not None:
        out["mgwfbp"] = family
    out["link"] = load_cluster("k80-4x4-10gbe").with_size(nodes, 1)
    return out


# ------------------------------------------------------------------------------- WFBP replay
@dataclass(frozen=True)
class Replay:
    """Communication of one backward pass under wait-free backpropagation (FIFO, one channel).

    Attributes
    ----------
    backward_s
        Length of the backward pass.
    comm_s
        Sum of the message durations.
    last_end_s
        End of the last message, from the start of the backward.
    """

    backward_s: float
    comm_s: float
    last_end_s: float

    @property
    def exposed_s(self) -> float:
        """Communication left after the backward ends (``last_end_s - backward_s``, at least 0)."""
        return max(0.0, self.last_end_s - self.backward_s)


def _blob_ready_s(log: BCaffeLog) -> np.ndarray:
    """End of the backward of every blob's layer, from the start of the backward (seconds)."""
    slices = log.layer_slices()
    back = log.layer_backward_us * 1e-6
    end = np.cumsum(back[::-1])[::-1]  # layers run L-1 .. 0; layer l ends after Σ_{j>=l} b_j
    ready = np.empty(len(log.size))
    for s, e in zip(slices, end, strict=True):
        ready[s] = e
    return ready


def wfbp_replay(log: BCaffeLog, groups: Sequence[slice], durations_s: ArrayLike) -> Replay:
    """Replay messages of given durations on one channel behind the log's measured backward.

    Every group is ready when the backward of its smallest-index blob's layer ends; groups are
    sent first-ready first (ties in blob order, highest first), each after the previous one.
    This is the closed form of the ``caffe-mpi`` schedule (docs/model.md, "Closed forms").

    Parameters
    ----------
    log
        A parsed log (its per-layer backward times are used).
    groups
        Blob ranges, as from :func:`comm_groups`.
    durations_s
        Duration of every group (seconds), measured or modelled.
    """
    d = np.asarray(durations_s, dtype=float)
    if d.shape != (len(groups),):
        raise SchedoptError("needs one duration per group", "durations_s", d.shape)
    blob_ready = _blob_ready_s(log)
    ready = np.array([blob_ready[g.start:g.stop].max() for g in groups])
    order = sorted(range(len(groups)), key=lambda k: (ready[k], -groups[k].start))
    ends = chain_ends(0.0, d[order], ready[order])
    return Replay(
        backward_s=float(log.layer_backward_us.sum() * 1e-6),
        comm_s=float(d.sum()),
        last_end_s=float(ends[-1]) if ends.size else 0.0,
    )


def group_buckets(trace: Trace, groups: Sequence[slice]) -> list[list[str]]:
    """Plan buckets (tensor names) for blob groups of a trace loaded from the same log.

    The trace's tensors in forward order are the log's blobs; buckets are listed first-ready
    first, as in :func:`wfbp_replay`.
    """
    names = [t.name for t in trace.tensor_list]
    if not groups or groups[-1].stop != len(names):
        raise SchedoptError(f"groups must cover the trace's {len(names)} tensors", "groups",
                            groups[-1].stop if groups else 0)
    return [names[g] for g in sorted(groups, key=lambda g: -g.start)]


# ------------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class Comparison:
    """Predicted against measured times of a set of messages.

    Attributes
    ----------
    section
        ``layer-wise`` (column 4) or ``merged`` (column 5).
    instance
        Log name and node count (``tmp8comm (8n)``).
    model
        Key of the model (``osu``, ``mgwfbp``, ``link``, ``fit``, ``repeat``, ``osu/last``,
        ``osu-curve``; see ``MODEL_NAMES``).
    subset
        ``all``, ``>= 64 KB``, ``<= 1 MB`` (the OSU curve's range) or a label of
        :data:`SIZE_CLASSES`.
    stats
        The errors.
    """

    section: str
    instance: str
    model: str
    subset: str
    stats: ErrorStats


@dataclass(frozen=True)
class Scalar:
    """One predicted figure against a reference figure (seconds).

    Attributes
    ----------
    section, instance, model
        As in :class:`Comparison`; ``model`` ``measured`` marks the reference row itself.
    quantity
        What is compared (``exposed comm, layer-wise groups``, ``backward + exposed comm,
        merged groups``, ``merging saves``).
    value_s, reference_s
        The figure and the one it is judged against.
    """

    section: str
    instance: str
    model: str
    quantity: str
    value_s: float
    reference_s: float

    @property
    def error(self) -> float:
        """Signed relative error ``value / reference - 1`` (NaN for a zero reference)."""
        return self.value_s / self.reference_s - 1.0 if self.reference_s else float("nan")


@dataclass
class ValidationReport:
    """All figures of :func:`validate_bcaffe`.

    Attributes
    ----------
    comparisons
        Per-message errors (sections ``layer-wise`` and ``merged``).
    scalars
        Merging savings and exposed communication (sections ``merged`` and ``exposed``).
    fits
        ``(instance, subset, alpha_s, beta_s_per_byte)`` of the in-sample fits (model ``fit``).
    groupings
        ``(instance, section, carrier, groups, boundaries inside a layer)`` for both grouping
        conventions of every column with zeros: a convention that cuts layers (whose weight and
        bias are ready together) is implausible.
    models
        Description of every model key.
    """

    comparisons: list[Comparison] = field(default_factory=list)
    scalars: list[Scalar] = field(default_factory=list)
    fits: list[tuple[str, str, float, float]] = field(default_factory=list)
    groupings: list[tuple[str, str, str, int, int]] = field(default_factory=list)
    models: dict[str, str] = field(default_factory=dict)

    def get(self, section: str, instance: str, model: str, subset: str = "all") -> ErrorStats:
        """The errors of one comparison (instance as ``tmp8comm`` or ``tmp8comm (8n)``)."""
        for c in self.comparisons:
            if (c.section, c.model, c.subset) == (section, model, subset) and (
                c.instance == instance or c.instance.split(" ")[0] == instance
            ):
                return c.stats
        raise KeyError((section, instance, model, subset))

    def scalar(self, section: str, instance: str, model: str, quantity: str) -> Scalar:
        """One scalar figure (instance as ``tmp8comm`` or ``tmp8comm (8n)``)."""
        for s in self.scalars:
            if (s.section, s.model, s.quantity) == (section, model, quantity) and (
                s.instance == instance or s.instance.split(" ")[0] == instance
            ):
                return s
        raise KeyError((section, instance, model, quantity))


#: Description of every model key of a :class:`ValidationReport`.
MODEL_NAMES = {
    "osu": "OSU fit, same node count (bcaffe-osu-Nn)",
    "mgwfbp": "MG-WFBP fit (10gbe-k80-family, 8 nodes: a 5.23e-4 s, b 8.57e-10 s/B)",
    "link": "10GbE ring link model (k80-4x4-10gbe at N x 1: 1.1 GB/s, 35 us/step)",
    "fit": "alpha-beta fitted to these very messages (least squares on relative error)",
    "repeat": "another measurement of the same messages (noise floor)",
    "osu/last": "OSU fit, groups read with the opposite convention (carrier = last blob)",
    "osu-curve": "the OSU curve itself, interpolated (messages up to 1 MB only)",
    "measured": "replay of the measured message times",
}


def _compare(report: ValidationReport, section: str, instance: str, model: str,
             predicted: np.ndarray, measured: np.ndarray, sizes: np.ndarray) -> None:
    big = sizes >= LARGE_BYTES
    report.comparisons.append(
        Comparison(section, instance, model, "all", error_stats(predicted, measured)))
    if big.any():
        report.comparisons.append(Comparison(section, instance, model, ">= 64 KB",
                                             error_stats(predicted[big], measured[big])))


def _size_classes(report: ValidationReport, inst: str, smp: CommSamples,
                  osu: Cluster | None, curve: CommSamples | None) -> None:
    """Per-size-class errors of the OSU fit and of the OSU curve (layer-wise messages)."""
    fitted = predicted_times(osu, smp.sizes) if osu is not None else None
    raw = osu_curve_times(curve, smp.sizes) if curve is not None else None
    if raw is not None:
        ok = ~np.isnan(raw)
        report.comparisons.append(Comparison("layer-wise", inst, "osu-curve", "<= 1 MB",
                                             error_stats(raw[ok], smp.times[ok])))
    for label, lo, hi in SIZE_CLASSES:
        k = (smp.sizes >= lo) & (smp.sizes < hi)
        if fitted is not None and k.any():
            report.comparisons.append(Comparison("layer-wise", inst, "osu", label,
                                                 error_stats(fitted[k], smp.times[k])))
        if raw is not None:
            kk = k & ~np.isnan(raw)
            if kk.any():
                report.comparisons.append(Comparison("layer-wise", inst, "osu-curve", label,
                                                     error_stats(raw[kk], smp.times[kk])))


def validate_bcaffe(logdir: str | Path) -> ValidationReport:
    """Compare the shipped communication models with the B-Caffe logs in ``logdir``.

    Parameters
    ----------
    logdir
        The ``logdata`` folder of B-Caffe (``reference/mgwfbp-traces/B-Caffe/logdata``).

    Returns
    -------
    ValidationReport
        ``layer-wise``: every column-4 message against each model of
        :func:`reference_clusters`, an alpha-beta fit to the messages themselves
        (:func:`relative_fit`, per subset), and another
        measurement of the same messages where one exists (column 5 of ``tmp8comm``, which
        merged nothing; column 4 of ``tmp8comm`` for ``tmp8ocomm``).
        ``merged``: every column-5 group against the models (and with the opposite grouping
        convention), and, where column 5 merged something, the time merging saved, measured
        (Σ column 4 - Σ column 5) against predicted (the same difference of modelled times).
        ``exposed``: communication left after the backward under wait-free backpropagation, and
        the backward plus it, replayed with the measured times (:func:`wfbp_replay`) against
        the simulator's prediction (a ``caffe-mpi`` schedule of the same groups,
        :func:`schedopt.simulate.simulator.simulate`). The logs hold no iteration time: the
        :func:`schedopt.simulate.simulator.simulate`). The logs hold no iteration time: the
    """
    root = Path(logdir)
    report = ValidationReport(models=dict(MODEL_NAMES))
    logs = {name: read_bcaffe_log(root / name) for name in BCAFFE_LOGS}
    for name, log in logs.items():
        nodes = BCAFFE_LOGS[name]
        inst = f"{Path(name).stem} ({nodes}n)"
        models = reference_clusters(nodes)
        trace = load_bcaffe_log(root / name)
        osu_file = root / f"allreduce{nodes}.log"
        curve = parse_comm_file(osu_file) if osu_file.is_file() else None
        columns = [False] + ([True] if log.merged_us is not None else [])
        per_col: dict[bool, tuple[list[slice], CommSamples]] = {}
        for merged in columns:
            section = "merged" if merged else "layer-wise"
            groups, smp = group_samples(log, merged=merged)
            per_col[merged] = (groups, smp)
            col = log.merged_us if merged else log.comm_us
            if col is not None and bool((col == 0).any()):
                layer_starts = {sl.start for sl in log.layer_slices()}
                for carrier in ("first", "last"):
                    gs = comm_groups(col, carrier=carrier)
                    cuts = sum(g.start not in layer_starts for g in gs[1:])
                    report.groupings.append((inst, section, carrier, len(gs), cuts))
            for key, cl in models.items():
                _compare(report, section, inst, key, predicted_times(cl, smp.sizes), smp.times,
                         smp.sizes)
            if merged:
                _, alt = group_samples(log, merged=True, carrier="last")
                if "osu" in models:
                    _compare(report, section, inst, "osu/last",
                             predicted_times(models["osu"], alt.sizes), alt.times, alt.sizes)
            else:
                _size_classes(report, inst, smp, models.get("osu"), curve)
                for subset, lo in (("all", 0), (">= 64 KB", LARGE_BYTES)):
                    keep = smp.sizes >= lo
                    alpha, beta = relative_fit(smp.sizes[keep], smp.times[keep])
                    report.fits.append((inst, subset, alpha, beta))
                    pred = alpha + beta * smp.sizes[keep]
                    report.comparisons.append(Comparison(
                        section, inst, "fit", subset, error_stats(pred, smp.times[keep])))
            # exposed communication: measured replay against the simulator's prediction
            exposed = f"exposed comm, {section} groups"
            span = f"backward + exposed comm, {section} groups"
            replay = wfbp_replay(log, groups, smp.times)
            ref_span = replay.backward_s + replay.exposed_s
            report.scalars += [
                Scalar("exposed", inst, "measured", exposed, replay.exposed_s, replay.exposed_s),
                Scalar("exposed", inst, "measured", span, ref_span, ref_span),
            ]
            buckets = group_buckets(trace, groups)
            for key, cl in models.items():
                plan = new_plan("caffe-mpi", trace, cl, buckets)
                sched = simulate(trace, cl, plan)
                bd = sched.breakdown
                report.scalars += [
                    Scalar("exposed", inst, key, exposed, bd.exposed_comm_s, replay.exposed_s),
                    Scalar("exposed", inst, key, span, bd.backward_s + bd.exposed_comm_s,
                           ref_span),
                ]
        if True in per_col and per_col[True][0] != per_col[False][0]:  # something was merged
            s4, s5 = per_col[False][1], per_col[True][1]
            saved = float(s4.times.sum() - s5.times.sum())
            report.scalars.append(Scalar("merged", inst, "measured", "merging saves",
                                         saved, saved))
            for key, cl in models.items():
                pred_saved = float(predicted_times(cl, s4.sizes).sum()
                                   - predicted_times(cl, s5.sizes).sum())
                report.scalars.append(Scalar("merged", inst, key, "merging saves", pred_saved,
                                             saved))
    # noise floor: the same messages measured twice
    t8, t8o = logs["tmp8comm.log"], logs["tmp8ocomm.log"]
    g8, s8 = group_samples(t8)
    g8m, s8m = group_samples(t8, merged=True)
    if g8 == g8m:
        _compare(report, "layer-wise", "tmp8comm (8n)", "repeat", s8m.times, s8.times, s8.sizes)
    g8o, s8o = group_samples(t8o)
    if g8o == g8 and bool((t8o.size == t8.size).all()):
        _compare(report, "layer-wise", "tmp8ocomm (8n)", "repeat", s8.times, s8o.times,
                 s8o.sizes)
    return report
