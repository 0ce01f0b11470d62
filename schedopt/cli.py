"""The ``schedopt`` command line (typer)."""

from __future__ import annotations

import errno
import logging
import math
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from . import report
from .cluster import Cluster
from .errors import SchedoptError
from .files import (
    OutputFiles,
    json_text,
    list_instances,
    load_cluster,
    load_plan,
    load_trace,
    load_trace_or_cluster,
    output_files,
)
from .plan import Plan, Schedule
from .policies import POLICIES, SHARDED_POLICIES, make_plan, sharded_specs
from .report import SolveProgress, split_policy_specs
from .simulate import simulate
from .trace import Trace
from .validation import (
    MAX_BYTES,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_SECONDS,
    check_float_option,
    check_int_option,
    check_pieces,
)

if TYPE_CHECKING:
    from .optimize import SolveResult

app = typer.Typer(
    rich_markup_mode="rich",
    no_args_is_help=True,
    help="Predict, compare and optimize gradient-communication schedules of data-parallel SGD.",
)
console = Console()
_state = {"debug": False}
log = logging.getLogger("schedopt")
report.quiet_flag_metavars()

TraceArg = Annotated[str, typer.Argument(help="Trace: a JSON file or a shipped name.")]
ClusterArg = Annotated[str, typer.Argument(help="Cluster: a JSON file or a shipped name.")]
NodesOpt = Annotated[
    int | None, typer.Option("--nodes", help="Derive the cluster of N nodes (families, resizing).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
PolicyOpt = Annotated[
    str | None, typer.Option("--policy", "-p", help="Policy spec NAME[:key=value,...].")
]
PlanOpt = Annotated[
    Path | None, typer.Option("--plan", help="A plan JSON (from `optimize --out`).")
]
PerturbOpt = Annotated[
    str | None, typer.Option("--perturb", metavar="PCT",
                             help="Also simulate the plan with alpha, beta and compute scaled by"
                             " +-PCT% (the corners and the nominal; docs/robust.md).")
]
VaryOpt = Annotated[
    str, typer.Option("--vary", help="What --perturb / --robust scale: some of"
                      " alpha,beta,compute.")
]
PerLinkOpt = Annotated[
    bool, typer.Option("--per-link", help="Scale alpha and beta of each link separately.")
]
WorkLimitOpt = Annotated[
    float | None,
    typer.Option("--work-limit", help="Deterministic work limit in seconds (the time limit"
                 " becomes a safety stop); default: 70% of the time limit."),
]
WorkersOpt = Annotated[
    int, typer.Option("--workers", help="CP-SAT workers (1 is deterministic).")
]
ShardingOpt = Annotated[
    str | None, typer.Option("--sharding", help="full | grad-op: search sharded plans"
                             " (units, prefetch depths) instead of all-reduce buckets.")
]
MemoryCapOpt = Annotated[
    int | None, typer.Option("--memory-cap", help="With --sharding: largest peak of"
                             " unsharded parameters and gradients per rank (BYTES).")
]
AccumulateOpt = Annotated[
    int, typer.Option("--accumulate", help="With --sharding: micro-batches per step.")
]
RobustOpt = Annotated[
    str | None, typer.Option("--robust", metavar="PCT",
                             help="Minimise the worst case over alpha, beta and compute scaled"
                             " by +-PCT% (docs/robust.md).")
]
RobustClustersOpt = Annotated[
    list[str] | None, typer.Option("--robust-clusters", metavar="CLUSTERS",
                                   help="Minimise the worst case over these clusters too"
                                   " (comma-separated or repeated).")
]


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn bad input into one line on stderr and exit status 2 (tracebacks with --debug)."""
    try:
        yield
    except SchedoptError as exc:
        if _state["debug"]:
            raise
        _fail(str(exc))


def parse_counts(text: str, option: str) -> list[int]:
    """Parse comma-separated node counts (1 to MAX_NODES, at most 64 of them)."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SchedoptError("must be comma-separated integers", option, text) from None
    if not counts or len(counts) > 64 or min(counts) < 1 or max(counts) > MAX_NODES:
        raise SchedoptError(f"must be 1 to 64 integers between 1 and {MAX_NODES:,}", option,
                            text)
    return counts


def load_pair(trace: str, cluster: str, nodes: int | None) -> tuple[Trace, Cluster]:
    """Load a trace and a cluster from names or paths."""
    tr, cl = load_trace(trace), load_cluster(cluster, nodes)
    log.info("trace %s: %d layers, %d tensors; cluster %s: %d GPUs, %s", tr.name,
             len(tr.layers), tr.num_tensors, cl.name, cl.world_size, cl.collective)
    return tr, cl


def load_with_plan(trace: str, cluster: str, nodes: int | None, policy: str | None,
                   plan_file: Path | None) -> tuple[Trace, Cluster, Plan]:
    """Load a trace, a cluster and the plan given by exactly one of a policy spec or a file."""
    if (policy is None) == (plan_file is None):
        raise SchedoptError("give exactly one of --policy and --plan", "options",
                            "both" if policy else "neither")
    tr, cl = load_pair(trace, cluster, nodes)
    if plan_file is not None:
        plan = load_plan(plan_file)
        plan.check_stage_orders(cl)
    else:
        plan = make_plan(policy or "", tr, cl)
    return tr, cl, plan


def result_dict(plan: Plan, sched: Schedule, **extra: Any) -> dict[str, Any]:
    """The JSON object ``simulate --json`` prints for one plan."""
    return {
        "policy": plan.policy,
        "knobs": plan.knobs,
        "iteration_time_s": sched.iteration_time_s,
        "first_iteration_s": sched.first_iteration_s,
        "throughput_samples_s": sched.throughput_samples_s,
        "breakdown": sched.breakdown.as_dict(),
        **_memory(sched),
        **extra,
        "plan": plan.model_dump(mode="json"),
    }


def _memory(sched: Schedule) -> dict[str, float]:
    """A sharded plan's memory figures (nothing for all-reduce plans)."""
    if sched.peak_memory_bytes is None:
        return {}
    return {"peak_memory_bytes": sched.peak_memory_bytes,
            "shard_bytes": sched.shard_bytes or 0.0}


def print_json(data: Any) -> None:
    """Print strict JSON to stdout (a NaN or infinite number is an error)."""
    sys.stdout.write(json_text(data, indent=None))


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"schedopt {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Log progress.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.",
                                          is_eager=True, callback=_version)] = False,
) -> None:
    _state["debug"] = debug
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(relativeCreated)7.0f ms  %(name)s: %(message)s", force=True)


