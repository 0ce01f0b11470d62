"""Regenerate every figure that the README and docs/ show, into docs/figures/.

Run: ``python benchmarks/figures.py [--out DIR] [--only NAME ...] [--no-optimal]``.

Every figure comes from shipped instances through the ``schedopt`` command line (run in this
process, with the same arguments one would type) or the public API, and is deterministic. At the
end the script prints a table: figure file, instance, what it shows, and its key number.

The figures:

``compare-resnet50-10gbe.png``, ``compare-gpt2-1.5b-dgx-a100.png``
    Breakdown bars of every policy (``schedopt compare ... --plot``).
``scale-googlenet-10gbe.png``, ``scale-resnet50-10gbe.png``, ``scale-bert-large-dgx-a100.png``
    Throughput against GPUs (``schedopt scale ... --plot``), with the optimized plan's curve
    when the optimizer is installed.
``gantt-ddp.png``, ``gantt-best.png``
    Gantt charts (``schedopt simulate ... --gantt``) of DDP and of the best plan (the optimized
    one, else the best baseline) on one instance: the exposed communication.
``crossover-resnet50.png``
    ResNet-50 with its compute scaled from an eighth to eight times the all-reduce time of all
    its gradients: where layer-wise, merged, bucketed and single-bucket plans win.

The optimized plan comes from ``schedopt optimize TRACE CLUSTER --out plan.json`` (or, where the
command line has no ``optimize`` command, from :func:`schedopt.optimize.solve`) with the default
options: FIFO launch order, wait-for-all, no partitioning, the class that ``ddp``, ``mgwfbp``,
``caffe-mpi`` and ``sync-easgd`` belong to. The plan is then re-simulated with ``schedopt
simulate TRACE CLUSTER --plan plan.json``. Without :func:`schedopt.optimize.solve`, or where the
optimizer fails on an instance, those series are skipped with a notice and every other figure is
drawn as usual. Each optimization is capped by ``--time-limit`` (Gantt) or
``--series-time-limit`` (each point of a curve).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import math
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import typer

from schedopt.cli.app import app
from schedopt.files import load_cluster, load_trace, write_json_atomic
from schedopt.report.charts import scaling_chart

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "figures"

#: Policies drawn in the scaling curves (deepspeed and megatron coincide with sync-easgd there:
#: one bucket each; tensorflow with mxnet or close to it).
SCALE_POLICIES = ("cntk", "sync-easgd", "caffe-mpi", "mxnet", "ddp", "horovod", "mgwfbp",
                  "bytescheduler")
#: Policies of the crossover sweep: layer-wise, merged, bucketed and single-bucket plans, all in
#: the FIFO wait-for-all class of the optimizer's default options.
SWEEP_POLICIES = ("caffe-mpi", "mgwfbp", "ddp", "sync-easgd")
#: Compute / communication ratios of the sweep: 2^(k/2) for k = -6 .. 6.
SWEEP_RATIOS = tuple(2.0 ** (k / 2) for k in range(-6, 7))
OPTIMAL = "optimal"

_COLORS = {"caffe-mpi": "#1f77b4", "mgwfbp": "#2ca02c", "ddp": "#d62728",
           "sync-easgd": "#9467bd", OPTIMAL: "#000000"}


class CommandFailed(RuntimeError):
    """A ``schedopt`` command exited with a non-zero status."""


@dataclass
class FigureResult:
    """One figure written, with what it shows and the numbers it plots.

    Attributes
    ----------
    file
        The image written.
    instance
        Trace and cluster (and node counts) it was made from.
    shows
        What the figure shows, in a few words.
    key
        The key number read off the run.
    commands
        The ``schedopt`` command lines that made it (the last one writes the image, unless the
        script draws it itself).
    data
        The plotted numbers (``rows`` of ``compare --json``, ``series`` of GPUs and throughput,
        ...), for checks.
    notes
        Remarks, e.g. a series skipped because the optimizer is not installed.
    """

    file: Path
    instance: str
    shows: str
    key: str
    commands: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def command_line(args: Sequence[str]) -> str:
    """The shell command line of ``schedopt`` with ``args``.

    Parameters
    ----------
    args
        Arguments after ``schedopt``.
    """
    return shlex.join(["schedopt", *[_short(str(a)) for a in args]])


def _short(arg: str) -> str:
    """A path inside the repository relative to its root; anything else unchanged."""
    path = Path(arg)
    if path.is_absolute() and path.is_relative_to(REPO):
        return str(path.relative_to(REPO))
    return arg


def run_cli(args: Sequence[str]) -> str:
    """Run ``schedopt ARGS`` in this process and return what it printed on stdout.

    Parameters
    ----------
    args
        Arguments after ``schedopt``.

    Raises
    ------
    CommandFailed
        The command exited with a non-zero status; the message holds its stderr.
    """
    command = typer.main.get_command(app)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = command.main(args=[str(a) for a in args], prog_name="schedopt",
                              standalone_mode=False)
        except Exception as exc:  # a usage error, from whichever click typer runs on
            exit_code, message = getattr(exc, "exit_code", None), getattr(exc, "format_message",
                                                                          None)
            if exit_code is None or message is None:
                raise
            err.write(message())
            rc = exit_code
    if rc not in (None, 0):
        raise CommandFailed(f"`{command_line(args)}` exited with {rc}: "
                            f"{err.getvalue().strip()}")
    return out.getvalue()


def run_json(args: Sequence[str]) -> Any:
    """Run ``schedopt ARGS --json`` in this process and parse its output.

    Parameters
    ----------
    args
        Arguments after ``schedopt``, without ``--json``.
    """
    return json.loads(run_cli([*args, "--json"]))


def optimizer_available() -> bool:
    """Whether :func:`schedopt.optimize.solve` exists."""
    try:
        module = importlib.import_module("schedopt.optimize")
    except ImportError:
        return False
    return hasattr(module, "solve")


def optimize_command_available() -> bool:
    """Whether the command line has the ``optimize`` command."""
    return "optimize" in typer.main.get_command(app).commands


def optimal_plan(trace: str, cluster: str, plan_out: Path, time_limit_s: float) -> dict[str, Any]:
    """Write the optimized plan of ``trace`` on ``cluster`` to ``plan_out``.

    Runs ``schedopt optimize TRACE CLUSTER --time-limit S --out PLAN --json`` where the command
    exists, else calls ``schedopt.optimize.solve`` with the same (default) options.

    Parameters
    ----------
    trace, cluster
        Shipped names or JSON files (a family must be written out at one size first).
    plan_out
        Plan JSON to write (``optimize --out``).
    time_limit_s
        The search's wall-clock limit.

    Returns
    -------
    dict
        What the optimizer reported (``status``, ``iteration_time_s``, ...), or ``{}``.

    Raises
    ------
    CommandFailed
        The optimizer failed on this instance.
    """
    if optimize_command_available():
        text = run_cli(["optimize", trace, cluster, "--time-limit", f"{time_limit_s:g}",
                        "--out", str(plan_out), "--json"])
        try:
            result = json.loads(text)
        except json.JSONDecodeError:
            return {}
        return result if isinstance(result, dict) else {}
    from schedopt.optimize import SolveOptions, solve

    try:
        res = solve(load_trace(trace), load_cluster(cluster),
                    SolveOptions(time_limit_s=time_limit_s))
        write_json_atomic(plan_out, res.plan.model_dump(mode="json"))
        report = res.to_dict()
    except Exception as exc:  # a failure of the optimizer costs its series, not the figures
        raise CommandFailed(f"schedopt.optimize.solve on {trace}, {cluster}: "
                            f"{type(exc).__name__}: {exc}") from exc
    report.pop("plan", None)
    return report


def optimize_command(trace: str, cluster: str, plan_out: Path, time_limit_s: float) -> str:
    """How :func:`optimal_plan` makes its plan, as a command line (or a Python call).

    Parameters
    ----------
    trace, cluster, plan_out, time_limit_s
        As for :func:`optimal_plan`.
    """
    if optimize_command_available():
        return command_line(["optimize", trace, cluster, "--time-limit", f"{time_limit_s:g}",
                             "--out", str(plan_out)])
    return (f"schedopt.optimize.solve(load_trace({_short(trace)!r}), "
            f"load_cluster({_short(cluster)!r}), SolveOptions(time_limit_s={time_limit_s:g}))"
            f" -> {_short(str(plan_out))}")


def cluster_file(cluster: str, nodes: int | None, folder: Path) -> str:
    """A cluster reference that needs no ``--nodes``: the name itself, or a JSON file.

    Parameters
    ----------
    cluster
        Shipped name or file of a cluster or a cluster family.
    nodes
        Node count to derive, or None.
    folder
        Where to write the derived cluster.
    """
    if nodes is None:
        return cluster
    derived = load_cluster(cluster, nodes)
    path = folder / f"{derived.name}.json"
    write_json_atomic(path, derived.model_dump(mode="json", exclude_none=True))
    return str(path)


def optimal_point(trace: str, cluster: str, nodes: int | None, folder: Path,
                  time_limit_s: float) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Optimize and re-simulate one instance.

    Parameters
    ----------
    trace, cluster
        Shipped names or files.
    nodes
        Node count for a family (written out to ``folder``), or None.
    folder
        Where the derived cluster and the plan are written.
    time_limit_s
        Limit of the ``optimize`` call.

    Returns
    -------
    tuple
        The ``simulate --plan --json`` result, what ``optimize`` reported, and the two command
        lines.
    """
    ref = cluster_file(cluster, nodes, folder)
    plan_out = folder / f"plan-{Path(trace).stem}-{Path(ref).stem}.json"
    report = optimal_plan(trace, ref, plan_out, time_limit_s)
    sim_args = ["simulate", trace, ref, "--plan", str(plan_out)]
    result = run_json(sim_args)
    opt_cmd = optimize_command(trace, ref, plan_out, time_limit_s)
    return result, report, [opt_cmd, command_line([*sim_args, "--json"])]


