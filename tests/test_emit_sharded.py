"""Sharded plans emitted for FSDP2 (``-t fsdp``) and DeepSpeed ZeRO-3 (``-t deepspeed``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.emit import emit
from schedopt.emit.fsdp import fsdp_config, unit_modules
from schedopt.emit.zero3 import zero3_config
from schedopt.errors import SchedoptError
from schedopt.files import load_trace
from schedopt.model.plan import Plan, Sharding
from schedopt.model.trace import Trace

runner = CliRunner()

#: layer -> its tensors' element counts (float32: 4 bytes each)
LAYERS = {
    "emb": {"emb.weight": 100},
    "blocks.0.fc1": {"blocks.0.fc1.weight": 64, "blocks.0.fc1.bias": 8},
    "blocks.0.fc2": {"blocks.0.fc2.weight": 64, "blocks.0.fc2.bias": 8},
    "blocks.1.fc1": {"blocks.1.fc1.weight": 64, "blocks.1.fc1.bias": 8},
    "blocks.1.fc2": {"blocks.1.fc2.weight": 64, "blocks.1.fc2.bias": 8},
    "head": {"head.weight": 30},
}


def small_trace() -> Trace:
    layers = [{"name": name, "forward_s": 1e-3, "backward_s": 2e-3,
               "tensors": [{"name": t, "bytes": 4 * n} for t, n in tensors.items()]}
              for name, tensors in LAYERS.items()]
    return Trace.model_validate({"name": "small", "batch_size": 4, "layers": layers})


def sharded_plan(trace: Trace, units: list[list[str]], **kw: object) -> Plan:
    """A sharded plan over ``units``: buckets are the units' tensors, backward order."""
    plan_kw = {k: kw.pop(k) for k in ("accumulate", "comm_dtype", "next_forward") if k in kw}
    sharding = Sharding.model_validate({"mode": "full", "units": units, **kw})
    tensors = sharding.check_against(trace)
    owner = trace.tensor_layer_by_name
    index = {la.name: i for i, la in enumerate(trace.layers)}
    buckets = [[t for t in dict.fromkeys(names)
                if owner[t] in {index[n] for n in units[k]}]
               for k, names in reversed(list(enumerate(tensors)))]
    return Plan.model_validate({"policy": "hand", "buckets": buckets,
                                "sharding": sharding, **plan_kw})


BLOCKS = [["emb"], ["blocks.0.fc1", "blocks.0.fc2"], ["blocks.1.fc1", "blocks.1.fc2"], ["head"]]


@pytest.mark.parametrize(("units", "groups"), [
    # a unit that is one block becomes the block module
    (BLOCKS, [["emb"], ["blocks.0"], ["blocks.1"], ["head"]]),
    # units cutting a block: the whole modules inside, leaves at the cut
    ([["emb", "blocks.0.fc1"], ["blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2", "head"]],
     [["emb", "blocks.0.fc1"], ["blocks.0.fc2", "blocks.1", "head"]]),
    # both blocks in one unit: still two modules (their parent also owns emb and head)
    ([["emb"], ["blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2"], ["head"]],
     [["emb"], ["blocks"], ["head"]]),
    # one unit: the root module
    ([list(LAYERS)], [[""]]),
])
def test_units_collapse_to_the_fewest_modules(units: list[list[str]],
                                              groups: list[list[str]]) -> None:
    assert unit_modules(units, list(LAYERS)) == groups
    tr = small_trace()
    config, notes = fsdp_config(tr, sharded_plan(tr, units))
    assert config["groups"] == groups
    assert notes == []


def test_fsdp_settings_follow_the_plan() -> None:
    tr = small_trace()
    plan = sharded_plan(tr, BLOCKS, mode="grad-op", forward_prefetch=3, backward_prefetch=2,
                        accumulate=4, comm_dtype="bfloat16")
    out = emit(tr, None, plan, "fsdp")
    assert out.exact and out.notes == []
    assert out.config == {"groups": [["emb"], ["blocks.0"], ["blocks.1"], ["head"]],
                          "reshard_after_forward": False,
                          "root_reshard_after_forward": False, "forward_prefetch": 3,
                          "backward_prefetch": 2, "reduce_dtype": "bfloat16", "accumulate": 4}
    assert json.loads(out.files["fsdp.json"]) == out.config
    snippet = out.files["fsdp_snippet.py"]
    namespace: dict = {}
    exec(compile(snippet, "fsdp_snippet.py", "exec"), namespace)  # defines only
    assert namespace["FSDP"] == out.config
    assert callable(namespace["apply_fsdp"]) and callable(namespace["train_step"])


