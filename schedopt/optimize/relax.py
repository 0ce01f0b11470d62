"""What the optimizer's model leaves out of a cluster, and how its bound stays valid anyway.

The optimizer's model costs every communication stage with one line ``alpha + beta * n`` and
runs compute at full speed. Two cluster effects go beyond it (docs/model.md):

* a measured **cost curve** (``allreduce.segments``): the true cost ``c(n)`` of a stage may lie
  below its line at some sizes;
* the **overlap slowdown** ``s > 1``: compute that overlaps communication runs slower;
* the **communication slowdown** ``s_c > 1``: communication that overlaps compute runs slower;
* the **host side** (docs/model.md, "Host side"): launch, hook and host times of the launching
  thread (``launch_overhead_s``, ``hook_overhead_s``, the trace's ``host_*_s``).

On such a cluster the optimizer still searches its linear, full-speed model; every plan it
reports is re-simulated (the simulator models both effects exactly), and its bound is made valid
by a relaxation factor ``r``: with ``c(n) >= r * (alpha + beta * n)`` for every stage and every
size ``n >= 1`` and ``r <= 1``, each plan's true period is at least ``r`` times its model period
(the period is a maximum of sums of durations, non-decreasing in each duration, and compute
and communication durations are only lengthened by the slowdowns), so ``r`` times the model's
lower bound bounds the true optimum.

The host side only adds time: its tasks and edges extend the graph of the model without a host
(which is the graph with every host cost at 0), and the longest paths, hence the period, are
non-decreasing in every duration. The model without a host therefore bounds every plan's period
with host costs (factor 1), and a plan whose simulated period meets that bound is proven optimal.
The model's search sees the collective calls only through the link's start-up cost, so with a
host the result also weighs :func:`launch_candidates`: the programme's plans with each call's
launch cost counted as part of the bucket's start-up, judged by the simulator like every plan.

With the slowdowns and one communication stage, :func:`contention_bound` adds a bound of its
own, which the full-speed model cannot give: the time that contention costs every plan
(docs/formulation.md, "Clusters beyond the model"); per-layer, bucket by bucket
(:func:`per_layer_overlap`), with :func:`split_candidates` the plans of that picture.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from schedopt.model.cluster import Cluster, CommStage
from schedopt.model.trace import Trace

if TYPE_CHECKING:
    from schedopt.model.plan import Plan
    from schedopt.optimize.instance import Instance, Segments

__all__ = ["FIRST_BUCKET_STEPS", "LAUNCH_SCALES", "MAX_COUNT_CANDIDATES", "MAX_DESCENT_EVALS",
           "MAX_SIDE_PIECES", "MAX_WINDOW_LEVELS", "PER_LAYER_MARGIN", "SPLIT_HEAD_LAYERS",
           "SPLIT_LOW_LAYERS", "Relaxation", "contention_bound", "count_candidates",
           "curve_ratio", "first_bucket_candidates", "gradient_pieces", "host_free_period",
           "launch_candidates", "per_layer_overlap", "relaxation", "simulated_descent",
           "split_candidates", "without_added_time"]

#: Multiples of the launch cost tried as extra start-up cost per bucket (:func:`launch_candidates`):
#: a call delays its own start by one launch when the host runs ahead, and every later backward
#: launch too when the host is the bottleneck.
LAUNCH_SCALES = (0.5, 1.0, 2.0, 4.0)

#: Largest bucket count whose best bucketing :func:`launch_candidates` offers.
MAX_COUNT_CANDIDATES = 48

#: Grid steps per doubling of the last bucket's bytes in :func:`first_bucket_candidates`.
FIRST_BUCKET_STEPS = 8

#: Most plans :func:`simulated_descent` simulates.
MAX_DESCENT_EVALS = 400


@dataclass(frozen=True)
class Relaxation:
    """How the model relaxes a cluster.

    Attributes
    ----------
    factor
        ``r`` in (0, 1]: the model's bound times ``r`` bounds the true optimum.
    effects
        The effects the model leaves out, in words (for the result's notes).
    host
        Whether the host side is among them (its plans are then also weighed against
        :func:`launch_candidates`).
    bucket
        Whether the buckets' compute-stream time (``bucket_compute_s``) is among them.
    """

    factor: float
    effects: tuple[str, ...]
    host: bool = False
    bucket: bool = False

    @property
    def per_call(self) -> bool:
        """Whether a cost per collective call is among the effects (the host side's launches
        or the buckets' compute-stream time): plans with fewer calls are then weighed
        (:func:`launch_candidates`)."""
        return self.host or self.bucket

    @property
    def only_added_time(self) -> bool:
        """Whether the host side and the buckets' compute-stream time are all the model leaves
        out (then a plan's period without them is the model's own, and the model's proven
        optimum bounds every plan with them: :func:`host_free_period`; the exact programme
        of :mod:`.host_dp` covers both)."""
        return self.per_call and len(self.effects) == int(self.host) + int(self.bucket)

    @property
    def note(self) -> str:
        """One line for the result's notes."""
        return (f"the model leaves out {' and '.join(self.effects)}: plans are judged by the "
                f"simulator and the bound is the model's times {self.factor:.6g}")


def curve_ratio(stage: CommStage) -> float:
    """The largest ``r <= 1`` with ``stage.time(n) >= r * (alpha + beta * n)`` for all n >= 1.

    On each segment both costs are linear in ``n``, so their ratio is monotone there and its
    infimum is at an end of the segment (the last one's is the limit ``beta_k / beta``).
    """
    if not stage.segments:
        return 1.0
    alpha, beta = stage.alpha_s, stage.beta_s_per_byte
    starts = [max(1.0, s[0]) for s in stage.segments]
    ends: list[float] = [*starts[1:], math.inf]
    ratio = 1.0
    for (_, a, b), lo, hi in zip(stage.segments, starts, ends, strict=True):
        for n in (lo, hi):
            if lo >= hi:
                continue
            line = alpha + beta * n if math.isfinite(n) else beta
            cost = stage.offset_s + a + b * n if math.isfinite(n) else b
            if line > 0:
                ratio = min(ratio, max(0.0, cost / line))
    return ratio


def relaxation(cluster: Cluster, stages: Sequence[CommStage] | None = None, *,
               trace: Trace | None = None) -> Relaxation | None:
    """The relaxation of ``cluster`` by the optimizer's model; None when the model is exact.

    Parameters
    ----------
    cluster
        The cluster solved on.
    stages
        Its communication stages (default: ``cluster.comm_stages()``).
    trace
        The trace solved for: its host times count as a left-out effect too (default: only the
        cluster's host costs are looked at).
    """
    stages = cluster.comm_stages() if stages is None else stages
    effects: list[str] = []
    factor = 1.0
    if any(st.segments for st in stages):
        effects.append("the measured cost curve (its single line is used)")
        factor = min(curve_ratio(st) for st in stages)
    if cluster.overlap_slowdown != 1.0:
        effects.append(f"the overlap slowdown {cluster.overlap_slowdown:g}")
    if cluster.comm_slowdown != 1.0:
        effects.append(f"the communication slowdown {cluster.comm_slowdown:g}")
    host = cluster.has_host or (trace is not None and trace.has_host)
    if host:
        effects.append("the host side (launch, hook and host times, which only add time)")
    if cluster.bucket_compute_s > 0.0:
        effects.append(f"the buckets' compute-stream time ({cluster.bucket_compute_s:g} s each,"
                       " which only adds time)")
    if not effects:
        return None
    return Relaxation(factor=factor, effects=tuple(effects), host=host,
                      bucket=cluster.bucket_compute_s > 0.0)


#: Share of one iteration's communication that the per-layer contention bound leaves out: the
#: simulator's period spans whole cycles of a repeating state, or else the second half of its
#: run (``simulate``'s ``max_iterations``, 256: at least 127 iterations), where the work left
#: at the ends (at most one iteration's communication) can shift the window's share by one
#: iteration's worth; 1/64 covers every window of 64 iterations or more.
PER_LAYER_MARGIN = 1.0 / 64

#: Most pieces of gradient (the largest) whose side of the lowest layer's bucket the per-layer
#: contention bound tries one by one (``2**k`` sides); the others may split between the sides.
MAX_SIDE_PIECES = 10

#: Most window ends per side that the per-layer contention bound checks (fewer only lower it).
MAX_WINDOW_LEVELS = 40


def contention_bound(trace: Trace, cluster: Cluster, stages: Sequence[CommStage], *,
                     mode: str, total_bytes: int, factor: float = 1.0,
                     pieces: int | str | None = None) -> float | None:
    r"""A lower bound (seconds) on every plan's period under the slowdowns, or None.

    It holds for one communication stage (each bucket one task, one at a time), in every
    launch order and bucketing, and is None with several stages and without a slowdown. The
    period is at least the measure of the union of the compute stream's busy set ``K`` and the
    communication's busy set ``C`` within a window that does one iteration's compute ``W``
    (forward, backward, update) and communication ``Σc``:

    * wait-for-all: one iteration, from the end of the previous update to the end of its own
      (the forward waits for the previous communication, the update for this one);
    * per-layer: the simulator's window, whole cycles of a repeating state (the work left at
      both ends is the same) or, without one, the second half of its run, in which the
      communication done falls short of the iterations' by at most the work left at the end,
      one iteration's (every update waits for its bucket): :data:`PER_LAYER_MARGIN` of it.

    With ``x = |K ∩ C|`` per iteration, compute runs at speed ``1/s`` on ``K ∩ C`` and at most 1
    elsewhere, so ``|K \ C| >= W - x/s``; the one stage serves one task at a time, at speed
    ``1/s_c`` on ``K ∩ C`` and at most 1 elsewhere, so ``|C \ K| >= Σc - x/s_c``. Hence

        T >= W + Σc - γ x,   γ = 1/s + 1/s_c - 1.

    With ``γ <= 0`` (for example ``s = s_c = 2``) this is at least ``W + Σc``. Otherwise the
    overlap does at most the work it meets: ``x/s <= W_o``, the compute that can run beside
    communication (wait-for-all: the backward after the first gradient's readiness, as no
    communication runs before it and the update waits for it all; per-layer: all of ``W``),
    and ``x/s_c <= Σc``. The resulting ``W + Σc - γ min(s W_o, s_c Σc)`` is non-decreasing in
    ``Σc`` (slope ``s_c (1 - 1/s) >= 0`` or 1), and every plan communicates every byte in at
    least one call: ``Σc >= r (alpha + beta N)`` with the curve factor ``r``. Per-layer,
    :func:`per_layer_overlap` also bounds ``x`` bucket by bucket; the larger bound holds.

    Parameters
    ----------
    trace, cluster
        The instance.
    stages
        The cluster's communication stages (the bound needs exactly one).
    mode
        The next-forward mode of the plans (``wait-for-all`` or ``per-layer``).
    total_bytes
        The bytes every plan communicates (at most the trace's; fewer only lowers the bound).
    factor
        ``r`` of :func:`curve_ratio` (1 without a measured cost curve).
    pieces
        What the plans' buckets hold (per-layer): None, any share of a layer's bytes (every
        plan); ``"tensors"``, whole tensors; an int, pieces of ``partition_bytes``.

    Returns
    -------
    float or None
        The bound in seconds, or None where it does not apply.
    """
    s, s_c = cluster.overlap_slowdown, cluster.comm_slowdown
    if len(stages) != 1 or (s == 1.0 and s_c == 1.0) or cluster.comm_concurrency != 1:
        return None
    if mode not in ("wait-for-all", "per-layer"):
        return None
    stage = stages[0]
    nbytes = min(int(total_bytes), int(trace.total_bytes))
    if nbytes <= 0:
        return None
    full = max(0.0, factor) * (stage.alpha_s + stage.beta_s_per_byte * nbytes)
    work = float(trace.forward.sum()) + float(trace.backward.sum()) + trace.update_s
    gamma = 1.0 / s + 1.0 / s_c - 1.0
    comm = full * (1.0 - PER_LAYER_MARGIN) if mode == "per-layer" else full
    overlappable = work if mode == "per-layer" else _after_first_gradient(trace)
    if overlappable is None:
        return None
    if gamma <= 0.0:
        return work + comm
    bound = work + comm - gamma * min(s * overlappable, s_c * comm)
    if mode == "per-layer" and nbytes == trace.total_bytes:
        x = _trace_overlap(trace, stage, s, s_c * max(0.0, factor), pieces)
        bound = max(bound, work + (1.0 - PER_LAYER_MARGIN) * (full - gamma * x))
    return bound


def _after_first_gradient(trace: Trace) -> float | None:
    """Wait-for-all: the backward that can run beside communication (None without gradients).

    The backward runs from the last layer down: no bucket is ready before the backward of the
    last layer that holds a gradient ends (a tied weight belongs to an earlier layer, so
    counting the later layers that name it only lowers the bound).
    """
    with_grads = [i for i, layer in enumerate(trace.layers) if layer.tensors]
    if not with_grads:
        return None
    return float(trace.backward[: max(with_grads)].sum())


def _trace_overlap(trace: Trace, stage: CommStage, s: float, scale: float,
                   pieces: int | str | None) -> float:
    """:func:`per_layer_overlap` of the pieces of ``trace`` (:func:`gradient_pieces`), each
    overlapping at most ``scale`` (``s_c r``) times its share of the calls' cost, the one
    start-up cost every plan pays given to a piece of the lowest layer (in ``b0``)."""
    layer, nbytes, whole = gradient_pieces(trace, pieces)
    u = scale * stage.beta_s_per_byte * nbytes.astype(float)
    u[int(np.argmin(layer))] += scale * stage.alpha_s
    return per_layer_overlap(layer, u, trace.forward, trace.backward, trace.update_s, s,
                             MAX_SIDE_PIECES if whole else 0)


def gradient_pieces(trace: Trace, pieces: int | str | None
                    ) -> tuple[np.ndarray, np.ndarray, bool]:
    """The owning layer and the bytes of every piece of gradient that a bucket holds whole.

    Parameters
    ----------
    trace
        The instance's trace.
    pieces
        None: any share of a layer's bytes (one piece per tensor, which may split);
        ``"tensors"``: whole tensors; an int: tensors cut as ``partition_bytes`` cuts them.

    Returns
    -------
    layer, nbytes, whole
        Arrays in gradient-ready order, and whether a bucket holds each piece whole.
    """
    from schedopt.optimize.units import _base_pieces

    if pieces is None or pieces == "tensors":
        return trace.ready_layer, trace.ready_bytes, pieces is not None
    if not isinstance(pieces, int) or isinstance(pieces, bool) or pieces <= 0:
        raise ValueError(f"pieces must be None, 'tensors' or a positive int, not {pieces!r}")
    tensor, _, nbytes = _base_pieces(trace.ready_order, pieces)
    return trace.ready_layer[tensor], nbytes, True


def per_layer_overlap(layer: np.ndarray, u: np.ndarray, fwd: np.ndarray, bwd: np.ndarray,
                      update_s: float, s: float, k: int) -> float:
    r"""An upper bound on ``x = |K ∩ C|`` of one iteration of every per-layer plan.

    Let ``m0`` be the lowest layer that owns a piece of gradient and ``b0`` the last bucket in
    launch order holding a piece of it. Bucket ``b`` (lowest layer ``m_b``) is released at the
    end of ``m_b``'s backward and ends before the next forward of ``m_b`` (its update runs
    first); it overlaps compute for at most ``x_b <= s_c c_b``. A bucket launched before ``b0``
    (the *head*) ends before ``b0`` starts, one launched after it (the *tail*) starts after
    ``b0`` ends, and ``b0`` runs between the end of ``m0``'s backward and the next forward of
    ``m0``. So for layers ``a, b >= m0`` the head buckets with ``m_b <= a``, ``b0`` and the tail
    buckets with ``m_b <= b`` all run within the end of ``a``'s backward and the start of the
    next forward of ``b``, where the compute stream runs the backward below ``a``, the forward
    below ``b`` and updates, at speed ``1/s`` at least:

        H(a) + T(b) <= s (B_{<a} + F_{<b} + U).

    Share each bucket's ``x_b`` among its pieces by bytes (a piece's layer is at least
    ``m_b``, so each constraint counts no more of it) and give ``b0`` to the head: piece ``i``
    overlaps at most ``u_i`` (``s_c`` times its share of ``c``) on its side. The
    largest ``k`` pieces are tried on each side; the others may split between the sides (a
    relaxation). For a choice of sides, the most overlap is a flow through the two chains of
    constraints (``H(a) <= s B_{<a} + e``, ``T(b) <= s F_{<b} + s U - e`` for some ``e``),
    whose minimum cut over ``e`` is

        min(Σu, min_{a, b} s (B_{<a} + F_{<b} + U) + u(head > a) + u(tail > b)
                                                   + u(split > min(a, b))),

    with ``u(S > a)`` the ``u`` of the pieces of ``S`` above layer ``a``; the bound is its
    largest value over the choices. Checking fewer layers ``a, b`` only raises it.

    Parameters
    ----------
    layer, u
        Owning layer and largest overlap (seconds) of every piece.
    fwd, bwd
        Forward and backward times of the layers (seconds).
    update_s
        The update of all buckets (seconds).
    s
        The overlap slowdown.
    k
        Most pieces tried on each side (0: every piece may split).

    Returns
    -------
    float
        The bound on ``x`` (seconds).
    """
    layer = np.asarray(layer, dtype=np.int64)
    u = np.asarray(u, dtype=float)
    big = np.argsort(-u, kind="stable")[: max(0, min(k, len(u)))]
    levels = _window_levels(layer, big)
    above = layer[:, None] > levels[None, :]
    split = np.ones(len(u), dtype=bool)
    split[big] = False
    rest = (u[split, None] * above[split]).sum(axis=0)  # non-increasing in the level
    idx = np.arange(len(levels))
    rest_min = rest[np.minimum.outer(idx, idx)]
    head_cap = s * np.r_[0.0, np.cumsum(bwd)][levels]
    tail_cap = s * np.r_[0.0, np.cumsum(fwd)][levels]
    big_above = u[big, None] * above[big]
    sides = ((np.arange(2 ** len(big))[:, None] >> np.arange(len(big))) & 1).astype(float)
    head = head_cap + sides @ big_above
    tail = tail_cap + (1.0 - sides) @ big_above
    cut = head[:, :, None] + tail[:, None, :] + (s * update_s + rest_min)[None]
    return float(min(u.sum(), cut.min(axis=(1, 2)).max()))


def _window_levels(layer: np.ndarray, big: np.ndarray) -> np.ndarray:
    """The layers ``a, b`` that :func:`per_layer_overlap` checks: every layer owning a piece
    (only these can be the tightest: between two of them the pieces above stay the same and the
    compute below grows), or at most :data:`MAX_WINDOW_LEVELS` of them, the lowest and those of
    the largest pieces first."""
    owners = np.unique(layer)
    if len(owners) <= MAX_WINDOW_LEVELS:
        return owners
    keep = np.unique(np.r_[owners[0], layer[big]])
    others = np.setdiff1d(owners, keep)
    room = max(0, MAX_WINDOW_LEVELS - len(keep))
    picks = others[np.linspace(0, len(others) - 1, room).astype(np.int64)] if room else others[:0]
    return np.unique(np.r_[keep, picks]).astype(np.int64)


def count_candidates(inst: Instance, reorder: bool = False) -> list[Segments]:
    """The wait-for-all programme's best bucketing (cuts between layers) with at most ``c``
    buckets, for ``c = 1 ..`` :data:`MAX_COUNT_CANDIDATES`: plans with few calls, to simulate
    where the model leaves out what each call costs (the host side, or the slowdowns, under
    which a call's overlap with compute is not free). With ``reorder``, then
    :func:`split_candidates`. Candidates, not optima.

    Parameters
    ----------
    inst
        The instance of the search (its units, releases and costs in ticks).
    reorder
        Whether the plans' class has launch orders other than readiness order.

    Returns
    -------
    list of Segments
        One plan per bucket count (none without communication), then the split plans.
    """
    from schedopt.optimize.dp import min_makespan_by_count

    if not inst.stages:
        return []
    limit = min(inst.n, MAX_COUNT_CANDIDATES)
    plans = [segs for segs in min_makespan_by_count(inst.r, inst.p, inst.a,
                                                    inst.layer_first_unit,
                                                    lambda count: count >= limit) if segs]
    if reorder:
        plans += split_candidates(inst)
    return plans


#: Numbers of layers (from the lowest) in the lowest bucket of :func:`split_candidates`.
SPLIT_LOW_LAYERS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)

#: Numbers of the largest other layers that :func:`split_candidates` launch before it.
SPLIT_HEAD_LAYERS = (0, 1, 2, 3, 4, 6, 8)


def split_candidates(inst: Instance) -> list[Segments]:
    """Per-layer plans that launch some buckets after the lowest layer's (reordered).

    Under the slowdowns a bucket's overlap with compute is not free, and the next forward
    waits first for the lowest layers: the plans of :func:`per_layer_overlap`'s picture. The
    lowest bucket holds the lowest :data:`SPLIT_LOW_LAYERS` layers; before it, in readiness
    order, the buckets of the :data:`SPLIT_HEAD_LAYERS` largest other layers, one per layer
    (they overlap the backward); after it the remaining layers in forward order (they overlap
    the next forward, each needed later than the one before), one bucket per layer or one per
    run of them. Candidates to simulate, not optima.

    Parameters
    ----------
    inst
        The instance of the search (per-layer mode).

    Returns
    -------
    list of Segments
        Distinct plans, by lowest bucket, then head, then the tail's grouping (none in
        wait-for-all mode, whose next forward waits for every bucket).
    """
    if not inst.per_layer or not inst.stages:
        return []
    runs = inst.layer_runs  # ready order: the highest layer first
    size = [int(inst.nbytes[lo:hi + 1].sum()) for lo, hi in runs]
    plans: list[Segments] = []
    seen: set[tuple[tuple[int, int], ...]] = set()
    for low in SPLIT_LOW_LAYERS:
        if low >= len(runs):
            break
        upper = len(runs) - low
        lowest = (runs[upper][0], inst.n - 1)
        by_size = sorted(range(upper), key=lambda r: (-size[r], r))
        for heads in SPLIT_HEAD_LAYERS:
            if heads > upper:
                break
            head = sorted(by_size[:heads])
            rest = [r for r in range(upper) if r not in set(head)]
            for grouped in (False, True):
                segs = [*(runs[r] for r in head), lowest, *_tail_segments(runs, rest, grouped)]
                key = tuple(segs)
                if key not in seen:
                    seen.add(key)
                    plans.append(segs)
    return plans


def _tail_segments(runs: list[tuple[int, int]], rest: list[int], grouped: bool) -> Segments:
    """The buckets of the layer runs ``rest`` (indices into ``runs``, ready order) in forward
    order: one per run, or one per stretch of consecutive runs."""
    groups: list[list[int]] = []
    for r in rest:
        if grouped and groups and groups[-1][-1] == r - 1:
            groups[-1].append(r)
        else:
            groups.append([r])
    return [(runs[g[0]][0], runs[g[-1]][1]) for g in reversed(groups)]


def first_bucket_candidates(inst: Instance, segs: Segments,
                            per_octave: int = FIRST_BUCKET_STEPS) -> list[Segments]:
    """Plans whose last bucket, the one the next step's first forward waits for, is larger.

    In per-layer mode the next step's first forward waits for its launch, which the host
    starts only once the step's backward has ended (docs/model.md, "Host side"); the updates
    of the bucket that holds layer 0 can run in that wait. So ``segs`` is offered with its
    last units ``c .. n-1`` joined into one bucket, launched last (the other buckets keep their
    order, cut at ``c``), for ``c`` whose joined bytes run from layer 0's bytes to all of them
    in ``per_octave`` steps per doubling (:func:`.host_side.host_work` bounds what this can
    gain).

    Parameters
    ----------
    inst
        The instance of the search.
    segs
        A plan (segments in launch order) of ``inst``.
    per_octave
        Grid steps per doubling of the joined bytes.

    Returns
    -------
    list of Segments
        One plan per distinct ``c``, from the smallest joined bucket (none without
        communication or when layer 0 holds no gradient).
    """
    n = inst.n
    if not inst.stages or not segs or int(inst.layer[-1]) != 0:
        return []
    tail = np.cumsum(inst.nbytes[::-1].astype(float))[::-1]  # bytes of units c .. n-1
    first = int(np.flatnonzero(inst.layer == 0)[0])
    lo, hi = float(tail[first]), float(tail[0])
    steps = math.ceil(per_octave * math.log2(max(hi / lo, 1.0))) + 1
    targets = lo * np.power(2.0, np.arange(steps) / per_octave)
    # the largest c whose units c .. n-1 hold at least the target (tail falls with c)
    cuts = sorted({max(0, min(first, int(np.searchsorted(-tail, -z, side="right")) - 1))
                   for z in targets}, reverse=True)
    plans: list[Segments] = []
    for c in cuts:
        kept = [(a, min(b, c - 1)) for a, b in segs if a < c]
        plans.append([*kept, (c, n - 1)])
    return plans


def launch_candidates(inst: Instance) -> list[Segments]:
    """FIFO plans with few collective calls, to weigh where calls cost host or compute time.

    The wait-for-all programme's best bucketing (cuts between layers) with at most ``c`` buckets
    for ``c = 1 ..`` :data:`MAX_COUNT_CANDIDATES`, and, for each multiple in
    :data:`LAUNCH_SCALES` of the cluster's cost per call (``launch_overhead_s`` plus
    ``bucket_compute_s``), its best bucketing when each bucket's start-up ``a`` also carries
    that much. They are candidates to simulate, not optima
    (the bound stays the model's without a host).

    Parameters
    ----------
    inst
        The instance of the search (its units, releases and costs in ticks).

    Returns
    -------
    list of Segments
        One plan per distinct extra start-up, in :data:`LAUNCH_SCALES` order (none without
        communication or launch cost).
    """
    from schedopt.optimize.dp import min_makespan

    launch = inst.cluster.launch_overhead_s + inst.cluster.bucket_compute_s
    if not inst.stages or launch <= 0:
        return []
    plans = count_candidates(inst)
    seen: set[int] = set()
    for scale in LAUNCH_SCALES:
        extra = int(inst.ticks(scale * launch))
        if extra <= 0 or extra in seen:
            continue
        seen.add(extra)
        _, segs = min_makespan(inst.r, inst.p, inst.a + extra, inst.layer_first_unit)
        plans.append(segs)
    return plans


def without_added_time(trace: Trace, cluster: Cluster) -> tuple[Trace, Cluster]:
    """``trace`` and ``cluster`` with every host cost and the buckets' compute-stream time at 0
    (the optimizer's model: what :attr:`Relaxation.only_added_time` leaves out only adds time).

    Parameters
    ----------
    trace, cluster
        The instance.

    Returns
    -------
    trace, cluster
        New, validated copies (their fingerprints are those of files without these fields).
    """
    tdoc = trace.model_dump()
    tdoc["host_update_s"] = 0.0
    for layer in tdoc["layers"]:
        layer["host_forward_s"] = layer["host_backward_s"] = 0.0
    cdoc = cluster.model_dump()
    cdoc["launch_overhead_s"] = cdoc["hook_overhead_s"] = cdoc["bucket_compute_s"] = 0.0
    return Trace.model_validate(tdoc), Cluster.model_validate(cdoc)


def host_free_period(trace: Trace, cluster: Cluster, plan: Plan) -> float:
    """The simulated period of ``plan`` without any host cost nor the buckets' compute-stream
    time (seconds).

    Every plan's period with them is at least this (both only add time), so when ``plan`` is
    the proven optimum of the model without them, this is a lower bound of every plan's period
    with them.

    Parameters
    ----------
    trace, cluster
        The instance, with its host costs.
    plan
        A plan made for ``trace`` and ``cluster``.
    """
    from schedopt.simulate.simulator import simulate

    free_trace, free_cluster = without_added_time(trace, cluster)
    moved = plan.model_copy(update={
        "trace_hash": None if plan.trace_hash is None else free_trace.fingerprint(),
        "cluster_hash": None if plan.cluster_hash is None else free_cluster.fingerprint()})
    return simulate(free_trace, free_cluster, moved).iteration_time_s


def _neighbours(segs: Segments, n: int) -> list[Segments]:
    """Contiguous bucketings one move from ``segs``: two neighbours joined, a cut moved by one
    unit, a bucket split in two halves."""
    cuts = [j for _, j in segs[:-1]]
    out: list[list[int]] = []
    for k, c in enumerate(cuts):
        out.append(cuts[:k] + cuts[k + 1:])
        lo = cuts[k - 1] if k else -1
        hi = cuts[k + 1] if k + 1 < len(cuts) else n - 1
        if c - 1 > lo:
            out.append([*cuts[:k], c - 1, *cuts[k + 1:]])
        if c + 1 < hi:
            out.append([*cuts[:k], c + 1, *cuts[k + 1:]])
    for i, j in segs:
        if j > i:
            mid = (i + j) // 2
            out.append(sorted([*cuts, mid]))
    plans: list[Segments] = []
    for cs in out:
        starts = [0, *(c + 1 for c in cs)]
        ends = [*cs, n - 1]
        plans.append(list(zip(starts, ends, strict=True)))
    return plans


def simulated_descent(segs: Segments, n: int, period: Callable[[Segments], float],
                      max_evals: int = MAX_DESCENT_EVALS,
                      stop: Callable[[], bool] | None = None,
                      stats: dict[str, int] | None = None) -> tuple[Segments, float]:
    """Improve a contiguous FIFO bucketing by first-improvement moves judged by ``period``.

    Parameters
    ----------
    segs
        The starting bucketing of units ``0..n-1`` (contiguous, in ready order).
    n
        The number of units.
    period
        The period of a bucketing (seconds; the simulator's, with the host side).
    max_evals
        The most bucketings judged.
    stop
        Called before each judgement; True ends the descent (the time limit).
    stats
        When given, receives ``evals``: the bucketings judged.

    Returns
    -------
    segs, value
        The best bucketing found and its period.
    """
    out = stats if stats is not None else {}
    best, value = list(segs), period(segs)
    evals = 1
    improved = True
    while improved and evals < max_evals:
        improved = False
        for cand in _neighbours(best, n):
            if evals >= max_evals or (stop is not None and stop()):
                improved = False
                break
            val = period(cand)
            evals += 1
            if val < value * (1 - 1e-12):
                best, value, improved = cand, val, True
                break
    out["evals"] = evals
    return best, value
