"""Property: any value in any numeric field of a trace, a cluster or a knob either simulates to
finite, strict JSON or is refused with one line naming the field (exit 2, nothing on stdout)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schedopt.cli.app import run

from .test_hostile_inputs import edit

DATA = Path(__file__).parent / "data"
TRACE: dict[str, Any] = json.loads((DATA / "tiny_trace.json").read_text())
CLUSTER: dict[str, Any] = json.loads((DATA / "fitted_cluster.json").read_text())
CLUSTER_RING = {k: v for k, v in CLUSTER.items() if k != "allreduce"}

# (document, dotted path, name the message must contain)
FIELDS = [
    ("trace", "batch_size", "batch_size"),
    ("trace", "io_s", "io_s"),
    ("trace", "update_s", "update_s"),
    ("trace", "layers.0.forward_s", "forward_s"),
    ("trace", "layers.2.backward_s", "backward_s"),
    ("trace", "layers.0.tensors.0.bytes", "bytes"),
    ("trace", "schema_version", "schema_version"),
    ("cluster", "nodes", "nodes"),
    ("cluster", "gpus_per_node", "gpus_per_node"),
    ("cluster", "nics_per_node", "nics_per_node"),
    ("cluster", "intra_link.bandwidth_Bps", "bandwidth_Bps"),
    ("cluster", "inter_link.bandwidth_Bps", "bandwidth_Bps"),
    ("cluster", "inter_link.latency_s", "latency_s"),
    ("cluster", "shared_pcie", "shared_pcie"),
]
KNOBS = [("ddp", "bucket_cap_mb"), ("ddp", "first_bucket_mb"), ("horovod", "cycle_time_ms"),
         ("horovod", "fusion_threshold_mb"), ("horovod", "groups"),
         ("bytescheduler", "partition_bytes"), ("bytescheduler", "credit_params"),
         ("deepspeed", "zero_stage"), ("deepspeed", "reduce_bucket_size"), ("mgwfbp", "alpha_s"),
         ("ddp", "prefetch")]

hostile = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 2**31, 2**53, 2**62, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, 5e-324, -0.0, 0.5, 1e-300, 1e30, 1e15]),
    st.text(max_size=4),
    st.none(),
    st.lists(st.integers(-3, 3), max_size=2),
)


def _refuse_constant(token: str) -> float:
    raise ValueError(f"bare {token} in the output")


def _check(argv: list[str], needle: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(argv)
    if rc == 0:
        assert err.getvalue() == ""
        data = json.loads(out.getvalue(), parse_constant=_refuse_constant)
        assert math.isfinite(data["iteration_time_s"]) and data["iteration_time_s"] > 0
        assert math.isfinite(data["throughput_samples_s"])
        return
    assert rc == 2, (out.getvalue(), err.getvalue())
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err.getvalue()
    assert needle in lines[0], lines[0]


@settings(max_examples=150, deadline=None)
@given(field=st.sampled_from(FIELDS), value=hostile, ring=st.booleans())
def test_any_value_in_a_numeric_field(field: tuple[str, str, str], value: Any,
                                      ring: bool) -> None:
    kind, path, needle = field
    trace, cluster = TRACE, CLUSTER_RING if ring else CLUSTER
    if kind == "trace":
        trace = edit(trace, path, value)
    else:
        cluster = edit(cluster, path, value)
    with tempfile.TemporaryDirectory() as tmp:
        t, c = Path(tmp) / "t.json", Path(tmp) / "c.json"
        t.write_text(json.dumps(trace))
        c.write_text(json.dumps(cluster))
        _check(["simulate", str(t), str(c), "-p", "ddp", "--json"], needle)


@settings(max_examples=120, deadline=None)
@given(knob=st.sampled_from(KNOBS), value=hostile)
def test_any_value_in_a_knob(knob: tuple[str, str], value: Any) -> None:
    policy, key = knob
    spec = f"{policy}:{key}={json.dumps(value)}"
    if "," in json.dumps(value) and not isinstance(value, list):
        return  # a comma in text separates knobs: another input, tested elsewhere
    _check(["simulate", str(DATA / "tiny_trace.json"), str(DATA / "fitted_cluster.json"),
            "-p", spec, "--json"], f"{policy}.")


number_text = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "1e308", "-0", "0x10", "", "1,5", "true"]),
)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(number_text, number_text), min_size=1, max_size=6),
       ranks=st.sampled_from(["", "-3", "0", "1", "8", str(2**63)]))
def test_any_numbers_in_a_comm_file(rows: list[tuple[str, str]], ranks: str) -> None:
    """fit-comm on OSU rows of arbitrary numbers: a finite fit written as a cluster, or one
    line naming the file (or the option)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "osu8.txt"
        path.write_text("# OSU MPI Allreduce Latency Test\n"
                        + "\n".join(f"{a} {b}" for a, b in rows) + "\n")
        out_path = Path(tmp) / "c.json"
        argv = ["fit-comm", str(path), "--json", "--out", str(out_path)]
        if ranks:
            argv += ["--ranks", ranks]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = run(argv)
        if rc == 0:
            data = json.loads(out.getvalue(), parse_constant=_refuse_constant)
            assert math.isfinite(data["alpha_s"]) and math.isfinite(data["beta_s_per_byte"])
            assert data["r2"] >= 0
            assert json.loads(out_path.read_text())["allreduce"]["alpha_s"] == data["alpha_s"]
            return
        assert rc == 2 and out.getvalue() == "", err.getvalue()
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err.getvalue()
        assert not out_path.exists()
