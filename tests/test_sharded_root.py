"""FSDP2's root group (gathered once, kept through the backward, reduced last) and frozen
parameters (gathered, never reduced) in sharded plans: the simulator, the checks, the emitters,
the optimizer's baselines and the trace format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schedopt.emit import emit
from schedopt.errors import SchedoptError
from schedopt.files import load_trace
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan, Sharding
from schedopt.model.sharded import shard_units
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

MS = 1e-3
MB = 1_000_000


def _cluster() -> Cluster:
    return Cluster.model_validate({"name": "c", "nodes": 1, "gpus_per_node": 2,
                                   "intra_link": {"bandwidth_Bps": 1e9},
                                   "allreduce": {"alpha_s": 1 * MS, "beta_s_per_byte": 1e-9}})


def _layer(name: str, nbytes: int, frozen: int = 0) -> dict[str, Any]:
    """Layer ``name``: 1 ms forward, 2 ms backward, tensor ``name.w`` of ``nbytes`` (none at 0)
    and frozen parameter ``name.f`` of ``frozen`` bytes (none at 0)."""
    return {"name": name, "forward_s": MS, "backward_s": 2 * MS,
            "tensors": [{"name": f"{name}.w", "bytes": nbytes}] if nbytes else [],
            "frozen": [{"name": f"{name}.f", "bytes": frozen}] if frozen else []}


def _trace(*layers: dict[str, Any]) -> Trace:
    return Trace.model_validate({"name": "t", "batch_size": 1, "layers": list(layers)})


#: embedding, two blocks, head: the root's layers around the units
ROOTED = _trace(_layer("emb", 4 * MB), _layer("h.0", 2 * MB), _layer("h.1", 2 * MB),
                _layer("head", 4 * MB))


def _plan(trace: Trace, units: list[list[str]], root: list[str] | None,
          buckets: list[list[str]] | None = None, **kw: Any) -> Plan:
    sharding = Sharding.model_validate({"mode": "full", "units": units, "root": root, **kw})
    if buckets is None:
        buckets = sharding.bucket_tensors(trace)
    return Plan(policy="hand", buckets=buckets, sharding=sharding)


def _network(trace: Trace, plan: Plan, step: int = 1) -> list[tuple]:
    """The collectives of one step, in the order the network serves them."""
    sched = simulate(trace, _cluster(), plan, record=True)
    return [key for _, key in sorted((s, k) for k, (s, _) in sched.tasks.items()
                                     if k[0] in ("ag", "rs") and k[1] == step)]


# ----------------------------------------------------------------------------- root group
def test_root_group_is_gathered_once_kept_and_reduced_last() -> None:
    plan = _plan(ROOTED, [["h.0"], ["h.1"]], ["emb", "head"])
    seq = _network(ROOTED, plan)
    root = 2  # units 0, 1, then the root group
    assert seq[0] == ("ag", 1, root, 0, "fwd")  # before any unit's all-gather
    assert [k for k in seq if k[0] == "ag" and k[2] == root] == [seq[0]]  # never in backward
    assert [k[2] for k in seq if k[0] == "rs"] == [1, 0, root]  # the root last
    sched = simulate(ROOTED, _cluster(), plan, record=True)
    bwd_end = max(e for k, (_, e) in sched.tasks.items() if k[:2] == ("bwd", 1))
    assert sched.tasks[("rs", 1, root)][0] >= bwd_end  # after the whole backward
    # the root's parameters stay gathered from its all-gather to the end of the backward:
    # with the units' gradients and parameters, at least 8 MB + a unit's 2 MB at once
    assert sched.peak_memory_bytes is not None and sched.peak_memory_bytes >= 10 * MB


def test_root_group_by_hand() -> None:
    # one unit h.0 between emb and head; AG(x) = RS(x) = 1 ms / 2 + x bytes / 2 GB/s ...
    trace = _trace(_layer("emb", 2 * MB), _layer("h.0", 2 * MB), _layer("head", 2 * MB))
    plan = _plan(trace, [["h.0"]], ["emb", "head"], forward_prefetch=1, backward_prefetch=1)
    cl = _cluster()
    units = shard_units(trace, cl, plan)
    ag_root, ag_u = float(units.ag_s[1]), float(units.ag_s[0])
    rs_root, rs_u = float(units.rs_s[1]), float(units.rs_s[0])
    # forward: AG(root) then AG(h.0) back to back from 0; emb after AG(root), h.0 after both
    t = max(ag_root + MS, ag_root + ag_u) + MS + MS  # emb, h.0, head
    # backward: AG(h.0) again from the forward's end, head's backward meanwhile
    t = max(t + 2 * MS, t + ag_u) + 2 * MS  # head, then h.0
    rs_u_end = t + rs_u  # RS(h.0) from h.0's end; emb's backward meanwhile
    t += 2 * MS  # emb
    step = max(rs_u_end, t) + rs_root  # RS(root) after the backward and RS(h.0)
    assert simulate(trace, cl, plan).iteration_time_s == pytest.approx(step, rel=1e-12)


def test_plans_without_root_keep_their_meaning_and_files() -> None:
    plan = _plan(ROOTED, [["emb", "h.0"], ["h.1", "head"]], None)
    assert "root" not in json.loads(plan.model_dump_json())["sharding"]
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again == plan and again.sharding is not None and again.sharding.root is None
    rooted = _plan(ROOTED, [["h.0"], ["h.1"]], ["emb", "head"])
    assert Plan.model_validate_json(rooted.model_dump_json()) == rooted


@pytest.mark.parametrize(("units", "root", "why", "field"), [
    ([["h.0"], ["h.1"]], ["emb", "nope"], "unknown layer", "plan.sharding.root"),
    ([["h.0"], ["h.1", "head"]], ["emb", "head"], "both in a unit and in the root",
     "plan.sharding.root"),
    ([["h.0"], ["h.1"]], ["emb", "emb", "head"], "appears twice", "plan.sharding.root"),
    ([["h.0"], ["h.1"]], ["emb"], "layer is in no unit", "plan.sharding.units"),
    ([["emb", "h.1"]], ["h.0", "head"], "consecutive", "plan.sharding.units[0]"),
])
def test_bad_root_groups_are_named(units: list[list[str]], root: list[str], why: str,
                                   field: str) -> None:
    plan = Plan(policy="hand", buckets=[["emb.w", "h.0.w", "h.1.w", "head.w"]],
                sharding=Sharding.model_validate({"mode": "full", "units": units,
                                                  "root": root}))
    with pytest.raises(SchedoptError, match=why) as err:
        simulate(ROOTED, _cluster(), plan)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_root_group_checks_its_tensors_and_buckets() -> None:
    trace = _trace(_layer("emb", 0), _layer("h.0", 2 * MB), _layer("h.1", 2 * MB))
    with pytest.raises(SchedoptError, match="root group holds no tensor"):
        simulate(trace, _cluster(), _plan(trace, [["h.0"], ["h.1"]], ["emb"], [["h.1.w"],
                                                                               ["h.0.w"]]))
    with pytest.raises(SchedoptError, match="then the root group's") as err:  # root not last
        simulate(ROOTED, _cluster(), _plan(ROOTED, [["h.0"], ["h.1"]], ["emb", "head"],
                                           [["emb.w", "head.w"], ["h.1.w"], ["h.0.w"]]))
    assert "plan.buckets" in str(err.value)
    with pytest.raises(ValueError, match="at least 1"):
        Sharding.model_validate({"mode": "full", "units": [["h.0"]], "root": []})


def test_fsdp_baseline_and_emitters_take_the_root_group() -> None:
    trace = _trace(_layer("emb", 4 * MB), _layer("h.0.a", 2 * MB), _layer("h.0.b", 2 * MB),
                   _layer("h.1.a", 2 * MB), _layer("head", 4 * MB))
    plan = make_plan(trace, _cluster(), "fsdp")
    assert plan.sharding is not None and plan.sharding.root == ["emb", "head"]
    out = emit(trace, _cluster(), plan, "fsdp")
    assert out.config["groups"] == [["h.0"], ["h.1"]]  # the root's layers: fully_shard(model)
    assert out.config["root_reshard_after_forward"] is False
    assert out.config["reshard_after_forward"] is True and str(out.spec).startswith("fsdp:")
    assert "root_reshard_after_forward" in out.files["fsdp_snippet.py"]
    ds = emit(trace, None, plan, "deepspeed")
    zero = ds.config["zero_optimization"]
    assert zero["reduce_bucket_size"] == 2 * MB  # the root group: 8 MB of float32
    assert any("root group" in n for n in ds.notes)


def test_optimizer_reports_a_root_baseline_without_starting_from_it() -> None:
    trace = _trace(_layer("emb", 4 * MB), _layer("h.0", 2 * MB), _layer("h.1", 2 * MB),
                   _layer("head", 4 * MB))
    res = solve(trace, _cluster(), SolveOptions(sharding="full", time_limit_s=5))
    row = next(b for b in res.baselines if b.policy == "fsdp")
    assert not row.expressible and "root group" in row.reason
    base = simulate(trace, _cluster(), make_plan(trace, _cluster(), "fsdp"))
    assert row.iteration_time_s == base.iteration_time_s  # the one simulator
    assert res.bound_s <= res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-9)


# ------------------------------------------------------------------------ frozen parameters
def test_frozen_parameters_are_gathered_never_reduced() -> None:
    trace = _trace(_layer("a", 2 * MB, frozen=MB), _layer("b", 0, frozen=3 * MB),
                   _layer("c", 2 * MB))
    plan = _plan(trace, [["a"], ["b"], ["c"]], None)
    assert plan.buckets == [["c.w"], ["a.w"]]  # the all-frozen unit has no bucket
    units = shard_units(trace, _cluster(), plan)
    assert units.param_bytes.tolist() == [3 * MB, 3 * MB, 2 * MB]
    assert units.grad_bytes.tolist() == [2 * MB, 0, 2 * MB]
    assert units.grad_mem.tolist() == [2 * MB, 0, 2 * MB]
    seq = _network(trace, plan)
    assert [k[2] for k in seq if k[0] == "rs"] == [2, 0]  # no reduce-scatter of unit 1
    assert {k[2] for k in seq if k[0] == "ag"} == {0, 1, 2}


def test_frozen_parameters_are_padded_and_left_out_of_the_dtype_rule() -> None:
    trace = Trace.model_validate({"name": "t", "batch_size": 1, "layers": [
        {"name": "h.0", "forward_s": MS, "backward_s": MS,
         "tensors": [{"name": "h.0.w", "bytes": 12, "rows": 3}],
         "frozen": [{"name": "h.0.f", "bytes": 24, "dtype": "float64", "rows": 3}]}]})
    plan = make_plan(trace, _cluster(), "fsdp")  # float64 frozen beside float32: accepted
    units = shard_units(trace, _cluster(), plan)
    assert units.param_bytes.tolist() == [16 + 32]  # 3 rows padded to 4 on 2 ranks
    assert units.grad_bytes.tolist() == [16]


def test_allreduce_plans_ignore_frozen_parameters() -> None:
    plain = _trace(_layer("a", 2 * MB), _layer("b", 2 * MB))
    frozen = _trace(_layer("a", 2 * MB, frozen=8 * MB), _layer("b", 2 * MB))
    for policy in ("ddp", "mgwfbp"):
        assert simulate(frozen, _cluster(), make_plan(frozen, _cluster(), policy)) \
            .iteration_time_s == simulate(plain, _cluster(), make_plan(
                plain, _cluster(), policy)).iteration_time_s


def test_an_empty_frozen_list_keeps_the_fingerprint() -> None:
    data = {"name": "t", "batch_size": 1, "layers": [_layer("a", 8)]}
    bare = json.loads(json.dumps(data))
    del bare["layers"][0]["frozen"]
    assert Trace.model_validate(data).fingerprint() == Trace.model_validate(bare).fingerprint()
    assert "frozen" not in Trace.model_validate(data).model_dump_json()
    with_frozen = _trace(_layer("a", 8, frozen=8))
    assert with_frozen.fingerprint() != Trace.model_validate(bare).fingerprint()


@pytest.mark.parametrize(("frozen", "why", "field"), [
    ({"name": "a.f", "bytes": -4}, "greater than 0", "layers[0].frozen[0].bytes"),
    ({"name": "a.f", "bytes": 2 ** 62}, "less than or equal", "layers[0].frozen[0].bytes"),
    ({"name": "a.f", "bytes": 4, "dtype": "float7"}, "Input should be",
     "layers[0].frozen[0].dtype"),
    ({"name": "a.f", "bytes": 6}, "multiple of the float32", "layers[0].frozen[0].bytes"),
    ({"name": "a.w", "bytes": 4}, "gradient tensor or frozen", "layers[0].frozen[0].name"),
    ({"name": "a#1", "bytes": 4}, "pieces", "layers[0].frozen[0].name"),
])
def test_bad_frozen_parameters_are_one_line_errors(tmp_path: Path, frozen: dict, why: str,
                                                   field: str) -> None:
    layer = {**_layer("a", 8), "frozen": [frozen]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"name": "t", "batch_size": 1, "layers": [layer]}))
    with pytest.raises(SchedoptError, match=why) as err:
        load_trace(path)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_memory_cap_with_frozen_parameters_is_refused() -> None:
    trace = _trace(_layer("a", 2 * MB, frozen=MB), _layer("b", 2 * MB))
    with pytest.raises(SchedoptError, match="frozen"):
        solve(trace, _cluster(), SolveOptions(sharding="full", memory_cap_bytes=10 ** 9,
                                              baselines=False))
    res = solve(trace, _cluster(), SolveOptions(sharding="full", time_limit_s=2,
                                                baselines=False))
    assert res.objective_s == pytest.approx(res.iteration_time_s, rel=1e-9)


def test_profile_records_frozen_parameters_of_layers() -> None:
    torch = pytest.importorskip("torch")
    from schedopt.measure.profile import profile_model
    from tests.fsdp_worker import Rooted

    trace = profile_model(Rooted(), torch.randint(0, 10, (2, 4)), name="r", batch_size=2,
                          repeats=1, warmup=0, loss_fn=lambda out: out.sum())
    layer = next(la for la in trace.layers if la.name == "blocks.0.fc1")
    assert [(t.name, t.bytes) for t in layer.tensors] == [("blocks.0.fc1.weight", 16 * 8 * 4)]
    assert [(t.name, t.bytes) for t in layer.frozen] == [("blocks.0.fc1.bias", 16 * 4)]
    # modules whose parameters are all frozen (block 1, the norm) are no layers
    assert {la.name for la in trace.layers} & {"norm", "blocks.1.fc1"} == set()
