"""Sweeps: spec errors, row keys, the store, the local executor, resume, report."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.study.sweep import Store, expand_rows, parse_spec_text, run_row, run_sweep
from schedopt.study.sweep.report import best_knobs, near_optimal, speedup_rows
from schedopt.study.sweep.spec import SweepSpec, row_key

from .sweep_helpers import REPO, SMALL, env, schedopt, stable, write_spec

runner = CliRunner()


# --------------------------------------------------------------------------- spec errors
BAD_SPECS = [
    # no traces at all
    ({"clusters": ["k80-4x4-10gbe"], "policies": ["ddp"]}, "spec.traces"),
    # a node count of zero
    ({"traces": ["alexnet-k80-b128"], "clusters": [{"cluster": "10gbe-k80-family",
                                                    "nodes": [2, 0]}], "policies": ["ddp"]},
     "spec.clusters[0].nodes[1]"),
    # an unknown policy name
    ({"traces": ["alexnet-k80-b128"], "clusters": ["k80-4x4-10gbe"],
      "policies": ["ddp", "nosuch"]}, "spec.policies[1]"),
    # an optimizer option that does not exist
    ({"traces": ["alexnet-k80-b128"], "clusters": ["k80-4x4-10gbe"],
      "optimize": [{"time_limit": 3}]}, "spec.optimize[0].time_limit"),
    # a negative time limit
    ({"traces": ["alexnet-k80-b128"], "clusters": ["k80-4x4-10gbe"],
      "optimize": [{"time_limit_s": -1}]}, "spec.optimize[0].time_limit_s"),
    # an unknown top-level key (a typo of policies)
    ({"traces": ["alexnet-k80-b128"], "clusters": ["k80-4x4-10gbe"], "polices": ["ddp"]},
     "spec.polices"),
    # nothing to run
    ({"traces": ["alexnet-k80-b128"], "clusters": ["k80-4x4-10gbe"]}, "spec.policies"),
]


@pytest.mark.parametrize(("data", "field"), BAD_SPECS)
def test_bad_spec_names_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(SchedoptError) as err:
        parse_spec_text(json.dumps(data), "json")
    assert str(err.value).startswith(field), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("text", "fmt", "needle"), [
    ('{"traces": [', "json", "not valid JSON"),
    ("traces: [a, b\nclusters: x", "yaml", "not valid YAML"),
    ("[1, 2]", "json", "must be a mapping"),
])
def test_unparsable_spec(text: str, fmt: Any, needle: str) -> None:
    if fmt == "yaml":
        pytest.importorskip("yaml", reason="YAML specs need pyyaml")
    with pytest.raises(SchedoptError, match=needle):
        parse_spec_text(text, fmt)


def test_cli_malformed_spec_one_line_exit_2(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "bad.json", BAD_SPECS[1][0])
    db = tmp_path / "r.sqlite"
    res = runner.invoke(app, ["sweep", "run", str(spec), "--db", str(db), "--no-progress"])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "spec.clusters[0].nodes[1]" in lines[0], res.output
    assert "Traceback" not in res.output
    assert not db.exists()


def test_unknown_trace_fails_before_running(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "s.json", {**SMALL, "traces": ["no-such-trace"]})
    res = runner.invoke(app, ["sweep", "run", str(spec), "--db", str(tmp_path / "r.sqlite")])
    assert res.exit_code == 2 and "no-such-trace" in res.output, res.output


# --------------------------------------------------------------------------- rows and keys
def test_rows_and_keys() -> None:
    spec = SweepSpec.model_validate(SMALL)
    rows = expand_rows(spec)
    # 2 traces x 3 cluster sizes x (4 policies + 2 settings)
    assert len(rows) == 2 * 3 * 6
    assert len({r.key for r in rows}) == len(rows)
    assert expand_rows(spec) == rows
    # spellings of the same policy share a key; repeated entries run once
    same = SweepSpec.model_validate({**SMALL, "policies": ["ddp", "ddp:", "ddp"],
                                     "optimize": [{}, {"method": "auto"}]})
    assert len(expand_rows(same)) == 2 * 3 * 2
    # the key moves with the version and with the content
    assert row_key("t", "c", "policy", {"p": 1}, "0.1.0") != row_key("t", "c", "policy",
                                                                     {"p": 1}, "0.2.0")
    assert row_key("t", "c", "policy", {"p": 1}, "v") != row_key("t", "c2", "policy",
                                                                 {"p": 1}, "v")


def test_run_row_is_deterministic() -> None:
    rows = expand_rows(SweepSpec.model_validate(SMALL))
    cp = next(r for r in rows if r.kind == "optimize" and r.options.get("method") == "cp-sat")
    a, b = run_row(cp.as_dict()), run_row(cp.as_dict())
    assert a["error"] is None, a["error"]
    assert stable([a]) == stable([b])
    assert a["iteration_time_s"] >= a["bound_s"] * (1 - 1e-3)  # ticks: within 0.05%
    parts = a["breakdown"]
    assert sum(parts.values()) == pytest.approx(a["iteration_time_s"], rel=1e-12)


# --------------------------------------------------------------------------- the store
_WRITER = """
import sys
from schedopt.study.sweep import Store
db, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with Store(db, timeout_s=60) as s:
    for i in range(first, first + count):
        s.put({"key": f"k{i:04d}", "trace": "t", "policy": f"writer{first}",
               "breakdown": {"forward_s": i}, "iteration_time_s": float(i)})