@pytest.mark.parametrize(("kw", "phrase"), [
    ({"forward_prefetch": 0}, "forward_prefetch is 0"),
    ({"backward_prefetch": 0}, "backward_prefetch is 0"),
    ({"streams": 1}, "streams is 1"),
])
def test_what_fsdp2_cannot_express_is_noted(kw: dict, phrase: str) -> None:
    tr = small_trace()
    out = emit(tr, None, sharded_plan(tr, BLOCKS, **kw), "fsdp")
    assert not out.exact
    assert any(phrase in n for n in out.notes)
    assert out.config["forward_prefetch"] == 1 and out.config["backward_prefetch"] == 1


def test_gpt2_blocks_and_the_tied_head() -> None:
    tr = load_trace("gpt2-124m-a100-bf16")
    names = [la.name for la in tr.layers]
    blocks = sorted({n.split(".")[2] for n in names if n.startswith("transformer.h.")}, key=int)
    units = [["transformer.wte", "transformer.wpe"]]
    units += [[n for n in names if n.startswith(f"transformer.h.{b}.")] for b in blocks]
    units.append(["transformer.ln_f", "lm_head"])
    out = emit(tr, None, sharded_plan(tr, units), "fsdp")
    groups = out.config["groups"]
    assert groups[1:-1] == [[f"transformer.h.{b}"] for b in blocks]
    # lm_head's only tensor is transformer.wte.weight: FSDP2 needs it in wte's group
    assert groups[0] == ["transformer.wte", "transformer.wpe", "lm_head"]
    assert groups[-1] == ["transformer.ln_f"]
    assert not out.exact and "tied" in out.notes[0]


def test_a_plan_that_is_not_sharded_is_refused() -> None:
    tr = small_trace()
    plan = Plan(policy="x", buckets=[[t.name for t in tr.tensor_list]])
    with pytest.raises(SchedoptError, match="needs a sharded plan") as err:
        emit(tr, None, plan, "fsdp")
    assert "plan.sharding" in str(err.value)
    with pytest.raises(SchedoptError, match="sharded plan needs one of"):
        emit(tr, None, sharded_plan(tr, BLOCKS), "ddp")


