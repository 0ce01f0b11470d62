"""The documentation runs: every ``$ schedopt ...`` example of README.md and docs/cli.md, and
every ``python`` block of docs/api.md.

Each document's examples run in order in one empty temporary folder (so an example may use the
files an earlier one wrote), at 100 columns. An example passes when it exits with 0, or with 2
when the output shown is an ``error:`` line, and every line of output shown appears in the
actual output, in order, with the same text and the same numbers within a tolerance (0.1%, or one
unit of the last digit shown). A line ending in ``...`` is a prefix; a line ``...`` alone skips
output. ``$ cat FILE`` examples create FILE from the lines shown. Numbers that measure this
machine (search and profiling times) are not compared.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli import common
from schedopt.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/cli.md")
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
#: Numbers that measure the machine, not the model: replaced before comparing.
VOLATILE = [
    re.compile(r'("solve_time_s": )[^,}]+'),
    re.compile(r"(  time )\S+( s)"),
    re.compile(r"(compute )\S+( ms)"),
]


@dataclass
class Example:
    """One ``$`` command of a document and the output shown after it."""

    doc: str
    line: int
    command: str
    shown: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def examples(doc: str) -> list[Example]:
    """The ``$`` commands of ``doc``'s code blocks, in order, each with the lines after it."""
    out: list[Example] = []
    current: Example | None = None
    in_block = False
    lines = (ROOT / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        text = lines[i]
        if text.startswith("```"):
            in_block, current = not in_block, None
        elif in_block and text.startswith("$ "):
            command, start = text[2:], i + 1
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            current = Example(doc, start, command)
            out.append(current)
        elif current is not None:
            current.shown.append(text)
        i += 1
    return out


def _volatile(text: str) -> str:
    for pattern in VOLATILE:
        text = pattern.sub(lambda m: m.group(1) + "#" + (m.group(2) if m.lastindex == 2 else ""),
                           text)
    return text


def _shape(text: str) -> str:
    return re.sub(r"\s+", " ", NUMBER.sub("#", _volatile(text))).strip()


def _numbers(text: str) -> list[str]:
    return NUMBER.findall(_volatile(text))


def _close(shown: str, actual: str) -> bool:
    a, b = float(shown.replace(",", "")), float(actual.replace(",", ""))
    frac = shown.split("e")[0].split("E")[0]
    digits = len(frac.split(".")[1]) if "." in frac else 0
    unit = 10.0 ** -digits
    if "e" in shown.lower():
        unit *= 10.0 ** int(shown.lower().split("e")[1])
    return abs(a - b) <= max(1e-3 * abs(a), 1.01 * unit)


def check_output(ex: Example, actual: str) -> None:
    """Every line shown appears in ``actual`` in order, numbers within the tolerance."""
    lines = actual.splitlines()
    pos = 0
    for shown in ex.shown:
        prefix = shown.rstrip().endswith("...")
        want = shown.rstrip().removesuffix("...")
        if prefix:  # the last token may be cut in the middle
            want = want[: max(want.rfind(" "), want.rfind(","), 0)]
        if not want.strip():
            continue
        shape = _shape(want)
        for j in range(pos, len(lines)):
            got = _shape(lines[j])
            if got == shape or (prefix and got.startswith(shape)):
                break
        else:
            raise AssertionError(f"{ex.id}: `{ex.command}`: line not in the output:\n{shown}\n"
                                 f"--- actual output ---\n{actual}")
        for s, a in zip(_numbers(want), _numbers(lines[j]), strict=False):
            assert _close(s, a), f"{ex.id}: `{ex.command}`: {s} shown, {a} now\n{lines[j]}"
        pos = j + 1


def run_example(ex: Example, folder: Path) -> tuple[int, str]:
    """Run one example in ``folder``: in-process when it is a plain command, else in a shell."""
    if ex.command.startswith("cat "):
        (folder / ex.command.split()[1]).write_text("\n".join(ex.shown) + "\n")
        return 0, "\n".join(ex.shown)
    words = shlex.split(ex.command, comments=True)
    if words[0] == "schedopt" and not set(words) & {">", "|", "&&", "<"}:
        cwd = Path.cwd()
        os.chdir(folder)
        try:
            width = common.console.width
            common.console.width = 100
            result = CliRunner().invoke(app, words[1:])
        finally:
            common.console.width = width
            os.chdir(cwd)
        return result.exit_code, result.output
    env = {**os.environ, "COLUMNS": "100", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(ex.command, shell=True, cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _needs_torch(ex: Example) -> bool:
    return " profile " in f" {ex.command} "


@pytest.mark.parametrize("doc", DOCS)
def test_examples_run_and_show_what_they_print(doc: str, tmp_path: Path) -> None:
    found = examples(doc)
    assert len(found) >= 7
    for ex in found:
        if _needs_torch(ex):
            pytest.importorskip("torch")
        status, output = run_example(ex, tmp_path)
        expect = 2 if any(s.startswith("error:") for s in ex.shown) else 0
        assert status == expect, f"{ex.id}: `{ex.command}` exited {status}:\n{output}"
        check_output(ex, output)


def test_the_checker_catches_drift() -> None:
    ex = Example("x", 1, "schedopt x", ["│ iteration time │ 185.409 ms │", "{\"a\": 1.5, ..."])
    check_output(ex, "│ iteration time │ 185.41 ms │\n{\"a\": 1.5, \"b\": 2}")
    with pytest.raises(AssertionError, match=r"185\.409 shown"):
        check_output(ex, "│ iteration time │ 186.0 ms │\n{\"a\": 1.5}")
    with pytest.raises(AssertionError, match="line not in the output"):
        check_output(ex, "│ iteration  │ 185.409 ms │\n{\"a\": 1.5}")
    assert _close("3.356e-09", "3.3557e-09") and not _close("3.356e-09", "3.4e-09")
    assert _numbers("fingerprint 7e69e846190dbb3f, 1,234.5 ms") == ["1,234.5"]


def python_blocks(doc: str) -> list[tuple[int, str, list[str]]]:
    """The ``python`` code blocks of ``doc``: (line, code, the ``output`` block after it)."""
    out: list[tuple[int, str, list[str]]] = []
    lines = (ROOT / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() in ("```python", "```output"):
            kind, start, body = lines[i].strip()[3:], i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if kind == "python":
                out.append((start, "\n".join(body), []))
            elif out:
                out[-1][2].extend(body)
        i += 1
    return out


def test_api_examples_run_and_print_what_they_show(tmp_path: Path, capsys) -> None:
    blocks = python_blocks("docs/api.md")
    assert len(blocks) >= 3
    namespace: dict[str, object] = {"__name__": "docs_api"}
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for line, code, shown in blocks:
            exec(compile(code, f"docs/api.md:{line}", "exec"), namespace)
            printed = capsys.readouterr().out
            check_output(Example("docs/api.md", line, code.splitlines()[0], shown), printed)
    finally:
        os.chdir(cwd)
