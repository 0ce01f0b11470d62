"""What every hostile-input table checks: the command refused with one ``error:`` line naming
the field or option, exit status 2, nothing on stdout, no traceback, and the folder unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from schedopt.cli.app import run


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
