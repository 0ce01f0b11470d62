"""The S-SGD DAG of docs/model.md, built with networkx for checking and export.

:func:`build_dag` unrolls ``iterations`` iterations of a plan into a graph whose nodes are tasks
(keys as in :class:`~schedopt.model.plan.Schedule`) with ``duration`` and ``resources`` attributes
and whose edges are precedences: data dependencies and the order the plan fixes on every resource.
The simulator evaluates the same graph over arrays; :func:`check_schedule` verifies any schedule
against the graph, and :func:`longest_path_starts` evaluates it the slow, obvious way (a reference
for tests on small instances).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence

import networkx as nx
import numpy as np

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster, CommStage
from schedopt.model.plan import Plan, Schedule
from schedopt.model.sharded import comm_member_bytes
from schedopt.model.trace import Trace

__all__ = ["build_dag", "check_schedule", "longest_path_starts"]

Key = tuple


def _compute_order(trace: Trace, plan: Plan, first_layer: list[int], t: int,
                   last: int) -> list[Key]:
    """Compute-stream tasks of iteration ``t`` in stream order (``accumulate`` micro-batches,
    all but the last keyed with their micro-batch index)."""
    n_l, k_mb = len(trace.layers), plan.accumulate
    out: list[Key] = []
    for mb in range(k_mb):
        tag = () if mb == k_mb - 1 else (mb,)
        for lay in range(n_l):
            if mb == 0 and plan.next_forward == "per-layer" and t > 0:
                out += [("update", t - 1, k) for k, fl in enumerate(first_layer) if fl == lay]
            out.append(("fwd", t, lay, *tag))
        out += [("bwd", t, lay, *tag) for lay in range(n_l - 1, -1, -1)]
    if plan.next_forward == "wait-for-all":
        out.append(("update", t, -1))
    return out


def _compute_duration(trace: Trace, key: Key, nbytes: np.ndarray, total: float) -> float:
    """Duration of a compute-stream task: a layer's forward or backward, or an update (the
    whole ``update_s``, or bucket ``k``'s byte share)."""
    if key[0] == "fwd":
        return float(trace.forward[key[2]])
    if key[0] == "bwd":
        return float(trace.backward[key[2]])
    return trace.update_s if key[2] == -1 else float(trace.update_s * nbytes[key[2]] / total)


def _host_tasks(trace: Trace, cluster: Cluster, plan: Plan, t: int, chain: list[Key],
                fire_at: dict[int, list[int]], n_hooks: np.ndarray,
                last_compute: dict[int, Key], add: Callable[[Key, float, tuple[str, ...]], None],
                g: nx.DiGraph, seq: list[Key]) -> None:
    """The launching thread of iteration ``t`` (docs/model.md, "Host side"): a launch before
    every forward and backward, hooks after each backward launch of the last micro-batch, the
    collective calls they fire, the optimizer step's launches; after the previous step."""
    first = len(seq)
    for key in chain:
        if key[0] == "update":
            if key[2] >= 0:  # per-layer update of t-1: launched by that step's optimizer
                g.add_edge(("host-update", key[1]), key)
            continue
        lay, last = key[2], len(key) == 3
        if key[0] == "fwd":
            hkey, dur = ("host-fwd", *key[1:]), trace.layers[lay].host_forward_s
        else:
            hkey = ("host-bwd", *key[1:])
            dur = trace.layers[lay].host_backward_s + (
                cluster.hook_overhead_s * float(n_hooks[lay]) if last else 0.0)
        add(hkey, dur, ("host",))
        seq.append(hkey)
        g.add_edge(hkey, key)
        if key[0] == "bwd" and last:
            for k in fire_at.get(lay, []):
                lkey = ("launch", t, k)
                add(lkey, cluster.launch_overhead_s, ("host",))
                seq.append(lkey)
                g.add_edge(lkey, ("comm", t, k, 0))
    ukey = ("host-update", t)
    add(ukey, trace.host_update_s, ("host",))
    seq.append(ukey)
    if plan.next_forward == "wait-for-all":
        g.add_edge(ukey, ("update", t, -1))
    if t > 0:  # the loop waits for the previous step on the device
        g.add_edge(last_compute[t - 1], seq[first])