@app.command("simulate")
def simulate_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    policy: PolicyOpt = None,
    plan_file: PlanOpt = None,
    nodes: NodesOpt = None,
    as_json: JsonOpt = False,
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
    spread = None
    with user_errors():
        _check_figure_path(gantt, "--gantt")
        with output_files({"--gantt": gantt, "--chrome-trace": chrome_trace}) as files:
            tr, cl, plan = load_with_plan(trace, cluster, nodes, policy, plan_file)
            record = gantt is not None or chrome_trace is not None
            sched = simulate(tr, cl, plan, record=record)
            log.info("simulated %s: %d iterations to the steady state", plan.policy,
                     sched.iterations)
            if perturb is not None or samples:
                from .scenarios import perturbation_spread

                spread = perturbation_spread(tr, cl, plan, perturb, samples, seed, vary,
                                             per_link)
            _write_visuals(files, tr, cl, plan, sched, gantt, chrome_trace)
    if as_json:
        extra = {} if spread is None else {"spread": spread.as_dict()}
        print_json(result_dict(plan, sched, **extra))
        return
    _print_breakdown(tr, cl, plan, sched)
    if spread is not None:
        typer.echo(spread.line())
    _wrote(gantt, chrome_trace)


def _wrote(*paths: Path | None) -> None:
    """Say which files a command wrote (after its table; nothing under --json)."""
    for path in paths:
        if path is not None:
            typer.echo(f"wrote {path}")


_FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def _check_figure_path(path: Path | None, option: str) -> None:
    """Refuse a figure path whose format matplotlib would not write."""
    if path is not None and path.suffix.lower() not in _FIGURE_SUFFIXES:
        raise SchedoptError(f"must end in {', '.join(_FIGURE_SUFFIXES)}", option, str(path))


def _write_visuals(files: OutputFiles, tr: Trace, cl: Cluster, plan: Plan, sched: Schedule,
                   gantt: Path | None, chrome_trace: Path | None) -> None:
    if gantt is not None:
        from .plotting import gantt_chart

        with files.writing(gantt) as tmp:
            gantt_chart(sched, tmp, title=f"{tr.name} on {cl.name}: {plan.policy}")
    if chrome_trace is not None:
        from .plotting import chrome_trace_events

        files.write_json(chrome_trace, chrome_trace_events(sched))


def _print_breakdown(tr: Trace, cl: Cluster, plan: Plan, sched: Schedule) -> None:
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
    one = cl.single_gpu()
    rows = []
    for spec in specs:
        plan = make_plan(spec, tr, cl)
        sched = simulate(tr, cl, plan)
        base = simulate(tr, one, make_plan(spec, tr, one))
        eff = sched.throughput_samples_s / (cl.world_size * base.throughput_samples_s)
        log.info("%s: %.3f ms per iteration", spec, sched.iteration_time_s * 1e3)
        row = result_dict(plan, sched, scaling_efficiency=eff)
        row["label"] = spec  # distinguishes two settings of one policy
        rows.append(row)
    return rows


@app.command()
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
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a stacked breakdown chart (PNG/SVG/PDF).")
    ] = None,
    sharding: Annotated[
        str | None, typer.Option("--sharding", help="Also (or, without -p, only) the sharded"
                                 " baselines of this mode: full (fsdp, zero3) or grad-op.")
    ] = None,
) -> None:
    """Compare every policy: iteration time, throughput, scaling efficiency, exposed comm."""
    with user_errors(), output_files({"--plot": plot}) as files:
        _check_figure_path(plot, "--plot")
        extra = sharded_specs(sharding) if sharding is not None else []
        tr, cl = load_pair(trace, cluster, nodes)
        given = split_policy_specs(policies)
        rows = compare_rows(tr, cl, (given or []) + extra if given or extra else list(POLICIES))
        if plot is not None:
            from .plotting import breakdown_chart

            ordered = sorted(rows, key=lambda r: r["iteration_time_s"])
            with files.writing(plot) as tmp:
                breakdown_chart([(r["label"], r["breakdown"]) for r in ordered], tmp,
                                title=f"{tr.name} on {cl.name} ({cl.world_size} GPUs)")
    if as_json:
        print_json(rows)
        return
    console.print(report.compare_table(rows, f"{tr.name} on {cl.name} ({cl.world_size} GPUs)"))
    _wrote(plot)
    console.print(report.compare_hint(rows, trace, cluster, nodes), markup=False,
                  highlight=False)


