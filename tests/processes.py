"""Waiting for the subprocesses a test starts."""

from __future__ import annotations

import subprocess


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str, str]]:
    """Wait for every process (killing them all past ``timeout``): status, stdout, stderr.

    Raises
    ------
    subprocess.TimeoutExpired
        A process still ran after ``timeout`` (all of them are killed first).
    """
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]
