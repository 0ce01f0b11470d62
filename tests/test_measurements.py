"""The measurements CSV: parsing, resolution of names and paths, one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.measure.measurements import read_measurements

HEADER = "trace,cluster,nodes,policy,iteration_time_s"
TRACE = {"name": "t3", "batch_size": 8, "layers": [
    {"name": f"l{i}", "forward_s": 0.001, "backward_s": 0.002,
     "tensors": [{"name": f"l{i}.w", "bytes": 400_000 * (i + 1)}]} for i in range(3)]}
FAMILY = {"name": "fam", "base": {
    "name": "fam", "nodes": 2, "gpus_per_node": 2,
    "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 5e-6},
    "inter_link": {"bandwidth_Bps": 1e9, "latency_s": 2e-5}}}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "t3.json").write_text(json.dumps(TRACE))
    (tmp_path / "fam.json").write_text(json.dumps(FAMILY))
    return tmp_path


def write(folder: Path, body: str, header: str = HEADER) -> Path:
    p = folder / "m.csv"
    p.write_text(header + "\n" + body)
    return p


def test_reads_rows_with_optional_columns(folder: Path) -> None:
    plan = folder / "plan.json"
    from schedopt.files import load_cluster, load_trace
    from schedopt.policies import make_plan

    cl = load_cluster(folder / "fam.json", 2)
    plan.write_text(make_plan(load_trace(folder / "t3.json"), cl, "cntk").model_dump_json())
    p = write(folder, "# a comment\n"
              "t3.json,fam.json,2,ddp:bucket_cap_mb=1,0.0123,0.0004,50,run A\n"
              "\n"
              "t3.json,fam.json,,plan:plan.json,0.02,,,\n"
              "resnet50-v100-b64,dgx1-v100,,caffe-mpi,0.3,,,\n",
              header=HEADER + ",iteration_time_std_s,samples,source")
    rows = read_measurements(p)
    assert [m.line for m in rows] == [3, 5, 6]
    a, b, c = rows
    assert a.row.nodes == 2 and a.row.samples == 50 and a.row.source == "run A"
    assert a.row.iteration_time_std_s == pytest.approx(0.0004)
    assert a.cluster().world_size == 4 and a.cluster_ref.kind == "cluster-family"
    assert b.row.nodes is None and b.plan is not None and b.cluster().nodes == 2
    assert c.cluster_ref.kind == "cluster" and c.trace_obj.name == "resnet50-v100-b64"
    assert a.plan_for(a.cluster()).knobs["bucket_cap_mb"] == 1


BAD = [
    # header: a required column missing
    ("trace,cluster,policy,iteration_time_s\nt3.json,fam.json,ddp,0.01\n", 1, "nodes"),
    # header: an unknown column
    (HEADER + ",gpus\nt3.json,fam.json,2,ddp,0.01,4\n", 1, "gpus"),
    # empty measured time
    (HEADER + "\nt3.json,fam.json,2,ddp,\n", 2, "iteration_time_s"),
    # measured time is not a number
    (HEADER + "\nt3.json,fam.json,2,ddp,fast\n", 2, "iteration_time_s"),
    # measured time zero, then negative, then NaN (after a good row)
    (HEADER + "\nt3.json,fam.json,2,ddp,0\n", 2, "iteration_time_s"),
    (HEADER + "\nt3.json,fam.json,2,ddp,0.01\nt3.json,fam.json,2,ddp,-1\n", 3,
     "iteration_time_s"),
    (HEADER + "\nt3.json,fam.json,2,ddp,nan\n", 2, "iteration_time_s"),
    # nodes not an integer, nodes zero
    (HEADER + "\nt3.json,fam.json,two,ddp,0.01\n", 2, "nodes"),
    (HEADER + "\nt3.json,fam.json,0,ddp,0.01\n", 2, "nodes"),
    # empty trace; unknown trace; unknown cluster
    (HEADER + "\n,fam.json,2,ddp,0.01\n", 2, "trace"),
    (HEADER + "\nno-such-trace,fam.json,2,ddp,0.01\n", 2, "trace"),
    (HEADER + "\nt3.json,missing.json,2,ddp,0.01\n", 2, "cluster"),
    # unknown policy; bad knob; missing plan file
    (HEADER + "\nt3.json,fam.json,2,nope,0.01\n", 2, "policy"),
    (HEADER + "\nt3.json,fam.json,2,ddp:bucket_cap_mb=-3,0.01\n", 2, "policy"),
    (HEADER + "\nt3.json,fam.json,2,plan:nowhere.json,0.01\n", 2, "policy"),
    # more cells than the header
    (HEADER + "\nt3.json,fam.json,2,ddp,0.01,7\n", 2, "#6"),
    # optional columns: negative std, zero samples
    (HEADER + ",iteration_time_std_s\nt3.json,fam.json,2,ddp,0.01,-0.1\n", 2,
     "iteration_time_std_s"),
    (HEADER + ",samples\nt3.json,fam.json,2,ddp,0.01,0\n", 2, "samples"),
]


@pytest.mark.parametrize(("text", "line", "column"), BAD)
def test_bad_rows_name_row_and_column(folder: Path, text: str, line: int, column: str) -> None:
    p = folder / "m.csv"
    p.write_text(text)
    with pytest.raises(SchedoptError) as info:
        read_measurements(p)
    msg = str(info.value)
    assert f"{p}:{line} column {column}" in msg
    assert "\n" not in msg


@pytest.mark.parametrize(("text", "line", "column"), BAD[:6] + BAD[11:13])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_cli_bad_file_is_one_line_exit_2(folder: Path, text: str, line: int, column: str,
                                         command: str) -> None:
    p = folder / "m.csv"
    p.write_text(text)
    out = folder / "out"
    args = [command, str(p)] + (["--out", str(out)] if command == "calibrate" else [])
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and res.output.startswith("error: ")
    assert f":{line} column {column}" in res.output
    assert not out.exists()


@pytest.mark.parametrize("text", ["", "# only a comment\n", HEADER + "\n"])
def test_empty_files(folder: Path, text: str) -> None:
    p = folder / "m.csv"
    p.write_text(text)
    with pytest.raises(SchedoptError, match=str(p)):
        read_measurements(p)


def test_missing_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", str(tmp_path / "none.csv")])
    assert res.exit_code == 2 and "cannot read file" in res.output


def test_schema_measurements() -> None:
    res = CliRunner().invoke(app, ["schema", "measurements"])
    assert res.exit_code == 0, res.output
    schema = json.loads(res.stdout)
    assert set(schema["required"]) == {"trace", "cluster", "policy", "iteration_time_s"}
    assert {"nodes", "iteration_time_std_s", "samples", "source"} <= set(schema["properties"])