@app.command()
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
) -> None:
    """Scaling curves: throughput of every policy as the cluster grows node by node."""
    with user_errors(), output_files({"--plot": plot}) as files:
        _check_figure_path(plot, "--plot")
        counts = parse_counts(nodes, "--nodes")
        tr = load_trace(trace)
        specs = split_policy_specs(policies) or list(POLICIES)
        out: list[dict[str, Any]] = []
        for n in counts:
            cl = load_cluster(cluster, n)
            for row in compare_rows(tr, cl, specs):
                out.append({"nodes": n, "gpus": cl.world_size, "policy": row["policy"],
                            "label": row["label"],
                            "iteration_time_s": row["iteration_time_s"],
                            "throughput_samples_s": row["throughput_samples_s"],
                            "scaling_efficiency": row["scaling_efficiency"]})
        if plot is not None:
            from .plotting import scaling_chart

            series: dict[str, list[tuple[int, float]]] = {}
            for r in out:
                series.setdefault(r["label"], []).append((r["gpus"], r["throughput_samples_s"]))
            with files.writing(plot) as tmp:
                scaling_chart(series, tmp, title=f"{tr.name} on {cluster}")
    if as_json:
        print_json(out)
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
    _wrote(plot)


@app.command()
def info(
    ref: Annotated[str, typer.Argument(help="A trace or cluster: file or shipped name.")],
    as_json: JsonOpt = False,
) -> None:
    """Describe a trace or a cluster."""
    with user_errors():
        obj = load_trace_or_cluster(ref)
    if isinstance(obj, Trace):
        data: dict[str, Any] = {
            "kind": "trace", "name": obj.name, "batch_size": obj.batch_size,
            "layers": len(obj.layers), "tensors": obj.num_tensors,
            "gradient_bytes": obj.total_bytes, "forward_s": float(obj.forward.sum()),
            "backward_s": float(obj.backward.sum()), "io_s": obj.io_s, "h2d_s": obj.h2d_s,
            "update_s": obj.update_s, "fingerprint": obj.fingerprint(), "source": obj.source,
        }
    else:
        alpha, beta = obj.alpha_beta()
        data = {
            "kind": "cluster", "name": obj.name, "nodes": obj.nodes,
            "gpus_per_node": obj.gpus_per_node, "world_size": obj.world_size,
            "collective": obj.collective, "alpha_s": alpha, "beta_s_per_byte": beta,
            "stages": [s.__dict__ for s in obj.comm_stages()],
            "fingerprint": obj.fingerprint(), "source": obj.source,
        }
    if as_json:
        print_json(data)
        return
    console.print(report.info_table(data))


@app.command("list")
def list_cmd(
    as_json: JsonOpt = False,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="Show each instance's source.")
    ] = False,
) -> None:
    """List the shipped instances (name, kind, size; sources with --long) and the policies."""
    with user_errors():
        rows = list_instances()
    if as_json:
        print_json({"instances": rows, "policies": list(POLICIES),
                    "sharded_policies": list(SHARDED_POLICIES)})
        return
    console.print(report.list_table(rows, long))
    console.print("policies: " + ", ".join(POLICIES))
    console.print("sharded (compare --sharding): " + ", ".join(SHARDED_POLICIES))
    if not long:
        console.print("`schedopt list --long` adds each instance's source; `schedopt info NAME`"
                      " describes one.")


@app.command()
def schema(
    kind: Annotated[
        str, typer.Argument(help="trace | cluster | cluster-family | plan | measurements")],
) -> None:
    """Print the JSON Schema of a document kind (measurements: of one CSV row)."""
    from .cluster import ClusterFamily
    from .measurements import MeasurementRow

    models: dict[str, Callable[[], dict[str, Any]]] = {
        "trace": Trace.model_json_schema,
        "cluster": Cluster.model_json_schema,
        "cluster-family": ClusterFamily.model_json_schema,
        "plan": Plan.model_json_schema,
        "measurements": MeasurementRow.model_json_schema,
    }
    with user_errors():
        if kind not in models:
            raise SchedoptError(f"unknown kind (known: {', '.join(models)})", "kind", kind)
    print_json(models[kind]())


@app.command("fit-comm")
def fit_comm(
    file: Annotated[
        list[Path], typer.Argument(help="osu_allreduce or nccl-tests all_reduce_perf output;"
                                   " several runs of the same ranks are pooled (per size, the"
                                   " median over the files).")
    ],
    min_bytes: Annotated[
        int | None,
        typer.Option("--min-bytes", help="Smallest message size fitted (default: 65536 for OSU"
                     " data with smaller sizes, else every size)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write a cluster with the fitted all-reduce.")
    ] = None,
    ranks: Annotated[
        int | None,
        typer.Option("--ranks", help="Ranks of the measurement (default: from the file or its"
                     " name)."),
    ] = None,
    as_json: JsonOpt = False,
    segments: Annotated[
        str, typer.Option("--segments", help="auto (detect protocol switches: the fewest"
                          " segments within --tolerance) or a number (1: one line).")
    ] = "auto",
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Median relative error the automatic"
                            " segmentation reaches.")
    ] = 0.02,
) -> None:
    """Fit the all-reduce cost (piecewise linear at protocol switches, or one line
    t = alpha + beta * n) to measured times; optionally write a cluster."""
    from .commfit import cluster_from_fit, fit_comm_cli, piecewise_summary
    from .loaders.comm import parse_comm_file, pool_samples

    with user_errors(), output_files({"--out": out}) as files:
        check_int_option(ranks, "--ranks", 2, MAX_NODES * MAX_GPUS_PER_NODE)
        check_int_option(min_bytes, "--min-bytes", 0, MAX_BYTES)
        paths = [_shipped_sample(f) for f in file]
        samples = pool_samples([parse_comm_file(p) for p in paths])
        fit = fit_comm_cli(samples, min_bytes, segments, tolerance)
        n_ranks = ranks if ranks is not None else samples.ranks
        names = ", ".join(f.name for f in file)
        if out is not None:
            if n_ranks is None:
                raise SchedoptError("the rank count is not in the file or its name: pass --ranks",
                                    "ranks", None)
            slow = _pooled_slowdowns(paths)
            pooled = f"the median of {len(file)} runs: " if len(file) > 1 else ""
            calls = _call_pattern(paths)
            cluster = cluster_from_fit(
                fit, name=out.stem, ranks=n_ranks,
                source=f"fitted by `schedopt fit-comm` to {pooled}{names} ({samples.format}"
                       f"{f'; bench-comm calls {calls}' if calls else ''})",
                overlap_slowdown=slow.get("overlap_slowdown", 1.0),
                comm_slowdown=slow.get("comm_slowdown", 1.0),
            )
            files.write_json(out, cluster.model_dump(mode="json", exclude_none=True))
    used = (samples.sizes >= (fit.min_bytes or 0)) & (samples.sizes <= (fit.max_bytes or 0))
    data = {
        "file": str(file[0]), "files": [str(f) for f in file], "format": samples.format,
        "ranks": n_ranks, "points": int(used.sum()), "alpha_s": fit.alpha_s,
        "beta_s_per_byte": fit.beta_s_per_byte, "r2": fit.r2, "min_bytes": fit.min_bytes,
        "max_bytes": fit.max_bytes, "out": str(out) if out is not None else None,
        "overlap_slowdown": cluster.overlap_slowdown if out is not None else None,
        "comm_slowdown": cluster.comm_slowdown if out is not None else None,
        **piecewise_summary(samples, fit),
    }
    if as_json:
        print_json(data)
        return
    console.print(_fit_table(f"all-reduce fit: {names} ({samples.format})", data))


