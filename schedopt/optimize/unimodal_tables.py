"""The data of the unimodal programme that does not depend on the period tested.

:func:`.unimodal._tables` builds them once per instance; the forward programme
(:mod:`.unimodal`) and the backward one (:mod:`.backward`) read them at every ``lam``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["UnimodalTables"]


@dataclass(frozen=True)
class UnimodalTables:
    """What the feasibility tests need of an instance, independent of ``lam`` (ticks; the
    terms are those of :mod:`.unimodal`). ``k`` is a unit, ``j`` a cut.

    Attributes
    ----------
    n
        Number of units.
    r
        Release of every unit.
    q
        Forward tail of every unit's layer.
    pp
        Prefix of the bandwidth parts (length ``n + 1``).
    p
        Bandwidth part of every unit.
    a
        Start-up cost of a bucket.
    rest
        Least work still to come after unit ``k``.
    r_last
        Release of the last unit.
    peak_min
        The peak ends no earlier.
    fit
        The whole communication ends no earlier (the most over the later units).
    upd_in
        Update part of a tail opened at unit ``k`` (maybe rounded down to levels).
    upd_own
        Exact update prefix (length ``n + 1``).
    layer
        Layer of every unit.
    first
        First unit of every unit's layer.
    peak_need
        The peak's work and tail beyond ``max(e, r_last)``.
    inside
        A cut after ``k`` splits a layer.
    one_left
        ... and leaves one unit of it.
    rest_max
        Most work of buckets in the units of ``k``'s layer after ``k``.
    rest_min_upd
        Least update of one unit of ``k``'s layer after ``k``.
    q_env
        Lower envelope of the forward tails from ``k`` on.
    late_fit
        Least ``fit[k'] + pp[k' + 1]`` over the late buckets ending at ``k' >= k``.
    edf
        An early chain ending after ``lam + edf[j]`` leaves a later unit too late.
    peak_upd
        Least update part of the peak's tail beyond its own last unit.
    pe_key
        ``pp[k + 1] + peak_upd[k + 1]`` (non-decreasing).
    pr_key
        ``r[k] + pp[k + 1] + peak_upd[k + 1]`` (non-decreasing).
    e_key
        ``pp[k + 1] + q_env[k]`` (non-decreasing).
    r_key
        ``r[k] + pp[k + 1] + q_env[k]`` (non-decreasing: releases in ready order).
    layer_last
        Last unit of every unit's layer.
    """

    n: int
    r: np.ndarray
    q: np.ndarray
    pp: np.ndarray
    p: np.ndarray
    a: np.int64
    rest: np.ndarray
    r_last: np.int64
    peak_min: np.int64
    fit: np.ndarray
    upd_in: np.ndarray
    upd_own: np.ndarray
    layer: np.ndarray
    first: np.ndarray
    peak_need: np.int64
    inside: np.ndarray
    one_left: np.ndarray
    rest_max: np.ndarray
    rest_min_upd: np.ndarray
    q_env: np.ndarray
    late_fit: np.ndarray
    edf: np.ndarray
    peak_upd: np.ndarray
    pe_key: np.ndarray
    pr_key: np.ndarray
    e_key: np.ndarray
    r_key: np.ndarray
    layer_last: np.ndarray
