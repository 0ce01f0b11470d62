"""Horovod tensor fusion, replayed over the base model's ready times.

Every ``cycle_time_ms`` the ranks agree on the tensors that became ready since the previous cycle
and fuse them (Horovod's ``Controller::FuseResponses``): the first pending tensor opens a fused
all-reduce; the following ones join it while they have its dtype and the fused size stays within
``fusion_threshold_mb``; a tensor that does not join is skipped and the look-ahead stops once the
fused size plus the skipped sizes exceed the threshold. The skipped tensors open the next fused
all-reduces of the same cycle. Ready times come from the trace alone (backward starting at the
sum of forward times), with cycle boundaries at multiples of the cycle time from the start of the
forward; the result is a static plan.

Explicit groups (``hvd.DistributedOptimizer(groups=...)``) make every tensor of a group wait for
the whole group, which is then submitted together in the group's own order, not in readiness
order (``horovod/torch/optimizer.py``: the hook of the group's last gradient submits the group
tuple); ``num_groups`` splits the parameter list (forward order) into that many contiguous
groups the way Horovod's ``split_list`` does, and tensors in no group form groups of one.
Defaults follow Horovod 0.28.1.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Tensor, Trace
from schedopt.policies.common import mib_to_bytes, new_plan, positive, tensor_ready_times

__all__ = ["FUSION_BUFFER_ATOMIC_UNIT", "fuse_responses", "horovod", "horovod_buckets"]

#: Horovod's FUSION_BUFFER_ATOMIC_UNIT (elements); the threshold is rounded up to a multiple of
#: local_size * 8 bytes * this unit on homogeneous clusters.
FUSION_BUFFER_ATOMIC_UNIT = 64

#: Cycle times below this (seconds) count as 0: every distinct ready time is its own cycle.
_MIN_CYCLE_S = 1e-9


def fuse_responses(tensors: Sequence[Tensor], threshold: int) -> list[list[str]]:
    """Fuse one cycle's ready tensors (in submission order) the way Horovod's controller does.

    Parameters
    ----------
    tensors
        The cycle's tensors, in the order they were submitted.
    threshold
        Fusion threshold in bytes (0 disables fusion).

    Returns
    -------
    list of list of str
        Fused all-reduces, in execution order.
    """
    queue = deque(tensors)
    out: list[list[str]] = []
    while queue:
        first = queue.popleft()
        fused, size = [first.name], first.bytes
        skipped: list[Tensor] = []
        skipped_size = 0
        while queue:
            nxt = queue[0]
            if nxt.dtype == first.dtype and size + nxt.bytes <= threshold:
                fused.append(nxt.name)
                size += nxt.bytes
                queue.popleft()
                continue
            skipped_size += nxt.bytes
            if size + skipped_size <= threshold:
                skipped.append(queue.popleft())
            else:
                break
        queue.extendleft(reversed(skipped))
        out.append(fused)
    return out


def _groups(
    trace: Trace, groups: int | list[list[str]] | None
) -> dict[str, tuple[int, int]] | None:
    """Group id and place in its group of every tensor (None: no explicit groups).

    The place is the tensor's position in the tuple Horovod submits: parameter order for a
    number of groups (``split_list``), the listed order for explicit lists; tensors in no group
    form groups of one after the listed groups.
    """
    if groups is None:
        return None
    names = [t.name for t in trace.tensor_list]
    if isinstance(groups, bool) or not isinstance(groups, int | list):
        raise SchedoptError("must be a number of groups or a list of lists of tensor names",
                            "horovod.groups", groups)
    out: dict[str, tuple[int, int]] = {}
    if isinstance(groups, int):
        if groups < 1:
            raise SchedoptError("must be a positive number of groups", "horovod.groups", groups)
        d, r = divmod(len(names), groups)
        for g in range(groups):
            members = names[g * d + min(g, r):(g + 1) * d + min(g + 1, r)]
            out.update({name: (g, i) for i, name in enumerate(members)})
        return out
    known = set(names)
    for g, group in enumerate(groups):
        if isinstance(group, str) or not isinstance(group, list):
            raise SchedoptError("must be a list of tensor names", f"horovod.groups[{g}]", group)
        for i, name in enumerate(group):
            if name not in known:
                raise SchedoptError("unknown tensor", f"horovod.groups[{g}]", name)
            if name in out:
                raise SchedoptError("tensor is in two groups", f"horovod.groups[{g}]", name)
            out[name] = (g, i)
    nxt = len(groups)
    for name in names:
        if name not in out:
            out[name] = (nxt, 0)
            nxt += 1
    return out


def horovod_buckets(
    trace: Trace,
    *,
    cycle_s: float,
    threshold: int,
    groups: int | list[list[str]] | None = None,
) -> list[list[str]]:
    """Fused all-reduces of one iteration in execution order (see the module docstring)."""
    order = trace.ready_order
    ready = tensor_ready_times(trace)
    group_of = _groups(trace, groups)
    # a tensor is submitted when the hook of the last tensor of its group runs (its own hook
    # without groups); a completed group enters in its own order (the tuple Horovod submits)
    done = np.arange(len(order))
    place = np.zeros(len(order), dtype=int)
    if group_of is not None:
        last: dict[int, int] = {}
        for k, t in enumerate(order):
            last[group_of[t.name][0]] = k
        done = np.array([last[group_of[t.name][0]] for t in order])
        place = np.array([group_of[t.name][1] for t in order])
        ready = ready[done]
    # a tensor ready exactly on a boundary is taken by that cycle (tolerance 1e-9 cycles)
    boundary = np.ceil(ready / cycle_s - 1e-9) if cycle_s >= _MIN_CYCLE_S else ready
    cycle = np.unique(boundary, return_inverse=True)[1]
    pos = np.lexsort((place, done, ready, cycle))
    out: list[list[str]] = []
    start = 0
    while start < len(pos):
        end = start
        while end < len(pos) and cycle[pos[end]] == cycle[pos[start]]:
            end += 1
        out.extend(fuse_responses([order[i] for i in pos[start:end]], threshold))
        start = end
    return out


def horovod(
    trace: Trace,
    cluster: Cluster,
    *,
    cycle_time_ms: float = 1.0,
    fusion_threshold_mb: float = 128.0,
    groups: int | list[list[str]] | None = None,
    fusion_threshold_bytes: int | None = None,
) -> Plan:
    """Horovod's tensor fusion (HOROVOD_CYCLE_TIME, HOROVOD_FUSION_THRESHOLD, groups).

    Parameters
    ----------
    trace, cluster
        The instance.
    cycle_time_ms
        Cycle time in milliseconds (default 1 as in recent Horovod; older versions used 5).
        0 (or anything below 1 ns) means every distinct ready time is a cycle of its own.
    fusion_threshold_mb
        Fusion threshold in MiB (default 128, ``HOROVOD_FUSION_THRESHOLD``'s default in
        ``horovod/common/operations.cc`` since v0.21.0; the docs still say 64; 0 disables
        fusion). Rounded up, as Horovod does on homogeneous clusters, to a multiple of
        ``gpus_per_node * 8 * 64`` bytes.
    groups
        Explicit groups: a number of contiguous groups over the parameter list, or lists of
        tensor names.
    fusion_threshold_bytes
        The fusion threshold in bytes, as ``HOROVOD_FUSION_THRESHOLD`` sets it (the spec may
        write that name, and ``HOROVOD_CYCLE_TIME`` for ``cycle_time_ms``); replaces
        ``fusion_threshold_mb``.

    Returns
    -------
    Plan
        Fused all-reduces in execution order, overlapped with the backward; the optimizer step
        waits for all.
    """
    cycle_ms = positive(cycle_time_ms, "horovod.cycle_time_ms", allow_zero=True)
    mb = positive(fusion_threshold_mb, "horovod.fusion_threshold_mb", allow_zero=True)
    unit = cluster.gpus_per_node * 8 * FUSION_BUFFER_ATOMIC_UNIT
    given = mib_to_bytes(mb)
    if fusion_threshold_bytes is not None:
        if fusion_threshold_mb != 128.0:
            raise SchedoptError("give the threshold once: in bytes or in MiB",
                                "horovod.fusion_threshold_bytes", fusion_threshold_bytes)
        given = int(positive(fusion_threshold_bytes, "horovod.fusion_threshold_bytes",
                             allow_zero=True))
    threshold = -(-given // unit) * unit
    buckets = horovod_buckets(trace, cycle_s=cycle_ms / 1000.0, threshold=threshold, groups=groups)
    knobs = {"cycle_time_ms": cycle_time_ms, "fusion_threshold_mb": fusion_threshold_mb,
             "groups": groups, "threshold_bytes": threshold}
    if fusion_threshold_bytes is not None:  # the spec's unit, not the default MiB
        knobs = {"cycle_time_ms": cycle_time_ms, "fusion_threshold_bytes":
                 fusion_threshold_bytes, "groups": groups, "threshold_bytes": threshold}
    return new_plan("horovod", trace, cluster, buckets, knobs)