def _call_pattern(paths: list[Path]) -> str | None:
    """How bench-comm timed the calls of ``paths`` (None when no file says).

    Raises
    ------
    SchedoptError
        The files were measured with different patterns (their times do not pool).
    """
    from .integrations.bench import read_pattern

    found = {p.name: read_pattern(p) for p in paths}
    stated = {v for v in found.values() if v is not None}
    if len(stated) > 1:
        raise SchedoptError("the files time their calls differently (bench-comm --pattern);"
                            " pool files of one pattern", "file",
                            ", ".join(f"{k}: {v or 'not stated'}" for k, v in found.items()))
    return stated.pop() if stated else None


def _pooled_slowdowns(paths: list[Path]) -> dict[str, float]:
    """The slowdowns bench-comm recorded in ``paths``: each the median over the files that
    state it (none when no file does)."""
    from .integrations.bench import read_slowdowns

    found: dict[str, list[float]] = {}
    for p in paths:
        for key, value in read_slowdowns(p).items():
            found.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in found.items()}


def _fit_table(title: str, data: dict[str, Any]) -> Table:
    """The table `fit-comm` prints of its ``--json`` document."""
    table = Table(title=title, show_header=False)
    table.add_row("ranks", str(data["ranks"]) if data["ranks"] is not None else "unknown")
    table.add_row("alpha", f"{data['alpha_s'] * 1e6:.3f} us")
    beta = data["beta_s_per_byte"]
    table.add_row("beta", f"{beta:.4g} s/B ({beta * 1e12:.1f} us/MB)")
    table.add_row("R²", f"{data['r2']:.5f}" if data["r2"] is not None else "n/a")
    table.add_row("sizes used", f"{data['min_bytes']:,} .. {data['max_bytes']:,} B "
                  f"({data['points']} points)")
    for i, seg in enumerate(data["segments"]):
        table.add_row(f"segment {i + 1}", f"from {seg['min_bytes']:,} B: {seg['alpha_s'] * 1e6:.1f}"
                      f" us + {seg['beta_s_per_byte'] * 1e12:.1f} us/MB")
    table.add_row("median |rel. error|", f"{data['median_rel_error'] * 100:.2f}%")
    if data["out"] is not None:
        table.add_row("overlap slowdown", f"{data['overlap_slowdown']:.3f}")
        table.add_row("communication slowdown", f"{data['comm_slowdown']:.3f}")
        table.add_row("cluster written", data["out"])
    return table


def _shipped_sample(file: Path) -> Path:
    """A file that does not exist but names a shipped sample (``osu_allreduce8.log``)."""
    from .files import instances_dir

    sample = instances_dir() / "samples" / file.name
    return sample if not file.exists() and file.parent == Path() and sample.is_file() else file