"""


def test_concurrent_writers(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    # four writers, each overlapping the next by half: keys 0..249
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(db), str(50 * w), "100"],
                              env=env()) for w in range(4)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    with Store(db) as s:
        assert s.integrity_ok()
        rows = s.rows()
    assert [r["key"] for r in rows] == [f"k{i:04d}" for i in range(250)]
    assert all(r["iteration_time_s"] == float(r["key"][1:]) for r in rows)
    assert all(r["breakdown"] == {"forward_s": int(r["key"][1:])} for r in rows)
    mode = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_concurrent_sweeps_on_one_database(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "s.json", {**SMALL, "optimize": []})  # 24 policy rows
    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "schedopt", "sweep", "run", str(spec), "--db", str(db),
           "--workers", "1", "--no-progress"]
    procs = [subprocess.Popen(cmd, env=env(), cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    with Store(db) as s:
        assert s.integrity_ok()
        rows = s.rows()
    assert len(rows) == 24 and all(r["error"] is None for r in rows)


def test_json_spec_needs_no_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if pyyaml were not installed
    assert parse_spec_text(json.dumps(SMALL), "json").traces == SMALL["traces"]
    with pytest.raises(SchedoptError, match="pyyaml"):
        parse_spec_text("traces: [a]", "yaml")


def test_put_writes_a_key_once(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as s:
        assert s.put({"key": "a", "iteration_time_s": 1.0})
        assert not s.put({"key": "a", "iteration_time_s": 2.0})
        assert [r["iteration_time_s"] for r in s.rows()] == [1.0]


# --------------------------------------------------------------------------- local executor
@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("sweep") / "r.sqlite"
    summary = run_sweep(SweepSpec.model_validate(SMALL), db, workers=2, progress=False)
    assert (summary.total, summary.done, summary.failed) == (36, 36, 0)
    return db


def test_local_sweep_stores_every_row(small_db: Path) -> None:
    with Store(small_db) as s:
        rows = s.rows()
    keys = {r.key for r in expand_rows(SweepSpec.model_validate(SMALL))}
    assert {r["key"] for r in rows} == keys
    for r in rows:
        assert r["error"] is None and r["iteration_time_s"] > 0
        assert sum(r["breakdown"].values()) == pytest.approx(r["iteration_time_s"], rel=1e-9)
        if r["kind"] == "optimize":
            assert r["bound_s"] <= r["iteration_time_s"] * (1 + 1e-3)
            assert 0 <= r["gap"] <= 1
    # a rerun runs nothing
    again = run_sweep(SweepSpec.model_validate(SMALL), small_db, workers=2, progress=False)
    assert (again.skipped, again.done) == (36, 0)


def test_failed_row_is_stored_and_sweep_goes_on(tmp_path: Path) -> None:
    spec = SweepSpec.model_validate({**SMALL, "traces": ["alexnet-k80-b128"],
                                     "clusters": ["k80-4x4-10gbe"],
                                     "policies": ["ddp", "ddp:nosuch_knob=1"], "optimize": []})
    db = tmp_path / "r.sqlite"
    s1 = run_sweep(spec, db, workers=1, progress=False)
    assert (s1.done, s1.failed) == (1, 1)
    with Store(db) as st:
        bad = [r for r in st.rows() if r["error"] is not None]
    assert len(bad) == 1 and "nosuch_knob" in bad[0]["error"]
    assert bad[0]["iteration_time_s"] is None
    s2 = run_sweep(spec, db, workers=1, progress=False)
    assert (s2.skipped, s2.done, s2.failed) == (2, 0, 0)
    s3 = run_sweep(spec, db, workers=1, progress=False, retry_failed=True)
    assert (s3.skipped, s3.failed) == (1, 1)
    with Store(db) as st:
        assert len(st.rows()) == 2


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["crash", "ctrl-c"])
def test_kill_and_resume(tmp_path: Path, sig: signal.Signals) -> None:
    # rows of at most a few tenths of a second each, one at a time; enough of them that the
    # sweep cannot end between the second stored row and the signal
    n = 30
    spec = write_spec(tmp_path / "slow.json", {
        "traces": ["vgg16-k80-b32"], "clusters": ["k80-4x4-10gbe"],
        "optimize": [{"next_forward": "per-layer", "reorder": True, "method": "cp-sat",
                      "lns": False, "seed": s, "time_limit_s": 0.4} for s in range(n)],
    })
    db = tmp_path / "r.sqlite"
    cmd = [sys.executable, "-m", "schedopt", "sweep", "run", str(spec), "--db", str(db),
           "--workers", "1", "--no-progress"]
    # SIGINT as a terminal delivers it: a suite started in the background (``cmd &``) hands its
    # children SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen(cmd, env=env(), cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    stored = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if db.exists():
                with sqlite3.connect(db, timeout=30) as con:
                    try:
                        stored = con.execute("SELECT COUNT(*) FROM rows").fetchone()[0]
                    except sqlite3.OperationalError:  # table not yet created
                        stored = 0
                if stored >= 2:
                    break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, sig)  # the sweep and its pool, mid-sweep
        _, err = proc.communicate(timeout=60)
    if sig == signal.SIGINT:  # one line, no traceback from the parent or its workers
        assert proc.returncode == 130, err
        assert err.strip().splitlines() == [
            "interrupted: finished rows are stored; rerun to resume"], err
    with Store(db) as s:
        before = {r["key"]: r["finished_at"] for r in s.rows()}
    assert 2 <= len(before) < n, f"stored {len(before)} rows before the kill"
    res = schedopt("sweep", "run", str(spec), "--db", str(db), "--workers", "1",
                   "--no-progress")
    assert res.returncode == 0, res.stderr
    assert f"{n} rows: {len(before)} already stored, {n - len(before)} done, 0 failed" in (
        res.stdout)
    with Store(db) as s:
        rows = s.rows()
        assert s.integrity_ok()
    assert len(rows) == n and len({r["key"] for r in rows}) == n
    assert all(before[r["key"]] == r["finished_at"] for r in rows if r["key"] in before)


# --------------------------------------------------------------------------- report
def test_report_figures_follow_the_rows(small_db: Path) -> None:
    with Store(small_db) as s:
        rows = s.rows()
    sp = speedup_rows(rows)
    assert len(sp) == 2 * 3 * 4
    for item in sp:
        inst = [r for r in rows if r["trace"] == item["trace"] and r["kind"] == "optimize"
                and (r["cluster"] if r["nodes"] is None else f"{r['cluster']}@{r['nodes']}")
                == item["cluster"]]
        assert item["optimum_s"] == min(r["iteration_time_s"] for r in inst)
        assert item["speedup"] == pytest.approx(item["policy_s"] / item["optimum_s"])
    for n in near_optimal(rows):
        mine = [x for x in sp if x["policy"] == n["policy"]]
        assert n["within_1pct"] == sum(x["speedup"] <= 1.01 for x in mine)
    for b in best_knobs(rows):
        assert b["relative_time"] >= 1.0


def test_report_cli_json_and_plots(small_db: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["sweep", "report", "--db", str(small_db), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    with Store(small_db) as s:
        assert data == json.loads(json.dumps(s.rows()))
    res = runner.invoke(app, ["sweep", "report", "--db", str(small_db), "--plot",
                              str(tmp_path / "plots")])
    assert res.exit_code == 0, res.output
    assert "36 rows (0 failed)" in res.output
    for name in ("speedup.png", "efficiency.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_report_missing_db(tmp_path: Path) -> None:
    res = runner.invoke(app, ["sweep", "report", "--db", str(tmp_path / "none.sqlite")])
    assert res.exit_code == 2 and "--db" in res.output
    assert not (tmp_path / "none.sqlite").exists()


def test_shipped_paper_spec_parses() -> None:
    pytest.importorskip("yaml", reason="the shipped spec is YAML (pyyaml)")
    from schedopt.study.sweep import load_spec

    spec = load_spec(REPO / "benchmarks" / "sweeps" / "paper.yaml")
    assert len(expand_rows(spec)) > 0