def build_dag(trace: Trace, cluster: Cluster, plan: Plan, iterations: int = 2) -> nx.DiGraph:
    """Unroll ``iterations`` iterations of ``plan`` into a task graph.

    Parameters
    ----------
    trace, cluster, plan
        The instance and the plan whose resource orders the graph encodes.
    iterations
        Number of iterations to unroll.

    Returns
    -------
    networkx.DiGraph
        Nodes carry ``duration`` (s) and ``resources`` (tuple of names); edges are precedences.
    """
    if plan.sharding is not None:
        raise SchedoptError("the DAG fixes every resource's order in advance; a sharded plan's"
                            " network order follows its issue times (simulate it instead)",
                            "plan.sharding", plan.sharding.mode)
    if cluster.comm_concurrency > 1:
        raise SchedoptError("the DAG serves every resource one task at a time; concurrent "
                            "collectives take whichever channel frees first (simulate instead)",
                            "cluster.comm_concurrency", cluster.comm_concurrency)
    members = plan.check_against(trace, cluster)
    g = nx.DiGraph()
    stages = cluster.comm_stages(plan.collective)
    nbytes = members.bucket_bytes()
    moved = np.bincount(members.bucket, minlength=members.num_buckets,
                        weights=comm_member_bytes(trace, plan, members.nbytes))
    first_layer = [int(x) for x in members.ready_layer()]
    total = float(nbytes.sum())
    res_seq: dict[str, list[Key]] = defaultdict(list)

    def add(key: Key, dur: float, res: tuple[str, ...]) -> None:
        g.add_node(key, duration=float(dur), resources=res)

    comm_order = plan.comm_sequence(len(stages))
    last_compute: dict[int, Key] = {}
    host = trace.has_host or cluster.has_host
    # the reducer fires buckets in launch order, each once it and every earlier one is complete
    fire_at: dict[int, list[int]] = defaultdict(list)
    lowest = len(trace.layers)
    for s, k in comm_order:
        if s == 0:
            lowest = min(lowest, first_layer[k]) if plan.overlap else 0
            fire_at[lowest].append(k)
    n_hooks = np.bincount(trace.ready_layer, minlength=len(trace.layers))
    # the buckets' compute-stream time, in the backward that completes them (docs/model.md)
    scaling = cluster.bucket_compute_s * np.bincount(first_layer, minlength=len(trace.layers))
    for t in range(iterations):
        _data_tasks(g, trace, plan, t, last_compute, add, res_seq)
        chain = _compute_order(trace, plan, first_layer, t, iterations - 1)
        for key in chain:
            extra = float(scaling[key[2]]) if key[0] == "bwd" and len(key) == 3 else 0.0
            add(key, _compute_duration(trace, key, nbytes, total) + extra, ("compute",))
        res_seq["compute"] += chain
        if host:
            _host_tasks(trace, cluster, plan, t, chain, fire_at, n_hooks, last_compute, add, g,
                        res_seq["host"])
        g.add_edge(("h2d", t), chain[next(i for i, key in enumerate(chain) if key[0] == "fwd")])
        last_compute[t] = ("update", t, -1) if plan.next_forward == "wait-for-all" else (
            "bwd", t, 0)
        _comm_tasks(g, plan, t, iterations, comm_order, stages, moved, first_layer, add, res_seq)
    for seq in res_seq.values():
        for a, b in itertools.pairwise(seq):
            g.add_edge(a, b)
    for key in list(g.nodes):
        if "duration" not in g.nodes[key]:
            g.remove_node(key)
    return g