@app.command("emit")
def emit_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    target: Annotated[
        str, typer.Option("--target", "-t",
                          help="ddp | fsdp | horovod | deepspeed | megatron | json")
    ],
    policy: PolicyOpt = None,
    plan_file: PlanOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the files into this folder.")
    ] = None,
    nodes: NodesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Translate a policy's plan (or a saved plan) into a framework's settings."""
    from .emit import emit

    with user_errors():
        tr, cl, plan = load_with_plan(trace, cluster, nodes, policy, plan_file)
        emitted = emit(target, plan, tr, cl)
        written = emitted.write(out) if out is not None else []
    if as_json:
        print_json(emitted.model_dump(mode="json"))
        return
    kind = "exact" if emitted.exact else "approximate"
    typer.echo(f"{emitted.target}: {kind} ({report.short_spec(emitted.spec or plan.policy)})")
    for note in emitted.notes:
        typer.echo(f"note: {note}")
    if written:
        typer.echo("wrote " + ", ".join(str(p) for p in written))
        return
    for name, text in emitted.files.items():
        typer.echo(f"# ---- {name}")
        typer.echo(text.rstrip("\n"))


@app.command("profile")
def profile_cmd(
    factory: Annotated[
        str, typer.Argument(help="MODULE:FACTORY, a callable returning a torch.nn.Module.")
    ],
    input_shape: Annotated[
        str, typer.Option("--input-shape", help="Shape of one input batch, e.g. 32,3,224,224.")
    ],
    name: Annotated[str, typer.Option("--name", help="Trace name.")],
    out: Annotated[Path, typer.Option("--out", help="Trace JSON to write.")],
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="Per-GPU batch (default: first dim).")
    ] = None,
    input_dtype: Annotated[
        str, typer.Option("--input-dtype", help="float32, or int64 for token ids in [0, 100).")
    ] = "float32",
    device: Annotated[
        str | None, typer.Option("--device", help="cpu, cuda, cuda:1 (default: the model's).")
    ] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Measured iterations.")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", help="Discarded iterations.")] = 2,
    procs: Annotated[
        int, typer.Option("--procs", help="Ranks computing at once, as in training (1: this "
                          "process alone; N >= 2: N local ranks, the median over them).")
    ] = 1,
    backend: Annotated[
        str, typer.Option("--backend", help="With --procs N: gloo (CPU) | nccl (a GPU each).")
    ] = "gloo",
    threads: Annotated[
        int, typer.Option("--threads", help="With --procs N: OMP_NUM_THREADS of every rank.")
    ] = 1,
    timeout: Annotated[
        float, typer.Option("--timeout", help="With --procs N: seconds before a hung run stops.")
    ] = 600.0,
    grad_copy: Annotated[
        bool, typer.Option("--grad-copy", help="Time DDP's copy of every gradient into its "
                           "bucket as part of the backward; autograd's gradient is kept "
                           "(see --grad-view).")
    ] = False,
    grad_view: Annotated[
        bool, typer.Option("--grad-view", help="As --grad-copy, then make the copy the "
                           "gradient, as DDP's gradient_as_bucket_view (bench-ddp's default).")
    ] = False,
) -> None:
    """Measure a PyTorch model's layer-wise trace (needs torch)."""
    from .integrations.torch import check_profile_options

    with user_errors(), output_files({"--out": out}) as files:
        check_profile_options(name, batch_size, repeats, warmup)
        if procs == 1:
            tr = _profile_here(factory, input_shape, input_dtype, name, batch_size, repeats,
                               warmup, device, (grad_copy, grad_view))
        else:
            tr = _profile_ranks(factory, input_shape, input_dtype, name, batch_size, repeats,
                                warmup, device, (procs, backend, threads, timeout),
                                (grad_copy, grad_view))
        files.write_json(out, tr.model_dump(mode="json", exclude_none=True))
    typer.echo(f"wrote {out}: {len(tr.layers)} layers, {tr.num_tensors} tensors, "
               f"{tr.total_bytes / 2**20:.1f} MiB, compute {tr.compute_s * 1e3:.3f} ms")


def _profile_here(factory: str, input_shape: str, input_dtype: str, name: str,
                  batch_size: int | None, repeats: int, warmup: int, device: str | None,
                  grads: tuple[bool, bool]) -> Trace:
    """``profile`` in this process; ``grads``: ``--grad-copy``, ``--grad-view``."""
    from .integrations.torch import build_model, profile_model, random_batch

    model = build_model(factory)
    batch = random_batch(input_shape, input_dtype)
    return profile_model(model, batch, name=name, batch_size=batch_size or batch.shape[0],
                         repeats=repeats, warmup=warmup, device=device, grad_copy=grads[0],
                         grad_view=grads[1])


def _profile_ranks(factory: str, input_shape: str, input_dtype: str, name: str,
                   batch_size: int | None, repeats: int, warmup: int, device: str | None,
                   launch: tuple[int, str, int, float], grads: tuple[bool, bool]) -> Trace:
    """``profile --procs N``: N co-running local ranks; ``grads`` as :func:`_profile_here`."""
    from .integrations.bench import Launch
    from .integrations.profile_ranks import profile_ranks
    from .integrations.torch import random_batch

    if device is not None:
        raise SchedoptError("with --procs N the backend places the ranks (gloo: CPU, nccl: a "
                            "GPU each); leave --device out", "--device", device)
    spec = Launch(*launch).check()
    batch = batch_size or random_batch(input_shape, input_dtype).shape[0]
    return profile_ranks(factory, input_shape, input_dtype, name=name, batch_size=batch,
                         repeats=repeats, warmup=warmup, spec=spec, grad_copy=grads[0],
                         grad_view=grads[1])


@app.command("tune")
def tune_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    nodes: NodesOpt = None,
    framework: Annotated[
        str, typer.Option("--framework", "-f", help="ddp | horovod | deepspeed | megatron | all,"
                          " or a comma list.")
    ] = "all",
    time_limit: Annotated[
        float, typer.Option("--time-limit", help="Time limit of the optimum's search (s).")
    ] = 10.0,
    as_json: JsonOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write each knob's curve (PNG/SVG/PDF).")
    ] = None,
) -> None:
    """Best value of each framework's own knob, against its default and the optimized plan."""
    from .tune import FRAMEWORKS, tune_all

    with user_errors(), output_files({"--plot": plot}) as files:
        _check_figure_path(plot, "--plot")
        names = list(FRAMEWORKS) if framework == "all" else [
            f.strip() for f in framework.split(",") if f.strip()]
        for name in names:
            if name not in FRAMEWORKS:
                raise SchedoptError(f"unknown framework (known: {', '.join(FRAMEWORKS)}, all)",
                                    "framework", name)
        tr, cl = load_pair(trace, cluster, nodes)
        results, optimum = tune_all(tr, cl, names, time_limit_s=time_limit)
        rows = [r.as_dict() for r in results]
        if plot is not None:
            from .plotting import tune_chart

            with files.writing(plot) as tmp:
                tune_chart(rows, tmp, optimum_s=optimum["iteration_time_s"] if optimum else None,
                           title=f"{tr.name} on {cl.name} ({cl.world_size} GPUs)")
    if as_json:
        print_json({"optimum": optimum, "frameworks": rows})
        return
    console.print(report.tune_table(rows, f"{tr.name} on {cl.name} ({cl.world_size} GPUs)",
                                    optimum))
    for line in report.tune_lines(rows):
        typer.echo(line)
    _wrote(plot)


