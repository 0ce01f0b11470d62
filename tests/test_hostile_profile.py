"""Hostile input to ``schedopt profile``: every user-side failure is one line naming the module,
the factory, the shape or the device; exit 2; no trace written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from schedopt.cli.app import run

MODELS = '''
import torch

def linear():
    return torch.nn.Linear(4, 2)

def half():
    return torch.nn.Linear(4, 2).half()

def raises():
    raise ValueError("no weights here")

def not_a_module():
    return 3

def frozen():
    m = torch.nn.Linear(4, 2)
    for p in m.parameters():
        p.requires_grad_(False)
    return m
'''

OK = ["--input-shape", "2,4", "--name", "m", "--repeats", "1", "--warmup", "0"]

CASES = {
    # (factory, extra options replacing the defaults, text the message must contain)
    "module-raises-on-import": ("broken_{n}:f", OK, "broken_"),
    "module-syntax-error": ("syntax_{n}:f", OK, "syntax_"),
    "module-missing": ("no_such_module_{n}:f", OK, "no_such_module_"),
    "no-colon": ("models_{n}", OK, "MODULE:FACTORY"),
    "no-such-factory": ("models_{n}:nothing", OK, "nothing"),
    "factory-raises": ("models_{n}:raises", OK, "no weights here"),
    "factory-returns-int": ("models_{n}:not_a_module", OK, "returned int"),
    "no-trainable-parameters": ("models_{n}:frozen", OK, "model"),
    "shape-mismatch": ("models_{n}:linear", ["--input-shape", "2,5", "--name", "m"],
                       "input_shape"),
    "float16-model": ("models_{n}:half", OK, "on cpu"),
    "zero-dim-shape": ("models_{n}:linear", ["--input-shape", "0,4", "--name", "m"],
                       "input_shape"),
    "huge-shape": ("models_{n}:linear", ["--input-shape", "100000,100000,1000", "--name", "m"],
                   "input_shape"),
    "device-meta": ("models_{n}:linear", [*OK, "--device", "meta"], "device"),
    "device-bogus": ("models_{n}:linear", [*OK, "--device", "gpu7"], "device"),
    "batch-size-zero": ("models_{n}:linear", [*OK, "--batch-size", "0"], "--batch-size"),
    "repeats-2^63": ("models_{n}:linear", ["--input-shape", "2,4", "--name", "m", "--repeats",
                                           str(2**63)], "--repeats"),
    "warmup-negative": ("models_{n}:linear", ["--input-shape", "2,4", "--name", "m",
                                              "--warmup", "-1"], "--warmup"),
    "empty-name": ("models_{n}:linear", ["--input-shape", "2,4", "--name", ""], "--name"),
}


@pytest.mark.parametrize("case_id", list(CASES))
def test_profile_user_errors(case_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    n = case_id.replace("-", "_").replace("^", "")
    (tmp_path / f"models_{n}.py").write_text(MODELS)
    (tmp_path / f"broken_{n}.py").write_text("raise RuntimeError('cannot load weights')\n")
    (tmp_path / f"syntax_{n}.py").write_text("def f(:\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    factory, options, needle = CASES[case_id]
    out = tmp_path / "trace.json"
    rc = run(["profile", factory.format(n=n), *options, "--out", str(out)])
    stdout, stderr = capsys.readouterr()
    assert rc == 2, (stdout, stderr)
    assert stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert needle.format(n=n) in lines[0], stderr
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("__")) == sorted(
        [f"models_{n}.py", f"broken_{n}.py", f"syntax_{n}.py"])


def test_cuda_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``--device cuda`` on a machine without CUDA names the device (simulated on a GPU box)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (tmp_path / "models_cuda.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    rc = run(["profile", "models_cuda:linear", *OK, "--device", "cuda", "--out",
              str(tmp_path / "t.json")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "CUDA is not available" in err and "device" in err
    assert not (tmp_path / "t.json").exists()


def test_profile_still_writes_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks leave a good run alone: one layer, two tensors, positive times."""
    import json

    (tmp_path / "models_ok.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    out = tmp_path / "t.json"
    assert run(["profile", "models_ok:linear", *OK, "--out", str(out)]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    assert [len(la["tensors"]) for la in doc["layers"]] == [2]
    assert doc["batch_size"] == 2
