"""``schedopt sweep run`` and ``schedopt sweep report`` (a typer sub-app)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from schedopt.cli.output import WideConsole, choice
from schedopt.errors import SchedoptError

app = typer.Typer(
    rich_markup_mode="rich",
    no_args_is_help=True,
    help="Run many traces x clusters x policies x optimizer settings into SQLite; report them.",
)
console = WideConsole()

DbOpt = Annotated[Path, typer.Option("--db", help="The SQLite results file.")]


@contextmanager
def _user_errors() -> Iterator[None]:
    """Bad input: one line on stderr, exit status 2."""
    try:
        yield
    except SchedoptError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command("run")
def run_cmd(
    spec: Annotated[Path, typer.Argument(help="Sweep spec (YAML or JSON).")],
    db: DbOpt,
    executor: Annotated[
        str, typer.Option("--executor", help="local (process pool) or ray (one task per row).",
                          **choice("local", "ray"))
    ] = "local",
    workers: Annotated[
        int, typer.Option("--workers", help="Rows at once (local) or CPUs of a local Ray; "
                          "a solve takes its own `workers` CPUs.")
    ] = 2,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Address of a running Ray cluster.")
    ] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Run again the rows stored with an error.")
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Progress bar on stderr.")
    ] = True,
) -> None:
    """Run every row of SPEC that --db lacks; each row is stored as soon as it finishes.

    A row whose worker process dies is left pending (a rerun runs it; exit status 1); SIGTERM
    and SIGHUP stop the sweep and its workers as Ctrl-C does.
    """
    from schedopt.model.limits import check_int_option
    from schedopt.study.sweep.run import Terminated, run_sweep
    from schedopt.study.sweep.spec import MAX_WORKERS, load_spec

    with _user_errors():
        if executor not in ("local", "ray"):
            raise SchedoptError("must be local or ray", "--executor", executor)
        check_int_option(workers, "--workers", 1, MAX_WORKERS)
        sweep = load_spec(spec)
        try:
            s = run_sweep(sweep, db, executor=executor, workers=workers,  # type: ignore[arg-type]
                          ray_address=ray_address, retry_failed=retry_failed, progress=progress)
        except KeyboardInterrupt as exc:
            typer.echo("interrupted: finished rows are stored; rerun to resume", err=True)
            raise typer.Exit(128 + exc.signum if isinstance(exc, Terminated) else 130) from None
    typer.echo(f"{s.total} rows: {s.skipped} already stored, {s.done} done, {s.failed} failed"
               + (f", {s.pending} pending" if s.pending else "")
               + f" in {s.wall_s:.1f} s -> {db}")
    if s.pending:
        typer.echo(f"{s.pending} rows left pending: their worker process died; rerun to run "
                   "them", err=True)
        raise typer.Exit(1)


def _speedup_table(rows: list[dict[str, Any]]) -> Table:
    from schedopt.study.sweep.report import speedup_grid

    grid = speedup_grid(rows)
    cols = sorted({c for cells in grid.values() for c in cells},
                  key=lambda c: (float(c[0].split()[0]) if c[0] != "?" else 0.0, c[1]))
    table = Table(title="Speedup of the optimum over each policy (geometric mean over traces)")
    table.add_column("policy")
    for bw, ws in cols:
        table.add_column(f"{bw}\n{ws} GPUs", justify="right")
    for pol, cells in sorted(grid.items()):
        table.add_row(pol, *(f"{cells[c]:.3f}x" if c in cells else "" for c in cols))
    return table


def _near_table(rows: list[dict[str, Any]]) -> Table:
    from schedopt.study.sweep.report import near_optimal

    table = Table(title="Policies within 1% of the optimum")
    for col in ("policy", "instances", "within 1%"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for n in near_optimal(rows):
        table.add_row(n["policy"], str(n["instances"]), str(n["within_1pct"]))
    return table


def _knob_table(rows: list[dict[str, Any]]) -> Table:
    from schedopt.study.sweep.report import best_knobs

    table = Table(title="Best knob per framework per cluster (time / fastest policy, geomean)")
    for col in ("framework", "cluster", "best spec", "relative", "specs"):
        table.add_column(col)
    for b in best_knobs(rows):
        if b["candidates"] > 1:
            table.add_row(b["framework"], b["cluster"], b["best"],
                          f"{b['relative_time']:.3f}", str(b["candidates"]))
    return table


def _hidden_table(rows: list[dict[str, Any]]) -> Table:
    from schedopt.study.sweep.report import efficiency_rows

    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in efficiency_rows(rows):
        acc[e["what"]][e["bandwidth"]].append(e["hidden"])
    bands = sorted({b for d in acc.values() for b in d},
                   key=lambda b: float(b.split()[0]) if b != "?" else 0.0)
    table = Table(title="Share of communication hidden behind compute (mean over instances)")
    table.add_column("policy or setting")
    for b in bands:
        table.add_column(b, justify="right")
    for what, cells in sorted(acc.items()):
        table.add_row(what, *(f"{sum(cells[b]) / len(cells[b]):.1%}" if b in cells else ""
                              for b in bands))
    return table


def _instance_table(rows: list[dict[str, Any]]) -> Table:
    from schedopt.study.sweep.report import efficiency_rows

    best: dict[tuple[str, str], dict[str, Any]] = {}
    opt: dict[tuple[str, str], dict[str, Any]] = {}
    for e in efficiency_rows(rows):
        key = (e["trace"], e["cluster"])
        pick = opt if e["what"].startswith("optimize") else best
        if key not in pick or e["iteration_s"] < pick[key]["iteration_s"]:
            pick[key] = e
    table = Table(title="Per instance: best policy, optimum, efficiency, exposed tail")
    for col in ("trace", "cluster", "GPUs", "best policy", "ms", "optimum ms", "efficiency",
                "tail layer", "tail ms"):
        table.add_column(col)
    for key, e in sorted(best.items()):
        o = opt.get(key)
        table.add_row(key[0], key[1], str(e["world_size"]), e["what"],
                      f"{e['iteration_s'] * 1e3:.2f}",
                      f"{o['iteration_s'] * 1e3:.2f}" if o else "", f"{e['efficiency']:.1%}",
                      e["tail_layer"] or "-",
                      f"{e['tail_exposed_s'] * 1e3:.2f}" if e["tail_exposed_s"] else "0")
    return table


@app.command("report")
def report_cmd(
    db: DbOpt,
    as_json: Annotated[bool, typer.Option("--json", help="Print the stored rows as JSON.")] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write speedup.png and efficiency.png here.")
    ] = None,
) -> None:
    """Tables (and plots) of a sweep database: speedups, near-optimal policies, best knobs.

    The database is opened read-only; a file that is not a sweep database is refused. A stored
    row with an odd cell (a NaN, infinite or zero time, JSON that does not decode) is named on
    stderr, counted as failed and left out of the figures.
    """
    from schedopt.study.sweep.report import check_rows, write_plots
    from schedopt.study.sweep.store import Store

    with _user_errors():
        with Store(db, readonly=True) as store:
            rows, notes = check_rows(store.rows())
        for note in notes:
            typer.echo(f"warning: {note}", err=True)
        paths = write_plots(rows, plot) if plot is not None else []
    if as_json:
        sys.stdout.write(json.dumps(rows, allow_nan=False) + "\n")
        return
    failed = sum(r["error"] is not None for r in rows)
    typer.echo(f"{len(rows)} rows ({failed} failed) in {db}")
    for make in (_speedup_table, _near_table, _knob_table, _hidden_table, _instance_table):
        console.print(make(rows))
    for path in paths:
        typer.echo(f"wrote {path}")
