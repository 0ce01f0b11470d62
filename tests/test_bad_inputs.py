"""Bad input: one line naming the field and the value, exit status 2, no partial output."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app

DATA = Path(__file__).parent / "data"
TRACE = json.loads((DATA / "tiny_trace.json").read_text())
CLUSTER = json.loads((DATA / "fitted_cluster.json").read_text())
runner = CliRunner()


def edit(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Copy ``doc`` with ``path`` (dots; ints index lists) set to ``value`` (or deleted)."""
    out = copy.deepcopy(doc)
    *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = out
    for p in head:
        node = node[p]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


DELETE = object()

TRACE_CASES = [
    # (id, edited trace, text the message must contain)
    ("negative-forward", edit(TRACE, "layers.0.forward_s", -1.0), "layers[0].forward_s"),
    ("nan-backward", edit(TRACE, "layers.2.backward_s", float("nan")), "layers[2].backward_s"),
    ("inf-io", edit(TRACE, "io_s", float("inf")), "io_s"),
    ("zero-bytes", edit(TRACE, "layers.0.tensors.1.bytes", 0), "tensors[1].bytes"),
    ("odd-bytes-for-dtype", edit(TRACE, "layers.0.tensors.1.bytes", 4001), "bytes"),
    ("unknown-dtype", edit(TRACE, "layers.0.tensors.0.dtype", "float13"), "dtype"),
    ("missing-layers", edit(TRACE, "layers", DELETE), "layers"),
    ("missing-forward", edit(TRACE, "layers.1.forward_s", DELETE), "forward_s"),
    ("zero-batch", edit(TRACE, "batch_size", 0), "batch_size"),
    ("unknown-field", edit(TRACE, "speed", 3), "speed"),
    ("bad-ready-order", edit(TRACE, "grad_ready_order", ["a.w", "a.b", "c.w"]),
     "grad_ready_order"),
    ("future-schema", edit(TRACE, "schema_version", 9), "schema_version"),
]

CLUSTER_CASES = [
    ("zero-bandwidth", edit(CLUSTER, "intra_link.bandwidth_Bps", 0), "intra_link.bandwidth_Bps"),
    ("negative-latency", edit(CLUSTER, "inter_link.latency_s", -1e-6), "inter_link.latency_s"),
    ("zero-nodes", edit(CLUSTER, "nodes", 0), "nodes"),
    ("missing-inter-link", edit(CLUSTER, "inter_link", DELETE), "inter_link"),
    ("unknown-collective", edit(CLUSTER, "collective", "butterfly"), "collective"),
    ("nan-alpha", edit(CLUSTER, "allreduce.alpha_s", float("nan")), "allreduce.alpha_s"),
]


def _write(tmp_path: Path, name: str, doc: Any) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _assert_user_error(result: Any, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert needle in lines[0], result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("doc", "needle"), [c[1:] for c in TRACE_CASES],
                         ids=[c[0] for c in TRACE_CASES])
def test_bad_trace(tmp_path: Path, doc: dict[str, Any], needle: str) -> None:
    t = _write(tmp_path, "t.json", doc)
    c = _write(tmp_path, "c.json", CLUSTER)
    _assert_user_error(runner.invoke(app, ["simulate", str(t), str(c), "-p", "cntk"]), needle)


@pytest.mark.parametrize(("doc", "needle"), [c[1:] for c in CLUSTER_CASES],
                         ids=[c[0] for c in CLUSTER_CASES])
def test_bad_cluster(tmp_path: Path, doc: dict[str, Any], needle: str) -> None:
    t = _write(tmp_path, "t.json", TRACE)
    c = _write(tmp_path, "c.json", doc)
    _assert_user_error(runner.invoke(app, ["compare", str(t), str(c)]), needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "no-such-trace", str(DATA / "fitted_cluster.json"), "-p", "cntk"],
         "no-such-trace"),  # unknown name
        (["simulate", "missing.json", str(DATA / "fitted_cluster.json"), "-p", "cntk"],
         "missing.json"),  # file not found
        (["simulate", str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json"),
          "-p", "horovodd"], "horovodd"),  # unknown policy
        (["simulate", str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json"),
          "-p", "cntk:colour=red"], "colour"),  # unknown knob
        (["simulate", str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json"),
          "-p", "cntk:prefetch=3"], "prefetch"),  # knob out of range
        (["simulate", str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json")],
         "--policy"),  # neither policy nor plan
        (["compare", str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json"),
          "--nodes", "0"], "nodes"),  # impossible size
        (["schema", "widget"], "widget"),  # unknown schema kind
    ],
    ids=["unknown-name", "file-not-found", "unknown-policy", "unknown-knob", "knob-range",
         "no-policy", "zero-nodes-option", "schema-kind"],
)
def test_bad_arguments(args: list[str], needle: str) -> None:
    _assert_user_error(runner.invoke(app, args), needle)


def test_truncated_file(tmp_path: Path) -> None:
    t = tmp_path / "t.json"
    t.write_text((DATA / "tiny_trace.json").read_text()[:100])
    result = runner.invoke(app, ["info", str(t)])
    _assert_user_error(result, "not valid JSON")


def test_unreadable_file(tmp_path: Path) -> None:
    d = tmp_path / "dir.json"
    d.mkdir()
    _assert_user_error(runner.invoke(app, ["info", str(d)]), "dir.json")


def test_plan_for_another_trace(tmp_path: Path) -> None:
    """A plan bound to one trace is refused for another, and no output file is written."""
    from schedopt.files import load_cluster, load_trace, write_json_atomic
    from schedopt.policies import make_plan

    tr = load_trace(DATA / "tiny_trace.json")
    cl = load_cluster(DATA / "fitted_cluster.json")
    plan_path = tmp_path / "plan.json"
    write_json_atomic(plan_path, make_plan(tr, cl, "caffe-mpi").model_dump(mode="json"))
    other = edit(TRACE, "layers.0.forward_s", 0.5)
    t2 = _write(tmp_path, "other.json", other)
    out = tmp_path / "trace.json"
    result = runner.invoke(app, ["simulate", str(t2), str(DATA / "fitted_cluster.json"),
                                 "--plan", str(plan_path), "--chrome-trace", str(out)])
    _assert_user_error(result, "plan.trace_hash")
    assert not out.exists()
    # the same plan on its own trace simulates
    ok = runner.invoke(app, ["simulate", str(DATA / "tiny_trace.json"),
                             str(DATA / "fitted_cluster.json"), "--plan", str(plan_path),
                             "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["policy"] == "caffe-mpi"


def test_debug_shows_traceback(tmp_path: Path) -> None:
    t = _write(tmp_path, "t.json", edit(TRACE, "io_s", -1))
    result = runner.invoke(app, ["--debug", "info", str(t)])
    assert result.exit_code != 0 and result.exception is not None


@pytest.mark.parametrize("option", ["--gantt", "--chrome-trace"])
def test_bad_output_paths(tmp_path: Path, option: str) -> None:
    """A figure format matplotlib cannot write, or a folder that is a file: one line, exit 2."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    path = tmp_path / "g.xyz" if option == "--gantt" else blocker / "sub" / "t.json"
    result = runner.invoke(app, ["simulate", str(DATA / "tiny_trace.json"),
                                 str(DATA / "fitted_cluster.json"), "-p", "cntk", option,
                                 str(path)])
    _assert_user_error(result, option)
    assert not path.exists()
