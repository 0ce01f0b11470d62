"""``optimize`` and ``tune``: the best plan and the best framework knobs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from schedopt.cli.common import (
    AccumulateOpt,
    ClusterArg,
    JsonOpt,
    MemoryCapOpt,
    NodesOpt,
    PerLinkOpt,
    RobustClustersOpt,
    RobustOpt,
    ShardingOpt,
    TraceArg,
    VaryOpt,
    WorkersOpt,
    WorkLimitOpt,
    check_figure_path,
    console,
    load_pair,
    log,
    print_json,
    user_errors,
    wrote,
)
from schedopt.cli.output import CsvOpt, check_formats, choice, parse_size, print_csv, progress
from schedopt.errors import SchedoptError

if TYPE_CHECKING:
    from schedopt.model.cluster import Cluster
    from schedopt.model.trace import Trace
    from schedopt.optimize import SolveResult


#: ``tune --framework`` (besides comma lists), ``optimize --target`` and ``--next-forward``.
FRAMEWORK_CHOICES = ("ddp", "horovod", "deepspeed", "megatron", "all")
TARGET_CHOICES = ("ddp", "horovod", "bytescheduler", "any")
NEXT_FORWARD_CHOICES = ("wait-for-all", "per-layer")


def tune_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    nodes: NodesOpt = None,
    framework: Annotated[
        str, typer.Option("--framework", "-f", help="ddp | horovod | deepspeed | megatron | all,"
                          " or a comma list.", **choice(*FRAMEWORK_CHOICES))
    ] = "all",
    time_limit: Annotated[
        float, typer.Option("--time-limit", help="Time limit of the optimum's search (s).")
    ] = 10.0,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write each knob's curve (PNG/SVG/PDF).")
    ] = None,
) -> None:
    """Best value of each framework's own knob, against its default and the optimized plan."""
    from schedopt.files import output_files
    from schedopt.model.limits import MAX_SECONDS, check_float_option
    from schedopt.report import tables as report
    from schedopt.study.tune import FRAMEWORKS, tune_all

    with user_errors(), output_files({"--plot": plot}) as files:
        check_formats(as_json, as_csv)
        check_figure_path(plot, "--plot")
        check_float_option(time_limit, "--time-limit", 0.0, MAX_SECONDS)
        names = list(FRAMEWORKS) if framework.strip() == "all" else [
            f.strip() for f in framework.split(",") if f.strip()]
        if not names:
            raise SchedoptError(f"must name a framework (known: {', '.join(FRAMEWORKS)}, all)",
                                "--framework", framework)
        for name in names:
            if name not in FRAMEWORKS:
                raise SchedoptError(f"unknown framework (known: {', '.join(FRAMEWORKS)}, all)",
                                    "--framework", name)
        names = list(dict.fromkeys(names))  # each framework once
        tr, cl = load_pair(trace, cluster, nodes)
        with progress(f"tune {', '.join(names)} (then the optimum, up to {time_limit:g} s)"):
            results, optimum = tune_all(tr, cl, names, time_limit_s=time_limit)
        rows = [r.as_dict() for r in results]
        if plot is not None:
            from schedopt.report.charts import tune_chart

            with files.writing(plot) as tmp:
                tune_chart(rows, tmp, optimum_s=optimum["iteration_time_s"] if optimum else None,
                           title=f"{tr.name} on {cl.name} ({cl.world_size} GPUs)")
    if as_json:
        print_json({"optimum": optimum, "frameworks": rows})
        return
    if as_csv:
        print_csv(rows)
        return
    console.print(report.tune_table(rows, f"{tr.name} on {cl.name} ({cl.world_size} GPUs)",
                                    optimum))
    for line in report.tune_lines(rows):
        typer.echo(line)
    wrote(plot)