@app.command("optimize")
def optimize_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    nodes: NodesOpt = None,
    next_forward: Annotated[
        str, typer.Option("--next-forward", help="wait-for-all | per-layer")
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
                     " that framework executes (the options above widen it)."),
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
    robust: RobustOpt = None,
    robust_clusters: RobustClustersOpt = None,
    vary: VaryOpt = "alpha,beta,compute",
    per_link: PerLinkOpt = False,
    sharding: ShardingOpt = None,
    memory_cap: MemoryCapOpt = None,
    accumulate: AccumulateOpt = 1,
) -> None:
    """Find the best plan (exact DP or CP-SAT) and compare it with every baseline."""
    from .optimize import solve

    with user_errors(), output_files({"--out": out}) as files:
        check_float_option(time_limit, "--time-limit", -math.inf, MAX_SECONDS)  # (0 in options)
        if work_limit is not None:
            check_float_option(work_limit, "--work-limit", 0.0, MAX_SECONDS)
        check_int_option(workers, "--workers", 1, 1024)
        check_int_option(seed, "--seed", 0, 2**31 - 1)
        check_int_option(partition, "--partition", 1, MAX_BYTES)
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
            (sharding, memory_cap, accumulate))
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
    else:
        _print_optimized(res, tr, cl, cls, out)
    if res.interrupted:  # Ctrl-C: the best plan so far is printed (and written); exit 130
        raise typer.Exit(130)


def _solve_options(tr: Trace, cl: Cluster, target: str | None, next_forward: str, reorder: bool,
                   partition: int | None, search: dict[str, Any],
                   sharded: tuple[str | None, int | None, int]) -> tuple[dict[str, Any], Any]:
    """The class of plans ``optimize``'s options describe (``--target`` applied) and the
    :class:`~schedopt.optimize.SolveOptions` of the search."""
    from pydantic import ValidationError

    from .errors import from_validation_error
    from .optimize import SolveOptions
    from .optimize.sharding.options import sharded_options
    from .targets import target_options

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
    from .optimize.robust import robust_cli

    return robust_cli(tr, cl, opts, robust, robust_clusters or [], nodes, vary, per_link)


def _print_robust(rob: Any, as_json: bool, out: Path | None) -> None:
    """The report of ``optimize --robust`` (exit 130 after Ctrl-C, as ``optimize``)."""
    from .optimize.robust import robust_lines

    if as_json:
        print_json(rob.to_dict())
    else:
        for line in robust_lines(rob):
            typer.echo(line)
        _wrote(out)
    if rob.interrupted:
        raise typer.Exit(130)


def _print_optimized(res: SolveResult, tr: Trace, cl: Cluster, cls: dict[str, Any],
                     out: Path | None) -> None:
    """The table of ``optimize``: the optimized plan against every baseline, then the status."""
    from .optimize.sharding.options import sharded_labels

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
    from .targets import beyond_class

    for b in sorted(res.baselines, key=lambda b: b.iteration_time_s):
        if not b.expressible and b.iteration_time_s < res.iteration_time_s * (1 - 1e-6):
            if res.plan.sharding is not None:  # the reason names the options that reach it
                typer.echo(f"note: {b.policy} ({b.iteration_time_s * 1e3:.3f} ms) is faster and"
                           f" lies outside this class: {b.reason}")
                continue
            typer.echo(f"note: {b.policy} ({b.iteration_time_s * 1e3:.3f} ms) is faster and lies"
                       f" outside this class ({b.reason}): "
                       f"{beyond_class(b.policy, tr, cl, cls)}")