def _skipped(figure: str, exc: Exception) -> str:
    """Report on stderr that ``figure`` goes without its optimized plan; return the note."""
    note = f"optimize failed, {figure} is drawn without the optimized plan: {exc}"
    print(f"note: {note}", file=sys.stderr)
    return note


def _nodes_args(nodes: int | None) -> list[str]:
    return [] if nodes is None else ["--nodes", str(nodes)]


def _policy_args(policies: Sequence[str] | None) -> list[str]:
    return [arg for p in policies or () for arg in ("-p", p)]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


# ----------------------------------------------------------------------------------------------
# breakdown bars


def breakdown_figure(out: Path, filename: str, trace: str, cluster: str, *,
                     nodes: int | None = None,
                     policies: Sequence[str] | None = None) -> FigureResult:
    """Stacked breakdown bars of every policy: ``schedopt compare ... --plot``.

    Parameters
    ----------
    out
        Output folder.
    filename
        Image file name (PNG).
    trace, cluster
        Shipped names or files.
    nodes
        Node count for a family, or None.
    policies
        Policy specs (default: every policy).
    """
    path = out / filename
    args = ["compare", trace, cluster, *_nodes_args(nodes), *_policy_args(policies),
            "--plot", str(path)]
    rows = run_json(args)
    ordered = sorted(rows, key=lambda r: r["iteration_time_s"])
    best, worst = ordered[0], ordered[-1]
    by = {r["policy"]: r for r in rows}
    key = f"best {best['policy']} {_ms(best['iteration_time_s'])}"
    if "ddp" in by:
        ddp = by["ddp"]
        key += (f"; ddp {_ms(ddp['iteration_time_s'])} "
                f"({_ms(ddp['breakdown']['exposed_comm_s'])} exposed)")
    key += f"; worst {worst['policy']} {_ms(worst['iteration_time_s'])}"
    return FigureResult(
        file=path, instance=f"{trace} on {cluster}" + (f" ({nodes} nodes)" if nodes else ""),
        shows="iteration-time breakdown of every policy", key=key,
        commands=[command_line(args)],
        data={"rows": rows, "bars": [(r["policy"], r["breakdown"]) for r in ordered]},
    )


