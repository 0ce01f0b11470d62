"""``fit-comm``, ``calibrate`` and ``validate``: the model against measurements."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from schedopt.cli.common import (
    JsonOpt,
    check_figure_path,
    console,
    print_json,
    shipped_sample,
    user_errors,
)
from schedopt.cli.output import CsvOpt, check_formats, print_csv, progress

if TYPE_CHECKING:
    pass


def fit_comm(
    file: Annotated[
        list[Path], typer.Argument(help="osu_allreduce or nccl-tests all_reduce_perf output, or"
                                   " a CSV bytes,time_s[,ranks];"
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
    as_csv: CsvOpt = False,
    segments: Annotated[
        str, typer.Option("--segments", help="auto (detect protocol switches: the fewest"
                          " segments within --tolerance), a number (1: one line), or table"
                          " (keep the measured table, interpolated).")
    ] = "auto",
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Median relative error the automatic"
                            " segmentation reaches.")
    ] = 0.02,
) -> None:
    """Fit the all-reduce cost (piecewise linear at protocol switches, or one line
    t = alpha + beta * n) to measured times; optionally write a cluster."""
    from schedopt.files import output_files
    from schedopt.measure.comm_tables import parse_comm_file, pool_samples
    from schedopt.measure.commfit import cluster_from_files, fit_comm_cli, piecewise_summary
    from schedopt.model.limits import MAX_BYTES, MAX_GPUS_PER_NODE, MAX_NODES, check_int_option

    with user_errors(), output_files({"--out": out}) as files:
        check_formats(as_json, as_csv)
        check_int_option(ranks, "--ranks", 2, MAX_NODES * MAX_GPUS_PER_NODE)
        check_int_option(min_bytes, "--min-bytes", 0, MAX_BYTES)
        paths = [shipped_sample(f) for f in file]
        samples = pool_samples([parse_comm_file(p) for p in paths])
        fit = fit_comm_cli(samples, min_bytes, segments, tolerance)
        n_ranks = ranks if ranks is not None else samples.ranks
        names = ", ".join(f.name for f in file)
        if out is not None:
            cluster = cluster_from_files(fit, samples, paths, names=names, name=out.stem,
                                         ranks=n_ranks)
            files.write_json(out, cluster.model_dump(mode="json", exclude_none=True))
    used = (samples.sizes >= (fit.min_bytes or 0)) & (samples.sizes <= (fit.max_bytes or 0))
    data = {
        "file": str(file[0]), "files": [str(f) for f in file], "format": samples.format,
        "ranks": n_ranks, "points": int(used.sum()), "alpha_s": fit.alpha_s,
        "beta_s_per_byte": fit.beta_s_per_byte, "r2": fit.r2, "min_bytes": fit.min_bytes,
        "max_bytes": fit.max_bytes, "out": str(out) if out is not None else None,
        "overlap_slowdown": cluster.overlap_slowdown if out is not None else None,
        "comm_slowdown": cluster.comm_slowdown if out is not None else None,
        "launch_overhead_s": cluster.launch_overhead_s if out is not None else None,
        **piecewise_summary(samples, fit),
    }
    if as_json:
        print_json(data)
        return
    if as_csv:  # one row per segment of the curve, the fit's figures on every row
        whole = {k: v for k, v in data.items() if k != "segments"}
        print_csv([{**whole, **{f"segment.{k}": v for k, v in seg.items()}}
                   for seg in data["segments"]] or [whole])
        return
    console.print(_fit_table(f"all-reduce fit: {names} ({samples.format})", data))


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
        table.add_row("launch cost (host)", f"{data['launch_overhead_s'] * 1e6:.1f} us per call")
        table.add_row("cluster written", data["out"])
    return table



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
    as_csv: CsvOpt = False,
) -> None:
    """Fit each cluster's link, overlap and overhead parameters to measured iteration times."""
    from schedopt.files import output_files
    from schedopt.measure.calibrate import (
        MAX_STARTS,
        calibrate,
        calibration_files,
        parse_fit,
        planned_names,
        write_calibrations,
    )
    from schedopt.measure.measurements import read_measurements
    from schedopt.model.limits import check_int_option

    with user_errors():
        check_formats(as_json, as_csv)
        check_int_option(starts, "--starts", 1, MAX_STARTS)
        check_int_option(seed, "--seed", 0, 2**32 - 1)
        names = parse_fit(fit)
        calibration_files([], out)  # the folder, before reading anything
        rows = read_measurements(shipped_sample(measurements), label=str(measurements))
        cluster_files, trace_files = calibration_files(planned_names(rows, names), out)
        targets = {f"--out ({p.name})": p for p in cluster_files}
        targets.update({f"--out (traces/{p.name})": p for mine in trace_files
                        for p in mine.values()})
        with output_files(targets) as files:  # every file reserved before the fit
            with progress(f"calibrate: {len(rows)} rows, {starts} starts"):
                cals = calibrate(rows, names, starts=starts, seed=seed, where=measurements.name)
            paths = write_calibrations(cals, out, files)
    if as_json:
        print_json({"clusters": [{**c.to_dict(), "out": str(p)} for c, p in zip(cals, paths,
                                                                                strict=True)]})
        return
    if as_csv:  # one row per fitted parameter, in SI units as the JSON
        print_csv([{"cluster": c.name, "out": str(p), **q.to_dict(), "unit": _si_unit(q.name)}
                   for c, p in zip(cals, paths, strict=True) for q in c.params])
        return
    for cal, path in zip(cals, paths, strict=True):
        _print_calibration(cal, path)


