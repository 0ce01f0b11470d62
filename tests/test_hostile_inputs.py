"""Hostile input, table-driven: every kind of bad input over every command.

Each row builds its input files in a fresh folder and runs the command line in-process through
:func:`schedopt.cli.app.run` (the entry point's own error plumbing). The promise checked for every
row: exit status 2, exactly one line on stderr (``error: ...`` naming the field or option and
the value), nothing on stdout, no traceback, and no file left behind (no output, no temporary
file, no folder made for an output).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schedopt.cli.app import run
from schedopt.measure.gpus import GPUS, gpu_profile_data
from tests.hostile import refused, write_file

DATA = Path(__file__).parent / "data"
TRACE: dict[str, Any] = json.loads((DATA / "tiny_trace.json").read_text())
CLUSTER: dict[str, Any] = json.loads((DATA / "fitted_cluster.json").read_text())
ONE_NODE: dict[str, Any] = {"name": "one", "nodes": 1, "gpus_per_node": 4,
                            "intra_link": {"bandwidth_Bps": 1e10, "latency_s": 1e-6}}
ONE_GPU: dict[str, Any] = {**ONE_NODE, "gpus_per_node": 1}


def edit(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Copy ``doc`` with ``path`` (dots; ints index lists) set to ``value``."""
    out = copy.deepcopy(doc)
    *head, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = out
    for p in head:
        node = node[p]
    node[last] = value
    return out


