"""``schedopt import kineto`` (torch.profiler traces) and ``schedopt explain`` (measured against
predicted)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from schedopt.cli.common import (
    ClusterArg,
    JsonOpt,
    TraceArg,
    check_figure_path,
    console,
    load_pair,
    print_json,
    user_errors,
    wrote,
)
from schedopt.cli.output import CsvOpt, check_formats, print_csv
from schedopt.errors import SchedoptError

app = typer.Typer(no_args_is_help=True, help="Import measurements made by other tools.")

FilesArg = Annotated[
    list[Path], typer.Argument(help="torch.profiler Chrome traces (.json or .json.gz), one per"
                               " rank.")
]
StepsOpt = Annotated[
    str | None, typer.Option("--steps", metavar="N:M",
                             help="Profiled steps N <= step < M (ProfilerStep#N; default all).")
]
NamesOpt = Annotated[
    Path | None, typer.Option("--names", help="The model's parameter names, one a line, in"
                              " model.parameters() order (default <layer>.p<i>).")
]
BatchOpt = Annotated[int, typer.Option("--batch-size", help="Per-rank batch size of the steps.")]


def _names(path: Path | None) -> list[str] | None:
    if path is None:
        return None
    from schedopt.files import read_text

    return [ln.strip() for ln in read_text(path, "--names").splitlines() if ln.strip()]


@app.command("kineto")
def kineto_cmd(
    files: FilesArg,
    out_trace: Annotated[Path, typer.Option("--out-trace", help="Trace JSON to write.")],
    out_cluster: Annotated[
        Path | None, typer.Option("--out-cluster", help="Cluster JSON whose all-reduce is fitted"
                                  " to the measured collectives.")
    ] = None,
    out_points: Annotated[
        Path | None, typer.Option("--out-points", help="CSV bytes,time_s,ranks of the measured"
                                  " collectives (for fit-comm).")
    ] = None,
    steps: StepsOpt = None,
    names: NamesOpt = None,
    batch_size: BatchOpt = 1,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Read torch.profiler traces: layers, gradients, DDP buckets and measured collectives."""
    from schedopt.files import output_files
    from schedopt.measure.commfit import cluster_from_points
    from schedopt.measure.kineto import import_kineto

    paths = {"--out-trace": out_trace, "--out-cluster": out_cluster, "--out-points": out_points}
    with user_errors(), output_files(paths) as out:
        check_formats(as_json, as_csv)
        imp = import_kineto(files, steps=steps, names=_names(names), batch_size=batch_size,
                            name=out_trace.name.split(".")[0])
        out.write_json(out_trace, imp.trace.model_dump(mode="json", exclude_none=True))
        if out_cluster is not None:
            cluster = cluster_from_points(imp.points, imp.ranks, out_cluster.name.split(".")[0],
                                          ", ".join(f.name for f in files), imp.concurrency)
            out.write_json(out_cluster, cluster.model_dump(mode="json", exclude_none=True))
        if out_points is not None:
            rows = "".join(f"{n},{t!r},{imp.ranks or ''}\n" for n, t in imp.points)
            out.write_text(out_points, "bytes,time_s,ranks\n" + rows if imp.ranks else
                           "bytes,time_s\n" + "".join(f"{n},{t!r}\n" for n, t in imp.points))
    summary = {**imp.summary, "buckets_tensors": imp.buckets}
    if as_json:
        print_json(summary)
        return
    s = imp.summary
    if as_csv:  # one row per bucket, the step's figures on each
        step = {"step_time_s": s["step_time_s"], "busy_s": s["busy_s"], "idle_s": s["idle_s"],
                "host_bound": s["host_bound"]}
        print_csv([{**b, **step} for b in s["buckets"]])
        return
    table = Table(title=f"torch.profiler import: {len(files)} rank file(s), steps "
                  f"{s['steps'][0]}..{s['steps'][-1]} ({s['device']}, layers by {s['grouping']})")
    for col in ("bucket", "tensors", "bytes", "dtype", "launch ms", "transfer ms", "exposed ms"):
        table.add_column(col, justify="right")
    for b in s["buckets"]:
        table.add_row(str(b["index"]), str(b["tensors"]), f"{b['bytes']:,}", b["dtype"],
                      f"{b['launch_s'] * 1e3:.3f}", f"{b['transfer_s'] * 1e3:.3f}",
                      f"{b['exposed_s'] * 1e3:.3f}")
    console.print(table)
    typer.echo(f"step {s['step_time_s'] * 1e3:.3f} ms (median of {len(s['step_times_s'])}),"
               f" busy {s['busy_s'] * 1e3:.3f} ms, idle {s['idle_s'] * 1e3:.3f} ms"
               f"{' (host-bound)' if s['host_bound'] else ''}; {len(imp.trace.layers)} layers,"
               f" {imp.trace.num_tensors} tensors in {len(imp.buckets)} buckets")
    typer.echo(f"transfer time: {s['transfer_method']}")
    wrote(out_trace, out_cluster, out_points)


