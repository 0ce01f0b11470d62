"""``simulate``, ``compare`` and ``scale``: predictions of policies and plans."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from schedopt.cli.common import (
    ClusterArg,
    JsonOpt,
    NodesOpt,
    PerLinkOpt,
    PerturbOpt,
    PlanOpt,
    PolicyOpt,
    TraceArg,
    VaryOpt,
    check_figure_path,
    console,
    load_pair,
    load_with_plan,
    log,
    parse_counts,
    print_json,
    result_dict,
    user_errors,
    wrote,
)
from schedopt.cli.output import CsvOpt, check_formats, choice, print_csv, progress

if TYPE_CHECKING:
    from schedopt.files import OutputFiles
    from schedopt.model.cluster import Cluster
    from schedopt.model.plan import Plan, Schedule
    from schedopt.model.trace import Trace


def simulate_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    policy: PolicyOpt = None,
    plan_file: PlanOpt = None,
    nodes: NodesOpt = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    gantt: Annotated[
        Path | None, typer.Option("--gantt", help="Write a Gantt chart (PNG/SVG/PDF).")
    ] = None,
    chrome_trace: Annotated[
        Path | None, typer.Option("--chrome-trace", help="Write a Chrome trace (JSON).")
    ] = None,
    perturb: PerturbOpt = None,
    samples: Annotated[int, typer.Option("--samples", help="With --perturb: Monte Carlo"
                                         " samples besides the corners.")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="With --perturb: seed of the samples.")
                    ] = 0,
    vary: VaryOpt = "alpha,beta,compute",
    per_link: PerLinkOpt = False,
) -> None:
    """Simulate one policy (or a saved plan) and print its iteration time and breakdown."""
    from schedopt.files import output_files
    from schedopt.simulate.simulator import simulate
    spread = None
    with user_errors():
        check_formats(as_json, as_csv)
        check_figure_path(gantt, "--gantt")
        with output_files({"--gantt": gantt, "--chrome-trace": chrome_trace}) as files:
            tr, cl, plan = load_with_plan(trace, cluster, nodes, policy, plan_file)
            record = gantt is not None or chrome_trace is not None
            sched = simulate(tr, cl, plan, record=record)
            log.info("simulated %s: %d iterations to the steady state", plan.policy,
                     sched.iterations)
            if perturb is not None or samples:
                from schedopt.simulate.scenarios import perturbation_spread

                spread = perturbation_spread(tr, cl, plan, perturb, samples, seed, vary,
                                             per_link)
            _write_visuals(files, tr, cl, plan, sched, gantt, chrome_trace)
    if as_json:
        extra = {} if spread is None else {"spread": spread.as_dict()}
        print_json(result_dict(plan, sched, **extra))
        return
    if as_csv:
        extra = {} if spread is None else {"spread": spread.as_dict()}
        print_csv(result_dict(plan, sched, **extra))
        return
    _print_breakdown(tr, cl, plan, sched)
    if spread is not None:
        typer.echo(spread.line())
    wrote(gantt, chrome_trace)


def _write_visuals(files: OutputFiles, tr: Trace, cl: Cluster, plan: Plan, sched: Schedule,
                   gantt: Path | None, chrome_trace: Path | None) -> None:
    if gantt is not None:
        from schedopt.report.charts import gantt_chart

        with files.writing(gantt) as tmp:
            gantt_chart(sched, tmp, title=f"{tr.name} on {cl.name}: {plan_title(plan)}")
    if chrome_trace is not None:
        from schedopt.report.chrome import chrome_trace_events

        files.write_json(chrome_trace, chrome_trace_events(sched))


def plan_title(plan: Plan, limit: int = 90) -> str:
    """The policy and its knobs (``ddp bucket_cap_mb=50, first_bucket_mb=1``), for a title;
    a long knob value is cut."""
    def value(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:g}"
        if isinstance(v, list) and len(v) > 4:
            return f"[{len(v)} values]"
        return str(v)

    knobs = ", ".join(f"{k}={value(v)}" for k, v in plan.knobs.items() if v is not None)
    if len(knobs) > limit:
        knobs = knobs[: limit - 3] + "..."
    return f"{plan.policy} {knobs}" if knobs else plan.policy


def _print_breakdown(tr: Trace, cl: Cluster, plan: Plan, sched: Schedule) -> None:
    from schedopt.report import tables as report
    table = Table(title=f"{tr.name} on {cl.name} ({cl.world_size} GPUs): {plan.policy}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("iteration time", f"{sched.iteration_time_s * 1e3:.3f} ms")
    table.add_row("first (cold) iteration", f"{sched.first_iteration_s * 1e3:.3f} ms")
    table.add_row("throughput", f"{sched.throughput_samples_s:,.1f} samples/s")
    table.add_row("buckets", str(plan.num_buckets))
    for key, value in sched.breakdown.as_dict().items():
        table.add_row(key.removesuffix("_s").replace("_", " "), f"{value * 1e3:.3f} ms")
    if sched.peak_memory_bytes is not None:
        table.add_row("peak memory", report.fmt_bytes(sched.peak_memory_bytes))
        table.add_row("parameter shard", report.fmt_bytes(sched.shard_bytes or 0.0))
    console.print(table)


def compare_rows(tr: Trace, cl: Cluster, specs: list[str]) -> list[dict[str, Any]]:
    """Simulate every policy in ``specs``; add scaling efficiency against one GPU."""
    from schedopt.policies import make_plan
    from schedopt.simulate.simulator import simulate
    one = cl.single_gpu()
    rows = []
    for spec in specs:
        plan = make_plan(tr, cl, spec)
        sched = simulate(tr, cl, plan)
        base = simulate(tr, one, make_plan(tr, one, spec))
        eff = sched.throughput_samples_s / (cl.world_size * base.throughput_samples_s)
        log.info("%s: %.3f ms per iteration", spec, sched.iteration_time_s * 1e3)
        row = result_dict(plan, sched, scaling_efficiency=eff)
        row["label"] = spec  # distinguishes two settings of one policy
        rows.append(row)
    return rows


def compare(
    trace: TraceArg,
    cluster: ClusterArg,
    nodes: NodesOpt = None,
    policies: Annotated[
        list[str] | None,
        typer.Option("--policy", "-p", help="Policies to compare (default: all); repeat -p, or"
                      " separate specs with commas."),
    ] = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a stacked breakdown chart (PNG/SVG/PDF).")
    ] = None,
    sharding: Annotated[
        str | None, typer.Option("--sharding", help="Also (or, without -p, only) the sharded"
                                 " baselines of this mode: full (fsdp, zero3) or grad-op.",
                                 **choice("full", "grad-op"))
    ] = None,
) -> None:
    """Compare every policy: iteration time, throughput, scaling efficiency, exposed comm."""
    from schedopt.files import output_files
    from schedopt.policies import POLICIES, sharded_specs
    from schedopt.report import tables as report
    from schedopt.report.tables import split_policy_specs
    with user_errors(), output_files({"--plot": plot}) as files:
        check_formats(as_json, as_csv)
        check_figure_path(plot, "--plot")
        extra = sharded_specs(sharding) if sharding is not None else []
        tr, cl = load_pair(trace, cluster, nodes)
        given = split_policy_specs(policies)
        with progress(f"compare on {cl.world_size} GPUs", enabled=cl.world_size >= 64):
            rows = compare_rows(tr, cl, (given or []) + extra if given or extra
                                else list(POLICIES))
        if plot is not None:
            from schedopt.report.charts import breakdown_chart

            ordered = sorted(rows, key=lambda r: r["iteration_time_s"])
            with files.writing(plot) as tmp:
                breakdown_chart([(r["label"], r["breakdown"]) for r in ordered], tmp,
                                title=f"{tr.name} on {cl.name} ({cl.world_size} GPUs)")
    if as_json:
        print_json(rows)
        return
    if as_csv:
        print_csv([{"label": r["label"], **r} for r in rows])
        return
    console.print(report.compare_table(rows, f"{tr.name} on {cl.name} ({cl.world_size} GPUs)"))
    wrote(plot)
    console.print(report.compare_hint(rows, trace, cluster, nodes), markup=False,
                  highlight=False)


def scale(
    trace: TraceArg,
    cluster: ClusterArg,
    nodes: Annotated[
        str, typer.Option("--nodes", help="Node counts, comma-separated (e.g. 1,2,4,8,16).")
    ] = "1,2,4,8,16",
    policies: Annotated[
        list[str] | None,
        typer.Option("--policy", "-p", help="Policies (default: all); repeat -p, or separate"
                     " specs with commas."),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the scaling curves (PNG/SVG/PDF).")
    ] = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Scaling curves: throughput of every policy as the cluster grows node by node."""
    from schedopt.files import load_cluster, load_trace, output_files
    from schedopt.policies import POLICIES
    from schedopt.report.tables import split_policy_specs
    with user_errors(), output_files({"--plot": plot}) as files:
        check_formats(as_json, as_csv)
        check_figure_path(plot, "--plot")
        counts = parse_counts(nodes, "--nodes")
        tr = load_trace(trace)
        specs = split_policy_specs(policies) or list(POLICIES)
        out: list[dict[str, Any]] = []
        with progress(f"scale over {len(counts)} cluster sizes",
                      enabled=len(counts) * len(specs) > 8 or max(counts) >= 16) as step:
            for n in counts:
                cl = load_cluster(cluster, n)
                step(f"{n} nodes ({cl.world_size} GPUs)")
                out.extend(_scale_rows(tr, cl, n, specs))
        if plot is not None:
            from schedopt.report.charts import scaling_chart

            series: dict[str, list[tuple[int, float]]] = {}
            reference = [] if any(s.split(":")[0] == "ddp" for s in specs) else [
                r for n in counts for r in _scale_rows(tr, load_cluster(cluster, n), n, ["ddp"])]
            for r in out + reference:  # DDP always drawn: the reference users know
                series.setdefault(r["label"], []).append((r["gpus"], r["throughput_samples_s"]))
            with files.writing(plot) as tmp:
                scaling_chart(series, tmp, title=f"{tr.name} on {cluster}")
    if as_json:
        print_json(out)
        return
    if as_csv:
        print_csv(out)
        return
    table = Table(title=f"{tr.name}: throughput (samples/s) and scaling efficiency")
    table.add_column("policy", no_wrap=True)
    gpus = sorted({(r["nodes"], r["gpus"]) for r in out})
    for n, g in gpus:
        table.add_column(f"{n} nodes ({g} GPUs)", justify="right")
    for spec in dict.fromkeys(r["label"] for r in out):
        cells = [f"{r['throughput_samples_s']:,.0f} ({r['scaling_efficiency'] * 100:.0f}%)"
                 for r in out if r["label"] == spec]
        table.add_row(spec, *cells)
    console.print(table)
    wrote(plot)




def _scale_rows(tr: Trace, cl: Cluster, n: int, specs: list[str]) -> list[dict[str, Any]]:
    """The rows of ``scale`` for one cluster size."""
    return [{"nodes": n, "gpus": cl.world_size, "policy": row["policy"], "label": row["label"],
             "iteration_time_s": row["iteration_time_s"],
             "throughput_samples_s": row["throughput_samples_s"],
             "scaling_efficiency": row["scaling_efficiency"]}
            for row in compare_rows(tr, cl, specs)]