def test_cli_fsdp_one_line_errors_and_files(tmp_path: Path) -> None:
    out = runner.invoke(app, ["emit", "gpt2-124m-a100-bf16", "dgx-a100-4n", "-t", "fsdp",
                              "--policy", "ddp"])
    assert out.exit_code == 2, out.output
    assert len(out.output.strip().splitlines()) == 1 and "plan.sharding" in out.output
    tr = load_trace("gpt2-124m-a100-bf16")
    names = [la.name for la in tr.layers]
    plan = sharded_plan(tr, [names[: len(names) // 2], names[len(names) // 2:]])
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.model_dump_json())
    folder = tmp_path / "out"
    out = runner.invoke(app, ["emit", "gpt2-124m-a100-bf16", "dgx-a100-4n", "-t", "fsdp",
                              "--plan", str(plan_file), "--out", str(folder)])
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in folder.iterdir()) == ["fsdp.json", "fsdp_snippet.py"]
    assert len(json.loads((folder / "fsdp.json").read_text())["groups"]) == 2


# ------------------------------------------------------------------------------ ZeRO-3
def test_zero3_sizes_by_hand() -> None:
    tr = small_trace()
    # unit elements: emb 100, blocks.0 144, blocks.1 144, head 30 (total 418)
    plan = sharded_plan(tr, BLOCKS, forward_prefetch=2, backward_prefetch=1, accumulate=8,
                        comm_dtype="bfloat16")
    zero = zero3_config(tr, plan)
    assert zero["gradient_accumulation_steps"] == 8
    assert zero["communication_data_type"] == "bf16"
    z = zero["zero_optimization"]
    assert z["stage"] == 3
    assert z["stage3_prefetch_bucket_size"] == 144 + 144  # after emb: blocks.0 and blocks.1
    assert z["stage3_max_live_parameters"] == 100 + 144 + 144  # a unit and 2 prefetched
    assert z["stage3_max_reuse_distance"] == 0
    assert z["reduce_bucket_size"] == 144
    assert z["stage3_param_persistence_threshold"] == 0
    grad_op = zero3_config(tr, sharded_plan(tr, BLOCKS, mode="grad-op", forward_prefetch=0))
    z = grad_op["zero_optimization"]
    assert z["stage3_prefetch_bucket_size"] == 0
    assert z["stage3_max_live_parameters"] == z["stage3_max_reuse_distance"] == 418
    assert "communication_data_type" not in grad_op


def test_zero3_is_never_exact_and_refuses_odd_dtypes() -> None:
    tr = small_trace()
    out = emit(tr, None, sharded_plan(tr, BLOCKS), "deepspeed")
    assert not out.exact
    assert any("not per unit" in n for n in out.notes)
    assert any("reduce_bucket_size" in n for n in out.notes)  # unit sizes differ
    namespace: dict = {}
    exec(compile(out.files["deepspeed_snippet.py"], "ds.py", "exec"), namespace)
    merged = namespace["merge"]({"train_batch_size": 8, "zero_optimization": {"stage": 2}})
    assert merged["zero_optimization"]["stage"] == 3 and merged["train_batch_size"] == 8
    with pytest.raises(SchedoptError, match=r"plan\.comm_dtype"):
        emit(tr, None, sharded_plan(tr, BLOCKS, comm_dtype="float8"), "deepspeed")


def test_with_a_cluster_both_times_are_simulated() -> None:
    from schedopt.files import load_cluster
    from schedopt.simulate.simulator import simulate

    tr = load_trace("gpt2-124m-a100-bf16")
    cl = load_cluster("dgx-a100-4n")
    names = [la.name for la in tr.layers]
    units = [names[i: i + 8] for i in range(0, len(names), 8)]
    exact = emit(tr, cl, sharded_plan(tr, units), "fsdp")
    assert exact.plan_time_s == exact.emitted_time_s == simulate(
        tr, cl, sharded_plan(tr, units)).iteration_time_s
    lazy = sharded_plan(tr, units, forward_prefetch=0, backward_prefetch=0)
    out = emit(tr, cl, lazy, "fsdp")
    assert out.plan_time_s == simulate(tr, cl, lazy).iteration_time_s
    assert out.emitted_time_s == exact.plan_time_s  # FSDP2 runs depth 1


def test_zero3_fragment_is_what_deepspeed_reads() -> None:
    """DeepSpeed's own config classes parse the fragment to the same values (with DeepSpeed)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import get_communication_data_type
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    tr = small_trace()
    config = emit(tr, None, sharded_plan(tr, BLOCKS, comm_dtype="bfloat16"), "deepspeed").config
    zero = DeepSpeedZeroConfig(**config["zero_optimization"])
    z = config["zero_optimization"]
    assert (zero.stage, zero.prefetch_bucket_size, zero.max_live_parameters,
            zero.max_reuse_distance, zero.param_persistence_threshold,
            zero.reduce_bucket_size) == (3, z["stage3_prefetch_bucket_size"],
                                         z["stage3_max_live_parameters"],
                                         z["stage3_max_reuse_distance"], 0,
                                         z["reduce_bucket_size"])
    assert str(get_communication_data_type(config)) == "torch.bfloat16"


def test_an_fsdp_baseline_plan_names_its_spec() -> None:
    from schedopt.files import load_cluster
    from schedopt.policies import make_plan

    tr = load_trace("llama-7b-h100-bf16")
    cl = load_cluster("dgx-h100-4n")
    out = emit(tr, cl, make_plan(tr, cl, "fsdp:backward_prefetch=2"), "fsdp")
    assert out.exact and out.spec is not None and out.spec.startswith("fsdp:")
    assert make_plan(tr, cl, out.spec).sharding == make_plan(tr, cl,
                                                             "fsdp:backward_prefetch=2").sharding
    assert out.config["backward_prefetch"] == 2
    assert f"Policy spec: {out.spec}" in out.files["fsdp_snippet.py"]
    assert emit(tr, None, sharded_plan(tr, [[la.name for la in tr.layers]]), "fsdp").spec is None