# ------------------------------------------------------------------------------------ explain
def _predicted(trace: Any, cluster: Any, buckets: list[list[str]]) -> tuple[Any, dict[str, Any]]:
    """Simulate the measured buckets; per bucket its start, duration and exposed time (s, from
    the start of a steady-state iteration)."""
    from schedopt.model.plan import Plan
    from schedopt.simulate.simulator import simulate

    plan = Plan.model_validate({"policy": "measured", "buckets": buckets})
    sched = simulate(trace, cluster, plan, record=True)
    t = max(k[1] for k in sched.tasks if k[0] == "fwd") - 1
    begin = min(v[0] for k, v in sched.tasks.items() if len(k) > 1 and k[1] == t
                and k[0] in ("io", "h2d", "fwd"))
    compute = sorted(v for k, v in sched.tasks.items() if k[0] in ("fwd", "bwd", "update")
                     and k[1] == t)
    comm: dict[int, tuple[float, float]] = {}
    for key, (a, b) in sched.tasks.items():
        if key[0] == "comm" and key[1] == t:
            lo, hi = comm.get(key[2], (a, b))
            comm[key[2]] = (min(lo, a), max(hi, b))
    out = []
    done: list[tuple[float, float]] = []
    for k in sorted(comm):
        a, b = comm[k]
        covered = sum(max(0.0, min(b, y) - max(a, x)) for x, y in _merge(compute + done))
        out.append({"start_s": a - begin, "duration_s": b - a,
                    "exposed_s": max(0.0, b - a - covered)})
        done.append((a, b))
    return sched, {"begin": begin, "t": t, "buckets": out}


