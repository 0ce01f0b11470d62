"""Which relaxations would close the multi-stage gaps: two candidate bounds, measured.

Usage::

    python benchmarks/multistage_relaxations.py                       # both layouts, seeds 0-11
    python benchmarks/multistage_relaxations.py --only pipelined --seeds 1 5
    python benchmarks/multistage_relaxations.py --pareto 0            # the 60-layer row, seed 0

The per-layer rows of ``bench_multistage.py`` with reordering end FEASIBLE on the bound's side
(docs/formulation.md, section 9). This script measures, on its four-layer analogues (eight
units, two tensors per layer, where :func:`.flowshop.enumerate_plans` gives the optimum), how
far below the optimum the solver's flow-shop views are, and how far a candidate relaxation is:

**Split at the last-ready bucket.** Let ``z`` be the bucket holding the last unit in readiness
order (released last, at ``R``; its tail is the whole next forward). Every other bucket is
launched either before ``z`` (the set ``Bf``) or after it (``Af``). Every stage serves the
buckets in launch order, so ``Bf``'s first stage runs before ``z``'s, ``Bf``'s second before
``z``'s second, and ``Af``'s stages all run after ``z``'s. Per bucketing and split (every one is
tried; the relaxation is their minimum), with preemptive single-machine (Jackson) bounds on
each resource:

* ``z``'s first stage ends no earlier than ``max(R, E_0(Bf)) + d_0(z)``, ``E_0`` the makespan of
  ``Bf``'s first stages from their releases; its second stage starts no earlier than that and
  than ``E_1(Bf)``, the makespan of ``Bf``'s second stages from their heads (release plus first
  stage); ``z`` then pays its later stages and its tail;
* ``Af``'s second stages follow ``z``'s, one at a time, each followed by its later stages and
  tail; ``Af``'s first stages follow ``z``'s first stage, each followed by its later stages and
  tail;
* on the pipelined hierarchical all-reduce, whose reduce-scatter and all-gather share the
  intra-node link in the simulator's order (the next bucket's reduce-scatter before a bucket's
  all-gather), ``z``'s all-gather also waits for the reduce-scatter of the bucket after it
  when ``Af`` is not empty, and ``Af``'s reduce-scatters and all-gathers share one link;
* every bucket meets its own chain, and the period is at least ``B + F + U``.

A plan meets every term with its own bucketing and split, so the minimum is a lower bound
(the script reports any row above the enumerated optimum as a violation). ``--pareto`` checks a
second question on a 60-layer row: the network's stage view (:mod:`.pipeline`) keeps, per unit
and bucket count, the componentwise least ``(H, G, D)`` of different bucketings; keeping every
Pareto-optimal triple instead (exact, slower) gives the bound it would reach.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from bench_multistage import LAYOUTS, PER_LAYER_REORDER, layout_cluster, random_trace

from schedopt.optimize import SolveOptions
from schedopt.optimize import flowshop as fs
from schedopt.optimize import pipeline as pp
from schedopt.optimize.bounds import lower_tails
from schedopt.optimize.instance import Instance, Segments, build_instance
from schedopt.optimize.twomachine import PathView

#: The layouts with two stages or more whose four-layer analogues this script relaxes.
RELAXED = ("pipelined", "ps-dedicated")


def analogue(layout: str, seed: int, layers: int = 4) -> Instance:
    """The instance of ``bench_multistage``'s random trace (two tensors per layer)."""
    cluster = layout_cluster(layout)
    trace = random_trace(seed, 2, cluster, layers=layers)
    opts = SolveOptions(workers=1, seed=0, baselines=False, **PER_LAYER_REORDER)
    return build_instance(trace, cluster, opts, merge=False)


def bucketings(inst: Instance) -> Iterator[Segments]:
    """Every bucketing of the instance's units, in readiness order (as
    :func:`.flowshop.enumerate_plans` takes them)."""
    for bits in itertools.product((False, True), repeat=max(0, inst.n - 1)):
        yield inst.segments_from_cuts(np.array(bits, dtype=bool))


def _makespan(tasks: list[tuple[int, int]]) -> int:
    """Preemptive single-machine makespan of ``(release, work)`` tasks (Jackson)."""
    return max((r + sum(w for r2, w in tasks if r2 >= r) for r, _ in tasks), default=0)


def _with_tails(start: int, jobs: list[tuple[int, int]]) -> int:
    """All ``(tail, work)`` jobs released at ``start`` on one machine: the least largest end
    plus tail (largest tail first)."""
    out, t = 0, start
    for tail, work in sorted(jobs, reverse=True):
        t += work
        out = max(out, t + tail)
    return out


