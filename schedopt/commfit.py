"""Fit the all-reduce cost ``t(n) = alpha + beta * n`` to measured latencies.

The samples come from :mod:`schedopt.loaders.comm` (OSU or nccl-tests output). The fit is ordinary
least squares over the message sizes at or above ``min_bytes``; when the unconstrained solution has
a negative coefficient, that coefficient is fixed at zero and the other is refitted (an all-reduce
cost model cannot have a negative start-up time).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import ValidationError

from .cluster import AllReduceFit, Cluster, Link
from .errors import SchedoptError, from_validation_error
from .loaders.comm import OSU_MIN_BYTES, CommSamples

__all__ = [
    "cluster_from_fit",
    "default_min_bytes",
    "fit_alpha_beta",
    "residual_rms",
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
        return _cluster(data)
    if fit.beta_s_per_byte <= 0:
        raise SchedoptError("must be positive to derive a link (give a base cluster)",
                            "beta_s_per_byte", fit.beta_s_per_byte)
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
    })