def optimize_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    nodes: NodesOpt = None,
    next_forward: Annotated[
        str, typer.Option("--next-forward", help="wait-for-all | per-layer",
                          **choice(*NEXT_FORWARD_CHOICES))
    ] = "wait-for-all",
    reorder: Annotated[
        bool, typer.Option("--reorder", help="Allow launch orders other than readiness order.")
    ] = False,
    partition: Annotated[
        int | None, typer.Option("--partition", help="Cut tensors into pieces of BYTES at most.")
    ] = None,
    target: Annotated[
        str | None,
        typer.Option("--target", help="ddp | horovod | bytescheduler | any: search the plans"
                     " that framework executes (the options above widen it).",
                     **choice(*TARGET_CHOICES)),
    ] = None,
    time_limit: Annotated[
        float, typer.Option("--time-limit", help="Search time limit in seconds.")
    ] = 10.0,
    work_limit: WorkLimitOpt = None,
    workers: WorkersOpt = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the search.")] = 0,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the result and its plan (JSON).")
    ] = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    robust: RobustOpt = None,
    robust_clusters: RobustClustersOpt = None,
    vary: VaryOpt = "alpha,beta,compute",
    per_link: PerLinkOpt = False,
    sharding: ShardingOpt = None,
    memory_cap: MemoryCapOpt = None,
    accumulate: AccumulateOpt = 1,
) -> None:
    """Find the best plan (exact DP or CP-SAT) and compare it with every baseline."""
    from schedopt.files import output_files
    from schedopt.model.limits import check_pieces
    from schedopt.optimize import solve
    from schedopt.report.tables import SolveProgress

    with user_errors(), output_files({"--out": out}) as files:
        check_formats(as_json, as_csv)
        _check_search(time_limit, work_limit, workers, seed, partition)
        tr, cl = load_pair(trace, cluster, nodes)
        if partition is not None:
            check_pieces("pieces", sum(-(-t.bytes // partition) for t in tr.tensor_list),
                         "--partition", partition)
        if sharding is not None and (robust is not None or robust_clusters):
            raise SchedoptError("robust plans are all-reduce plans; drop --sharding or --robust",
                                "--sharding", sharding)
        cls, opts = _solve_options(tr, cl, target, next_forward, reorder, partition, {
            "time_limit_s": time_limit, "work_limit_s": work_limit, "workers": workers,
            "seed": seed},
            (sharding, parse_size(memory_cap, "--memory-cap"), accumulate))
        log.info("solving %s on %s: %s", tr.name, cl.name, cls)
        if robust is not None or robust_clusters:
            res: Any = _robust(tr, cl, opts, robust, robust_clusters, nodes, vary, per_link)
        else:
            with SolveProgress(enabled=not as_json and sys.stderr.isatty()) as progress:
                res = solve(tr, cl, opts, progress=progress)
            log.info("solved: %s in %.2f s (%s)", res.status, res.solve_time_s, res.method)
        data = res.to_dict()
        if out is not None:
            files.write_json(out, data)
    if robust is not None or robust_clusters:
        _print_robust(res, as_json, out)
        return
    if as_json:
        print_json(data)
    elif as_csv:
        print_csv(_optimized_rows(res))
    else:
        _print_optimized(res, tr, cl, cls, out)
    if res.interrupted:  # Ctrl-C: the best plan so far is printed (and written); exit 130
        raise typer.Exit(130)


def _check_search(time_limit: float, work_limit: float | None, workers: int, seed: int,
                  partition: int | None) -> None:
    """The search options of ``optimize``, each error naming its option."""
    from schedopt.model.limits import MAX_BYTES, MAX_SECONDS, check_float_option, check_int_option

    check_float_option(time_limit, "--time-limit", 0.0, MAX_SECONDS)
    if work_limit is not None:
        check_float_option(work_limit, "--work-limit", 0.0, MAX_SECONDS)
    check_int_option(workers, "--workers", 1, 1024)
    check_int_option(seed, "--seed", 0, 2**31 - 1)
    check_int_option(partition, "--partition", 1, MAX_BYTES)


def _optimized_rows(res: SolveResult) -> list[dict[str, Any]]:
    """``optimize --csv``: the optimized plan, then every baseline, fastest first."""
    return ([{"plan": "optimized", "iteration_time_s": res.iteration_time_s,
              "vs_optimized": 1.0, "expressible": None, "status": res.status}]
            + [{"plan": b.policy, "iteration_time_s": b.iteration_time_s,
                "vs_optimized": b.iteration_time_s / res.iteration_time_s,
                "expressible": b.expressible, "status": None}
               for b in sorted(res.baselines, key=lambda b: b.iteration_time_s)])


def _solve_options(tr: Trace, cl: Cluster, target: str | None, next_forward: str, reorder: bool,
                   partition: int | None, search: dict[str, Any],
                   sharded: tuple[str | None, int | None, int]) -> tuple[dict[str, Any], Any]:
    """The class of plans ``optimize``'s options describe (``--target`` applied) and the
    :class:`~schedopt.optimize.SolveOptions` of the search."""
    from pydantic import ValidationError

    from schedopt.errors import from_validation_error
    from schedopt.optimize import SolveOptions
    from schedopt.optimize.sharding.options import sharded_options
    from schedopt.study.targets import TARGETS, target_options

    if target is not None and target not in TARGETS:
        raise SchedoptError(f"unknown target (known: {', '.join(TARGETS)})", "--target", target)
    if next_forward not in ("wait-for-all", "per-layer"):
        raise SchedoptError("must be wait-for-all or per-layer", "--next-forward", next_forward)
    cls = target_options(target, tr, cl, next_forward=next_forward, reorder=reorder,
                         partition=partition)
    try:
        opts = SolveOptions.model_validate({**cls, **search, **sharded_options(*sharded)})
    except ValidationError as exc:
        raise from_validation_error(exc, "options") from None
    return cls, opts


def _robust(tr: Trace, cl: Cluster, opts: Any, robust: str | None,
            robust_clusters: list[str] | None, nodes: int | None, vary: str,
            per_link: bool) -> Any:
    """``optimize --robust`` / ``--robust-clusters`` (docs/robust.md)."""
    from schedopt.optimize.robust import robust_cli

    return robust_cli(tr, cl, opts, robust, robust_clusters or [], nodes, vary, per_link)


def _print_robust(rob: Any, as_json: bool, out: Path | None) -> None:
    """The report of ``optimize --robust`` (exit 130 after Ctrl-C, as ``optimize``)."""
    from schedopt.optimize.robust import robust_lines

    if as_json:
        print_json(rob.to_dict())
    else:
        for line in robust_lines(rob):
            typer.echo(line)
        wrote(out)
    if rob.interrupted:
        raise typer.Exit(130)


def _print_optimized(res: SolveResult, tr: Trace, cl: Cluster, cls: dict[str, Any],
                     out: Path | None) -> None:
    """The table of ``optimize``: the optimized plan against every baseline, then the status."""
    from schedopt.optimize.sharding.options import sharded_labels
    from schedopt.report import tables as report

    next_forward, reorder, partition = cls["next_forward"], cls["reorder"], cls["partition_bytes"]
    shard = sharded_labels(res)
    table = Table(title=f"{tr.name} on {cl.name} ({cl.world_size} GPUs): " + (
        f"{next_forward}{', reorder' if reorder else ''}"
        f"{f', partition {partition} B' if partition else ''}" if shard is None else shard[0]))
    for col in ("plan", "iteration ms", "vs optimized", "expressible"):
        table.add_column(col, justify="left" if col == "plan" else "right", no_wrap=True)
    table.add_row("[bold]optimized[/bold]", f"{res.iteration_time_s * 1e3:.3f}", "1.000x", "")
    for b in sorted(res.baselines, key=lambda b: b.iteration_time_s):
        mark = "yes" if b.expressible else "no"
        table.add_row(b.policy + (" (hint)" if b.policy == res.hint_policy else ""),
                      f"{b.iteration_time_s * 1e3:.3f}",
                      f"{b.iteration_time_s / res.iteration_time_s:.3f}x", mark)
    console.print(table)
    typer.echo(f"status {res.status}  objective {res.objective_s * 1e3:.3f} ms  bound "
               f"{res.bound_s * 1e3:.3f} ms  gap {report.fmt_gap(res.gap)}  time "
               f"{res.solve_time_s:.2f} s  method {res.method}  "
               + (f"buckets {res.plan.num_buckets}" if shard is None else shard[1]))
    for note in res.notes:
        typer.echo(f"note: {note}")
    _beyond_class(tr, cl, res, cls)
    if out is not None:
        typer.echo(f"wrote {out}")


def _beyond_class(tr: Trace, cl: Cluster, res: Any, cls: dict[str, Any]) -> None:
    """Name the baselines outside the class that beat the optimized plan, and how to reach them."""
    from schedopt.study.targets import beyond_class

    for b in sorted(res.baselines, key=lambda b: b.iteration_time_s):
        if not b.expressible and b.iteration_time_s < res.iteration_time_s * (1 - 1e-6):
            if res.plan.sharding is not None:  # the reason names the options that reach it
                typer.echo(f"note: {b.policy} ({b.iteration_time_s * 1e3:.3f} ms) is faster and"
                           f" lies outside this class: {b.reason}")
                continue
            typer.echo(f"note: {b.policy} ({b.iteration_time_s * 1e3:.3f} ms) is faster and lies"
                       f" outside this class ({b.reason}): "
                       f"{beyond_class(b.policy, tr, cl, cls)}")