# ----------------------------------------------------------------------------------------------
# scaling curves


def scaling_figure(out: Path, filename: str, trace: str, cluster: str, *,
                   nodes: Sequence[int] = (1, 2, 4, 8, 16),
                   policies: Sequence[str] = SCALE_POLICIES, optimal: bool = False,
                   time_limit_s: float = 2.0) -> FigureResult:
    """Throughput against GPUs: ``schedopt scale ... --plot``, plus the optimized plan.

    Parameters
    ----------
    out
        Output folder.
    filename
        Image file name (PNG).
    trace, cluster
        Shipped names or files; ``cluster`` is a family or a cluster that can be resized.
    nodes
        Node counts.
    policies
        Policy specs drawn.
    optimal
        Add the optimized plan's curve (needs the optimizer).
    time_limit_s
        Limit of each ``optimize`` call.
    """
    path = out / filename
    args = ["scale", trace, cluster, "--nodes", ",".join(str(n) for n in nodes),
            *_policy_args(policies)]
    if not optimal:  # the command draws the chart; with the optimal curve, this script does
        args += ["--plot", str(path)]
    rows = run_json(args)
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        series.setdefault(r["policy"], []).append((r["gpus"], r["throughput_samples_s"]))
    result = FigureResult(file=path, instance=f"{trace} on {cluster}, nodes "
                          + ",".join(str(n) for n in nodes),
                          shows="throughput vs GPUs", key="", commands=[command_line(args)],
                          data={"rows": rows, "series": series})
    if optimal:
        points: list[tuple[int, float]] = []
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for n in nodes:
                    sim, _, cmds = optimal_point(trace, cluster, n, Path(tmp), time_limit_s)
                    gpus = next(r["gpus"] for r in rows if r["nodes"] == n)
                    points.append((gpus, sim["throughput_samples_s"]))
                    result.commands.extend(cmds)
        except CommandFailed as exc:
            result.notes.append(_skipped(filename, exc))
        else:
            series[OPTIMAL] = points
        # the chart `scale --plot` draws, with the optimal curve added
        scaling_chart(series, path, title=f"{load_trace(trace).name} on {cluster}")
    top = max(r["gpus"] for r in rows)
    at_top = {name: dict(pts)[top] for name, pts in series.items()}
    eff = {r["policy"]: r["scaling_efficiency"] for r in rows if r["gpus"] == top}
    best = max(eff, key=lambda p: at_top[p])
    worst = min(eff, key=lambda p: at_top[p])
    result.key = (f"{top} GPUs: {best} {at_top[best]:,.0f}/s ({eff[best]:.0%}), "
                  f"{worst} {at_top[worst]:,.0f}/s ({eff[worst]:.0%})")
    if OPTIMAL in at_top:
        result.key += f", optimal {at_top[OPTIMAL]:,.0f}/s"
    return result


