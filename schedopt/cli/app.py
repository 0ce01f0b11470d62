"""The ``schedopt`` typer app: every command, registered in pipeline order, and the entry point."""

from __future__ import annotations

import errno
import logging
import os
import sys
from contextlib import suppress
from typing import Annotated

import typer

from schedopt.cli import calibrate, emit, instances, measure, optimize, simulate
from schedopt.cli.common import _state
from schedopt.cli.sweep import app as sweep_app
from schedopt.errors import SchedoptError

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

for _name, _fn in [
    ("simulate", simulate.simulate_cmd),
    ("compare", simulate.compare),
    ("scale", simulate.scale),
    ("optimize", optimize.optimize_cmd),
    ("tune", optimize.tune_cmd),
    ("emit", emit.emit_cmd),
    ("profile", measure.profile_cmd),
    ("bench-comm", measure.bench_comm_cmd),
    ("bench-ddp", measure.bench_ddp_cmd),
    ("fit-comm", calibrate.fit_comm),
    ("calibrate", calibrate.calibrate_cmd),
    ("validate", calibrate.validate_cmd),
    ("info", instances.info),
    ("list", instances.list_cmd),
    ("schema", instances.schema),
]:
    app.command(_name)(_fn)
app.add_typer(sweep_app, name="sweep")

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

