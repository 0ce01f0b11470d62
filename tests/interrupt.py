"""Ctrl-C sent to ``schedopt`` from inside a run: the CLI in a subprocess, with one function
wrapped so that its ``nth`` call sends SIGINT to the process first."""

from __future__ import annotations

import os
import subprocess
import sys


def cli_interrupted_at(module: str, function: str, argv: list[str], *, nth: int = 1,
                       timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``schedopt ARGV`` in a subprocess whose ``module.function`` sends SIGINT at its
    ``nth`` call; return the finished process (stdout and stderr captured)."""
    code = (
        "import importlib, os, signal, sys\n"
        f"m = importlib.import_module({module!r})\n"
        f"real, calls = m.{function}, []\n"
        "def stop(*a, **k):\n"
        "    calls.append(1)\n"
        f"    if len(calls) == {nth}:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(*a, **k)\n"
        f"m.{function} = stop\n"
        "from schedopt.cli.app import main\n"
        f"sys.argv = ['schedopt', *{argv!r}]\n"
        "main()\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout_s, env=env)