def zero_time(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for layer in out["layers"]:
        layer["forward_s"] = layer["backward_s"] = 0.0
    return out


class Case:
    """One row: input files to write, the command line, a text the message must contain."""

    def __init__(self, files: dict[str, Any], argv: list[str], needle: str,
                 prepare: Callable[[Path], None] | None = None) -> None:
        self.files = files
        self.argv = argv
        self.needle = needle
        self.prepare = prepare


T, C, G = "t.json", "c.json", "g.json"
EST = ["estimate", "resnet50", "--gpu", G, "--dtype", "bf16", "--batch", "2", "--out", "o.json"]
GPU_DOC: dict[str, Any] = json.loads(json.dumps(gpu_profile_data(GPUS["h100"])))
SIM = ["simulate", T, C, "-p", "cntk"]
LATIN1 = json.dumps(edit(TRACE, "name", "caf\u00e9"), ensure_ascii=False).encode("latin-1")
NESTED = "[" * 100_000 + "]" * 100_000
PLAN_OK = {"policy": "x", "buckets": [["c.w"], ["a.b", "a.w"]]}
OSU = "# OSU MPI Allreduce Latency Test\n# Size Avg Latency(us)\n"
OSU_BUSBW = "# OSU MPI Allreduce Latency Test\n# compare with nccl-tests busbw\n" + "\n".join(
    f"{2**k} {10 + 2**k / 1e3:.3f}" for k in range(16, 22))
OSU_NOISY = OSU + "\n".join(f"{2**k} {v}" for k, v in zip(range(16, 23), [9, 1, 8, 2, 9, 1, 12],
                                                             strict=True))
OSU_OK = OSU + "\n".join(f"{2**k} {10 + 2**k / 1e3:.3f}" for k in range(16, 22))

CASES: dict[str, Case] = {
    # ---- encodings, syntax, nesting, paths
    "latin1-trace": Case({T: LATIN1, C: CLUSTER}, SIM, "not UTF-8"),
    "binary-trace-info": Case({T: bytes(range(256))}, ["info", T], "not UTF-8"),
    "latin1-cluster": Case({T: TRACE, C: json.dumps(edit(CLUSTER, "name", "\u00e9"),
                                                    ensure_ascii=False).encode("latin-1")},
                           SIM, "not UTF-8"),
    "latin1-plan": Case({T: TRACE, C: CLUSTER, "p.json": json.dumps(
        {**PLAN_OK, "policy": "\u00e9"}, ensure_ascii=False).encode("latin-1")},
        ["simulate", T, C, "--plan", "p.json"], "not UTF-8"),
    "nested-trace": Case({T: NESTED, C: CLUSTER}, SIM, "nested too deeply"),
    "nested-info": Case({T: NESTED}, ["info", T], "nested too deeply"),
    "huge-int-literal": Case({T: '{"a": ' + "9" * 5000 + "}"}, ["info", T], "not valid JSON"),
    "long-path": Case({}, ["info", "x" * 5000 + ".json"], "characters"),
    "folder-as-trace": Case({}, ["info", "."], "folder"),
    # ---- integers past int64, decimals where integers go, bools where numbers go
    "bytes-2^63": Case({T: edit(TRACE, "layers.0.tensors.0.bytes", 2**63), C: CLUSTER}, SIM,
                       "layers[0].tensors[0].bytes"),
    "bytes-1e30-int": Case({T: edit(TRACE, "layers.0.tensors.0.bytes", 10**30)}, ["info", T],
                           "bytes"),
    "bytes-1e30-float": Case({T: edit(TRACE, "layers.0.tensors.0.bytes", 1e30)}, ["info", T],
                             "not a decimal"),
    "bytes-2^62-twice": Case({T: edit(edit(TRACE, "layers.0.tensors.0.bytes", 2**62),
                                      "layers.2.tensors.0.bytes", 2**62)}, ["info", T], "bytes"),
    "batch-true": Case({T: edit(TRACE, "batch_size", True)}, ["info", T], "batch_size"),
    "batch-2.0": Case({T: edit(TRACE, "batch_size", 2.0)}, ["info", T], "batch_size"),
    "forward-true": Case({T: edit(TRACE, "layers.0.forward_s", True)}, ["info", T],
                         "forward_s"),
    "forward-text": Case({T: edit(TRACE, "layers.0.forward_s", "0.1")}, ["info", T],
                         "forward_s"),
    "trace-schema-true": Case({T: edit(TRACE, "schema_version", True)}, ["info", T],
                              "schema_version"),
    "nodes-true": Case({C: edit(CLUSTER, "nodes", True)}, ["info", C], "nodes"),
    "gpus-true": Case({C: edit(CLUSTER, "gpus_per_node", True)}, ["info", C], "gpus_per_node"),
    "servers-true": Case({C: {**CLUSTER, "collective": "ps", "ps": {"servers": True}}},
                         ["info", C], "servers"),
    "colocated-no": Case({C: {**CLUSTER, "collective": "ps", "ps": {"colocated": "no"}}},
                         ["info", C], "colocated"),
    "shared-pcie-1": Case({C: edit(CLUSTER, "shared_pcie", 1)}, ["info", C], "shared_pcie"),
    # ---- numbers whose derived figures would not be finite
    "forward-1e308": Case({T: edit(TRACE, "layers.0.forward_s", 1e308), C: CLUSTER},
                          [*SIM, "--json"], "forward_s"),
    "latency-1e308": Case({T: TRACE, C: edit(CLUSTER, "inter_link.latency_s", 1e308)},
                          ["compare", T, C], "latency_s"),
    "bandwidth-5e-324": Case({T: TRACE, C: edit(CLUSTER, "inter_link.bandwidth_Bps", 5e-324)},
                             SIM, "bandwidth_Bps"),
    "alpha-1e308": Case({T: TRACE, C: edit(CLUSTER, "allreduce.alpha_s", 1e308)}, SIM,
                        "alpha_s"),
    "beta-huge": Case({T: TRACE, C: edit(CLUSTER, "allreduce.beta_s_per_byte", 1e300)}, SIM,
                      "beta_s_per_byte"),
    "zero-time-simulate": Case({T: zero_time(TRACE), C: ONE_GPU}, SIM, "zero"),
    "zero-time-compare": Case({T: zero_time(TRACE), C: CLUSTER}, ["compare", T, C], "zero"),
    "zero-time-scale": Case({T: zero_time(TRACE), C: CLUSTER},
                            ["scale", T, C, "--nodes", "1,2"], "zero"),
    "zero-time-optimize": Case({T: zero_time(TRACE), C: ONE_GPU}, ["optimize", T, C], "zero"),
    # ---- structure
    "newline-in-name": Case({T: edit(zero_time(TRACE), "name", "two\nlines")}, ["info", T],
                            "zero"),
    "duplicate-tensor-in-layer": Case(
        {T: edit(TRACE, "layers.0.tensors", [{"name": "a.w", "bytes": 8},
                                             {"name": "a.w", "bytes": 8}])},
        ["info", T], "twice"),
    "cluster-family-schema": Case({C: {"name": "f", "schema_version": 7, "base": CLUSTER}},
                                  ["info", C], "schema_version"),
    "info-bad-cluster-names-cluster": Case({C: edit(CLUSTER, "nodes", -1)}, ["info", C],
                                           "cluster.nodes"),
    # ---- plan files
    "plan-schema-99": Case({T: TRACE, C: CLUSTER, "p.json": {**PLAN_OK, "schema_version": 99}},
                           ["simulate", T, C, "--plan", "p.json"], "schema_version"),
    "plan-overlap-no": Case({T: TRACE, C: CLUSTER, "p.json": {**PLAN_OK, "overlap": "no"}},
                            ["simulate", T, C, "--plan", "p.json"], "overlap"),
    "plan-prefetch-true": Case({T: TRACE, C: CLUSTER, "p.json": {**PLAN_OK, "prefetch": True}},
                               ["simulate", T, C, "--plan", "p.json"], "prefetch"),
    "plan-missing-stage": Case({T: TRACE, C: CLUSTER,
                                "p.json": {**PLAN_OK, "stage_orders": {"3": [1, 0]}}},
                               ["simulate", T, C, "--plan", "p.json"], "stage_orders[3]"),
    "plan-knobs-nested": Case({T: TRACE, C: CLUSTER, "p.json": {**PLAN_OK, "knobs": {
        "k": json.loads("[" * 900 + "]" * 900)}}},
        ["simulate", T, C, "--plan", "p.json", "--json"], "plan.knobs"),
    "plan-piece-true": Case({T: TRACE, C: CLUSTER, "p.json": {
        "policy": "x", "buckets": [["c.w"], ["a.b", "a.w#0", "a.w#1"]],
        "partition": {"a.w": [True, 3999999]}}},
        ["simulate", T, C, "--plan", "p.json"], "partition"),
    # ---- policy knobs
    "ddp-cap-1e308": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                                   "ddp:bucket_cap_mb=1e308"], "bucket_cap_mb"),
    "ddp-cap-list-1e308": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                               "ddp:bucket_cap_mb_list=[1e308]"], "bucket_cap_mb_list[0]"),
    "ddp-cap-nan": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                                 "ddp:bucket_cap_mb=NaN"], "bucket_cap_mb"),
    "ddp-cap-text": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                                  "ddp:bucket_cap_mb=abc"], "bucket_cap_mb"),
    "ddp-cap-list-int": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                                      "ddp:bucket_cap_mb_list=5"],
                             "bucket_cap_mb_list"),
    "horovod-fusion-1e308": Case({T: TRACE, C: CLUSTER}, ["compare", T, C, "-p",
                                 "horovod:fusion_threshold_mb=1e308"], "fusion_threshold_mb"),
    "horovod-groups-1e9": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                                        "horovod:groups=1000000000"], "groups"),
    "horovod-groups-nested": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                  'horovod:groups=[[["a.w"]]]'], "groups"),
    "bytescheduler-half-byte": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                    "bytescheduler:partition_bytes=0.5"], "partition_bytes"),
    "bytescheduler-one-param": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                    "bytescheduler:partition_params=1"], "partition_params"),
    "ddp-cap-list-nested": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                "ddp:bucket_cap_mb_list=" + "[" * 50_000 + "]" * 50_000],
                                "nested too deeply"),
    "ddp-cap-list-900-deep": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                  "ddp:bucket_cap_mb_list=" + "[" * 900 + "]" * 900],
                                  "bucket_cap_mb_list"),
    "ddp-cap-5000-digits": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                "ddp:bucket_cap_mb=" + "9" * 5000], "bucket_cap_mb"),
    "ddp-prefetch-true": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                                       "ddp:prefetch=true"], "prefetch"),
    "deepspeed-stage-true": Case({T: TRACE, C: CLUSTER}, ["simulate", T, C, "-p",
                                 "deepspeed:zero_stage=true"], "zero_stage"),
    "megatron-overlap-1": Case({T: TRACE, C: CLUSTER}, ["emit", T, C, "-t", "megatron", "-p",
                               "megatron:overlap_grad_reduce=1"], "overlap_grad_reduce"),
    # ---- options
    "nodes-without-inter-link": Case({T: TRACE, C: ONE_NODE}, [*SIM, "--nodes", "2"],
                                     "inter_link"),
    "scale-without-inter-link": Case({T: TRACE, C: ONE_NODE},
                                     ["scale", T, C, "--nodes", "1,2"], "inter_link"),
    "nodes-huge": Case({T: TRACE, C: CLUSTER}, [*SIM, "--nodes", str(10**12)], "nodes"),
    "scale-nodes-huge": Case({T: TRACE, C: CLUSTER}, ["scale", T, C, "--nodes", "1,99999999"],
                             "--nodes"),
    "workers-2^31": Case({T: TRACE, C: CLUSTER}, ["optimize", T, C, "--workers", "2147483648"],
                         "--workers"),
    "time-limit-nan": Case({T: TRACE, C: CLUSTER}, ["optimize", T, C, "--time-limit", "nan"],
                           "--time-limit"),
    "time-limit-1e308": Case({T: TRACE, C: CLUSTER},
                             ["optimize", T, C, "--time-limit", "1e308"], "--time-limit"),
    "seed-negative": Case({T: TRACE, C: CLUSTER}, ["optimize", T, C, "--seed", "-1"], "--seed"),
    "partition-one-byte": Case({T: TRACE, C: CLUSTER}, ["optimize", T, C, "--partition", "1"],
                               "--partition"),
    "usage-unknown-option": Case({}, ["simulate", T, C, "--colour"], "--colour"),
    "usage-bad-int": Case({}, ["simulate", T, C, "--nodes", "two"], "--nodes"),
    "usage-missing-argument": Case({}, ["simulate"], "trace"),
    "usage-unknown-command": Case({}, ["simulat"], "simulat"),
    # ---- output paths: refused before any work, nothing left behind
    "optimize-out-proc": Case({T: TRACE, C: CLUSTER},
                              ["optimize", T, C, "--out", "/proc/x.json"], "--out"),
    "optimize-out-folder": Case({T: TRACE, C: CLUSTER}, ["optimize", T, C, "--out", "."],
                                "--out"),
    "optimize-out-empty": Case({T: TRACE, C: CLUSTER}, ["optimize", T, C, "--out", ""],
                               "--out"),
    "optimize-out-long": Case({T: TRACE, C: CLUSTER},
                              ["optimize", T, C, "--out", "o" * 300 + ".json"], "--out"),
    "fit-comm-out-proc": Case({"osu8.txt": OSU_OK},
                              ["fit-comm", "osu8.txt", "--out", "/proc/x.json"], "--out"),
    "gantt-then-bad-chrome": Case({T: TRACE, C: CLUSTER}, [
        *SIM, "--gantt", "g.png", "--chrome-trace", "/proc/x.json"], "--chrome-trace"),
    "same-output-twice": Case({T: TRACE, C: CLUSTER}, [
        *SIM, "--gantt", "g.svg", "--chrome-trace", "g.svg"], "--chrome-trace"),
    "emit-later-file-blocked": Case(
        {T: TRACE, C: CLUSTER}, ["emit", T, C, "-t", "ddp", "-p", "ddp", "--out", "e"],
        "ddp_snippet.py", prepare=lambda d: (d / "e" / "ddp_snippet.py").mkdir(parents=True)),
    "out-under-a-file": Case({T: TRACE, C: CLUSTER, "f": "x"},
                             ["optimize", T, C, "--out", "f/sub/o.json"], "--out"),
    # ---- fit-comm files and options
    "fit-ranks-zero": Case({"osu.txt": OSU_OK}, ["fit-comm", "osu.txt", "--ranks", "0"],
                           "--ranks"),
    "fit-ranks-negative": Case({"osu.txt": OSU_OK}, ["fit-comm", "osu.txt", "--ranks", "-3"],
                               "--ranks"),
    "fit-size-2^63": Case({"osu8.txt": OSU + f"{2**63} 5.0\n{2**64} 7.0\n"},
                          ["fit-comm", "osu8.txt"], "too large"),
    "fit-folder": Case({}, ["fit-comm", "."], "regular file"),
    "fit-zero-ranks-in-file": Case({"osu.txt": OSU + "0,65536 10.0\n0,131072 12.0\n"},
                                   ["fit-comm", "osu.txt"], "osu.txt:3"),
    "plan-stage-order-true": Case({T: TRACE, C: CLUSTER,
                                   "p.json": {**PLAN_OK, "stage_orders": {"0": [True, 0]}}},
                                  ["simulate", T, C, "--plan", "p.json"], "stage_orders"),
    # ---- GPU profiles (`estimate --gpu FILE`, `info FILE`)
    "gpu-nested": Case({G: "[" * 100_000 + '"peak_flops"' + "]" * 100_000}, EST,
                       "nested too deeply"),
    "gpu-binary": Case({G: bytes(range(256))}, EST, "not UTF-8"),
    "gpu-sms-true": Case({G: {**GPU_DOC, "sms": True}}, EST, "GPU profile.sms"),
    "gpu-peak-1e308": Case({G: edit(GPU_DOC, "peak_flops.bf16", 1e308)}, ["info", G],
                           "peak_flops.bf16"),
    "gpu-long-path": Case({}, [*EST[:3], "x" * 5000 + ".json", *EST[4:]], "too long"),
    "gpu-folder": Case({}, [*EST[:3], "./", *EST[4:]], "folder"),
}


