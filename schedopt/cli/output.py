"""How commands print: a console that never drops columns, CSV rows, progress, choices."""

from __future__ import annotations

import csv
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console, ConsoleDimensions

from schedopt.errors import SchedoptError

#: Width of a table written to a file or a pipe: wide enough that no column is ever dropped.
PIPE_WIDTH = 10_000

log = logging.getLogger("schedopt")

CsvOpt = Annotated[
    bool, typer.Option("--csv", help="Print CSV rows (the --json fields, units in the names)"
                       " instead of a table.")
]


class WideConsole(Console):
    """A rich console that is as wide as its terminal, and as wide as any table elsewhere.

    Written to a file, a pipe or a CI log (standard output not a terminal), a table keeps
    every column and every cell on one line: no width is assumed, unless ``COLUMNS`` is set
    or a width is given.
    """

    @property  # type: ignore[override]
    def size(self) -> ConsoleDimensions:
        """The console's size; the width is :data:`PIPE_WIDTH` off a terminal."""
        dims = Console.size.fget(self)  # type: ignore[attr-defined]
        if self._width is None and not self.is_terminal and "COLUMNS" not in self._environ:
            return ConsoleDimensions(PIPE_WIDTH, dims.height)
        return dims  # type: ignore[no-any-return]

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


def check_formats(as_json: bool, as_csv: bool) -> None:
    """Refuse ``--json`` together with ``--csv``."""
    if as_json and as_csv:
        raise SchedoptError("give one of --json and --csv", "--csv", True)


def flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """One CSV row of a JSON object: nested objects become ``outer.inner`` columns; lists and
    plans (``plan``) are left out."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if key != "plan":
                out.update(flatten(value, f"{name}."))
        elif isinstance(value, list | tuple):
            if all(not isinstance(v, Mapping | list | tuple) for v in value):
                out[name] = ";".join("" if v is None else str(v) for v in value)
        else:
            out[name] = value
    return out


def csv_text(rows: Iterable[Mapping[str, Any]]) -> str:
    """CSV of ``rows`` (flattened): a header of every column met, in order of appearance."""
    flat = [flatten(r) for r in rows]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    buf = _Buffer()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in flat:
        writer.writerow({k: _cell(v) for k, v in r.items()})
    return "".join(buf.parts)


def print_csv(rows: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> None:
    """Print ``rows`` (or one object) as CSV on standard output."""
    sys.stdout.write(csv_text([rows] if isinstance(rows, Mapping) else rows))


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    return "" if value is None else value


class _Buffer:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)


#: Units of ``--memory-cap`` and other sizes: SI (1000) and binary (1024) multiples of a byte.
SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | None, option: str) -> int | None:
    """A size in bytes from ``40GiB``, ``512MB``, ``1.5 GiB``, ``340000000`` or ``4096B``
    (KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: powers of 1024; the case of the unit
    is free). None stays None; the range is the caller's to check.

    Raises
    ------
    SchedoptError
        Not a number with a known unit, or not a whole number of bytes.
    """
    if text is None:
        return None
    m = _SIZE.match(text)
    if m is None or m.group(2).lower() not in ("", *SIZE_UNITS):
        raise SchedoptError("must be a size: a number of bytes, or a number with a unit (B, KB,"
                            " MB, GB, TB in 1000s; KiB, MiB, GiB, TiB in 1024s)", option, text)
    value = float(m.group(1)) * SIZE_UNITS.get(m.group(2).lower(), 1)
    if not abs(value) < 2**63 or abs(value - round(value)) > 1e-6 * max(1.0, abs(value)):
        raise SchedoptError("must be a whole number of bytes", option, text)
    return round(value)


def choice(*names: str) -> dict[str, Any]:
    """Keyword arguments of ``typer.Option`` for an option that takes one of ``names``: help
    lists them and shell completion offers them (the command still checks the value, so that
    a wrong one is one ``error:`` line)."""

    def complete(incomplete: str) -> list[str]:
        return [n for n in names if n.startswith(incomplete)]

    return {"metavar": "[" + "|".join(names) + "]", "autocompletion": complete}


@contextmanager
def progress(what: str, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """Show what a long command is doing: a spinner on a terminal's stderr with the elapsed
    time and the latest ``schedopt`` log message, or the log itself under ``-v``.

    Yields a function that reports a step (logged at INFO, so that ``-v`` prints it).
    Nothing is shown when stderr is not a terminal (a pipe, a file, a test).
    """
    logger = logging.getLogger("schedopt")
    step: Callable[[str], None] = logger.info
    verbose = logger.isEnabledFor(logging.INFO)
    if verbose or not enabled or not _stderr_tty():
        logger.info("%s ...", what)
        start = time.perf_counter()
        yield step
        logger.info("%s: done in %.1f s", what, time.perf_counter() - start)
        return
    err = Console(stderr=True)
    start = time.perf_counter()
    with err.status(what) as status:
        handler = _StatusHandler(lambda text: status.update(
            f"{what}: {text} ({time.perf_counter() - start:.0f} s)"))
        level, propagate = logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # the spinner shows the messages; the log stays quiet
        try:
            yield step
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


def _stderr_tty() -> bool:
    try:
        return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


class _StatusHandler(logging.Handler):
    """Shows each INFO message as the spinner's text (warnings still reach stderr)."""

    def __init__(self, show: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.show = show

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            sys.stderr.write(f"{record.getMessage()}\n")
            return
        self.show(record.getMessage())