def _print_calibration(cal: Any, path: Path) -> None:
    table = Table(title=f"{cal.name} ({cal.kind}, {len(cal.rows)} rows)")
    for col in ("parameter", "unit", "prior", "fitted", "95% interval", "status"):
        table.add_column(col, justify="left" if col in ("parameter", "unit", "status")
                         else "right")
    for p in cal.params:
        unit, factor = display_unit(p.name)
        ci = (f"{p.low * factor:.4g} .. {p.high * factor:.4g}"
              if p.low is not None and p.high is not None else "-")
        table.add_row(p.name, unit, f"{p.prior * factor:.4g}", f"{p.value * factor:.4g}", ci,
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


def display_unit(name: str) -> tuple[str, float]:
    """The unit a calibrated parameter is printed in and the factor from its SI value:
    bandwidths in GB/s, latencies and overheads in us, slowdowns and scales as ratios."""
    base = name.split("[")[0]
    if base.endswith("bandwidth"):
        return "GB/s", 1e-9
    if base.endswith(("latency", "overhead")):
        return "us", 1e6
    return "ratio", 1.0


def _si_unit(name: str) -> str:
    """The SI unit of a calibrated parameter's JSON value."""
    return {"GB/s": "B/s", "us": "s"}.get(display_unit(name)[0], "ratio")


def validate_cmd(
    measurements: Annotated[Path, typer.Argument(help="Measurements CSV (docs/formats.md).")],
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="Run every row on this cluster (a file or"
                                 " shipped name), or on its calibrated cluster of the same"
                                 " name in a folder of `calibrate --out DIR` (re-timed traces"
                                 " too).")
    ] = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Predicted vs measured (PNG/SVG/PDF).")
    ] = None,
) -> None:
    """Predict every measured run and report the errors per row, per policy and overall."""
    from schedopt.files import output_files
    from schedopt.measure.calibrate import validate
    from schedopt.measure.measurements import read_measurements, with_cluster

    with user_errors(), output_files({"--plot": plot}) as files:
        check_formats(as_json, as_csv)
        check_figure_path(plot, "--plot")
        rows = read_measurements(shipped_sample(measurements), label=str(measurements))
        if cluster is not None:
            rows = with_cluster(rows, cluster)
        with progress(f"validate: {len(rows)} rows", enabled=len(rows) > 20):
            report = validate(rows)
        if cluster is not None:
            names = {m.label: m.cluster_ref.name for m in rows}
            for r in report.rows:
                r["cluster"] = names[r["row"]]
        if plot is not None:
            from schedopt.report.validation_chart import validation_chart

            with files.writing(plot) as tmp:
                validation_chart([(r["measured_s"], r["predicted_s"], _configuration(r, rows))
                                  for r in report.rows], tmp,
                                 title=f"{measurements.name}: predicted vs measured")
    data = report.to_dict()
    if as_json:
        print_json(data)
        return
    if as_csv:
        print_csv(data["rows"])
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


def _configuration(row: dict[str, Any], rows: list[Any]) -> str:
    """A validate row's configuration (its colour in the plot): the policy spec, with the
    cluster and nodes when the rows run on several."""
    places = {(m.cluster_ref.name, m.row.nodes) for m in rows}
    if len(places) == 1:
        return str(row["policy"])
    nodes = f" x{row['nodes']}" if row["nodes"] else ""
    return f"{row['policy']} @ {row['cluster']}{nodes}"
