"""``emit``: a plan as a framework's settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from schedopt.cli.common import (
    ClusterArg,
    JsonOpt,
    NodesOpt,
    PlanOpt,
    PolicyOpt,
    TraceArg,
    load_with_plan,
    print_json,
    user_errors,
)
from schedopt.report import tables as report

if TYPE_CHECKING:
    pass


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
    from schedopt.emit.registry import emit

    with user_errors():
        tr, cl, plan = load_with_plan(trace, cluster, nodes, policy, plan_file)
        emitted = emit(tr, cl, plan, target)
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


