"""Knobs in the frameworks' own names and units, sizes with units, DeepSpeed configs merged,
and the real-run path: validate on another or a calibrated cluster, re-timed traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.cli.output import parse_size
from schedopt.errors import SchedoptError
from schedopt.files import load_cluster, load_trace
from schedopt.policies import make_plan

runner = CliRunner()
TRACE, CLUSTER = "resnet50-v100-b64", "dgx-a100-4n"


@pytest.fixture(scope="module")
def instance():
    return load_trace(TRACE), load_cluster(CLUSTER)


# ----------------------------------------------------------------------------- DDP
@pytest.mark.parametrize("knob", ["static_graph", "gradient_as_bucket_view"])
def test_ddp_knobs_that_keep_the_buckets(instance, knob: str) -> None:
    tr, cl = instance
    plain = make_plan(tr, cl, "ddp")
    plan = make_plan(tr, cl, f"ddp:{knob}=true")
    assert plan.buckets == plain.buckets
    assert plan.knobs[knob] is True and knob not in plain.knobs


def test_ddp_find_unused_parameters_is_accepted(instance) -> None:
    tr, cl = instance
    plan = make_plan(tr, cl, "ddp:find_unused_parameters=true")
    assert plan.knobs["find_unused_parameters"] is True
    assert sorted(n for b in plan.buckets for n in b) == sorted(t.name for t in tr.tensor_list)


def test_ddp_knob_values_are_checked(instance) -> None:
    tr, cl = instance
    with pytest.raises(SchedoptError, match=r"ddp\.static_graph: must be true or false"):
        make_plan(tr, cl, "ddp:static_graph=2")


def test_ddp_static_graph_is_emitted() -> None:
    result = runner.invoke(app, ["emit", TRACE, CLUSTER, "-t", "ddp", "-p",
                                 "ddp:static_graph=true", "--json"])
    assert result.exit_code == 0, result.output
    config = json.loads(json.loads(result.output)["files"]["ddp.json"])
    assert config["static_graph"] is True


# ----------------------------------------------------------------------------- Horovod
def test_horovod_threshold_in_bytes_by_its_environment_name(instance) -> None:
    tr, cl = instance
    mib = make_plan(tr, cl, "horovod:fusion_threshold_mb=16")
    env = make_plan(tr, cl, f"horovod:HOROVOD_FUSION_THRESHOLD={16 * 2**20}")
    named = make_plan(tr, cl, f"horovod:fusion_threshold_bytes={16 * 2**20}")
    assert env.buckets == mib.buckets == named.buckets
    assert env.knobs["threshold_bytes"] == mib.knobs["threshold_bytes"]
    assert env.knobs["fusion_threshold_bytes"] == 16 * 2**20
    assert "fusion_threshold_mb" not in env.knobs
    default = make_plan(tr, cl, "horovod")
    assert make_plan(tr, cl, "horovod:HOROVOD_FUSION_THRESHOLD=0").num_buckets > \
        default.num_buckets


def test_horovod_cycle_time_by_its_environment_name(instance) -> None:
    tr, cl = instance
    env = make_plan(tr, cl, "horovod:HOROVOD_CYCLE_TIME=5")
    assert env.knobs["cycle_time_ms"] == 5
    assert env.buckets == make_plan(tr, cl, "horovod:cycle_time_ms=5").buckets


@pytest.mark.parametrize(("spec", "message"), [
    ("horovod:fusion_threshold_bytes=-1", "horovod.fusion_threshold_bytes: must be >= 0"),
    ("horovod:fusion_threshold_bytes=1,fusion_threshold_mb=2",
     "horovod.fusion_threshold_bytes: give the threshold once"),
    ("horovod:HOROVOD_CYCLE_TIME=1,cycle_time_ms=2", "horovod.knob: knob given twice"),
])
def test_horovod_bad_thresholds(instance, spec: str, message: str) -> None:
    tr, cl = instance
    with pytest.raises(SchedoptError, match=message):
        make_plan(tr, cl, spec)


# ----------------------------------------------------------------------------- sizes
@pytest.mark.parametrize(("text", "expected"), [
    ("40GiB", 40 * 2**30), ("40 GB", 40 * 10**9), ("512MiB", 512 * 2**20), ("1.5KiB", 1536),
    ("340000000", 340_000_000), ("4096B", 4096), ("2kb", 2000), ("1e3", 1000), ("-5", -5),
])
def test_sizes_with_units(text: str, expected: int) -> None:
    assert parse_size(text, "--memory-cap") == expected


@pytest.mark.parametrize(("text", "message"), [
    ("12XB", "must be a size"), ("GiB", "must be a size"), ("0.5B", "a whole number of bytes"),
    ("1e30GiB", "a whole number of bytes"), ("", "must be a size"),
])
def test_bad_sizes(text: str, message: str) -> None:
    expected = message.removeprefix("must be ")
    with pytest.raises(SchedoptError, match=f"--memory-cap: must be {expected}"):
        parse_size(text, "--memory-cap")


def test_memory_cap_with_a_unit() -> None:
    result = runner.invoke(app, ["optimize", "alexnet-k80-b128", CLUSTER, "--sharding", "full",
                                 "--memory-cap", "1GiB", "--time-limit", "1"])
    assert result.exit_code == 0, result.output
    assert f"cap {2**30:,} B" in result.output
    result = runner.invoke(app, ["optimize", "alexnet-k80-b128", CLUSTER, "--sharding", "full",
                                 "--memory-cap", "1 parsec"])
    assert result.exit_code == 2
    assert result.output.startswith("error: --memory-cap: must be a size")


# ----------------------------------------------------------------------------- ds_config
def _emit_merge(tmp_path: Path, config: object, *extra: str):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    return runner.invoke(app, ["emit", TRACE, CLUSTER, "-t", "deepspeed", "-p", "ddp",
                               "--merge", str(path), *extra])


def test_merge_keeps_the_users_keys(tmp_path: Path) -> None:
    user = {"train_batch_size": 64, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 2, "contiguous_gradients": True,
                                  "reduce_bucket_size": 1}}
    result = _emit_merge(tmp_path, user, "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    merged = json.loads((tmp_path / "out" / "ds_config.json").read_text())
    fragment = json.loads((tmp_path / "out" / "deepspeed.json").read_text())
    assert merged["train_batch_size"] == 64 and merged["bf16"] == {"enabled": True}
    assert merged["zero_optimization"]["contiguous_gradients"] is True
    assert merged["zero_optimization"]["reduce_bucket_size"] == \
        fragment["zero_optimization"]["reduce_bucket_size"] != 1
    assert "note: --merge: zero_optimization.reduce_bucket_size: 1 replaced by" in result.output
    assert json.loads((tmp_path / "ds_config.json").read_text()) == user  # the input is kept


@pytest.mark.parametrize(("config", "message"), [
    ({"zero_optimization": {"stage": 3}}, "zero_optimization.stage is 3 in the file and 2"),
    ([1, 2], "must hold a JSON object"),
    ({"zero_optimization": 5}, "zero_optimization must be an object"),
])
def test_merge_refuses_conflicts(tmp_path: Path, config: object, message: str) -> None:
    result = _emit_merge(tmp_path, config, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --merge: {message}")
    assert not (tmp_path / "out").exists()


def test_merge_needs_deepspeed(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text("{}")
    result = runner.invoke(app, ["emit", TRACE, CLUSTER, "-t", "ddp", "-p", "ddp", "--merge",
                                 str(path)])
    assert result.exit_code == 2 and "--target deepspeed" in result.output


# ----------------------------------------------------------------------------- validate
def test_validate_on_another_cluster(tmp_path: Path) -> None:
    base = runner.invoke(app, ["validate", "toy-measurements.csv", "--json"])
    moved = runner.invoke(app, ["validate", "toy-measurements.csv", "--cluster",
                                "toy-prior.json" if Path("toy-prior.json").exists() else
                                str(_sample("toy-prior.json")), "--json"])
    assert moved.exit_code == 0, moved.output
    a, b = json.loads(base.output), json.loads(moved.output)
    assert [r["predicted_s"] for r in a["rows"]] == pytest.approx(
        [r["predicted_s"] for r in b["rows"]])
    fast_doc = json.loads(_sample("toy-prior.json").read_text())
    fast_doc["name"] = "fast"
    fast_doc["base"]["inter_link"]["bandwidth_Bps"] *= 10
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(fast_doc))
    quick = json.loads(runner.invoke(app, ["validate", "toy-measurements.csv", "--cluster",
                                           str(path), "--json"]).output)
    assert {r["cluster"] for r in quick["rows"]} == {"fast"}
    assert sum(r["predicted_s"] for r in quick["rows"]) < sum(r["predicted_s"]
                                                              for r in a["rows"])


def _sample(name: str) -> Path:
    from schedopt.files import instances_dir

    return instances_dir() / "samples" / name


def test_validate_on_a_calibrated_folder(tmp_path: Path) -> None:
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", "toy-measurements.csv", "--out", str(out),
                                 "--fit", "inter_bandwidth", "--starts", "1"])
    assert result.exit_code == 0, result.output
    before = json.loads(runner.invoke(app, ["validate", "toy-measurements.csv",
                                            "--json"]).output)
    after = json.loads(runner.invoke(app, ["validate", "toy-measurements.csv", "--cluster",
                                           str(out), "--json"]).output)
    assert after["mean_abs_error"] < before["mean_abs_error"] / 2


def test_validate_cluster_errors(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "toy-measurements.csv", "--cluster", "nope"])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --cluster: unknown cluster: neither a file, a"
                                     " folder of `calibrate --out` nor a shipped name (got"
                                     " 'nope')")
    result = runner.invoke(app, ["validate", "toy-measurements.csv", "--cluster",
                                 str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.startswith("error: --cluster: no calibrated cluster 'toy' in the"
                                    " folder")


# ----------------------------------------------------------------------------- re-timed traces
def test_a_plan_binds_to_its_trace_re_timed(instance) -> None:
    from schedopt.model.plan import Plan
    from schedopt.model.trace import Trace

    tr, cl = instance
    plan = make_plan(tr, cl, "ddp")
    bound = plan.model_copy(update={"trace_hash": tr.fingerprint()})
    slower = tr.scaled(compute=1.3, update=True)
    with pytest.raises(SchedoptError, match="plan was made for another trace"):
        bound.check_against(slower)
    retimed = Trace.model_validate({**slower.model_dump(), "retimed_from": tr.fingerprint()})
    bound.check_against(retimed)  # binds: same tensors, times re-scaled
    assert Plan.model_validate(bound.model_dump()).check_against(retimed) is not None
    assert "retimed_from" not in tr.model_dump()  # unchanged documents, unchanged hashes
    assert tr.fingerprint() == load_trace(TRACE).fingerprint()


def test_calibrate_writes_re_timed_traces_plans_bind_to(tmp_path: Path) -> None:
    from schedopt.measure.calibrate import _retimed_traces
    from schedopt.model.trace import Trace

    class P:
        name, identified, value = "compute_scale[t.json]", True, 1.25

    tr = load_trace(TRACE)

    class R:
        trace_obj = tr

        class row:
            trace = "t.json"

    class G:
        rows = (R,)

    class Cal:
        params, rows = (P,), (R,)

    docs = _retimed_traces(G, Cal, "m.csv")  # type: ignore[arg-type]
    retimed = Trace.model_validate(docs["t.json"])
    assert retimed.retimed_from == tr.fingerprint()
    assert retimed.compute_s == pytest.approx(1.25 * tr.compute_s)
    plan = make_plan(tr, load_cluster(CLUSTER), "ddp")
    plan.model_copy(update={"trace_hash": tr.fingerprint()}).check_against(retimed)


# ------------------------------------------------------------------ accumulate=K, every policy
@pytest.mark.parametrize("spec", ["ddp", "horovod", "mgwfbp", "megatron",
                                  "deepspeed:zero_stage=1,overlap_comm=true"])
def test_accumulate_knob_adds_the_micro_batches_compute(instance, spec: str) -> None:
    """With wait-for-all and no I/O, K micro-batches cost K-1 more forward and backward passes
    than one: the all-reduces overlap only the last backward (DDP ``no_sync``)."""
    from schedopt.simulate.simulator import simulate

    tr, cl = instance
    tr = tr.model_copy(update={"io_s": 0.0, "h2d_s": 0.0})
    one = make_plan(tr, cl, spec)
    sep = "," if ":" in spec else ":"
    four = make_plan(tr, cl, f"{spec}{sep}accumulate=4")
    assert four.accumulate == 4 and four.knobs["accumulate"] == 4
    assert four.buckets == one.buckets
    compute = sum(la.forward_s + la.backward_s for la in tr.layers)
    assert simulate(tr, cl, four).iteration_time_s == pytest.approx(
        simulate(tr, cl, one).iteration_time_s + 3 * compute, rel=1e-9)


@pytest.mark.parametrize(("spec", "message"), [
    ("ddp:accumulate=0", "from 1 to 4096"), ("ddp:accumulate=4097", "from 1 to 4096"),
    ("ddp:accumulate=true", "from 1 to 4096"), ("ddp:accumulate=2.5", "from 1 to 4096"),
    ("deepspeed:accumulate=2", "ZeRO stage 2 reduces the gradients at every micro-batch"),
])
def test_accumulate_knob_refusals(instance, spec: str, message: str) -> None:
    tr, cl = instance
    with pytest.raises(SchedoptError, match=message) as err:
        make_plan(tr, cl, spec)
    assert "accumulate" in err.value.field


@pytest.mark.parametrize(("target", "key"), [
    ("horovod", "backward_passes_per_step"), ("deepspeed", "gradient_accumulation_steps")])
def test_accumulate_is_emitted_in_the_frameworks_own_key(instance, target: str,
                                                         key: str) -> None:
    from schedopt.emit import emit

    tr, cl = instance
    out = emit(tr, cl, make_plan(tr, cl, "ddp:accumulate=3"), target)
    assert out.config[key] == 3 and "accumulate=3" in (out.spec or "")
    if target == "deepspeed":  # stage 2 would reduce at every micro-batch
        assert out.config["zero_optimization"]["stage"] == 1


def test_accumulating_baseline_is_not_expressible_without_accumulation(instance) -> None:
    from schedopt.optimize.baselines import expressible
    from schedopt.optimize.instance import build_instance
    from schedopt.optimize.options import SolveOptions

    tr, cl = instance
    opts = SolveOptions()
    inst = build_instance(tr, cl, opts)
    segs, reason = expressible(make_plan(tr, cl, "ddp:accumulate=2"), inst, opts, cl)
    assert segs is None and reason == "accumulate 2"
    segs, _ = expressible(make_plan(tr, cl, "ddp"), inst, opts, cl)
    assert segs is not None
