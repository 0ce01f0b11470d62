"""How a process that joined a process group ends (:func:`schedopt.measure.launch.exit_process`).

A rank's interpreter finalization can abort in torch's gloo threads after its output is written;
such a process ends with ``os._exit`` once its streams are flushed. These tests run the real
function in child processes: the status, the flushed output, and that the finalization (an
``atexit`` handler) is skipped only where a group was joined.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from schedopt.cli import app as cli_app

ROOT = Path(__file__).resolve().parents[1]


def _child(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter with an ``atexit`` handler that prints ``finalized``."""
    script = textwrap.dedent("""
        import atexit, sys
        atexit.register(lambda: print("finalized", flush=True))
        import schedopt.measure.launch as launch
        print("written", end="")  # no newline: only a flush brings it out
        print("to stderr", end="", file=sys.stderr)
    """) + textwrap.dedent(body)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                         if p)}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)


def test_without_a_group_the_interpreter_finalizes(tmp_path: Path) -> None:
    proc = _child("launch.exit_process(3)\n", tmp_path)
    assert proc.returncode == 3
    assert proc.stdout == "writtenfinalized\n" and proc.stderr == "to stderr"


def test_after_a_group_the_output_is_flushed_and_finalization_skipped(tmp_path: Path) -> None:
    proc = _child("launch._joined_group = True\nlaunch.exit_process(5)\n", tmp_path)
    assert proc.returncode == 5
    assert proc.stdout == "written" and proc.stderr == "to stderr"  # flushed, no atexit


@pytest.mark.torch
def test_joining_a_real_group_marks_the_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    body = f"""
        import types
        import torch.distributed as dist
        assert not launch._joined_group
        spec = types.SimpleNamespace(backend="gloo", procs=1, timeout_s=60.0)
        launch._init(spec, 0, "file://" + {str(tmp_path / "rendezvous")!r})
        dist.barrier()
        dist.destroy_process_group()
        launch.exit_process(0)
    """
    proc = _child(body, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "written"  # the group was joined: no finalization


def test_the_console_entry_ends_through_exit_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` hands its status to ``exit_process`` where the rank module is loaded, and to
    ``sys.exit`` where it is not."""
    seen: list[int] = []

    def fake_exit(status: int) -> None:
        seen.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(sys, "argv", ["schedopt", "--help"])
    monkeypatch.setitem(sys.modules, "schedopt.measure.launch",
                        types.SimpleNamespace(exit_process=fake_exit))
    with pytest.raises(SystemExit) as caught:
        cli_app.main()
    assert caught.value.code == 0 and seen == [0]
    monkeypatch.delitem(sys.modules, "schedopt.measure.launch")
    monkeypatch.setattr(sys, "argv", ["schedopt", "no-such-command"])
    with pytest.raises(SystemExit) as caught:
        cli_app.main()
    assert caught.value.code == 2 and seen == [0]
