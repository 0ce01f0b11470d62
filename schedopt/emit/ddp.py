"""Plan -> PyTorch DistributedDataParallel (``bucket_cap_mb_list``, torch >= 2.13).

DDP rebuilds its buckets once, after the first iteration, by walking the parameters in the
order their gradients became ready, with one accumulator per dtype (and device); a bucket closes
as soon as its size reaches the current limit, and each dtype advances through the list of
limits on its own (the last limit repeats). ``bucket_cap_mb_list`` gives those limits per
bucket, converted with ``int(cap_mb * 2**20)`` (torch's ``_BucketCapacityConfig.create``), so a
fractional cap gives byte precision. Bucket ``j`` of a dtype, with ``B`` bytes whose last tensor
has ``b`` bytes, closes exactly at its last tensor when its limit lies in ``(B - b, B]``; the caps
chosen here are round numbers of MiB inside the intersection of those intervals over the dtypes
that have a ``j``-th bucket, one byte from either end where the interval allows. The schedopt
``ddp`` policy replays the assignment with the chosen caps, and the plan is exact when the
replay gives back its buckets in its launch order.
"""

from __future__ import annotations

import math
import pprint
from dataclasses import dataclass, field

from schedopt.emit.common import (
    Candidate,
    Emitted,
    deviations,
    dtype_runs,
    same_buckets,
    search,
    whole_tensor_buckets,
)
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace
from schedopt.policies.common import MIB
from schedopt.policies.ddp import ddp_buckets, ddp_limits
from schedopt.report.tables import fmt_bytes

__all__ = ["DdpCaps", "cap_mb_in", "ddp_caps", "emit_ddp"]

#: Uniform caps (MiB) tried when the plan cannot be expressed exactly.
UNIFORM_CAPS_MB = (0.25, 0.5, 1, 2, 4, 5, 8, 10, 16, 25, 32, 50, 64, 100, 128, 256, 512, 1024)


def _limit(cap_mb: float) -> int:
    """The byte limit DDP derives from a cap in MiB."""
    return int(cap_mb * MIB)