# ----------------------------------------------------------------------------------------------
# Gantt charts


def gantt_figures(out: Path, trace: str, cluster: str, *, nodes: int | None = None,
                  optimal: bool = False, time_limit_s: float = 10.0) -> list[FigureResult]:
    """Gantt charts of DDP and of the best plan: ``schedopt simulate ... --gantt``.

    The best plan is the optimized one when ``optimal`` is set, else the baseline with the
    shortest iteration time (``schedopt compare --json``).

    Parameters
    ----------
    out
        Output folder (``gantt-ddp.png`` and ``gantt-best.png``).
    trace, cluster
        Shipped names or files.
    nodes
        Node count for a family, or None.
    optimal
        Draw the optimized plan (needs the optimizer).
    time_limit_s
        Limit of the ``optimize`` call.
    """
    instance = f"{trace} on {cluster}" + (f" ({nodes} nodes)" if nodes else "")
    ddp_path = out / "gantt-ddp.png"
    ddp_args = ["simulate", trace, cluster, *_nodes_args(nodes), "-p", "ddp",
                "--gantt", str(ddp_path)]
    ddp = run_json(ddp_args)
    best_path = out / "gantt-best.png"
    commands: list[str] = []
    notes: list[str] = []
    drawn = False
    if optimal:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                ref = cluster_file(cluster, nodes, Path(tmp))
                plan_out = Path(tmp) / "plan.json"
                report = optimal_plan(trace, ref, plan_out, time_limit_s)
                best_args = ["simulate", trace, ref, "--plan", str(plan_out), "--gantt",
                             str(best_path)]
                best = run_json(best_args)
                commands.append(optimize_command(trace, ref, plan_out, time_limit_s))
            label = f"optimized plan ({report.get('status', 'status unknown')})"
            drawn = True
        except CommandFailed as exc:
            notes.append(_skipped(best_path.name, exc))
    if not drawn:
        notes.append("no optimized plan: the best baseline is shown")
        rows = run_json(["compare", trace, cluster, *_nodes_args(nodes)])
        winner = min(rows, key=lambda r: r["iteration_time_s"])["policy"]
        commands.append(command_line(["compare", trace, cluster, *_nodes_args(nodes)]))
        best_args = ["simulate", trace, cluster, *_nodes_args(nodes), "-p", winner,
                     "--gantt", str(best_path)]
        best = run_json(best_args)
        label = f"best baseline {winner}"
    commands.append(command_line(best_args))

    def describe(r: dict[str, Any]) -> str:
        return (f"{_ms(r['iteration_time_s'])}, "
                f"{_ms(r['breakdown']['exposed_comm_s'])} exposed, "
                f"{len(r['plan']['buckets'])} buckets")

    return [
        FigureResult(file=ddp_path, instance=instance, shows="Gantt chart of ddp",
                     key=f"ddp: {describe(ddp)}", commands=[command_line(ddp_args)],
                     data={"result": ddp}),
        FigureResult(file=best_path, instance=instance, shows=f"Gantt chart of the {label}",
                     key=f"{best['policy']}: {describe(best)}", commands=commands,
                     data={"result": best}, notes=notes),
    ]


