"""The ``schedopt`` typer app: every command, registered in pipeline order, and the entry point."""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Annotated, Any

import typer

from schedopt.cli import calibrate, emit, estimate, instances, measure, optimize, simulate
from schedopt.cli.common import _state
from schedopt.cli.imports import app as import_app
from schedopt.cli.imports import explain_cmd
from schedopt.cli.sweep import app as sweep_app
from schedopt.errors import SchedoptError


def _quiet_flag_metavars() -> None:
    """Show no ``<bool>`` type after flags and ``SPEC...`` after repeatable options in --help.

    typer labels every option with its Python type; for a flag that reads as if it took a
    value. Idempotent.
    """
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - another typer layout: keep its help as is
        return
    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "_schedopt", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if self.metavar is None and getattr(self, "is_flag", False):
            return None
        if self.metavar is None and getattr(self, "multiple", False):
            return "<str>..."
        return original(self, ctx)  # type: ignore[no-any-return]

    display_type_rich._schedopt = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_quiet_flag_metavars()  # the app's help, before any command is built

app = typer.Typer(
    rich_markup_mode="rich",
    no_args_is_help=True,
    help="Predict, compare and optimize gradient-communication schedules of data-parallel SGD.",
)


def _version(value: bool) -> None:
    if value:
        from schedopt import __version__

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

#: Every command, in the order of the pipeline (``schedopt --help`` lists them so).
COMMANDS: list[tuple[str, Callable[..., Any]]] = [
    ("simulate", simulate.simulate_cmd),
    ("compare", simulate.compare),
    ("scale", simulate.scale),
    ("optimize", optimize.optimize_cmd),
    ("tune", optimize.tune_cmd),
    ("emit", emit.emit_cmd),
    ("profile", measure.profile_cmd),
    ("estimate", estimate.estimate_cmd),
    ("bench-comm", measure.bench_comm_cmd),
    ("bench-ddp", measure.bench_ddp_cmd),
    ("bench-gpu", measure.bench_gpu_cmd),
    ("fit-comm", calibrate.fit_comm),
    ("calibrate", calibrate.calibrate_cmd),
    ("validate", calibrate.validate_cmd),
    ("info", instances.info),
    ("list", instances.list_cmd),
    ("schema", instances.schema),
]
for _name, _fn in COMMANDS:
    app.command(_name)(_fn)
app.add_typer(sweep_app, name="sweep")
app.add_typer(import_app, name="import")
app.command("explain")(explain_cmd)

def main() -> None:
    """Entry point of the ``schedopt`` console script.

    A process that ran as a rank of a launcher (``--launcher env``) ends through
    :func:`schedopt.measure.launch.exit_process`, which skips the interpreter's finalization
    that torch's gloo threads can abort.
    """
    status = run(sys.argv[1:])
    launch = sys.modules.get("schedopt.measure.launch")  # imported only by the rank commands
    if launch is not None:
        launch.exit_process(status)
    sys.exit(status)


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
    empty = _empty_path_option(argv)
    if empty is not None:
        typer.echo(f"error: {empty}: must not be an empty path (got '')", err=True)
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


def _empty_path_option(argv: list[str]) -> str | None:
    """The first path option given an empty value (``--out ''`` or ``--out=``), if any.

    A command sees an empty path as ``.``, the current folder: it is refused before the command
    runs instead.
    """
    from pathlib import Path

    def is_path(param: Any) -> bool:
        described = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        return described is Path or type(getattr(param, "type", None)).__name__ == "Path"

    cmd: Any = typer.main.get_command(app)
    for word in argv:  # the (sub)command named
        sub = getattr(cmd, "commands", {}).get(word)
        if sub is not None:
            cmd = sub
    paths = {name for p in cmd.params if getattr(p, "param_type_name", "") == "option"
             and is_path(p) for name in p.opts}
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name in paths and ((eq and not value) or (not eq and i + 1 < len(argv)
                                                       and argv[i + 1] == "")):
            return name
    return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    with suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())