def _merge(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _cut(trace: Any, sizes: list[int]) -> list[list[str]]:
    """The trace's gradient-ready order cut into buckets of the measured byte sizes."""
    out: list[list[str]] = []
    order = trace.ready_order
    i = 0
    for k, size in enumerate(sizes):
        members, total = [], 0
        while i < len(order) and total < size:
            members.append(order[i].name)
            total += order[i].bytes
            i += 1
        if total != size:
            raise SchedoptError("the measured buckets do not match the trace's gradients (is it"
                                " the trace imported from these files?)", f"bucket {k} bytes",
                                size)
        out.append(members)
    if i != len(order):
        raise SchedoptError("the measured buckets do not hold every gradient of the trace",
                            "trace", len(order) - i)
    return out


def _explain_table(data: dict[str, Any], instance: str) -> None:
    """Print ``explain``'s table of buckets and its step line."""
    table = Table(title=f"measured vs predicted: {instance}")
    for col in ("bucket", "bytes", "start ms (meas/pred)", "duration ms (meas/pred)",
                "exposed ms (meas/pred)"):
        table.add_column(col, justify="right")
    for b in data["buckets"]:
        table.add_row(str(b["index"]), f"{b['bytes']:,}",
                      f"{b['measured_start_s'] * 1e3:.3f} / {b['predicted_start_s'] * 1e3:.3f}",
                      f"{b['measured_duration_s'] * 1e3:.3f} / "
                      f"{b['predicted_duration_s'] * 1e3:.3f}",
                      f"{b['measured_exposed_s'] * 1e3:.3f} / "
                      f"{b['predicted_exposed_s'] * 1e3:.3f}")
    console.print(table)
    d = data["difference"]
    typer.echo(f"step: measured {data['measured_step_s'] * 1e3:.3f} ms, predicted"
               f" {data['predicted_step_s'] * 1e3:.3f} ms ({data['relative_error']:+.1%});"
               f" measured - predicted: compute {d['compute_s'] * 1e3:+.3f} ms, communication"
               f" {d['communication_s'] * 1e3:+.3f} ms, host {d['host_s'] * 1e3:+.3f} ms")


def _explain_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """CSV rows of ``explain``: one per bucket, then the step (its durations the step times,
    its exposed times the exposed communication, its differences split as in the table)."""
    rows: list[dict[str, Any]] = [{"item": f"bucket {b['index']}", **b} for b in data["buckets"]]
    rows.append({"item": "step", "measured_duration_s": data["measured_step_s"],
                 "predicted_duration_s": data["predicted_step_s"],
                 "measured_exposed_s": data["measured_exposed_comm_s"],
                 "predicted_exposed_s": data["predicted_exposed_comm_s"],
                 "relative_error": data["relative_error"], "host_bound": data["host_bound"],
                 "difference": data["difference"]})
    return rows


def explain_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    measured: Annotated[
        list[Path], typer.Option("--measured", help="torch.profiler traces of the run (one per"
                                 " rank; repeatable).")
    ],
    steps: StepsOpt = None,
    gantt: Annotated[
        Path | None, typer.Option("--gantt", help="Draw measured and predicted one above the"
                                  " other (PNG, SVG or PDF).")
    ] = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Measured (torch.profiler) against predicted: per bucket, the step, and where the
    difference lies (compute, communication, host)."""
    from schedopt.files import output_files
    from schedopt.measure.kineto import import_kineto

    with user_errors(), output_files({"--gantt": gantt}) as out:
        check_formats(as_json, as_csv)
        check_figure_path(gantt, "--gantt")
        tr, cl = load_pair(trace, cluster, None)
        imp = import_kineto(measured, steps=steps)
        s = imp.summary
        buckets = _cut(tr, [b["bytes"] for b in s["buckets"]])
        sched, pred = _predicted(tr, cl, buckets)
        bd = sched.breakdown
        measured_compute = s["io_s"] + s["compute_s"] + s["update_s"]
        predicted_compute = bd.forward_s + bd.backward_s + bd.update_s + bd.io_stall_s
        diff = s["step_time_s"] - sched.iteration_time_s
        comm = s["exposed_comm_s"] - bd.exposed_comm_s
        comp = measured_compute - predicted_compute
        data = {
            "measured_step_s": s["step_time_s"],
            "predicted_step_s": sched.iteration_time_s,
            "difference_s": diff,
            "relative_error": -diff / s["step_time_s"],
            "difference": {"compute_s": comp, "communication_s": comm,
                           "host_s": diff - comp - comm},
            "measured_exposed_comm_s": s["exposed_comm_s"],
            "predicted_exposed_comm_s": bd.exposed_comm_s,
            "host_bound": s["host_bound"],
            "buckets": [{
                "index": k, "bytes": b["bytes"],
                "measured_start_s": b["start_s"], "predicted_start_s": p["start_s"],
                "measured_duration_s": b["transfer_s"], "predicted_duration_s": p["duration_s"],
                "measured_exposed_s": b["exposed_s"], "predicted_exposed_s": p["exposed_s"],
            } for k, (b, p) in enumerate(zip(s["buckets"], pred["buckets"], strict=True))],
        }
        if gantt is not None:
            from schedopt.report.compare_chart import compare_gantt

            with out.writing(gantt) as tmp:
                compare_gantt(s, sched, pred["t"], tmp, fmt=gantt.suffix.lstrip("."),
                              title=f"{tr.name} on {cl.name}")
    if as_json:
        print_json(data)
        return
    if as_csv:
        print_csv(_explain_rows(data))
        return
    _explain_table(data, f"{tr.name} on {cl.name}")
    wrote(gantt)