# ------------------------------------------------------------------- calibrate and validate
@app.command("calibrate")
def calibrate_cmd(
    measurements: Annotated[Path, typer.Argument(help="Measurements CSV (docs/formats.md).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for DIR/<cluster name>.json.")],
    fit: Annotated[
        str | None, typer.Option("--fit", help="Parameters to fit, comma-separated (default:"
                                 " all; see docs/cli.md).")
    ] = None,
    starts: Annotated[int, typer.Option("--starts", help="Starts of the search.")] = 3,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random starts.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Fit each cluster's link, overlap and overhead parameters to measured iteration times."""
    from .calibrate import calibrate, parse_fit, write_calibrations
    from .measurements import read_measurements

    with user_errors():
        names = parse_fit(fit)
        rows = read_measurements(_shipped_sample(measurements), label=str(measurements))
        cals = calibrate(rows, names, starts=starts, seed=seed, where=measurements.name)
        paths = write_calibrations(cals, out)
    if as_json:
        print_json({"clusters": [{**c.to_dict(), "out": str(p)} for c, p in zip(cals, paths,
                                                                                strict=True)]})
        return
    for cal, path in zip(cals, paths, strict=True):
        _print_calibration(cal, path)


def _print_calibration(cal: Any, path: Path) -> None:
    table = Table(title=f"{cal.name} ({cal.kind}, {len(cal.rows)} rows)")
    for col in ("parameter", "prior", "fitted", "95% interval", "status"):
        table.add_column(col, justify="left" if col in ("parameter", "status") else "right")
    for p in cal.params:
        ci = f"{p.low:.4g} .. {p.high:.4g}" if p.low is not None and p.high is not None else "-"
        table.add_row(p.name, f"{p.prior:.4g}", f"{p.value:.4g}", ci,
                      "fitted" if p.identified else f"unidentified: {p.note}")
    console.print(table)
    rows = Table(title="rows: residual of the fit, error predicted without the row")
    for col in ("row", "policy", "measured ms", "fitted ms", "residual", "left-out error"):
        rows.add_column(col, justify="left" if col in ("row", "policy") else "right")
    for r in cal.rows:
        loo = f"{r.loo_error * 100:+.2f}%" if r.loo_error is not None else "-"
        rows.add_row(r.label, r.policy, f"{r.measured_s * 1e3:.3f}", f"{r.predicted_s * 1e3:.3f}",
                     f"{r.error * 100:+.2f}%", loo)
    console.print(rows)
    loo_mean = cal.loo_mean_abs_error
    typer.echo(f"mean |residual| {cal.mean_abs_error * 100:.2f}%  leave-one-row-out mean |error| "
               + (f"{loo_mean * 100:.2f}% ({cal.loo_method})" if loo_mean is not None else "-")
               + f"  evaluations {cal.evaluations}  wrote {path}"
               + "".join(f", {f}" for f in cal.trace_files.values()))


@app.command("validate")
def validate_cmd(
    measurements: Annotated[Path, typer.Argument(help="Measurements CSV (docs/formats.md).")],
    as_json: JsonOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Predicted vs measured (PNG/SVG/PDF).")
    ] = None,
) -> None:
    """Predict every measured run and report the errors per row, per policy and overall."""
    from .calibrate import validate
    from .measurements import read_measurements

    with user_errors(), output_files({"--plot": plot}) as files:
        _check_figure_path(plot, "--plot")
        report = validate(read_measurements(_shipped_sample(measurements), label=str(measurements)))
        if plot is not None:
            from .plotting.validation import validation_chart

            with files.writing(plot) as tmp:
                validation_chart([(r["measured_s"], r["predicted_s"], r["policy_name"])
                                  for r in report.rows], tmp,
                                 title=f"{measurements.name}: predicted vs measured")
    data = report.to_dict()
    if as_json:
        print_json(data)
        return
    table = Table(title=f"{measurements.name}: predicted vs measured")
    for col in ("row", "trace", "cluster", "nodes", "policy", "measured ms", "predicted ms",
                "error"):
        table.add_column(col, justify="right" if "ms" in col or col == "error" else "left")
    for r in data["rows"]:
        table.add_row(r["row"], r["trace"], r["cluster"], str(r["nodes"] or ""), r["policy"],
                      f"{r['measured_s'] * 1e3:.3f}", f"{r['predicted_s'] * 1e3:.3f}",
                      f"{r['error'] * 100:+.2f}%")
    console.print(table)
    for name, st in data["policies"].items():
        typer.echo(f"{name}: {st['rows']} rows, mean |error| {st['mean_abs_error'] * 100:.2f}%,"
                   f" max {st['max_abs_error'] * 100:.2f}%")
    typer.echo(f"overall: mean |error| {data['mean_abs_error'] * 100:.2f}%, max "
               f"{data['max_abs_error'] * 100:.2f}%")


# ------------------------------------------------------------ real runs: bench-comm, bench-ddp
ProcsOpt = Annotated[int, typer.Option("--procs", help="Local processes (ranks).")]
ThreadsOpt = Annotated[
    int, typer.Option("--threads", help="OMP_NUM_THREADS and torch threads of every rank.")
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", help="Seconds before a hung run is stopped.")
]


@app.command("bench-comm")
def bench_comm_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output file (nccl-tests layout).")],
    backend: Annotated[str, typer.Option("--backend", help="gloo | nccl")] = "gloo",
    procs: ProcsOpt = 2,
    sizes: Annotated[
        str, typer.Option("--sizes", help="MIN:MAX message bytes (K, M, G suffixes).")
    ] = "4K:64M",
    iters: Annotated[int, typer.Option("--iters", help="Timed calls per size.")] = 10,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed calls per size.")] = 3,
    overlap_repeats: Annotated[
        int, typer.Option("--overlap-repeats", help="Overlap-slowdown repeats (0: skip).")
    ] = 5,
    overlap_bytes: Annotated[
        int | None, typer.Option("--overlap-bytes", help="All-reduce size under the compute"
                                 " loop (default 25 MiB).")
    ] = None,
    pattern: Annotated[
        str, typer.Option("--pattern", help="isolated: every timed call alone after a barrier"
                          " (the median call); queued: launched back to back (the mean, as"
                          " nccl-tests).")
    ] = "isolated",
    threads: ThreadsOpt = 1,
    timeout: TimeoutOpt = 600.0,
) -> None:
    """Measure all-reduce latency over message sizes and the contention between compute and
    communication on local ranks (needs torch); `fit-comm` reads the output."""
    from .integrations.bench import Launch, bench_comm, format_nccl_tests, parse_sizes
    from .integrations.bench import write_text_atomic as write_text

    with user_errors():
        lo, hi = parse_sizes(sizes)
        spec = Launch(procs, backend, threads, timeout).check()
        res = bench_comm(spec, min_bytes=lo, max_bytes=hi, iters=iters, warmup=warmup,
                         overlap_bytes=overlap_bytes, overlap_repeats=overlap_repeats,
                         pattern=pattern)
        write_text(out, format_nccl_tests(res))
    for n, t in zip(res.sizes, res.times, strict=True):
        typer.echo(f"{n:>12,} B  {t * 1e3:10.3f} ms")
    if res.overlap_slowdown is not None:
        typer.echo(f"overlap slowdown {res.overlap_slowdown:.3f} (compute under all-reduces of"
                   f" {res.overlap_bytes:,} B)")
    if res.comm_slowdown is not None:
        typer.echo(f"communication slowdown {res.comm_slowdown:.3f} (all-reduces of"
                   f" {res.overlap_bytes:,} B under the compute loop)")
    typer.echo(f"wrote {out} ({backend}, {procs} processes, OMP_NUM_THREADS={threads}, calls"
               f" {pattern})")


