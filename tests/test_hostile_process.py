"""Hostile conditions that need a real process: stdout closed or full, a FIFO where a file
should be, and the installed entry point's usage errors. Each run has a timeout (a FIFO that
blocks the reader would hang otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


def schedopt(*args: str, stdout: int | None = subprocess.PIPE, env: dict | None = None,
             close_stdout: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``python -m schedopt`` (stdout closed with ``close_stdout``), 60 s at most."""
    cmd = [sys.executable, "-m", "schedopt", *args]
    if close_stdout:  # `schedopt ... >&-`
        cmd = ["sh", "-c", 'exec "$0" "$@" >&-', *cmd]
    return subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60,
                          env=env or ENV)


def _one_error_line(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0], proc.stderr


@pytest.mark.parametrize("args", [["schema", "trace"], ["info", str(DATA / "tiny_trace.json")],
                                  ["list", "--json"]], ids=["schema", "info", "list"])
def test_stdout_full(args: list[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        proc = schedopt(*args, stdout=full.fileno())
    _one_error_line(proc, "No space left on device")


def test_stdout_closed() -> None:
    _one_error_line(schedopt("schema", "trace", close_stdout=True), "standard output is closed")


def test_fifo_in_the_instances_folder(tmp_path: Path) -> None:
    """A FIFO named like an instance is refused at once, not read (which would block)."""
    (tmp_path / "traces").mkdir()
    (tmp_path / "clusters").mkdir()
    os.mkfifo(tmp_path / "traces" / "x.json")
    proc = schedopt("list", env={**ENV, "SCHEDOPT_INSTANCES": str(tmp_path)})
    _one_error_line(proc, "not a regular file")
    assert proc.stdout == ""
    _one_error_line(schedopt("info", str(tmp_path / "traces" / "x.json")), "not a regular file")


def test_usage_error_is_one_line() -> None:
    """Usage errors through the entry point: the one ``error:`` line the docs promise."""
    proc = schedopt("simulate", "a", "b", "--nodes", "two")
    _one_error_line(proc, "--nodes")
    assert proc.stdout == ""