# ----------------------------------------------------------------------------------------------
# crossover sweep


def _crossing(xs: Sequence[float], a: Sequence[float], b: Sequence[float]) -> float | None:
    """First ``x`` (log-interpolated) where ``a - b`` changes sign, or None."""
    d = [ai - bi for ai, bi in zip(a, b, strict=True)]
    for i in range(1, len(d)):
        if d[i - 1] == 0:
            return xs[i - 1]
        if d[i - 1] * d[i] < 0:
            w = d[i - 1] / (d[i - 1] - d[i])
            return math.exp(math.log(xs[i - 1]) + w * (math.log(xs[i]) - math.log(xs[i - 1])))
    return None


def crossover_figure(out: Path, filename: str, trace: str, cluster: str, *,
                     nodes: int | None = None, ratios: Sequence[float] = SWEEP_RATIOS,
                     policies: Sequence[str] = SWEEP_POLICIES, optimal: bool = False,
                     time_limit_s: float = 2.0) -> FigureResult:
    """Iteration time against compute / communication, compute scaled with ``Trace.scaled``.

    The ratio is ``compute / T(all bytes)``: the trace's forward plus backward time over the
    cluster's all-reduce of every gradient byte in one bucket (``alpha + beta * bytes``).

    Parameters
    ----------
    out
        Output folder.
    filename
        Image file name (PNG).
    trace, cluster
        Shipped names or files.
    nodes
        Node count for a family, or None.
    ratios
        Compute / communication ratios to simulate.
    policies
        Policy specs compared.
    optimal
        Add the optimized plan (needs the optimizer).
    time_limit_s
        Limit of each ``optimize`` call.
    """
    path = out / filename
    tr = load_trace(trace)
    cl = load_cluster(cluster, nodes)
    alpha, beta = cl.alpha_beta()
    comm_s = alpha + beta * tr.total_bytes
    scales = [r * comm_s / tr.compute_s for r in ratios]
    series: dict[str, list[float]] = {p.split(":")[0]: [] for p in policies}
    compute_only: list[float] = []
    commands: list[str] = []
    notes: list[str] = []
    opt: list[float] | None = [] if optimal else None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ref = cluster_file(cluster, nodes, folder) if optimal else cluster
        for i, c in enumerate(scales):
            scaled = tr.scaled(compute=c, name=f"{tr.name}-x{c:.4g}")
            tfile = folder / f"{tr.name}-r{i}.json"
            write_json_atomic(tfile, scaled.model_dump(mode="json", exclude_none=True))
            args = ["compare", str(tfile), cluster, *_nodes_args(nodes),
                    *_policy_args(policies)]
            rows = run_json(args)
            if i == 0:
                commands.append(command_line(args))
            for r in rows:
                series[r["policy"]].append(r["iteration_time_s"])
            compute_only.append(scaled.compute_s + tr.update_s)
            if opt is not None:
                try:
                    sim, _, cmds = optimal_point(str(tfile), ref, None, folder, time_limit_s)
                except CommandFailed as exc:
                    notes.append(_skipped(filename, exc))
                    opt = None
                    continue
                opt.append(sim["iteration_time_s"])
                if i == 0:
                    commands.extend(cmds)
    if opt is not None:
        series[OPTIMAL] = opt
    best = [min(v[i] for v in series.values()) for i in range(len(ratios))]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for name, ys in series.items():
        style = {"color": _COLORS.get(name), "marker": "o", "markersize": 3}
        if name == OPTIMAL:
            style.update(linestyle="--", linewidth=1.5)
        ax1.plot(ratios, [y * 1e3 for y in ys], label=name, **style)
        ax2.plot(ratios, [y / b for y, b in zip(ys, best, strict=True)], label=name, **style)
    ax1.plot(ratios, [y * 1e3 for y in compute_only], color="#9e9e9e", linestyle=":",
             label="compute + update only")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_ylabel("iteration time (ms)")
    ax2.set_xscale("log", base=2)
    ax2.set_ylabel("iteration time / best shown")
    for ax in (ax1, ax2):
        ax.axvline(1.0, color="#bdbdbd", linewidth=0.8)
        ax.set_xlabel("compute / all-reduce of all gradients")
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    ax1.legend(fontsize=8)
    fig.suptitle(f"{tr.name} on {cl.name}: compute scaled x{scales[0]:.3g} .. x{scales[-1]:.3g}"
                 f" (all-reduce of all gradients {comm_s * 1e3:.1f} ms)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)

    names = [n for n in series if n != OPTIMAL]
    winners = []  # the best baseline at each ratio; ties (within 1 ns) joined by "="
    for i in range(len(ratios)):
        low = min(series[n][i] for n in names)
        winners.append("=".join(n for n in names if series[n][i] <= low + 1e-9))
    key = (f"best baseline at ratio {ratios[0]:.3g}: {winners[0]}, "
           f"at {ratios[-1]:.3g}: {winners[-1]}")
    if "caffe-mpi" in series and "sync-easgd" in series:
        x = _crossing(ratios, series["caffe-mpi"], series["sync-easgd"])
        if x is not None:
            key += (f"; caffe-mpi overtakes sync-easgd at ratio {x:.2f} "
                    f"(compute x{x * comm_s / tr.compute_s:.2f})")
    if OPTIMAL in series:
        gains = [min(series[n][i] for n in names) / series[OPTIMAL][i] - 1
                 for i in range(len(ratios))]
        i = max(range(len(ratios)), key=lambda k: gains[k])
        key += (f"; optimal up to {gains[i]:.1%} faster than the best baseline "
                f"(ratio {ratios[i]:.3g})")
    return FigureResult(
        file=path, instance=f"{trace} on {cluster}" + (f" ({nodes} nodes)" if nodes else ""),
        shows="iteration time vs compute/communication ratio", key=key, commands=commands,
        notes=notes,
        data={"ratios": list(ratios), "scales": scales, "comm_s": comm_s, "series": series,
              "compute_only": compute_only, "winners": winners},
    )


# ----------------------------------------------------------------------------------------------
# the whole set


def figure_jobs(out: Path, optimal: bool, time_limit_s: float,
                series_time_limit_s: float) -> dict[str, Callable[[], list[FigureResult]]]:
    """Every figure by name, as a function that makes it.

    Parameters
    ----------
    out
        Output folder.
    optimal
        Include the optimized plan where a figure has one.
    time_limit_s
        Limit of the Gantt chart's ``optimize`` call.
    series_time_limit_s
        Limit of each ``optimize`` call of a curve.
    """
    lim = series_time_limit_s
    return {
        "compare-resnet50-10gbe": lambda: [breakdown_figure(
            out, "compare-resnet50-10gbe.png", "resnet50-v100-b64", "k80-4x4-10gbe")],
        "compare-gpt2-1.5b-dgx-a100": lambda: [breakdown_figure(
            out, "compare-gpt2-1.5b-dgx-a100.png", "gpt2-1.5b-a100-bf16", "dgx-a100-4n")],
        "scale-googlenet-10gbe": lambda: [scaling_figure(
            out, "scale-googlenet-10gbe.png", "googlenet-k80-10gbe-8n", "10gbe-k80-family",
            optimal=optimal, time_limit_s=lim)],
        "scale-resnet50-10gbe": lambda: [scaling_figure(
            out, "scale-resnet50-10gbe.png", "resnet50-v100-b64", "10gbe-k80-family",
            optimal=optimal, time_limit_s=lim)],
        "scale-bert-large-dgx-a100": lambda: [scaling_figure(
            out, "scale-bert-large-dgx-a100.png", "bert-large-a100-bf16", "dgx-a100-family",
            optimal=optimal, time_limit_s=lim)],
        "gantt": lambda: gantt_figures(
            out, "resnet50-v100-b64", "10gbe-k80-family", nodes=16, optimal=optimal,
            time_limit_s=time_limit_s),
        "crossover-resnet50": lambda: [crossover_figure(
            out, "crossover-resnet50.png", "resnet50-v100-b64", "10gbe-k80-family", nodes=16,
            optimal=optimal, time_limit_s=lim)],
    }


def print_table(results: Sequence[FigureResult], out: Path) -> None:
    """Print the figure table (file, instance, what it shows, key number) to stdout.

    Parameters
    ----------
    results
        The figures made.
    out
        Output folder (file names are shown relative to it).
    """
    head = ("figure", "KB", "instance", "shows", "key number")
    rows = [(str(r.file.relative_to(out)) if r.file.is_relative_to(out) else str(r.file),
             f"{r.file.stat().st_size / 1024:.0f}", r.instance, r.shows, r.key)
            for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head[:-1])]
    for row in [head, *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]))