def _files(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")}


@pytest.mark.parametrize("case_id", list(CASES))
def test_hostile_input(case_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[case_id]
    for name, content in case.files.items():
        write_file(tmp_path, name, content)
    if case.prepare is not None:
        case.prepare(tmp_path)
    monkeypatch.chdir(tmp_path)
    refused(case.argv, case.needle, tmp_path, capsys)


def test_osu_file_with_busbw_comment_is_read_as_osu(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A comment mentioning nccl-tests' busbw does not make an OSU file nccl-tests output."""
    path = tmp_path / "osu8.txt"
    path.write_text(OSU_BUSBW)
    assert run(["fit-comm", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "osu"
    assert data["points"] == 6


def test_outputs_respect_the_umask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Output files get 0666 less the umask (0644 under 022), not a temporary file's 0600."""
    for name, doc in ((T, TRACE), (C, CLUSTER)):
        write_file(tmp_path, name, doc)
    old = os.umask(0o022)
    try:
        rc = run(["simulate", str(tmp_path / T), str(tmp_path / C), "-p", "cntk",
                  "--chrome-trace", str(tmp_path / "x.json")])
    finally:
        os.umask(old)
    capsys.readouterr()
    assert rc == 0
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [C, T, "x.json"]


def test_emit_writes_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The all-or-none writer still writes all when nothing fails (the counterpart of the
    ``emit-later-file-blocked`` row)."""
    for name, doc in ((T, TRACE), (C, CLUSTER)):
        write_file(tmp_path, name, doc)
    out = tmp_path / "e" / "f"
    rc = run(["emit", str(tmp_path / T), str(tmp_path / C), "-t", "ddp", "-p", "ddp",
              "--out", str(out)])
    capsys.readouterr()
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == ["ddp.json", "ddp_snippet.py"]
    assert json.loads((out / "ddp.json").read_text())


def test_fit_below_the_r2_floor_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit that explains the times worse than the floor writes no cluster (the floor is
    R^2 = 0; least squares with clamped coefficients stays above it on these data, so the
    floor is raised here to reach the refusal)."""
    import schedopt.measure.commfit as commfit

    path = tmp_path / "osu8.txt"
    path.write_text(OSU_NOISY)
    assert run(["fit-comm", str(path), "--json"]) == 0
    r2 = json.loads(capsys.readouterr().out)["r2"]
    assert 0 <= r2 < 0.9
    monkeypatch.setattr(commfit, "MIN_R2", 0.9)
    out = tmp_path / "c.json"
    assert run(["fit-comm", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "R^2" in err and "r2" in err
    assert not out.exists()


# ---------------------------------------------------------------------------- every command
#: Bad traces (document or raw bytes) and the text their message must contain.
BAD_TRACES: dict[str, tuple[Any, str]] = {
    "latin1": (LATIN1, "not UTF-8"),
    "nested": (NESTED, "nested too deeply"),
    "bytes-2^63": (edit(TRACE, "layers.0.tensors.0.bytes", 2**63), "bytes"),
    "bytes-true": (edit(TRACE, "layers.0.tensors.0.bytes", True), "bytes"),
    "forward-1e308": (edit(TRACE, "layers.0.forward_s", 1e308), "forward_s"),
    "batch-true": (edit(TRACE, "batch_size", True), "batch_size"),
    "zero-time": (zero_time(TRACE), "zero"),
    "duplicate-in-layer": (edit(TRACE, "layers.2.tensors", [{"name": "c.w", "bytes": 8},
                                                           {"name": "c.w", "bytes": 8}]),
                           "twice"),
}
#: Bad clusters and the text their message must contain.
BAD_CLUSTERS: dict[str, tuple[Any, str]] = {
    "latin1": (json.dumps(edit(CLUSTER, "name", "\u00e9"), ensure_ascii=False).encode(
        "latin-1"), "not UTF-8"),
    "latency-1e308": (edit(CLUSTER, "inter_link.latency_s", 1e308), "latency_s"),
    "bandwidth-5e-324": (edit(CLUSTER, "intra_link.bandwidth_Bps", 5e-324), "bandwidth_Bps"),
    "nodes-true": (edit(CLUSTER, "nodes", True), "nodes"),
    "nodes-2^63": (edit(CLUSTER, "nodes", 2**63), "nodes"),
}
#: Every command that reads a trace and a cluster (T and C are the file names).
COMMANDS = {
    "simulate": ["simulate", T, C, "-p", "ddp", "--json"],
    "compare": ["compare", T, C],
    "scale": ["scale", T, C, "--nodes", "1,2"],
    "optimize": ["optimize", T, C, "--out", "o.json"],
    "emit": ["emit", T, C, "-t", "ddp", "-p", "ddp", "--out", "e"],
}


def _expect_refusal(tmp_path: Path, files: dict[str, Any], argv: list[str], needle: str,
                    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, content in files.items():
        write_file(tmp_path, name, content)
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    rc = run(argv)
    out, err = capsys.readouterr()
    assert (rc, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and needle in err, err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("kind", list(BAD_TRACES))
def test_bad_trace_in_every_command(kind: str, command: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    doc, needle = BAD_TRACES[kind]
    _expect_refusal(tmp_path, {T: doc, C: CLUSTER}, COMMANDS[command], needle, capsys,
                    monkeypatch)


@pytest.mark.parametrize("command", [*COMMANDS, "info"])
@pytest.mark.parametrize("kind", list(BAD_CLUSTERS))
def test_bad_cluster_in_every_command(kind: str, command: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    doc, needle = BAD_CLUSTERS[kind]
    argv = ["info", C] if command == "info" else COMMANDS[command]
    _expect_refusal(tmp_path, {T: TRACE, C: doc}, argv, needle, capsys, monkeypatch)


@pytest.mark.parametrize("kind", [k for k in BAD_TRACES if k != "zero-time"])
def test_bad_trace_in_the_instances_folder(kind: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`list` names the bad file in one line instead of a traceback or a wrong count."""
    doc, needle = BAD_TRACES[kind]
    (tmp_path / "traces").mkdir()
    (tmp_path / "clusters").mkdir()
    monkeypatch.setenv("SCHEDOPT_INSTANCES", str(tmp_path))
    _expect_refusal(tmp_path / "traces", {"bad.json": doc}, ["list"], needle, capsys,
                    monkeypatch)


def test_ctrl_c_leaves_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after the outputs are reserved and before they are complete: exit 130, no
    traceback, and neither the outputs nor their temporary files are left."""
    import schedopt.simulate.simulator as cli

    for name, doc in ((T, TRACE), (C, CLUSTER)):
        write_file(tmp_path, name, doc)
    monkeypatch.chdir(tmp_path)

    def interrupted(*_args: Any, **_kwargs: Any) -> None:
        assert len(list(tmp_path.glob(".*.tmp*"))) == 2  # both outputs reserved by now
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "simulate", interrupted)
    rc = run([*SIM, "--gantt", "g.png", "--chrome-trace", "x.json"])
    _, err = capsys.readouterr()
    assert rc == 130
    assert "Traceback" not in err and len(err.splitlines()) <= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [C, T]
