"""Hostile input for sweeps and measurements, table-driven, and sweeps under kill signals.

Each table row builds its input files in a fresh folder and runs the command line in-process
through :func:`schedopt.cli.app.run`: a sweep spec fed to ``sweep run``, a database fed to
``sweep report``, a measurements CSV fed to ``calibrate`` (with an ``--out`` folder that must
not appear) and to ``validate``. The promise checked for every row: exit status 2, exactly one
line on stderr (``error: ...`` naming the field, option or file), nothing on stdout, no
traceback, and no file created, removed or changed.

The process tests run real sweeps in subprocesses (bounded by timeouts): a worker killed mid-sweep
leaves its rows pending, not failed, and a rerun runs them; SIGTERM or SIGKILL to the sweep
leaves no worker behind.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schedopt.cli.app import run
from schedopt.study.sweep import Store
from schedopt.study.sweep.store import COLUMNS

from .hostile import refused, write_file
from .sweep_helpers import REPO, env, write_spec
from .test_measurements import FAMILY, HEADER, TRACE

HAVE_YAML = importlib.util.find_spec("yaml") is not None
ON_LINUX = sys.platform.startswith("linux")


class Case:
    """One row: input files to write, the command line, a text the message must contain."""

    def __init__(self, files: dict[str, Any], argv: list[str], needle: str,
                 prepare: Callable[[Path], None] | None = None, yaml: bool = False) -> None:
        self.files = files
        self.argv = argv
        self.needle = needle
        self.prepare = prepare
        self.yaml = yaml


def _fifo(name: str) -> Callable[[Path], None]:
    return lambda folder: os.mkfifo(folder / name)


# ---------------------------------------------------------------------------- sweep specs
SPEC: dict[str, Any] = {"traces": ["alexnet-k80-b128"], "clusters": ["k80-4x4-10gbe"],
                        "policies": ["ddp"]}
S, DB = "s.json", "r.sqlite"
RUN = ["sweep", "run", S, "--db", DB, "--no-progress"]
RUN_YAML = ["sweep", "run", "s.yaml", "--db", DB, "--no-progress"]


def spec(**changes: Any) -> dict[str, Any]:
    """The small spec with top-level keys replaced."""
    out = copy.deepcopy(SPEC)
    out.update(changes)
    return out


def opt(**options: Any) -> dict[str, Any]:
    """The small spec with one optimizer setting."""
    return spec(policies=[], optimize=[options])


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi",
                                                                  strict=True)
) + "traces: *i\nclusters: [k80-4x4-10gbe]\npolicies: [ddp]\n"

SPEC_CASES: dict[str, Case] = {
    # ---- encodings, syntax, size, nesting, paths that are not files
    "binary": Case({S: bytes(range(256))}, RUN, "not UTF-8"),
    "latin1": Case({S: json.dumps(spec(traces=["caf\u00e9"]), ensure_ascii=False)
                    .encode("latin-1")}, RUN, "not UTF-8"),
    "utf16-bom": Case({S: json.dumps(SPEC).encode("utf-16")}, RUN, "UTF-16"),
    "json-syntax": Case({S: '{"traces": ['}, RUN, "not valid JSON"),
    "json-nested": Case({S: '{"traces": ' + "[" * 100_000 + "]" * 100_000 + "}"}, RUN,
                        "nested too deeply"),
    "json-nested-40": Case({S: '{"traces": ' + "[" * 40 + "]" * 40 + "}"}, RUN,
                           "nested more than"),
    "json-5000-digits": Case({S: '{"traces": ' + "9" * 5000 + "}"}, RUN, "not valid JSON"),
    "huge-file": Case({S: '{"traces": ["' + "x" * (2 * 2**20) + '"]}'}, RUN, "larger than"),
    "not-a-mapping": Case({S: "[1, 2]"}, RUN, "must be a mapping"),
    "fifo": Case({}, RUN, "regular file", prepare=_fifo(S)),
    "dev-zero": Case({}, ["sweep", "run", "/dev/zero", "--db", DB], "regular file"),
    "folder": Case({}, ["sweep", "run", ".", "--db", DB], "folder"),
    "missing": Case({}, RUN, "spec"),
    # ---- numbers: bools, decimals, huge and non-finite values where the CLI refuses them
    "workers-true": Case({S: opt(workers=True)}, RUN, "spec.optimize[0].workers"),
    "workers-2.0": Case({S: opt(workers=2.0)}, RUN, "spec.optimize[0].workers"),
    "workers-2^31": Case({S: opt(workers=2**31)}, RUN, "spec.optimize[0].workers"),
    "workers-0": Case({S: opt(workers=0)}, RUN, "spec.optimize[0].workers"),
    "time-limit-1e308": Case({S: opt(time_limit_s=1e308)}, RUN, "spec.optimize[0].time_limit_s"),
    "time-limit-nan": Case({S: json.dumps(opt()).replace("{}", '{"time_limit_s": NaN}')}, RUN,
                           "spec.optimize[0].time_limit_s"),
    "time-limit-true": Case({S: opt(time_limit_s=True)}, RUN, "spec.optimize[0].time_limit_s"),
    "time-limit-text": Case({S: opt(time_limit_s="5")}, RUN, "spec.optimize[0].time_limit_s"),
    "time-limit-zero": Case({S: opt(time_limit_s=0)}, RUN, "spec.optimize[0].time_limit_s"),
    "work-limit-1e300": Case({S: opt(work_limit_s=1e300)}, RUN, "spec.optimize[0].work_limit_s"),
    "seed-2^63": Case({S: opt(seed=2**63)}, RUN, "spec.optimize[0].seed"),
    "partition-2^63": Case({S: opt(partition_bytes=2**63)}, RUN,
                           "spec.optimize[0].partition_bytes"),
    "prefetch-true": Case({S: opt(prefetch=True)}, RUN, "spec.optimize[0].prefetch"),
    "reorder-1": Case({S: opt(reorder=1)}, RUN, "spec.optimize[0].reorder"),
    "cp-sat-time-1e308": Case({S: opt(cp_sat={"max_time_in_seconds": 1e308})}, RUN,
                              "max_time_in_seconds"),
    "cp-sat-workers-1e6": Case({S: opt(cp_sat={"num_workers": 10**6})}, RUN, "num_workers"),
    "cp-sat-nested": Case({S: opt(cp_sat={"num_workers": [[1]]})}, RUN, "num_workers"),
    "cp-sat-unknown": Case({S: opt(cp_sat={"no_such_parameter": 1})}, RUN, "cp_sat"),
    "option-unknown": Case({S: opt(time_limit=3)}, RUN, "spec.optimize[0].time_limit"),
    "nodes-2^63": Case({S: spec(clusters=[{"cluster": "10gbe-k80-family", "nodes": [2**63]}])},
                       RUN, "spec.clusters[0].nodes[0]"),
    "nodes-true": Case({S: spec(clusters=[{"cluster": "10gbe-k80-family", "nodes": [True]}])},
                       RUN, "spec.clusters[0].nodes[0]"),
    "nodes-2.0": Case({S: spec(clusters=[{"cluster": "10gbe-k80-family", "nodes": [2.0]}])},
                      RUN, "spec.clusters[0].nodes[0]"),
    "nodes-zero": Case({S: spec(clusters=[{"cluster": "10gbe-k80-family", "nodes": [0]}])},
                       RUN, "spec.clusters[0].nodes[0]"),
    "nodes-too-many": Case({S: spec(clusters=[{"cluster": "10gbe-k80-family",
                                               "nodes": list(range(1, 100))}])},
                           RUN, "spec.clusters[0].nodes"),
    "rows-too-many": Case({S: spec(traces=["alexnet-k80-b128"] * 1000,
                                   clusters=[{"cluster": "10gbe-k80-family",
                                              "nodes": list(range(1, 51))}] * 30)},
                          RUN, "rows"),
    "trace-true": Case({S: spec(traces=[True])}, RUN, "spec.traces[0]"),
    "trace-unknown": Case({S: spec(traces=["no-such-trace"])}, RUN, "trace"),
    "trace-dev-zero": Case({S: spec(traces=["/dev/zero"])}, RUN, "regular file"),
    "trace-long-name": Case({S: spec(traces=["t" * 300 + ".json"])}, RUN, "trace"),
    # ---- policy knobs, checked as --policy checks them
    "knob-1e308": Case({S: spec(policies=["ddp:bucket_cap_mb=1e308"])}, RUN,
                       "ddp.bucket_cap_mb"),
    "knob-nan": Case({S: spec(policies=["ddp:bucket_cap_mb=NaN"])}, RUN, "ddp.bucket_cap_mb"),
    "knob-true": Case({S: spec(policies=["ddp:bucket_cap_mb=true"])}, RUN, "ddp.bucket_cap_mb"),
    "knob-unknown": Case({S: spec(policies=["ddp:no_such_knob=1"])}, RUN, "spec.policies[0]"),
    "knob-prefetch-2": Case({S: spec(policies=["horovod:prefetch=2"])}, RUN, "prefetch"),
    "policy-unknown": Case({S: spec(policies=["nosuch"])}, RUN, "spec.policies[0]"),
    # ---- command-line options
    "cli-workers-zero": Case({S: SPEC}, [*RUN, "--workers", "0"], "--workers"),
    "cli-workers-huge": Case({S: SPEC}, [*RUN, "--workers", str(2**31)], "--workers"),
    "cli-executor": Case({S: SPEC}, [*RUN, "--executor", "slurm"], "--executor"),
    # ---- YAML: aliases (billion laughs), depth, types JSON does not have
    "yaml-laughs": Case({"s.yaml": LAUGHS}, RUN_YAML, "values", yaml=True),
    "yaml-self-alias": Case({"s.yaml": "traces: &a [*a]\n"}, RUN_YAML, "nested", yaml=True),
    "yaml-deep": Case({"s.yaml": "traces: " + "[" * 100_000 + "]" * 100_000}, RUN_YAML,
                      "nested too deeply", yaml=True),
    "yaml-syntax": Case({"s.yaml": "traces: [a\n  b: c"}, RUN_YAML, "not valid YAML",
                        yaml=True),
    "yaml-date": Case({"s.yaml": "traces: [2024-01-01]\nclusters: [x]\npolicies: [ddp]\n"},
                      RUN_YAML, "date", yaml=True),
    "yaml-int-key": Case({"s.yaml": "traces: [a]\nclusters: [x]\npolicies: [ddp]\n1: 2\n"},
                         RUN_YAML, "key", yaml=True),
    "yaml-inf": Case({"s.yaml": "traces: [alexnet-k80-b128]\nclusters: [k80-4x4-10gbe]\n"
                                "optimize: [{time_limit_s: .inf}]\n"}, RUN_YAML,
                     "spec.optimize[0].time_limit_s", yaml=True),
    "yaml-workers-true": Case({"s.yaml": "traces: [alexnet-k80-b128]\n"
                                         "clusters: [k80-4x4-10gbe]\n"
                                         "optimize: [{workers: true}]\n"}, RUN_YAML,
                              "spec.optimize[0].workers", yaml=True),
}


# ---------------------------------------------------------------------------- databases
def _sqlite(folder: Path, name: str, *sql: str) -> None:
    con = sqlite3.connect(folder / name)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()


def _foreign(name: str) -> Callable[[Path], None]:
    return lambda d: _sqlite(d, name, "CREATE TABLE users (id INTEGER, name TEXT)",
                             "INSERT INTO users VALUES (1, 'a')")


def _rows_table(name: str) -> Callable[[Path], None]:
    return lambda d: _sqlite(d, name, "CREATE TABLE rows (key TEXT, what TEXT)",
                             "INSERT INTO rows VALUES ('k', 'x')")


def _empty_sqlite(name: str) -> Callable[[Path], None]:
    return lambda d: _sqlite(d, name, "PRAGMA user_version = 7")


REPORT = ["sweep", "report", "--db", DB]
DB_CASES: dict[str, Case] = {
    "report-missing": Case({}, REPORT, "--db"),
    "report-junk": Case({DB: b"this is not a database\n" * 100}, REPORT, "not an SQLite"),
    "report-binary": Case({DB: bytes(range(256)) * 64}, REPORT, "--db"),
    "report-empty-file": Case({DB: b""}, REPORT, "not a schedopt sweep database"),
    "report-foreign": Case({}, REPORT, "not a schedopt sweep database", prepare=_foreign(DB)),
    "report-no-tables": Case({}, REPORT, "not a schedopt sweep database",
                             prepare=_empty_sqlite(DB)),
    "report-other-rows": Case({}, REPORT, "lacks", prepare=_rows_table(DB)),
    "report-folder": Case({}, ["sweep", "report", "--db", "."], "folder"),
    "report-fifo": Case({}, REPORT, "regular file", prepare=_fifo(DB)),
    "report-dev-zero": Case({}, ["sweep", "report", "--db", "/dev/zero"], "regular file"),
    "report-foreign-plot": Case({}, [*REPORT, "--plot", "plots"], "--db", prepare=_foreign(DB)),
    "report-foreign-json": Case({}, [*REPORT, "--json"], "--db", prepare=_foreign(DB)),
    # ``sweep run`` refuses a foreign database too, before writing to it
    "run-foreign": Case({S: SPEC}, RUN, "not a schedopt sweep database", prepare=_foreign(DB)),
    "run-other-rows": Case({S: SPEC}, RUN, "lacks", prepare=_rows_table(DB)),
    "run-junk": Case({S: SPEC, DB: b"this is not a database\n" * 100}, RUN, "not an SQLite"),
    "run-db-fifo": Case({S: SPEC}, RUN, "regular file", prepare=_fifo(DB)),
    "run-db-folder": Case({S: SPEC}, ["sweep", "run", S, "--db", "."], "folder"),
}


# ---------------------------------------------------------------------------- measurements
FULL_HEADER = HEADER + ",iteration_time_std_s,samples,source"
M = "m.csv"


def csv_files(body: str | bytes, header: str = HEADER) -> dict[str, Any]:
    """A measurements file (``header`` then ``body``) with the trace and family it names."""
    text: str | bytes = (header + "\n" + body) if isinstance(body, str) else body
    return {"t3.json": TRACE, "fam.json": FAMILY, M: text}


def row(time_s: str = "0.02", nodes: str = "2", policy: str = "ddp", trace: str = "t3.json",
        cluster: str = "fam.json") -> str:
    return f"{trace},{cluster},{nodes},{policy},{time_s}\n"


GOOD = row() + row(nodes="", policy="cntk", time_s="0.03")
CSV_CASES: dict[str, tuple[dict[str, Any], str, Callable[[Path], None] | None]] = {
    # ---- encodings, line structure, sizes, paths that are not files
    "binary": (csv_files(bytes(range(256))), "not UTF-8", None),
    "latin1": (csv_files(f"{HEADER}\n{row()}# caf\u00e9\n".encode("latin-1")), "not UTF-8",
               None),
    "utf16-bom": (csv_files(f"{HEADER}\n{GOOD}".encode("utf-16")), "UTF-16", None),
    "newline-in-cell": (csv_files('t3.json,fam.json,2,"ddp\nx",0.02\n' + GOOD),
                        "m.csv:2", None),
    "nul-in-cell": (csv_files("t3.json,fam.json,2,ddp\x00,0.02\n"), "control character", None),
    "cr-in-cell": (csv_files("t3.json,fam.json\r,2,ddp,0.02\n"), "control character", None),
    "unterminated-quote": (csv_files('t3.json,fam.json,2,"ddp,0.02\n'), "quoted cell", None),
    "huge-cell": (csv_files(row(trace="t" * 5000)), "column trace", None),
    "huge-line": (csv_files("x," * 40_000 + "\n"), "line longer", None),
    "huge-file": (csv_files(GOOD + "#" * (17 * 2**20) + "\n"), "larger than", None),
    "too-many-rows": (csv_files(row() * 10_001), "data rows", None),
    "too-many-cells": (csv_files("t3.json,fam.json,2,ddp,0.02,extra\n"), "cells", None),
    "empty-file": (csv_files(b""), "empty file", None),
    "header-only": (csv_files(""), "no data rows", None),
    "unknown-column": (csv_files(GOOD, header=HEADER + ",colour"), "colour", None),
    "fifo": ({"t3.json": TRACE, "fam.json": FAMILY}, "regular file", _fifo(M)),
    "folder": ({"t3.json": TRACE, "fam.json": FAMILY}, "folder",
               lambda d: (d / M).mkdir()),
    # ---- times: extreme, non-finite, not numbers
    "time-1e-300": (csv_files(row(time_s="1e-300")), "iteration_time_s", None),
    "time-5e-324": (csv_files(row(time_s="5e-324")), "iteration_time_s", None),
    "time-1e300": (csv_files(row(time_s="1e300")), "iteration_time_s", None),
    "time-1e999": (csv_files(row(time_s="1e999")), "iteration_time_s", None),
    "time-zero": (csv_files(row(time_s="0")), "iteration_time_s", None),
    "time-negative": (csv_files(row(time_s="-0.02")), "iteration_time_s", None),
    "time-nan": (csv_files(row(time_s="nan")), "iteration_time_s", None),
    "time-inf": (csv_files(row(time_s="inf")), "iteration_time_s", None),
    "time-true": (csv_files(row(time_s="true")), "iteration_time_s", None),
    "time-underscore": (csv_files(row(time_s="0_02")), "iteration_time_s", None),
    "time-empty": (csv_files(row(time_s="")), "iteration_time_s", None),
    "std-nan": (csv_files("t3.json,fam.json,2,ddp,0.02,nan,,\n", FULL_HEADER),
                "iteration_time_std_s", None),
    "std-1e300": (csv_files("t3.json,fam.json,2,ddp,0.02,1e300,,\n", FULL_HEADER),
                  "iteration_time_std_s", None),
    # ---- counts
    "nodes-2^63": (csv_files(row(nodes=str(2**63))), "column nodes", None),
    "nodes-true": (csv_files(row(nodes="true")), "column nodes", None),
    "nodes-2.0": (csv_files(row(nodes="2.0")), "column nodes", None),
    "nodes-arabic-digit": (csv_files(row(nodes="\u0663")), "column nodes", None),
    "nodes-zero": (csv_files(row(nodes="0")), "column nodes", None),
    "samples-2^63": (csv_files("t3.json,fam.json,2,ddp,0.02,,9223372036854775808,\n",
                               FULL_HEADER), "column samples", None),
    # ---- cells naming files and policies
    "trace-dev-zero": (csv_files(row(trace="/dev/zero")), "regular file", None),
    "trace-long-name": (csv_files(row(trace="t" * 300 + ".json")), "column trace", None),
    "trace-missing": (csv_files(row(trace="nosuch.json")), "column trace", None),
    "cluster-dev-zero": (csv_files(row(cluster="/dev/zero")), "regular file", None),
    "cluster-long-name": (csv_files(row(cluster="c" * 300)), "column cluster", None),
    "plan-dev-zero": (csv_files(row(policy="plan:/dev/zero")), "regular file", None),
    "knob-1e308": (csv_files(row(policy="ddp:bucket_cap_mb=1e308")), "bucket_cap_mb", None),
    "knob-unknown": (csv_files(row(policy="ddp:nosuch=1")), "column policy", None),
}

for _name, (_files_, _needle, _prep) in CSV_CASES.items():
    SPEC_CASES[f"calibrate-{_name}"] = Case(_files_, ["calibrate", M, "--out", "cal"], _needle,
                                            _prep)
    SPEC_CASES[f"validate-{_name}"] = Case(_files_, ["validate", M], _needle, _prep)
CASES = {**SPEC_CASES, **DB_CASES}


def _params() -> list[Any]:
    skip_yaml = pytest.mark.skipif(not HAVE_YAML, reason="YAML specs need pyyaml")
    return [pytest.param(k, marks=skip_yaml) if CASES[k].yaml else k for k in CASES]


@pytest.mark.parametrize("case_id", _params())
def test_hostile_sweep_input(case_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[case_id]
    for name, content in case.files.items():
        write_file(tmp_path, name, content)
    if case.prepare is not None:
        case.prepare(tmp_path)
    monkeypatch.chdir(tmp_path)
    refused(case.argv, case.needle, tmp_path, capsys)


def test_good_measurements_still_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The counterpart of the table: a plain file with a comment, a blank line, CRLF line ends
    and quoted cells is read (validate answers with every row)."""
    body = '# runs of May\r\n\r\n"t3.json",fam.json,2,"ddp",0.02\r\nt3.json,fam.json,,cntk,3e-2\r\n'
    for name, content in csv_files(body).items():
        write_file(tmp_path, name, content)
    monkeypatch.chdir(tmp_path)
    assert run(["validate", M, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["measured_s"] for r in data["rows"]] == [0.02, 0.03]


# ---------------------------------------------------------------------------- odd stored cells
def _record(key: str, kind: str, time_s: Any, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "key": key, "trace": "t", "cluster": "c", "nodes": None, "kind": kind,
        "policy": "ddp" if kind == "policy" else "", "options": {}, "world_size": 4,
        "gpus_per_node": 4, "intra_bw_Bps": 1e10, "inter_bw_Bps": None,
        "iteration_time_s": time_s, "first_iteration_s": time_s,
        "breakdown": {"forward_s": 0.01, "backward_s": 0.02, "update_s": 0.0,
                      "exposed_comm_s": 0.001},
        "comm_busy_s": 0.005, "tail": None, "buckets": 1, "status": "SIMULATED",
        "method": "simulate", "version": "x", "host": "h", "wall_s": 0.1, "error": None,
        "finished_at": "2026-01-01T00:00:00+00:00",
    }
    base.update(extra)
    return base


def _odd_db(path: Path) -> dict[str, str]:
    """A sweep database with two sound rows and one row per odd cell; returns key -> what."""
    odd = {
        "k-inf": _record("k-inf", "policy", float("inf")),
        "k-nan": _record("k-nan", "policy", float("nan")),
        "k-zero-optimum": _record("k-zero-optimum", "optimize", 0.0),
        "k-negative": _record("k-negative", "policy", -1.0),
        "k-text-time": _record("k-text-time", "policy", "fast"),
        "k-no-world": _record("k-no-world", "policy", 0.05, world_size=None),
        "k-breakdown-inf": _record("k-breakdown-inf", "policy", 0.05,
                                   breakdown={"forward_s": float("inf")}),
    }
    with Store(path) as store:
        store.put(_record("k-good-policy", "policy", 0.05))
        store.put(_record("k-good-optimize", "optimize", 0.04))
        for record in odd.values():
            store.put(record)
    con = sqlite3.connect(path)  # JSON that does not decode, and a kind nobody wrote
    marks = ", ".join("?" for _ in COLUMNS)
    for key, column, value in (("k-bad-json", "breakdown", "{not json"),
                               ("k-deep-json", "tail", "[" * 100_000 + "]" * 100_000),
                               ("k-bad-kind", "kind", "banana")):
        rec = _record(key, "policy", 0.05)
        values = [json.dumps(rec[c]) if c in ("options", "breakdown", "tail") else rec.get(c)
                  for c in COLUMNS]
        values[list(COLUMNS).index(column)] = value
        con.execute(f"INSERT INTO rows VALUES ({marks})", values)
        odd[key] = rec
    con.commit()
    con.close()
    return {k: k for k in odd}


def test_report_names_odd_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NaN, infinite, zero and negative times, text in a number column and stored JSON that does
    not decode: each row is named on stderr and left out; the report and its JSON still come,
    the JSON strict (no NaN or Infinity), and the database is not changed."""
    db = tmp_path / "odd.sqlite"
    odd = _odd_db(db)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    for argv in (["sweep", "report", "--db", str(db)],
                 ["sweep", "report", "--db", str(db), "--json"]):
        rc = run(argv)
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert "Traceback" not in err + out
        warned = [ln for ln in err.splitlines() if ln.startswith("warning: row ")]
        assert sorted(ln.split()[2].rstrip(":") for ln in warned) == sorted(odd), err
        if "--json" in argv:
            rows = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
            by_key = {r["key"]: r for r in rows}
            assert by_key["k-good-policy"]["error"] is None
            for key in odd:
                assert by_key[key]["error"].startswith("unreadable stored row"), by_key[key]
                assert by_key[key]["iteration_time_s"] is None
        else:
            assert f"{len(odd) + 2} rows ({len(odd)} failed)" in out
            assert "1.250x" in out  # the sound policy over the sound optimum: 0.05 / 0.04
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


# ---------------------------------------------------------------------------- kill signals
def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _children(pid: int) -> list[int]:
    """Pool workers of ``pid`` (its children started by multiprocessing's spawn)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmd:
            out.append(int(entry.name))
    return out


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
            return int(con.execute("SELECT COUNT(*) FROM rows").fetchone()[0])
    except sqlite3.Error:  # not yet created
        return 0


def _slow_spec(folder: Path, n: int) -> Path:
    """``n`` optimize rows of a few tenths of a second each, run one at a time."""
    return write_spec(folder / "slow.json", {
        "traces": ["vgg16-k80-b32"], "clusters": ["k80-4x4-10gbe"],
        "optimize": [{"next_forward": "per-layer", "reorder": True, "method": "cp-sat",
                      "lns": False, "seed": s, "time_limit_s": 0.4} for s in range(n)],
    })


def _start(spec_path: Path, db: Path, workers: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "schedopt", "sweep", "run", str(spec_path), "--db", str(db),
           "--workers", str(workers), "--no-progress"]
    return subprocess.Popen(cmd, env=env(), cwd=REPO, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(what: Callable[[], bool], proc: subprocess.Popen[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if what():
            return True
        time.sleep(0.05)
    return False


def _no_group_left(pgid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = _group(pgid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _group(pgid)
    return left


@pytest.mark.skipif(not ON_LINUX, reason="finds the workers in /proc")
def test_killed_worker_leaves_rows_pending(tmp_path: Path) -> None:
    n = 10
    spec_path, db = _slow_spec(tmp_path, n), tmp_path / "r.sqlite"
    proc = _start(spec_path, db, workers=1)
    try:
        if not _wait_for(lambda: _stored(db) >= 1 and bool(_children(proc.pid)), proc, 120):
            pytest.skip("the sweep ended before a worker could be killed mid-sweep")
        for pid in _children(proc.pid):
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert "rows left pending" in err, err
    with Store(db, readonly=True) as s:
        rows = s.rows()
    assert 1 <= len(rows) < n
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows]
    assert f"{n - len(rows)} pending" in out, out
    res = subprocess.run([sys.executable, "-m", "schedopt", "sweep", "run", str(spec_path),
                          "--db", str(db), "--workers", "1", "--no-progress"],
                         capture_output=True, text=True, timeout=300, env=env(), cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert f"{n} rows: {len(rows)} already stored, {n - len(rows)} done, 0 failed" in res.stdout
    with Store(db, readonly=True) as s:
        assert len(s.rows()) == n


@pytest.mark.skipif(not ON_LINUX, reason="lists the process group in /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_killed_sweep_leaves_no_worker(tmp_path: Path, sig: signal.Signals) -> None:
    spec_path, db = _slow_spec(tmp_path, 20), tmp_path / "r.sqlite"
    proc = _start(spec_path, db, workers=2)
    try:
        if not _wait_for(lambda: len(_children(proc.pid)) == 2, proc, 120):
            pytest.skip("the sweep ended before its workers started")
        os.kill(proc.pid, sig)  # the parent only: its workers must follow it
        _, err = proc.communicate(timeout=60)
        left = _no_group_left(proc.pid, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        for pid in _group(proc.pid):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes left behind: {left}"
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert err.strip().splitlines() == [
            "interrupted: finished rows are stored; rerun to resume"], err
    with Store(db, readonly=True) as s:
        assert all(r["error"] is None for r in s.rows())


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="needs SIGTERM")
def test_signals_wait_until_the_workers_have_started() -> None:
    """A signal during the pool's start (workers being handed their start-up data) is held
    and delivered to the previous handler once the start is over: nothing raised inside."""
    from schedopt.study.sweep.run import _held_signals

    seen: list[str] = []

    def handler(signum: int, _frame: object) -> None:
        seen.append(f"handler {signum}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        with _held_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            seen.append("after the start")
        seen.append("after the block")
    finally:
        signal.signal(signal.SIGTERM, old)
    assert seen == ["after the start", f"handler {int(signal.SIGTERM)}", "after the block"]
    with pytest.raises(KeyboardInterrupt), _held_signals():  # Ctrl-C: held, then raised
        signal.raise_signal(signal.SIGINT)
        seen.append("still starting")
    assert seen[-1] == "still starting"
