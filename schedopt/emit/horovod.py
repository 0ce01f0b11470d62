"""Plan -> Horovod (explicit ``groups``, HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME).

Each bucket becomes one group of ``hvd.DistributedOptimizer(..., groups=...)``: a group's
tensors are submitted together once all of them are ready. The fusion threshold is the smallest
multiple of Horovod's fusion-buffer unit (``local_size × 8 × 64`` bytes) that holds the largest
group, so no group is split; groups that complete in the same cycle may still be fused together
when they fit under the threshold, so several cycle times are tried (1 ms first, Horovod's
default). The schedopt ``horovod`` policy replays the controller with each setting over the
trace's ready times; the plan is exact when the replay gives back its buckets in its order.
Exactness therefore holds under that replay: real cycles also depend on when the background
thread wakes up.
"""

from __future__ import annotations

import pprint

from schedopt.emit.common import Candidate, Emitted, deviations, search, whole_tensor_buckets
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import MIB
from schedopt.policies.horovod import FUSION_BUFFER_ATOMIC_UNIT

__all__ = ["emit_horovod"]

#: Cycle times tried, in order of preference (milliseconds).
CYCLE_TIMES_MS = (1.0, 0.5, 0.2, 0.1, 0.05, 2.0, 5.0)


def emit_horovod(trace: Trace, cluster: Cluster | None, plan: Plan) -> Emitted:
    """Express ``plan`` as Horovod groups and environment settings.

    Parameters
    ----------
    plan, trace
        The plan and the trace it was made for.
    cluster
        The cluster (optional): its GPUs per node fix the fusion-buffer unit (8 GPUs assumed
        without one, a unit that also suits 1, 2 and 4); it allows the simulated choice.

    Returns
    -------
    Emitted
        ``horovod.json`` (``env`` and ``groups``) and ``horovod_snippet.py``.
    """
    plan.check_against(trace, cluster)
    groups = whole_tensor_buckets(trace, plan)
    size = {t.name: t.bytes for t in trace.tensor_list}
    dtype = {t.name: t.dtype for t in trace.tensor_list}
    local = cluster.gpus_per_node if cluster is not None else 8
    unit = local * 8 * FUSION_BUFFER_ATOMIC_UNIT
    largest = max(sum(size[m] for m in g) for g in groups)
    threshold = -(-largest // unit) * unit
    env_extra = {}
    if cluster is not None and cluster.collective == "hierarchical" and cluster.nodes > 1:
        env_extra["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    settings = [(cycle, threshold, True) for cycle in CYCLE_TIMES_MS]
    if plan.policy == "horovod" and not plan.knobs.get("groups"):
        # a plan made by Horovod's own fusion: its settings, without explicit groups
        own = plan.knobs.get("threshold_bytes")
        cycle = plan.knobs.get("cycle_time_ms")
        if isinstance(own, int) and isinstance(cycle, int | float) and cycle > 0:
            settings.append((float(cycle), -(-own // unit) * unit, False))
    settings += [(cycle, threshold, False) for cycle in CYCLE_TIMES_MS]
    candidates = []
    for cycle, limit, with_groups in settings:
        knobs: dict = {"cycle_time_ms": cycle, "fusion_threshold_mb": limit / MIB}
        env = {"HOROVOD_FUSION_THRESHOLD": str(limit), "HOROVOD_CYCLE_TIME": f"{cycle:g}",
               **env_extra}
        config: dict = {"env": env}
        label = f"HOROVOD_CYCLE_TIME={cycle:g}, HOROVOD_FUSION_THRESHOLD={limit}"
        if with_groups:
            knobs["groups"] = config["groups"] = groups
            label += " with the plan's groups"
        candidates.append(Candidate(knobs, config, label))
    blocked = deviations(plan, "Horovod")
    mixed = [k for k, g in enumerate(groups) if len({dtype[m] for m in g}) > 1]
    if mixed:
        blocked.append(f"buckets {mixed[:5]} mix dtypes; Horovod fuses one dtype at a time")
    found = search("horovod", plan, trace, cluster, candidates, blocked=blocked)
    config = found.chosen.config
    if not found.exact and not blocked:
        first = "Horovod's cycles fuse or reorder some groups under every setting tried"
        if _fifo(groups, trace):
            grouped = [c for c in candidates if "groups" in c.knobs]
            found = search("horovod", plan, trace, cluster, grouped)
            config = {"env": {**found.chosen.config["env"], "HOROVOD_DISABLE_GROUP_FUSION": "1"},
                      "groups": groups}
            found.notes[0] = first
            found.notes.insert(1, (
                "HOROVOD_DISABLE_GROUP_FUSION=1 is set: Horovod then never fuses one group with "
                "another, so each bucket is one all-reduce, launched as its group completes, "
                "which is the plan's order; the horovod policy does not model this variable, so "
                "the result is not marked exact and the times below are those of the fused "
                "replay"))
        else:
            found.notes[0] = first
    if plan.accumulate > 1:  # DistributedOptimizer's argument (all-reduce in the last backward)
        config = {**config, "backward_passes_per_step": plan.accumulate}
    return found.emitted("horovod", config, _snippet(plan, trace, config, found.exact))


def _fifo(groups: list[list[str]], trace: Trace) -> bool:
    """Whether the groups are listed in the order they complete (ties keep their order)."""
    ready = trace.ready_index
    done = [max(ready[m] for m in g) for g in groups]
    return done == sorted(done)


def _snippet(plan: Plan, trace: Trace, config: dict, exact: bool) -> str:
    env = pprint.pformat(config["env"], width=96, sort_dicts=False)
    groups = pprint.pformat(config.get("groups"), width=96, compact=True)
    return "\n".join([
        f'"""Horovod settings for the {plan.policy} plan of {trace.name} '
        f"(trace {trace.fingerprint()}).",
        "",
        "Set the environment before hvd.init(); group names (GROUPS None: Horovod's own fusion)",
        "are the trace's tensor names, which must be the model's parameter names.",
        f"{'Exact' if exact else 'Approximate'}: see the notes of `schedopt emit`.",
        '"""',
        "",
        "import os",
        "",
        f"HOROVOD_ENV = {env}",
        "",
        f"GROUPS = {groups}",
        "",
        f"BACKWARD_PASSES_PER_STEP = {config.get('backward_passes_per_step', 1)}",
        "",
        "",
        "def set_env():",
        '    """Export the fusion settings (call before ``hvd.init()``)."""',
        "    os.environ.update(HOROVOD_ENV)",
        "",
        "",
        "def distributed_optimizer(model, optimizer, **kwargs):",
        '    """Wrap ``optimizer`` with one Horovod group per bucket of the plan."""',
        "    import horovod.torch as hvd",
        "",
        "    params = dict(model.named_parameters())",
        '    kwargs.setdefault("backward_passes_per_step", BACKWARD_PASSES_PER_STEP)',
        "    if GROUPS is not None:",
        '        kwargs["groups"] = [[params[name] for name in group] for group in GROUPS]',
        "    return hvd.DistributedOptimizer(",
        "        optimizer, named_parameters=model.named_parameters(), **kwargs)",
        "",
    ])