def main(argv: Sequence[str] | None = None) -> int:
    """Make the figures; print the table; return the exit status.

    Parameters
    ----------
    argv
        Command-line arguments (default: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument("--only", action="append", default=None,
                        help="make only this figure (repeatable); names: see --list")
    parser.add_argument("--list", action="store_true", help="list the figure names and exit")
    parser.add_argument("--no-optimal", action="store_true",
                        help="leave out the optimized plan even when the optimizer exists")
    parser.add_argument("--time-limit", type=float, default=10.0,
                        help="optimize time limit of the Gantt chart's plan (s)")
    parser.add_argument("--series-time-limit", type=float, default=2.0,
                        help="optimize time limit of each point of a curve (s)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print the schedopt commands of every figure")
    args = parser.parse_args(argv)

    optimal = not args.no_optimal and optimizer_available()
    jobs = figure_jobs(args.out, optimal, args.time_limit, args.series_time_limit)
    if args.list:
        print("\n".join(jobs))
        return 0
    unknown = sorted(set(args.only or ()) - set(jobs))
    if unknown:
        print(f"error: --only: unknown figure {unknown[0]!r} (known: {', '.join(jobs)})",
              file=sys.stderr)
        return 2
    if not optimal and not args.no_optimal:
        print("note: schedopt.optimize.solve is not available: the optimal series and the "
              "optimized Gantt chart are skipped (the best baseline is drawn instead)",
              file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[FigureResult] = []
    t_all = time.perf_counter()
    for name, job in jobs.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        made = job()
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        results.extend(made)
        if args.verbose:
            for r in made:
                for cmd in r.commands:
                    print(f"  {cmd}", file=sys.stderr)
    print_table(results, args.out)
    print(f"{len(results)} figures in {time.perf_counter() - t_all:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