def split_bound(inst: Instance, segs: Segments) -> int:
    """The relaxation of one bucketing (module docstring): the least over splits."""
    sp, sa, r = inst.stage_p, inst.stage_a, inst.r
    tails = inst.terms.bucket_tails
    assert tails is not None
    pipelined = len(inst.stages) == 3

    def d(s: int, b: tuple[int, int]) -> int:
        return int(sa[s] + sp[s, b[0]:b[1] + 1].sum())

    def q(b: tuple[int, int]) -> int:
        return int(lower_tails(tails, b[0], np.array([b[1]]))[0])

    last = len(inst.stages) - 1
    z, others = segs[-1], segs[:-1]
    chain = max(int(r[b[1]]) + sum(d(s, b) for s in range(last + 1)) + q(b) for b in segs)
    best = None
    for labels in itertools.product((True, False), repeat=len(others)):
        before = [b for b, x in zip(others, labels, strict=True) if x]
        after = [b for b, x in zip(others, labels, strict=True) if not x]
        first = max(int(r[z[1]]), _makespan([(int(r[b[1]]), d(0, b)) for b in before])) + d(0, z)
        second = max(first, _makespan([(int(r[b[1]]) + d(0, b), d(1, b)) for b in before]))
        if pipelined:
            gather = second + d(1, z)
            if after:  # the next bucket's reduce-scatter comes first on the shared link
                gather = max(gather, first + min(d(0, b) for b in after))
            terms = [gather + d(2, z) + q(z),
                     _with_tails(second + d(1, z), [(d(2, b) + q(b), d(1, b)) for b in after]),
                     _with_tails(first, [(q(b), d(0, b) + d(2, b)) for b in after]
                                 + [(q(z), d(2, z))])]
        else:
            terms = [second + d(1, z) + q(z),
                     _with_tails(second + d(1, z), [(q(b), d(1, b)) for b in after]),
                     _with_tails(first, [(d(1, b) + q(b), d(0, b)) for b in after])]
        value = max(*terms, chain)
        best = value if best is None else min(best, value)
    assert best is not None
    return best


def views_bound(inst: Instance) -> int:
    """The solver's flow-shop views (stage, resource and path views), bisected without a
    call limit."""
    views = fs.resource_views(inst)
    every: list[Any] = [*fs.stage_views(inst, views), *views, PathView(inst)]
    return max(fs._view_bound(inst, v, 0, 1 << 40, fs._Calls(None)) for v in every)


def row(layout: str, seed: int) -> dict[str, Any]:
    """One four-layer analogue: the optimum, the views' bound and the split relaxation."""
    inst = analogue(layout, seed)
    optimum = int(fs.enumerate_plans(inst, True)[0])
    views = views_bound(inst)
    split = max(min(split_bound(inst, s) for s in bucketings(inst)), int(inst.consts.k0))
    return {"layout": layout, "seed": seed, "optimum": optimum, "views": views, "split": split,
            "both": max(views, split)}


def _fits_exact(inst: Instance, view: pp.StageView, lam: int) -> bool:
    """:func:`.pipeline.stage_fits` keeping every Pareto-optimal ``(H, G, D)`` per unit and
    count level instead of their componentwise least."""
    n, top = inst.n, min(pp.COUNT_LEVELS, inst.n)
    p_suffix = np.r_[np.cumsum(view.p[::-1])[::-1], 0]
    fronts: list[list[list[tuple[int, int, int]]]] = [[[] for _ in range(top + 1)]
                                                      for _ in range(n + 1)]
    fronts[n][0] = [(pp._BIG, pp._BIG, pp._BIG)]
    for i in range(n - 1, -1, -1):
        h, g, ok = pp._terms(inst, view, lam, i, np.minimum(np.arange(top + 1) + 1, top))
        new: dict[int, set[tuple[int, int, int]]] = {}
        for jj in range(n - i):
            for c in range(top + 1):
                if not fronts[i + jj + 1][c] or not ok[jj, c]:
                    continue
                level, hb, gb = min(c + 1, top), int(h[jj]), int(g[jj])
                for big_h, big_g, big_d in fronts[i + jj + 1][c]:
                    pair = min(big_d, hb + big_g, big_h + gb)
                    if c and pair + view.a * level + p_suffix[i] > lam:
                        continue
                    new.setdefault(level, set()).add((min(big_h, hb), min(big_g, gb), pair))
        for level, points in new.items():
            kept: list[tuple[int, int, int]] = []
            for p in sorted(points):
                if not any(k[0] <= p[0] and k[1] <= p[1] and k[2] <= p[2] for k in kept):
                    kept.append(p)
            fronts[i][level] = kept
    return any(fronts[0][c] for c in range(top + 1))


def pareto(seed: int) -> None:
    """The network's stage view on the 60-layer pipelined row, as solved and exact."""
    inst = analogue("pipelined", seed, layers=60)
    view = fs.stage_views(inst, fs.resource_views(inst))[1]
    t0 = time.perf_counter()
    least = fs._view_bound(inst, view, 0, 1 << 40, fs._Calls(None))
    # the exact fronts are tighter: ``least - 1``, where the solved programme fails, fails too
    assert not _fits_exact(inst, view, least - 1)
    lo, hi = least - 1, 2 * least
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _fits_exact(inst, view, mid) else (mid, hi)
    print(f"rand60-s{seed}-t2, pipelined, the network's stage view: componentwise least"
          f" {least * inst.tick * 1e3:.4f} ms, exact Pareto fronts {hi * inst.tick * 1e3:.4f} ms"
          f" ({time.perf_counter() - t0:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="layouts whose name contains this")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(12)))
    ap.add_argument("--pareto", type=int, metavar="SEED",
                    help="only the exact stage view on the 60-layer pipelined row of SEED")
    args = ap.parse_args(argv)
    if args.pareto is not None:
        pareto(args.pareto)
        return 0
    assert set(RELAXED) <= set(LAYOUTS)
    print("| layout | instance | optimum (ticks) | views: below the optimum | split: below |"
          " both: below |")
    print("|---|---|---|---|---|---|")
    bad = 0
    for layout in RELAXED:
        if args.only and args.only not in layout:
            continue
        for seed in args.seeds:
            r = row(layout, seed)
            below = {k: 1 - r[k] / r["optimum"] for k in ("views", "split", "both")}
            bad += r["split"] > r["optimum"]
            print(f"| {layout} | rand4-s{seed}-t2 | {r['optimum']} | {below['views']:.2%} |"
                  f" {below['split']:.2%}{' VIOLATION' if r['split'] > r['optimum'] else ''} |"
                  f" {below['both']:.2%} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
