"""``emit``: a plan as a framework's settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
from schedopt.cli.output import choice

#: ``emit --target`` (the emitters of :mod:`schedopt.emit.registry`).
EMIT_TARGETS = ("ddp", "fsdp", "horovod", "deepspeed", "megatron", "json")

if TYPE_CHECKING:
    pass


def emit_cmd(
    trace: TraceArg,
    cluster: ClusterArg,
    target: Annotated[
        str, typer.Option("--target", "-t",
                          help="ddp | fsdp | horovod | deepspeed | megatron | json",
                          **choice(*EMIT_TARGETS))
    ],
    policy: PolicyOpt = None,
    plan_file: PlanOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the files into this folder.")
    ] = None,
    nodes: NodesOpt = None,
    as_json: JsonOpt = False,
    merge: Annotated[
        Path | None, typer.Option("--merge", metavar="DS_CONFIG",
                                  help="With -t deepspeed: also emit this ds_config with the"
                                  " emitted keys merged in (its other keys kept; a different"
                                  " zero_optimization.stage is refused), under its own name.")
    ] = None,
) -> None:
    """Translate a policy's plan (or a saved plan) into a framework's settings."""
    from schedopt.emit.registry import emit
    from schedopt.report import tables as report

    with user_errors():
        tr, cl, plan = load_with_plan(trace, cluster, nodes, policy, plan_file)
        emitted = emit(tr, cl, plan, target)
        if merge is not None:
            emitted = _merged(emitted, merge, target)
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




def _merged(emitted: Any, merge: Path, target: str) -> Any:
    """``emit --merge``: the emitted files plus the user's ds_config with the keys merged."""
    from schedopt.emit.ds_merge import merged_file
    from schedopt.errors import SchedoptError

    if target != "deepspeed":
        raise SchedoptError("merges into a DeepSpeed config: use it with --target deepspeed",
                            "--merge", str(merge))
    name, text, notes = merged_file(merge, emitted.files["deepspeed.json"], set(emitted.files))
    return emitted.model_copy(update={
        "files": {**emitted.files, name: text},
        "notes": [*emitted.notes, *(f"--merge: {n}" for n in notes)]})
