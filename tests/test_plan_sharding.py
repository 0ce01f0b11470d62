"""The sharded plan's schema: units checked against the trace, bad fields named."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schedopt.errors import SchedoptError
from schedopt.model.plan import Plan, Sharding
from schedopt.model.trace import Trace


def _trace() -> Trace:
    layers = [
        {"name": "emb", "forward_s": 1e-3, "backward_s": 2e-3,
         "tensors": [{"name": "emb.w", "bytes": 400}]},
        {"name": "act", "forward_s": 1e-3, "backward_s": 1e-3, "tensors": []},
        {"name": "fc", "forward_s": 1e-3, "backward_s": 2e-3,
         "tensors": [{"name": "fc.w", "bytes": 800}, {"name": "fc.b", "bytes": 8}]},
    ]
    return Trace.model_validate({"name": "t", "batch_size": 1, "layers": layers})


def _plan(units: list[list[str]], buckets: list[list[str]], **kw: object) -> Plan:
    return Plan(policy="fsdp", buckets=buckets,
                sharding=Sharding(mode="full", units=units, **kw))  # type: ignore[arg-type]


def test_units_give_tensors_and_buckets_in_backward_order() -> None:
    tr = _trace()
    plan = _plan([["emb", "act"], ["fc"]], [["fc.b", "fc.w"], ["emb.w"]])
    assert plan.sharding is not None
    assert plan.sharding.check_against(tr) == [["emb.w"], ["fc.w", "fc.b"]]
    assert plan.check_against(tr).num_buckets == 2
    with pytest.raises(SchedoptError, match="backward order"):
        _plan([["emb", "act"], ["fc"]], [["emb.w"], ["fc.w", "fc.b"]]).check_against(tr)


@pytest.mark.parametrize(("units", "why"), [
    ([["emb"], ["fc"]], "layer is in no unit"),
    ([["emb", "act"], ["fc"], ["fc"]], "every layer must appear once"),
    ([["act", "emb"], ["fc"]], "every layer must appear once"),
    ([["emb"], ["act"], ["fc"]], "unit holds no tensor"),
    ([["emb", "act"], ["nope"]], "unknown layer"),
])
def test_bad_units_are_named(units: list[list[str]], why: str) -> None:
    with pytest.raises(SchedoptError, match=why) as err:
        _plan(units, [["fc.w", "fc.b"], ["emb.w"]]).check_against(_trace())
    assert "plan.sharding.units" in str(err.value)


@pytest.mark.parametrize(("field", "value"), [
    ("forward_prefetch", -1), ("backward_prefetch", True), ("streams", 3), ("streams", 2.0),
])
def test_bad_knobs_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        Sharding.model_validate({"mode": "full", "units": [["emb"]], field: value})


def test_accumulate_and_comm_dtype_are_checked() -> None:
    for bad in ({"accumulate": 0}, {"accumulate": True}, {"comm_dtype": "float7"}):
        with pytest.raises(ValidationError):
            Plan.model_validate({"policy": "x", "buckets": [["a"]], **bad})
    plan = Plan(policy="x", buckets=[["a"]], accumulate=4, comm_dtype="bfloat16")
    assert (plan.accumulate, plan.comm_dtype, plan.sharding) == (4, "bfloat16", None)
    with pytest.raises(ValidationError, match="no pieces"):
        Plan(policy="x", buckets=[["a#0"]], partition={"a": [4]},
             sharding=Sharding(mode="full", units=[["l"]]))