@app.command("bench-ddp")
def bench_ddp_cmd(
    factory: Annotated[
        str, typer.Argument(help="MODULE:FACTORY, a callable returning a torch.nn.Module.")
    ],
    input_shape: Annotated[
        str, typer.Option("--input-shape", help="Shape of one input batch per rank.")
    ],
    trace: Annotated[Path, typer.Option("--trace", help="The model's trace (`profile`).")],
    cluster: Annotated[Path, typer.Option("--cluster", help="Cluster of the rows.")],
    out: Annotated[Path, typer.Option("--out", help="Measurements CSV to write.")],
    policies: Annotated[
        list[str] | None, typer.Option("--policy", "-p", help="ddp[:knobs], cntk or sync-easgd"
                                       " (repeatable).")
    ] = None,
    plans: Annotated[
        list[Path] | None, typer.Option("--plan", help="Plan JSON (repeatable).")
    ] = None,
    input_dtype: Annotated[
        str, typer.Option("--input-dtype", help="float32, or int64 for token ids.")
    ] = "float32",
    procs: ProcsOpt = 2,
    backend: Annotated[str, typer.Option("--backend", help="gloo | nccl")] = "gloo",
    iters: Annotated[int, typer.Option("--iters", help="Timed iterations per run.")] = 20,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed iterations (>= 2).")] = 5,
    rounds: Annotated[
        int, typer.Option("--rounds", help="Run the configurations alternately this often.")
    ] = 1,
    bucket_view: Annotated[
        bool, typer.Option("--bucket-view/--no-bucket-view",
                           help="gradient_as_bucket_view for every row.")
    ] = True,
    threads: ThreadsOpt = 1,
    timeout: TimeoutOpt = 600.0,
) -> None:
    """Run real DistributedDataParallel per policy or plan on local ranks; write measurements
    rows (needs torch)."""
    from .integrations.bench import Launch
    from .integrations.bench_ddp import bench_ddp, ddp_configs, write_rows

    with user_errors():
        tr, cl = load_trace(str(trace)), load_cluster(str(cluster))
        if cl.world_size != procs:
            raise SchedoptError(f"the cluster has {cl.world_size} ranks, --procs {procs}",
                                "cluster", str(cluster))
        spec = Launch(procs, backend, threads, timeout).check()
        configs = ddp_configs(tr, cl, policies or [], plans or [], out.parent)
        rows = bench_ddp(configs, spec, factory=factory, input_shape=input_shape,
                         input_dtype=input_dtype, trace_path=trace, iters=iters,
                         warmup=warmup, rounds=rounds, bucket_view=bucket_view)
        write_rows(out, rows, trace_ref=_rel_to(trace, out.parent),
                   cluster_ref=_rel_to(cluster, out.parent), spec=spec, iters=iters,
                   warmup=warmup)
    for r in rows:
        mark = "ok" if r.buckets_ok else "MISMATCH"
        typer.echo(f"{r.config.label}: {r.median_s * 1e3:.3f} ms (std {r.std_s * 1e3:.3f} ms, "
                   f"{len(r.times)} samples)  buckets {mark}: {r.note}")
    typer.echo(f"wrote {out}: {len(rows)} rows ({backend}, {procs} processes, "
               f"OMP_NUM_THREADS={threads})")


def _rel_to(path: Path, base: Path) -> str:
    import os

    return os.path.relpath(path.resolve(), base.resolve())


from .sweep.cli import app as _sweep_app  # noqa: E402  (sweep run / sweep report)

app.add_typer(_sweep_app, name="sweep")


def main() -> None:
    """Entry point of the ``schedopt`` console script."""
    sys.exit(run(sys.argv[1:]))


def run(argv: list[str]) -> int:
    """Run the command line on ``argv``; return the exit status.

    Usage errors (unknown option, missing argument, a value of the wrong type) print one
    ``error:`` line and return 2, as bad input does; a standard output that is closed or full
    is an error too, reported on stderr.
    """
    from typer.exceptions import TyperException

    if sys.stdout is None:
        typer.echo("error: standard output is closed", err=True)
        return 2
    try:
        rc = app(prog_name="schedopt", args=argv, standalone_mode=False)
        sys.stdout.flush()
    except TyperException as exc:
        if isinstance(exc, typer.Exit):
            return int(exc.exit_code)
        if isinstance(exc, typer.Abort):
            typer.echo("error: interrupted", err=True)
            return 130
        message = " ".join(str(exc.format_message()).split())
        if message:  # an empty message: the help was shown (no arguments)
            typer.echo(f"error: {message}", err=True)
        return int(getattr(exc, "exit_code", 2))
    except SchedoptError as exc:  # raised outside a command's `user_errors` (printing)
        if _state["debug"]:
            raise
        typer.echo(f"error: {exc}", err=True)
        return 2
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EBADF, errno.EIO):
            raise
        _silence_stdout()
        typer.echo(f"error: cannot write to standard output: {exc.strerror or exc}", err=True)
        return 2
    return rc if isinstance(rc, int) else 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