def _data_tasks(g: nx.DiGraph, trace: Trace, plan: Plan, t: int, last_compute: dict[int, Key],
                add: Callable[[Key, float, tuple[str, ...]], None],
                res_seq: dict[str, list[Key]]) -> None:
    """Iteration ``t``'s read and copy of its batch (with prefetch, of batch ``t + 1`` too:
    it is read during iteration ``t``)."""
    data = [t] if (t == 0 or not plan.prefetch) else []
    if plan.prefetch:
        data.append(t + 1)
    for d in data:
        add(("io", d), trace.io_s, ("cpu",))
        add(("h2d", d), trace.h2d_s, ("pcie",))
        g.add_edge(("io", d), ("h2d", d))
        res_seq["cpu"].append(("io", d))
        res_seq["pcie"].append(("h2d", d))
        done = d - 1 - plan.prefetch
        if done >= 0:
            g.add_edge(last_compute[done], ("io", d))


def _comm_tasks(g: nx.DiGraph, plan: Plan, t: int, iterations: int,
                comm_order: list[tuple[int, int]], stages: Sequence[CommStage], moved: np.ndarray,
                first_layer: list[int], add: Callable[[Key, float, tuple[str, ...]], None],
                res_seq: dict[str, list[Key]]) -> None:
    """Iteration ``t``'s communication stages in the plan's order on their resources, each
    after its bucket's backward or its previous stage, and the updates that wait for them."""
    for s, k in comm_order:
        key = ("comm", t, k, s)
        add(key, stages[s].time(moved[k]), stages[s].resources)
        for r in stages[s].resources:
            res_seq[r].append(key)
        src: Key = ("comm", t, k, s - 1) if s else (
            "bwd", t, first_layer[k] if plan.overlap else 0)
        g.add_edge(src, key)
    n_s = len(stages)
    for k in range(len(moved)):
        done_key = ("comm", t, k, n_s - 1) if n_s else (
            "bwd", t, first_layer[k] if plan.overlap else 0)
        if plan.next_forward == "wait-for-all":
            g.add_edge(done_key, ("update", t, -1))
        elif t + 1 < iterations:
            g.add_edge(done_key, ("update", t, k))


def longest_path_starts(g: nx.DiGraph) -> dict[Key, float]:
    """Earliest start of every task (longest path from the sources), in topological order."""
    start: dict[Key, float] = {}
    for node in nx.topological_sort(g):
        start[node] = max(
            (start[p] + g.nodes[p]["duration"] for p in g.predecessors(node)), default=0.0
        )
    return start


def check_schedule(
    trace: Trace, cluster: Cluster, plan: Plan, schedule: Schedule, tol: float = 1e-9
) -> list[str]:
    """Verify a recorded schedule against the DAG; return the violations (empty when valid).

    Checks every task's duration, every precedence, and that no resource runs two tasks at once.
    """
    if not schedule.tasks:
        return ["schedule has no recorded tasks (simulate with record=True)"]
    iters = 1 + max(k[1] for k in schedule.tasks if k[0] == "fwd")
    g = build_dag(trace, cluster, plan, iterations=iters)
    problems: list[str] = []
    scale = tol * max(1.0, schedule.iteration_time_s * iters)
    for key, data in g.nodes(data=True):
        if key not in schedule.tasks:
            problems.append(f"{key} missing from the schedule")
            continue
        s, e = schedule.tasks[key]
        if abs((e - s) - data["duration"]) > scale:
            problems.append(f"{key} lasts {e - s} instead of {data['duration']}")
    if problems:
        return problems
    for u, v in g.edges:
        if schedule.tasks[v][0] < schedule.tasks[u][1] - scale:
            problems.append(f"{v} starts before {u} ends")
    busy: dict[str, list[tuple[float, float, Key]]] = defaultdict(list)
    for key, data in g.nodes(data=True):
        s, e = schedule.tasks[key]
        if e > s:
            for r in data["resources"]:
                busy[r].append((s, e, key))
    for r, spans in busy.items():
        spans.sort()
        for (s1, e1, k1), (s2, e2, k2) in itertools.pairwise(spans):
            if min(e1, e2) - max(s1, s2) > scale:
                problems.append(f"{r} runs {k1} and {k2} at once")
    return problems
