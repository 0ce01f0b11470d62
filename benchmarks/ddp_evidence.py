"""Real PyTorch DDP runs on this machine against schedopt's predictions (docs/validation.md).

Runs, with the same commands a user runs (docs/guide.md), for the models of
``benchmarks/ddp_models.py`` (2 processes, gloo over loopback, OMP_NUM_THREADS pinned):

1. ``bench-comm`` (all-reduce latency of isolated calls, and the contention: compute under
   all-reduces ``s``, all-reduces under compute ``s_c``), ``bench-comm --pattern queued``
   (calls back to back, for comparison) and ``fit-comm --out`` (the cluster the plans are
   optimized for);
2. per model, before each round of its runs: ``bench-comm`` again, and ``profile --procs 2
   --grad-view`` (two ranks computing at once, the same thread count as the runs, DDP's copy
   of the gradients into its buckets timed in the backward and the copies made the gradients,
   as ``gradient_as_bucket_view`` in the runs: the trace of record), and for comparison
   ``--grad-copy`` (autograd's gradients kept until ``zero_grad``) and one process alone
   without the copy (PROFILES); each
   trace is the per-layer median of its profiles over the rounds, and the cluster of record
   is ``fit-comm`` on every ``bench-comm`` run pooled (per size the median; ``s`` and ``s_c``
   the medians), so both span the minutes of the runs;
3. ``optimize --target ddp`` (the optimal DDP-expressible plan);
4. ``bench-ddp`` at bucket caps 1, 5, 25, 100 MiB, no overlap (``sync-easgd``) and the plan,
   ``--config-rounds`` rounds, each after its own profile (the median round per
   configuration is its measurement);
5. ``validate``: predictions from profile + bench-comm + fit-comm only, with the measured
   ``s`` and ``s_c``, with the measured ``s`` and ``s_c = 1`` (compute slowed, communication
   not), with ``s = s_c = 1`` (free overlap), with the first ``bench-comm`` run alone, with
   the latencies of queued calls, and with the other profiles (VARIANTS); and the minor page
   faults of an iteration in the profiles of record and in each configuration's runs (CPU
   ranks: page work the times include, which differs between them);
6. ``calibrate`` leaving one configuration out, and predicting it, for every fit set of
   ``FITS`` (both slowdowns and the per-collective overhead; a compute scale per model with
   some of them);
7. the measured gain: default DDP, the optimum and the optimum of the model without the
   communication slowdown (``s_c = 1``) alternately (``--rounds``), on the model with the
   largest predicted gain of either.

Prints tables (instance, method, figure) and the machine load before and after. Usage::

    python benchmarks/ddp_evidence.py [--out DIR] [--threads 1] [--rounds 5] [--iters 20]
                                      [--config-rounds 3]

Run it from the repository root (the factories are ``benchmarks.ddp_models:...``). Timings are
only meaningful on an otherwise idle machine: it refuses to start above ``--max-load`` (1-minute
load average) unless ``--force``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from schedopt.files import load_cluster, load_trace
from schedopt.model.plan import Plan
from schedopt.model.trace import median_trace

#: Profiles taken before every round of runs: suffix of the trace file -> (what it is,
#: ``profile`` options). The first is the trace of record (optimized, emitted, calibrated).
PROFILES: dict[str, tuple[str, list[str]]] = {
    "": ("2 co-running ranks, DDP's gradient copy made the gradient (gradient_as_bucket_view,"
         " as the runs)", ["--procs", "2", "--grad-view"]),
    "-copy": ("2 co-running ranks, DDP's gradient copy, autograd's gradient kept",
              ["--procs", "2", "--grad-copy"]),
    "-alone": ("one process alone, no copy", []),
}
#: Predictions validated: name -> (fields replaced in the fitted cluster, profile suffix).
VARIANTS: dict[str, tuple[dict[str, float], str]] = {
    "loopback": ({}, ""),
    "loopback-sc1": ({"comm_slowdown": 1.0}, ""),
    "loopback-s1": ({"overlap_slowdown": 1.0, "comm_slowdown": 1.0}, ""),
    "loopback-single": ({}, ""),  # the first bench-comm run alone (the cluster of the plans)
    "loopback-queued": ({}, ""),  # bench-comm --pattern queued, pooled alike; same s and s_c
    "copy": ({}, "-copy"),
    "alone": ({}, "-alone"),
}
VARIANT_NAMES = {"loopback": "measured s and s_c", "loopback-sc1": "measured s, s_c = 1",
                 "loopback-s1": "s = s_c = 1",
                 "loopback-single": "measured s and s_c, one bench-comm run",
                 "loopback-queued": "measured s and s_c, bench-comm calls queued",
                 "copy": "measured s and s_c, profile keeping autograd's gradients",
                 "alone": "measured s and s_c, profile of one process alone"}
MODELS = {  # name: (factory, input shape, input dtype)
    "mlp": ("benchmarks.ddp_models:mlp", "32,1536", "float32"),
    "bert_small": ("benchmarks.ddp_models:bert_small", "2,64", "int64"),
    "mlp12": ("benchmarks.ddp_models:mlp12", "32,768", "float32"),
    # chosen before they were measured: convolutional, attention, embedding-heavy
    "convnet": ("benchmarks.ddp_models:convnet", "4,3,64,64", "float32"),
    "gpt_small": ("benchmarks.ddp_models:gpt_small", "1,256", "int64"),
    "dlrm": ("benchmarks.ddp_models:dlrm", "64,8", "int64"),
}
#: The bucket caps whose ranking is compared (measured against predicted).
CAPS = ["ddp:bucket_cap_mb=1", "ddp:bucket_cap_mb=5", "ddp:bucket_cap_mb=25",
        "ddp:bucket_cap_mb=100"]
#: Predicted times within this fraction of each other tie (``tune``'s resolution, TIE_REL).
TIE = 1e-3
CONFIGS = ["ddp:bucket_cap_mb=1", "ddp:bucket_cap_mb=5", "ddp:bucket_cap_mb=25",
           "ddp:bucket_cap_mb=100", "sync-easgd"]


def schedopt(*args: Any, env: dict[str, str]) -> str:
    """Run ``python -m schedopt ARGS``; return stdout (stderr passes through)."""
    cmd = [sys.executable, "-m", "schedopt", *map(str, args)]
    print("$ schedopt " + " ".join(map(str, args)), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env, check=False)
    if proc.returncode:
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def write_rows(path: Path, rows: list[dict[str, str]], **override: str) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({**r, **override})


def config_of(policy: str) -> str:
    return "plan" if policy.startswith("plan:") or "bucket_cap_mb_list" in policy else policy


def validate(csv_path: Path, env: dict[str, str]) -> dict[str, Any]:
    return json.loads(schedopt("validate", csv_path, "--json", env=env))


def measure(d: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    """Steps 1-4: comm file, cluster; per model its profiles, plans and runs.

    Every round of a model's runs follows a profile of its own, taken on 2 co-running ranks
    (``profile --procs 2``, the setting of the runs); the model's trace is the per-layer median
    of those profiles, so the profile spans the same minutes as the runs (this VM's speed drifts
    by tens of percent within minutes). The plan is optimized on the first profile and bound to
    the merged trace once the rounds are done.
    """
    bench_comm(d, "comm-start-", args, env)
    fit_cluster(d, ["comm-start-"], env)  # the cluster the plans are optimized for
    (d / "loopback-single.json").write_text((d / "loopback.json").read_text())
    for m in MODELS:
        measure_model(d, m, args, env)
    # the cluster of record: every bench-comm run of this run, pooled (per size the median)
    fit_cluster(d, ["comm-start-", *(f"comm-{m}-round{r}-" for m in MODELS
                                    for r in range(args.config_rounds))], env)
    for m in MODELS:  # the plans, bound to the traces and clusters of record
        for suffix in PROFILES:
            rebind(d / f"{m}-opt{suffix}.json", d / f"{m}{suffix}.json", d / "loopback.json")
        rebind(d / f"{m}-opt-sc1.json", d / f"{m}.json", d / "loopback-sc1.json")


def bench_comm(d: Path, stem: str, args: argparse.Namespace, env: dict[str, str]) -> None:
    """One ``bench-comm`` run (latencies of isolated calls, ``s`` and ``s_c``) into
    ``d/STEM2.txt``, and the latencies of queued calls (``--pattern queued``, as nccl-tests)
    into ``d/STEMqueued-2.txt``."""
    schedopt("bench-comm", "--procs", 2, "--sizes", "4K:64M", "--iters", 20, "--threads",
             args.threads, "--out", d / f"{stem}2.txt", env=env)
    schedopt("bench-comm", "--procs", 2, "--sizes", "4K:64M", "--iters", 20, "--threads",
             args.threads, "--pattern", "queued", "--overlap-repeats", 0,
             "--out", d / f"{stem}queued-2.txt", env=env)


def fit_cluster(d: Path, stems: list[str], env: dict[str, str]) -> None:
    """``fit-comm --out loopback.json`` on the bench-comm runs ``stems`` (pooled), and the
    clusters of VARIANTS derived from it."""
    print(schedopt("fit-comm", *(d / f"{s}2.txt" for s in stems), "--out", d / "loopback.json",
                   env=env))
    cl = json.loads((d / "loopback.json").read_text())
    schedopt("fit-comm", *(d / f"{s}queued-2.txt" for s in stems), "--out",
             d / "loopback-queued.json", env=env)
    queued = json.loads((d / "loopback-queued.json").read_text())
    (d / "loopback-queued.json").write_text(json.dumps(
        {**queued, "overlap_slowdown": cl["overlap_slowdown"],
         "comm_slowdown": cl["comm_slowdown"]}))
    for name, (over, _) in VARIANTS.items():
        if over:
            (d / f"{name}.json").write_text(json.dumps({**cl, "name": name, **over}))


def profile(d: Path, m: str, r: int, args: argparse.Namespace, env: dict[str, str]) -> None:
    """Round ``r``'s measurements before the runs of model ``m``: a ``bench-comm`` run, then
    its profiles (every entry of PROFILES), one after the other."""
    factory, shape, dtype = MODELS[m]
    bench_comm(d, f"comm-{m}-round{r}-", args, env)
    for suffix, (_, options) in PROFILES.items():
        schedopt("profile", factory, "--input-shape", shape, "--input-dtype", dtype, "--name",
                 m, "--out", d / f"{m}{suffix}-prof{r}.json", "--repeats", 10, "--warmup", 3,
                 "--threads", args.threads, *options, env=env)


def measure_model(d: Path, m: str, args: argparse.Namespace, env: dict[str, str]) -> None:
    """Steps 2-4 for model ``m``: profiles, plans and ``--config-rounds`` rounds of runs."""
    factory, shape, dtype = MODELS[m]
    first = f"{m}-prof0.json"
    profile(d, m, 0, args, env)
    for cl, out in (("loopback", f"{m}-opt.json"), ("loopback-sc1", f"{m}-opt-sc1.json")):
        schedopt("optimize", d / first, d / f"{cl}.json", "--target", "ddp", "--out", d / out,
                 "--json", env=env)
    specs = [a for c in CONFIGS for a in ("-p", c)]
    rows: list[dict[str, str]] = []
    for r in range(args.config_rounds):
        if r:
            profile(d, m, r, args, env)
        print(schedopt("bench-ddp", factory, "--input-shape", shape, "--input-dtype", dtype,
                       "--trace", d / first, "--cluster", d / "loopback.json", *specs,
                       "--plan", d / f"{m}-opt.json", "--iters", args.iters, "--warmup", 5,
                       "--threads", args.threads, "--out", d / f"{m}-round{r}.csv", env=env))
        rows += read_rows(d / f"{m}-round{r}.csv")
    for suffix, (what, _) in PROFILES.items():
        merged = median_trace([load_trace(d / f"{m}{suffix}-prof{r}.json")
                               for r in range(args.config_rounds)],
                              source=f"median of {args.config_rounds} profiles ({what}), one "
                                     "before each round of runs")
        (d / f"{m}{suffix}.json").write_text(merged.model_dump_json(exclude_none=True))
        if suffix:
            (d / f"{m}-opt{suffix}.json").write_text((d / f"{m}-opt.json").read_text())
    write_rows(d / f"{m}-rounds.csv", rows, trace=f"{m}.json")
    write_rows(d / f"{m}-runs.csv", medians(read_rows(d / f"{m}-rounds.csv")))


def rebind(path: Path, trace_path: Path, cluster_path: Path) -> None:
    """Bind the plan of the ``optimize --json`` file ``path`` to a trace and a cluster (the
    same model and machine, re-measured): its buckets must be valid for both; only the
    fingerprints change."""
    res = json.loads(path.read_text())
    trace, cluster = load_trace(trace_path), load_cluster(cluster_path)
    plan = Plan.model_validate({**res["plan"], "trace_hash": None, "cluster_hash": None})
    plan.check_against(trace, cluster)
    res["plan"]["trace_hash"] = trace.fingerprint()
    res["plan"]["cluster_hash"] = cluster.fingerprint()
    path.write_text(json.dumps(res))


def medians(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """One row per configuration: the median round (its spread and samples with it)."""
    by: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in rows:
        by.setdefault((r["trace"], r["policy"]), []).append(r)
    out = []
    for group in by.values():
        group.sort(key=lambda r: float(r["iteration_time_s"]))
        mid = dict(group[len(group) // 2])
        mid["source"] = (f"median of {len(group)} rounds ("
                         + ", ".join(f"{float(r['iteration_time_s']) * 1e3:.1f}" for r in group)
                         + " ms); " + mid["source"])
        out.append(mid)
    return out


def accuracy(d: Path, env: dict[str, str]) -> list[tuple[str, str, str]]:
    """Steps 5-6: validate (each cluster variant) and leave-one-configuration-out calibration."""
    rows = [r for m in MODELS for r in read_rows(d / f"{m}-runs.csv")]
    table: list[tuple[str, str, str]] = []
    per_row: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for variant, (_, suffix) in VARIANTS.items():
        f = "runs.csv" if variant == "loopback" else f"runs-{variant}.csv"
        write_rows(d / f, [on_profile(r, suffix) for r in rows],
                   **({} if variant == "loopback" or suffix else {"cluster": f"{variant}.json"}))
        rep = validate(d / f, env)
        table.append(("all rows", f"predicted, {VARIANT_NAMES[variant]}", f"mean |error| "
                      f"{rep['mean_abs_error'] * 100:.1f}%, max {rep['max_abs_error'] * 100:.1f}%"))
        for row, r in zip(rows, rep["rows"], strict=True):  # keyed by the row of record
            per_row.setdefault((row["trace"], config_of(row["policy"])), []).append(
                (r["measured_s"], r["predicted_s"], r["error"]))
    table += ranking(per_row, rows)
    heads = " | ".join(f"predicted ms ({VARIANT_NAMES[v]}) | error" for v in VARIANTS)
    print(f"| model | configuration | measured ms | {heads} |\n|"
          + " --- |" * (3 + 2 * len(VARIANTS)))
    for (trace, cfg), cells in per_row.items():
        preds = " | ".join(f"{p * 1e3:.1f} | {e * 100:+.1f}%" for _, p, e in cells)
        print(f"| {Path(trace).stem} | {cfg} | {cells[0][0] * 1e3:.1f} | {preds} |")
    return table + leave_one_out(d, rows, env)


ROUNDS = re.compile(r"median of \d+ rounds \(([^)]*) ms\)")


def ranking(per_row: dict[tuple[str, str], list[tuple[float, float, float]]],
            rows: list[dict[str, str]]) -> list[tuple[str, str, str]]:
    """Per model: the ranking of the bucket caps of CAPS, measured against predicted (the
    prediction of record), pair by pair, and the mean |error| of the model's rows.

    A pair is *clear* when the measured rounds of the two caps do not overlap (every round of
    one faster than every round of the other) and *tied* when the predictions are within
    :data:`TIE` (the same buckets, or times the model cannot rank); a tie is not counted right.
    """
    rounds = {(Path(r["trace"]).stem, config_of(r["policy"])):
              [float(x) for x in m.group(1).split(",")]
              for r in rows if (m := ROUNDS.search(r["source"]))}
    table = []
    for model in MODELS:
        cells = {cfg: c[0] for (trace, cfg), c in per_row.items() if Path(trace).stem == model}
        caps = [cfg for cfg in CAPS if cfg in cells]
        pairs = [(a, b) for i, a in enumerate(caps) for b in caps[i + 1:]]
        tied = {(a, b) for a, b in pairs
                if abs(cells[a][1] - cells[b][1]) <= TIE * min(cells[a][1], cells[b][1])}
        right = {(a, b) for a, b in pairs if (a, b) not in tied
                 and (cells[a][0] < cells[b][0]) == (cells[a][1] < cells[b][1])}
        runs = {c: rounds.get((model, c), [cells[c][0] * 1e3]) for c in caps}
        clear = [(a, b) for a, b in pairs
                 if max(runs[a]) < min(runs[b]) or max(runs[b]) < min(runs[a])]
        errors = [abs(e) for _, _, e in cells.values()]
        table.append((model, "ranking of the caps 1/5/25/100 MiB, measured against predicted",
                       f"{len(right)} of {len(pairs)} pairs right, {len(tied)} predicted tied "
                       f"({sum(p in right for p in clear)} of {len(clear)} where the measured "
                       f"rounds do not overlap); mean |error| {statistics.mean(errors) * 100:.1f}%"
                       f" over {len(errors)} rows"))
    return table


#: Parameters ``calibrate`` fits in the leave-one-configuration-out runs: the cluster's, and
#: the cluster's with a compute scale per model (re-timed traces).
FITS = {"s, s_c, overhead": "overlap_slowdown,comm_slowdown,collective_overhead",
        "s, s_c, overhead, compute per model":
            "overlap_slowdown,comm_slowdown,collective_overhead,compute_scale",
        "compute per model": "compute_scale",
        "overhead, compute per model": "collective_overhead,compute_scale",
        "s, compute per model": "overlap_slowdown,compute_scale"}


def on_profile(row: dict[str, str], suffix: str) -> dict[str, str]:
    """``row`` on the profile ``suffix`` of PROFILES (its plan rebound to that trace)."""
    if not suffix:
        return row
    stem = Path(row["trace"]).stem
    out = {**row, "trace": f"{stem}{suffix}.json"}
    if row["policy"].startswith("plan:"):
        out["policy"] = f"plan:{stem}-opt{suffix}.json"
    return out


def leave_one_out(d: Path, rows: list[dict[str, str]], env: dict[str, str]
                  ) -> list[tuple[str, str, str]]:
    """Calibrate on all configurations but one; predict the one left out (each fit of FITS)."""
    table: list[tuple[str, str, str]] = []
    for label, fit in FITS.items():
        loco: list[float] = []
        for cfg in [*CONFIGS, "plan"]:
            tag = cfg.replace(":", "_").replace("=", "") + f"-f{list(FITS).index(label)}"
            train = [r for r in rows if config_of(r["policy"]) != cfg]
            write_rows(d / f"train-{tag}.csv", train)
            out = json.loads(schedopt("calibrate", d / f"train-{tag}.csv", "--out",
                                      d / f"cal-{tag}", "--fit", fit, "--json", env=env))
            cal = out["clusters"][0]
            test = [retimed(d, r, cal) for r in rows if config_of(r["policy"]) == cfg]
            write_rows(d / f"test-{tag}.csv", test)
            rep = validate(d / f"test-{tag}.csv", env)
            loco += [abs(r["error"]) for r in rep["rows"]]
            params = {p["name"]: p["value"] for p in cal["params"]}
            scales = ", ".join(f"{Path(k[14:-1]).stem} {v:.3f}" for k, v in params.items()
                               if k.startswith("compute_scale["))
            table.append((f"left out: {cfg}", f"calibrated on the rest ({label})", "errors "
                          + ", ".join(f"{r['error'] * 100:+.1f}%" for r in rep["rows"])
                          + f" ({fitted(params)}" + (f"; compute {scales}" if scales else "")
                          + ")"))
        table.append(("all rows", f"leave one configuration out ({label})", f"mean |error| "
                      f"{statistics.mean(loco) * 100:.1f}%, max {max(loco) * 100:.1f}%"))
    return table


def fitted(params: dict[str, float]) -> str:
    """The fitted cluster parameters of a calibration, as text."""
    names = {"overlap_slowdown": "s", "comm_slowdown": "s_c"}
    parts = [f"{names[k]} = {v:.3f}" for k, v in params.items() if k in names]
    if "collective_overhead" in params:
        parts.append(f"overhead {params['collective_overhead'] * 1e3:.2f} ms")
    return ", ".join(parts) or "measured s and s_c"


def retimed(d: Path, row: dict[str, str], cal: dict[str, Any]) -> dict[str, str]:
    """``row`` on the calibrated cluster, and on its re-timed trace when ``cal`` wrote one
    (a plan row then runs its plan bound to that trace)."""
    out = {**row, "cluster": os.path.relpath(cal["out"], d)}
    written = {t["trace"]: t["out"] for t in cal.get("traces", [])}
    if row["trace"] not in written:
        return out
    trace_path = Path(written[row["trace"]])
    out["trace"] = os.path.relpath(trace_path, d)
    if row["policy"].startswith("plan:"):
        src = d / row["policy"][5:]
        dst = trace_path.parent / f"plan-{src.name}"
        dst.write_text(src.read_text())
        rebind(dst, trace_path, Path(cal["out"]))
        out["policy"] = "plan:" + os.path.relpath(dst, d)
    return out


def predicted_gain(path: Path) -> float:
    """Default DDP's simulated time over the optimum's, from an ``optimize --json`` file."""
    res = json.loads(path.read_text())
    ddp = next(b["iteration_time_s"] for b in res["baselines"] if b["policy"] == "ddp")
    return float(ddp / res["iteration_time_s"])


def gain(d: Path, args: argparse.Namespace, env: dict[str, str]) -> list[tuple[str, str, str]]:
    """Step 7: default DDP, the optimum and the optimum of the model without communication
    slowdown (s_c = 1) alternately, on the model with the largest predicted gain of either."""
    new = {m: predicted_gain(d / f"{m}-opt.json") for m in MODELS}
    old = {m: predicted_gain(d / f"{m}-opt-sc1.json") for m in MODELS}
    m = max(MODELS, key=lambda k: max(new[k], old[k]))
    factory, shape, dtype = MODELS[m]
    # the s_c = 1 optimum was planned for another cluster: run it as the DDP settings it emits
    emitted = schedopt("emit", d / f"{m}.json", d / "loopback-sc1.json", "--target", "ddp",
                       "--plan", d / f"{m}-opt-sc1.json", "--out", d / "emit-sc1", env=env)
    match = re.search(r"\((ddp:[^)]*)\)", emitted)
    if match is None:
        sys.exit(f"emit printed no DDP settings: {emitted!r}")
    plans = {"ddp": "ddp", f"plan:{m}-opt.json": "plan (s, s_c)",
             match.group(1): "plan (s, s_c = 1)"}
    if not (args.skip_measure and (d / "gain.csv").exists()):
        print(schedopt("bench-ddp", factory, "--input-shape", shape, "--input-dtype", dtype,
                       "--trace", d / f"{m}.json", "--cluster", d / "loopback.json", "-p",
                       "ddp", "-p", match.group(1), "--plan", d / f"{m}-opt.json",
                       "--rounds", args.rounds, "--iters", args.iters, "--warmup", 5,
                       "--threads", args.threads, "--out", d / "gain.csv", env=env))
    rows = read_rows(d / "gain.csv")
    write_rows(d / "gain-sc1.csv", rows, cluster="loopback-sc1.json")
    sim = {r["policy"]: r["predicted_s"] for r in validate(d / "gain.csv", env)["rows"]}
    sim1 = {r["policy"]: r["predicted_s"] for r in validate(d / "gain-sc1.csv", env)["rows"]}
    times = {p: [float(r["iteration_time_s"]) for r in rows if r["policy"] == p] for p in plans}
    table = [(m, "predicted gain of the optimum over default DDP (optimize)",
              "; ".join(f"{k}: {new[k]:.3f}x with s and s_c, {old[k]:.3f}x with s_c = 1"
                        for k in MODELS))]
    for p, label in plans.items():
        table.append((m, f"{label}: measured, {len(times[p])} alternating rounds",
                      ", ".join(f"{t * 1e3:.1f}" for t in times[p])
                      + f" ms; predicted {sim[p] * 1e3:.1f} ms (s, s_c), "
                      f"{sim1[p] * 1e3:.1f} ms (s_c = 1)"))
        if p == "ddp":
            continue
        speedups = [b / o for b, o in zip(times["ddp"], times[p], strict=True)]
        table.append((m, f"{label}: speedup over default DDP", f"measured median "
                      f"{statistics.median(speedups):.3f}x (min {min(speedups):.3f}x, max "
                      f"{max(speedups):.3f}x); predicted {sim['ddp'] / sim[p]:.3f}x (s, s_c), "
                      f"{sim1['ddp'] / sim1[p]:.3f}x (s_c = 1)"))
    return table


FAULTS = re.compile(r"; ([\d,]+) minor page faults per iteration")


def page_faults(d: Path) -> list[tuple[str, str, str]]:
    """Per model, the minor page faults of an iteration: in its profiles of record (median over
    the rounds, rank 0's) and in each configuration's row (the median round's, median over the
    ranks), where the sources state them (CPU ranks)."""
    def count(source: str) -> str:
        m = FAULTS.search(source)
        return m.group(1) if m else "?"

    table = []
    for m in MODELS:
        profiles = [count(load_trace(f).source) for f in sorted(d.glob(f"{m}-prof[0-9]*.json"))]
        known = [int(c.replace(",", "")) for c in profiles if c != "?"]
        prof = f"{statistics.median(known):,.0f}" if known else "?"
        runs = ", ".join(f"{config_of(r['policy'])} {count(r['source'])}"
                         for r in read_rows(d / f"{m}-runs.csv"))
        table.append((m, "minor page faults per iteration", f"profile {prof}; {runs}"))
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("ddp-evidence"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--config-rounds", type=int, default=3,
                    help="rounds of every configuration (the median is kept)")
    ap.add_argument("--max-load", type=float, default=1.5)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--skip-measure", action="store_true", help="reuse the runs in --out")
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated subset of: {', '.join(MODELS)} (default: all)")
    args = ap.parse_args()
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in MODELS]
    if unknown or not chosen:
        sys.exit(f"--models: unknown {', '.join(unknown) or '(none given)'}; choose from "
                 f"{', '.join(MODELS)}")
    for m in list(MODELS):  # every step iterates over MODELS
        if m not in chosen:
            del MODELS[m]
    load = os.getloadavg()[0]
    if load > args.max_load and not args.force:
        sys.exit(f"load average {load:.2f} > {args.max_load}: timings would be meaningless "
                 "(--force to run anyway)")
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH")) if p)
    t0 = time.time()
    if not args.skip_measure:
        measure(args.out, args, env)
    table = accuracy(args.out, env) + page_faults(args.out) + gain(args.out, args, env)
    loads = f"{load:.2f} before, {os.getloadavg()[0]:.2f} after"
    print(f"\nload average (1 min): {loads}; OMP_NUM_THREADS={args.threads}; "
          f"{time.time() - t0:.0f} s")
    print("| instance | method | figure |\n| --- | --- | --- |")
    for row in table:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