def cap_mb_in(lo: int, hi: float) -> float:
    """A round cap in MiB whose DDP limit ``int(cap * 2**20)`` lies in ``(lo, hi]``.

    The cap has as few decimal digits as possible (steps 10^p, 5·10^(p-1), 2·10^(p-1) MiB) and
    lies nearest the middle of the interval; its limit keeps one byte to spare on both sides
    when the interval holds three or more byte values. ``hi`` may be infinite (a last bucket
    that may stay open).

    Parameters
    ----------
    lo
        Exclusive lower bound on the limit, in bytes.
    hi
        Inclusive upper bound on the limit, in bytes (``math.inf`` allowed).
    """
    if math.isinf(hi):
        hi = 2 * lo + MIB
    lo_ok, hi_ok = int(lo) + 1, int(hi)
    if hi_ok - lo_ok >= 2:
        lo_ok, hi_ok = lo_ok + 1, hi_ok - 1
    mid = (lo_ok + hi_ok) / 2 / MIB
    top = math.ceil(math.log10(hi_ok / MIB)) + 1 if hi_ok > 0 else 0
    for p in range(top, -8, -1):
        for num, den in _steps(p):
            k_lo = -(-lo_ok * den // (num * MIB)) - 1
            k_hi = hi_ok * den // (num * MIB) + 1
            if k_hi < k_lo:
                continue
            k_mid = round(mid * den / num)
            near = (k for d in range(64) for k in (k_mid - d, k_mid + d) if d or k == k_mid)
            for k in near:
                if not max(k_lo, 1) <= k <= k_hi:
                    continue
                cap = k * num / den
                if lo_ok <= _limit(cap) <= hi_ok:
                    return cap
    return hi_ok / MIB


def _steps(p: int) -> list[tuple[int, int]]:
    """Steps 10^p, 5·10^(p-1), 2·10^(p-1) as (numerator, denominator)."""
    def frac(mant: int, exp: int) -> tuple[int, int]:
        return (mant * 10**exp, 1) if exp >= 0 else (mant, 10**-exp)

    return [frac(1, p), frac(5, p - 1), frac(2, p - 1)]


@dataclass
class DdpCaps:
    """Per-bucket caps for a plan and what DDP builds from them.

    Attributes
    ----------
    caps_mb
        ``bucket_cap_mb_list``.
    limits
        The byte limits DDP derives from them.
    buckets
        DDP's buckets with these limits, in launch order (the ``ddp`` policy's replay).
    exact
        The buckets and every other choice of the plan are DDP's.
    notes
        Why not, when not exact.
    """

    caps_mb: list[float]
    limits: list[int]
    buckets: list[list[str]]
    exact: bool
    notes: list[str] = field(default_factory=list)


def _caps_for(runs: dict[str, list[list]], *, open_last: bool) -> tuple[list[float], list[str]]:
    """Caps per position ``j`` from the runs of every dtype (see the module docstring)."""
    caps: list[float] = []
    notes: list[str] = []
    for j in range(max(len(r) for r in runs.values())):
        items = []
        for dtype, rs in runs.items():
            if j < len(rs):
                size = sum(t.bytes for t in rs[j])
                last = j == len(rs) - 1
                hi = math.inf if last and open_last else size
                items.append((size - rs[j][-1].bytes, hi, size, dtype))
        lo, hi = max(i[0] for i in items), min(i[1] for i in items)
        if lo >= hi:
            main = max(items, key=lambda i: i[2])
            notes.append(
                f"bucket position {j}: the dtypes {sorted(i[3] for i in items)} need caps "
                f"that do not overlap; the cap follows the {main[3]} bucket ({main[2]} bytes)")
            lo, hi = main[0], main[1]
        caps.append(cap_mb_in(lo, hi))
    return caps, notes


def ddp_caps(trace: Trace, plan: Plan) -> DdpCaps:
    """The ``bucket_cap_mb_list`` that expresses ``plan`` to DDP, or comes closest.

    Partitioned tensors are put back together first (the bucket holding most of a tensor's
    bytes takes it). Per dtype, the tensors in gradient-ready order are cut where their bucket
    changes; each run becomes one DDP bucket and the caps close every run at its last tensor.
    Two variants are tried (last bucket of each dtype closed by its cap or left open, which
    changes where it lands in the launch order); the one that reproduces the plan wins.

    Parameters
    ----------
    plan, trace
        The plan and its trace (checked by the caller).

    Returns
    -------
    DdpCaps
        Caps, limits, DDP's resulting buckets and whether they are the plan's.
    """
    groups = whole_tensor_buckets(trace, plan)
    bucket_of = {name: k for k, b in enumerate(groups) for name in b}
    runs = dtype_runs(trace.ready_order, bucket_of)
    tried = []
    for open_last in (False, True):
        caps, notes = _caps_for(runs, open_last=open_last)
        limits = ddp_limits(bucket_cap_mb_list=caps)
        built = ddp_buckets(trace, limits)
        tried.append((caps, limits, built, notes))
        if same_buckets(built, groups):
            break
    caps, limits, built, notes = tried[-1] if same_buckets(tried[-1][2], groups) else tried[0]
    reasons = deviations(plan, "DDP")
    if not same_buckets(built, groups):
        reasons += _mismatch(groups, built, runs, trace) + notes
    exact = not reasons and same_buckets(built, plan.buckets)
    return DdpCaps(caps, limits, built, exact, reasons)


def _mismatch(groups: list[list[str]], built: list[list[str]], runs: dict[str, list[list]],
              trace: Trace) -> list[str]:
    """Why DDP's buckets differ from the plan's (whole-tensor) buckets."""
    out = []
    dtype = {t.name: t.dtype for t in trace.tensor_list}
    mixed = [k for k, b in enumerate(groups) if len({dtype[m] for m in b}) > 1]
    if mixed:
        out.append(f"buckets {mixed[:5]} mix dtypes; DDP keeps one bucket per dtype")
    split = len(groups) + sum(len({dtype[m] for m in b}) - 1 for b in groups)
    if sum(len(r) for r in runs.values()) > split:
        out.append("some buckets are not contiguous in gradient-ready order (per dtype); DDP "
                   "splits them at the tensors of other buckets")
    if not out and sorted(map(sorted, groups)) == sorted(map(sorted, built)):
        out.append("the plan launches buckets out of gradient-ready order; DDP launches each "
                   "bucket as soon as it is full")
    if not out:
        out.append("DDP's per-dtype accumulators give these buckets another launch order")
    return out


def _uniform_candidates() -> list[Candidate]:
    out = [Candidate({"bucket_cap_mb": c}, {"bucket_cap_mb": c}, f"bucket_cap_mb={c}")
           for c in UNIFORM_CAPS_MB]
    out.append(Candidate({}, {}, "DDP's defaults (25 MiB, first bucket 1 MiB)"))
    return out


def emit_ddp(trace: Trace, cluster: Cluster | None, plan: Plan) -> Emitted:
    """Express ``plan`` as PyTorch DDP settings (``ddp.json`` and ``ddp_snippet.py``).

    Exact for plans whose buckets are contiguous in gradient-ready order per dtype, launched in
    the order they fill, wait-for-all, overlapped, not partitioned, one dtype per bucket. Other
    plans get the closest DDP setting: the per-bucket caps of their nearest expressible
    grouping, or a uniform ``bucket_cap_mb``, whichever simulates closest to the plan (by bucket
    count without a cluster); the notes say what was given up.

    Parameters
    ----------
    plan, trace
        The plan and the trace it was made for.
    cluster
        The cluster (optional): checks the plan's cluster hash and allows the simulated choice.

    Returns
    -------
    Emitted
        ``ddp.json`` (keyword arguments of ``DistributedDataParallel``) and a snippet.
    """
    plan.check_against(trace, cluster)
    caps = ddp_caps(trace, plan)
    structural = Candidate({"bucket_cap_mb_list": caps.caps_mb},
                           {"bucket_cap_mb_list": caps.caps_mb},
                           f"bucket_cap_mb_list with {len(caps.caps_mb)} caps")
    candidates = [structural] if caps.exact else [structural, *_uniform_candidates()]
    found = search("ddp", plan, trace, cluster, candidates, blocked=caps.notes)
    config = {**found.chosen.config, "gradient_as_bucket_view": True,
              "find_unused_parameters": False}
    if plan.policy == "ddp" and plan.knobs.get("static_graph"):
        config["static_graph"] = True  # the plan's own setting (the buckets are the same)
    return found.emitted("ddp", config,
                         _snippet(plan, trace, config, found.plan.buckets, found.exact))


def _snippet(plan: Plan, trace: Trace, config: dict, buckets: list[list[str]],
             exact: bool) -> str:
    size = {t.name: t.bytes for t in trace.tensor_list}
    lines = [
        f'"""PyTorch DDP settings for the {plan.policy} plan of {trace.name} '
        f"(trace {trace.fingerprint()}).",
        "",
        "Needs torch >= 2.13 for bucket_cap_mb_list. The buckets take effect at DDP's bucket",
        "rebuild after the first iteration, when gradients arrive in the trace's gradient-ready",
        "order and the parameter names are the trace's tensor names.",
        f"{'Exact' if exact else 'Approximate'}: see the notes of `schedopt emit`.",
        '"""',
        "",
        "from torch.nn.parallel import DistributedDataParallel",
        "",
        f"DDP_KWARGS = {pprint.pformat(config, width=96, compact=True, sort_dicts=False)}",
        "",
        "# Buckets DDP builds with these settings, in launch order:",
    ]
    for k, b in enumerate(buckets[:50]):
        members = b[0] if len(b) == 1 else f"{b[0]} .. {b[-1]}"
        lines.append(f"#   {k}: {len(b)} tensor{'' if len(b) == 1 else 's'}, "
                     f"{fmt_bytes(sum(size[m] for m in b))}, {members}")
    if len(buckets) > 50:
        lines.append(f"#   ... {len(buckets) - 50} more")
    lines += [
        "",
        "",
        "def wrap(model, **kwargs):",
        '    """Wrap ``model`` (process group initialised) with the plan\'s buckets."""',
        "    return DistributedDataParallel(model, **DDP_KWARGS, **kwargs)",
        "",
    ]
    if plan.accumulate > 1:
        lines += _accumulate_lines(plan.accumulate)
    return "\n".join(lines)


def _accumulate_lines(k: int) -> list[str]:
    """A training step of ``k`` micro-batches, the first ``k - 1`` under ``no_sync`` (DDP
    all-reduces in the last backward only, the plan's ``accumulate``)."""
    return [
        "",
        f"ACCUMULATE = {k}  # micro-batches per step (the plan's accumulate)",
        "",
        "",
        "def train_step(ddp_model, micro_batches, loss_fn, optimizer):",
        '    """One step: gradients accumulate locally under ``no_sync``; the backward of the',
        '    last micro-batch all-reduces them."""',
        "    import contextlib",
        "",
        "    assert len(micro_batches) == ACCUMULATE",
        "    for i, batch in enumerate(micro_batches):",
        "        last = i == len(micro_batches) - 1",
        "        with contextlib.nullcontext() if last else ddp_model.no_sync():",
        "            (loss_fn(ddp_model, batch) / len(micro_batches)).backward()",
        "    optimizer.step()",
        "    optimizer.zero_grad(set_to_none=True)",
        "",
    ]
