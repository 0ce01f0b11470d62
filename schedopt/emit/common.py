"""What every emitter shares: the result type, plan comparison, and the search for a config.

An emitter turns a :class:`~schedopt.model.plan.Plan` into the settings of one framework. Where the
framework can express the plan, the settings reproduce it exactly: the framework's own policy in
:mod:`schedopt.policies`, run with the emitted settings, returns the same buckets in the same
launch order with the same couplings. Where it cannot, the emitter picks, among candidate
settings, the one whose plan simulates closest to the plan's iteration time (or, without a
cluster, the one whose buckets resemble the plan's most) and says so in ``notes``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, split_member
from schedopt.model.trace import Tensor, Trace
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

__all__ = [
    "Candidate",
    "Emitted",
    "Search",
    "deviations",
    "dtype_runs",
    "placeholder_cluster",
    "round_int_in",
    "same_buckets",
    "same_plan",
    "search",
    "size_grid",
    "spec_of",
    "whole_tensor_buckets",
]


class Emitted(BaseModel):
    """A plan translated into one framework's settings.

    Attributes
    ----------
    target
        Emitter name (``ddp``, ``horovod``, ``deepspeed``, ``megatron``, ``json``).
    files
        File name -> text content (a JSON config and a Python snippet, or the plan itself).
    exact
        True when the settings reproduce the plan exactly under the model: the framework's
        policy, given these settings, yields the same buckets, launch order and couplings.
    notes
        What could not be expressed and how it was approximated (empty when exact and nothing
        needs saying).
    config
        The framework settings (the content of the main JSON file).
    spec
        The schedopt policy spec that models these settings (``ddp:bucket_cap_mb_list=[...]``);
        ``schedopt simulate --policy SPEC`` shows what they give. None for ``json``.
    plan_time_s, emitted_time_s
        Simulated iteration times of the plan and of the emitted settings, when a cluster was
        given.
    """

    model_config = ConfigDict(extra="forbid")

    target: str = Field(description="Emitter name.")
    files: dict[str, str] = Field(description="File name -> content.")
    exact: bool = Field(description="The settings reproduce the plan exactly.")
    notes: list[str] = Field(default_factory=list, description="Approximations made.")
    config: dict[str, Any] = Field(default_factory=dict, description="Framework settings.")
    spec: str | None = Field(default=None, description="Policy spec modelling the settings.")
    plan_time_s: float | None = Field(
        default=None, description="Simulated iteration time of the plan."
    )
    emitted_time_s: float | None = Field(
        default=None, description="Simulated iteration time of the emitted settings."
    )

    def write(self, folder: str | Path) -> list[Path]:
        """Write every file into ``folder`` (created if needed), all or nothing.

        Written through :func:`schedopt.files.output_files` (temporary files, then renamed), so
        a failure leaves no partial output.

        Returns
        -------
        list of Path
            The files written.

        Raises
        ------
        SchedoptError
            The folder or a file cannot be written.
        """
        from schedopt.files import output_files

        root = Path(folder)
        paths = {name: root / name for name in self.files}
        with output_files({f"--out {name}": path for name, path in paths.items()}) as files:
            for name, text in self.files.items():
                files.write_text(paths[name], text)
        return list(paths.values())


# ---------------------------------------------------------------------------- plan views


def placeholder_cluster(gpus_per_node: int = 8) -> Cluster:
    """A one-node cluster for building policy plans when no cluster is given (never simulated)."""
    return Cluster.model_validate({
        "name": "emit-placeholder", "nodes": 1, "gpus_per_node": gpus_per_node,
        "intra_link": {"bandwidth_Bps": 1e10},
    })


def whole_tensor_buckets(trace: Trace, plan: Plan) -> list[list[str]]:
    """The plan's buckets with every partitioned tensor put back together.

    A tensor whose pieces sit in several buckets goes to the bucket holding most of its bytes
    (ties: the later one in launch order, since the framework must wait for the whole tensor).
    Buckets left empty are dropped; members keep their order.
    """
    if not plan.partition:
        return [list(b) for b in plan.buckets]
    share: dict[str, dict[int, int]] = {}
    for k, bucket in enumerate(plan.buckets):
        for member in bucket:
            tensor, piece = split_member(member)
            if piece is not None and tensor in plan.partition:
                by_bucket = share.setdefault(tensor, {})
                by_bucket[k] = by_bucket.get(k, 0) + plan.partition[tensor][piece]
    home = {t: _largest_share(s) for t, s in share.items()}
    out: list[list[str]] = [[] for _ in plan.buckets]
    for k, bucket in enumerate(plan.buckets):
        for member in bucket:
            tensor, piece = split_member(member)
            if piece is None or tensor not in plan.partition:
                out[k].append(member)
            elif home[tensor] == k and tensor not in out[k]:
                out[k].append(tensor)
    return [b for b in out if b]


def _largest_share(share: dict[int, int]) -> int:
    """The bucket holding most bytes (ties: the later one)."""
    return max(share.items(), key=lambda kv: (kv[1], kv[0]))[0]


def dtype_runs(
    order: Sequence[Tensor], bucket_of: dict[str, int]
) -> dict[str, list[list[Tensor]]]:
    """Per dtype, its tensors in ``order`` cut into maximal runs of one bucket.

    This is how a framework with one accumulator per dtype that closes buckets by size sees a
    grouping: each run must become one of its buckets.
    """
    runs: dict[str, list[list[Tensor]]] = {}
    last: dict[str, int] = {}
    for t in order:
        k = bucket_of[t.name]
        seq = runs.setdefault(t.dtype, [])
        if not seq or last[t.dtype] != k:
            seq.append([])
        seq[-1].append(t)
        last[t.dtype] = k
    return runs


def _bucket_sets(buckets: Sequence[Sequence[str]]) -> list[frozenset[str]]:
    return [frozenset(b) for b in buckets]


def same_buckets(a: Sequence[Sequence[str]], b: Sequence[Sequence[str]]) -> bool:
    """Same buckets in the same launch order (member order inside a bucket does not matter)."""
    return _bucket_sets(a) == _bucket_sets(b)


def _stage_orders(plan: Plan) -> dict[int, list[int]]:
    ident = list(range(plan.num_buckets))
    return {s: o for s, o in plan.stage_orders.items() if o != ident}


def same_plan(plan: Plan, other: Plan) -> bool:
    """Whether ``other`` makes the same choices as ``plan`` (policy name and knobs aside)."""
    return (
        same_buckets(plan.buckets, other.buckets)
        and plan.partition == other.partition
        and _stage_orders(plan) == _stage_orders(other)
        and plan.next_forward == other.next_forward
        and plan.overlap == other.overlap
        and plan.collective == other.collective
    )


def deviations(plan: Plan, framework: str, *, overlap_always: bool = True) -> list[str]:
    """Plan choices that ``framework`` cannot express, one sentence each.

    Parameters
    ----------
    plan
        The plan.
    framework
        Name used in the sentences.
    overlap_always
        The framework always overlaps communication with the backward (no ``overlap=False``).
    """
    out: list[str] = []
    if plan.partition:
        out.append(f"{len(plan.partition)} tensors are partitioned; {framework} never splits a "
                   "tensor, so each goes whole to the bucket holding most of its bytes")
    if plan.next_forward != "wait-for-all":
        out.append(f"next_forward is {plan.next_forward}; {framework}'s optimizer step waits "
                   "for every bucket (wait-for-all)")
    if overlap_always and not plan.overlap:
        out.append(f"overlap is false; {framework} starts each all-reduce during the backward")
    if plan.collective is not None:
        out.append(f"the plan imposes the {plan.collective} collective; {framework} uses the "
                   "process group's all-reduce")
    if _stage_orders(plan):
        out.append(f"per-stage launch orders are given; {framework} keeps one order")
    return out


def spec_of(policy: str, knobs: dict[str, Any]) -> str:
    """The ``NAME:key=value,...`` spec of a policy and its knobs (JSON values)."""
    if not knobs:
        return policy
    items = ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in knobs.items())
    return f"{policy}:{items}"


# ---------------------------------------------------------------------------- numbers


def round_int_in(lo: int, hi: int) -> int:
    """A round integer in ``[lo, hi]``: the most trailing zeros (steps 10^p, 5·10^p, 2·10^p),
    nearest the middle."""
    if lo > hi:
        raise SchedoptError("empty interval", "round_int_in", (lo, hi))
    mid = (lo + hi) / 2
    top = max(0, int(math.log10(max(hi, 1))))
    for p in range(top, -1, -1):
        for step in (10**p, 5 * 10**p // 10, 2 * 10**p // 10):
            if step < 1:
                continue
            first = -(-lo // step) * step
            if first <= hi:
                last = hi // step * step
                k = min(max(round(mid / step), first // step), last // step)
                return k * step
    return lo


# ---------------------------------------------------------------------------- search


@dataclass
class Candidate:
    """One setting of a framework: its policy knobs and the config it is written as."""

    knobs: dict[str, Any]
    config: dict[str, Any]
    label: str


@dataclass
class Search:
    """The outcome of :func:`search`."""

    chosen: Candidate
    plan: Plan
    exact: bool
    plan_time_s: float | None = None
    emitted_time_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def emitted(self, target: str, config: dict[str, Any], snippet: str) -> Emitted:
        """The result for ``target``: ``<target>.json`` holding ``config`` and a snippet."""
        files = {f"{target}.json": json.dumps(config, indent=1) + "\n",
                 f"{target}_snippet.py": snippet}
        knobs = self.chosen.knobs
        if self.plan.accumulate > 1:
            knobs = {**knobs, "accumulate": self.plan.accumulate}
        return Emitted(target=target, files=files, exact=self.exact, notes=self.notes,
                       config=config, spec=spec_of(target, knobs),
                       plan_time_s=self.plan_time_s, emitted_time_s=self.emitted_time_s)


def _signature(p: Plan) -> Hashable:
    return (tuple(_bucket_sets(p.buckets)), p.overlap, p.next_forward)


def search(
    policy: str,
    plan: Plan,
    trace: Trace,
    cluster: Cluster | None,
    candidates: Sequence[Candidate],
    *,
    blocked: Sequence[str] = (),
    structure_cost: Callable[[Plan], float] | None = None,
) -> Search:
    """Pick the candidate setting that reproduces ``plan``, or the closest one.

    Every candidate is turned into a plan by ``policy`` (with the plan's prefetch and
    accumulation). The first candidate whose plan equals ``plan`` wins (exact), unless
    ``blocked`` lists plan choices the framework cannot express. Otherwise, with a cluster, the
    candidate whose simulated iteration time is closest to the plan's wins (ties within a
    billionth of the plan's time: the bucket count closest to the plan's, then the earlier
    candidate); without one, the candidate with the smallest ``structure_cost`` (default:
    difference in bucket count).

    Parameters
    ----------
    policy
        Policy name in :mod:`schedopt.policies`.
    plan, trace, cluster
        The plan to express and its instance (``cluster`` may be None).
    candidates
        Settings to try, the preferred first.
    blocked
        Reasons the plan cannot be exact whatever the setting.
    structure_cost
        Distance of a candidate plan from ``plan`` when no cluster is given.
    """
    if not candidates:
        raise SchedoptError("no candidate settings", f"emit.{policy}", None)
    build_on = cluster if cluster is not None else placeholder_cluster()
    built: list[tuple[Candidate, Plan]] = []
    seen: set[Hashable] = set()
    for cand in candidates:
        p = make_plan(trace, build_on, policy, prefetch=plan.prefetch,
                      accumulate=plan.accumulate, **cand.knobs)
        if not blocked and same_plan(plan, p):
            out = Search(cand, p, True)
            if cluster is not None:
                out.plan_time_s = simulate(trace, cluster, plan).iteration_time_s
                out.emitted_time_s = out.plan_time_s
            return out
        sig = _signature(p)
        if sig not in seen:
            seen.add(sig)
            built.append((cand, p))
    notes = list(blocked) or [f"no {policy} setting among those tried reproduces the plan's "
                              "buckets"]
    if cluster is None:
        cost = structure_cost or (lambda p: abs(p.num_buckets - plan.num_buckets))
        cand, p = min(built, key=lambda cp: cost(cp[1]))
        notes.append(f"chose {cand.label} ({p.num_buckets} buckets vs the plan's "
                     f"{plan.num_buckets}); give a cluster to choose by simulated time")
        return Search(cand, p, False, notes=notes)
    target = simulate(trace, cluster, plan).iteration_time_s
    timed = [(abs(t - target), t, cand, p) for cand, p in built
             for t in [simulate(trace, cluster, p).iteration_time_s]]
    best = min(d for d, *_ in timed)
    # ties (within a billionth of the plan's time): the bucket count closest to the plan's
    ties = [x for x in timed if x[0] <= best + 1e-9 * target]
    _, t, cand, p = min(ties, key=lambda x: abs(x[3].num_buckets - plan.num_buckets))
    notes.append(f"chose {cand.label}: it simulates to {t * 1e3:.4f} ms per iteration, the "
                 f"plan to {target * 1e3:.4f} ms (closest of {len(built)} settings tried)")
    return Search(cand, p, False, target, t, notes)


def size_grid(smallest: int, total: int, *extra: int) -> list[int]:
    """Sizes to try for a uniform bucket size: powers of two from ``smallest`` to past ``total``
    (and the ``extra`` sizes), sorted."""
    out = {int(x) for x in extra if x > 0}
    size = 1 << max(0, int(smallest).bit_length() - 1)
    while size < 2 * total:
        out.add(size)
        size *= 2
    return sorted(out)
