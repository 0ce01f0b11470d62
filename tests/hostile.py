"""What every hostile-input table checks: the command refused with one ``error:`` line naming
the field or option, exit status 2, nothing on stdout, no traceback, and the folder unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from schedopt.cli.app import run


def write_file(folder: Path, name: str, content: Any) -> None:
    """Write a case's input: bytes as they are, text as UTF-8, anything else as JSON."""
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content))


def snapshot(folder: Path) -> dict[Path, tuple[str, ...]]:
    """Every path under ``folder`` with its kind, and its bytes' hash and time for a file."""
    out: dict[Path, tuple[str, ...]] = {}
    for p in folder.rglob("*"):
        if p.is_fifo():
            out[p.relative_to(folder)] = ("fifo",)
        elif p.is_file():
            out[p.relative_to(folder)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(),
                                          str(p.stat().st_mtime_ns))
        else:
            out[p.relative_to(folder)] = ("dir",)
    return out


def refused(argv: list[str], needle: str, folder: Path,
            capsys: pytest.CaptureFixture[str]) -> str:
    """Run the command line on ``argv`` and check the refusal; return the error line."""
    before = snapshot(folder)
    rc = run(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert out == "", out
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert needle in lines[0], err
    assert "Traceback" not in err
    assert snapshot(folder) == before  # nothing written, created, removed or changed
    return lines[0]
