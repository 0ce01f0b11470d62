"""``schedopt bench-gpu`` and GPU profile files: a device measured into a profile that
``estimate --gpu FILE`` reads, checked on this machine's CPU (the method is the same on a GPU)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.measure.gpus import (
    GPUS,
    check_profile,
    get_gpu,
    gpu_profile_data,
    load_gpu_profile,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedopt.measure.estimate import estimate, operator_breakdown  # noqa: E402
from schedopt.measure.gpu_bench import (  # noqa: E402
    QUICK_SHAPES,
    GpuBench,
    base_for,
    bench_gpu,
    flash_table,
    measured_profile,
)
from schedopt.measure.operators import GemmModel, fit_gemm, operator_model  # noqa: E402

runner = CliRunner()
GPT2 = {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 1024,
        "n_positions": 256, "architectures": ["GPT2LMHeadModel"]}


@pytest.fixture
def one_thread() -> object:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield None
    torch.set_num_threads(threads)


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


# ---------------------------------------------------------------------------- the fit
def test_fit_recovers_a_tensor_core_model_with_its_tiles_and_alignment() -> None:
    # products timed by a known model (64-tile at 0.8, alignment 8, 132 units): the fit holds
    # the tiles and alignment and recovers the rate and k_half
    true = GemmModel(peak=600e12, best=1.0, units=132, k_half=32.0, bandwidth_Bps=3e12,
                     kernel_s=4e-6, small_tile=0.8, align=8)
    shapes = [(4096, 4096, 4096), (2048, 1024, 1024), (8192, 768, 3072), (128, 4096, 4096),
              (200704, 64, 576), (1000, 1000, 1000), (12544, 256, 2304), (512, 512, 64)]
    samples = [(m, n, k, true.seconds(1, m, n, k, 2)) for m, n, k in shapes]
    fit = fit_gemm(samples, units=132, bandwidth_Bps=3e12, itemsize=2, small_tile=0.8, align=8)
    assert fit.k_half == 32.0
    assert fit.peak == pytest.approx(600e12, rel=1e-6)
    # the default (SIMT) fit of the same samples cannot express the 64-tile or the alignment
    plain = fit_gemm(samples, units=132, bandwidth_Bps=3e12, itemsize=2)
    err = [abs(plain.seconds(1, m, n, k, 2) / t - 1) for m, n, k, t in samples]
    assert max(err) > 0.05


# ---------------------------------------------------------------------------- profile files
def test_a_shipped_profile_written_and_read_back_estimates_the_same_trace(tmp_path: Path
                                                                          ) -> None:
    path = _write(tmp_path / "My-H100.json", gpu_profile_data(GPUS["h100"]))
    assert load_gpu_profile(path) == GPUS["h100"]
    assert get_gpu(str(path)) == GPUS["h100"]
    cfg = _write(tmp_path / "gpt2.json", GPT2)
    shipped = estimate(str(cfg), "h100", "bf16", 4, 128)
    mine = estimate(str(cfg), str(path), "bf16", 4, 128)
    assert mine.name == shipped.name.replace("-h100-", "-My-H100-")
    assert [la.model_dump() for la in mine.layers] == [la.model_dump() for la in shipped.layers]
    assert mine.update_s == shipped.update_s


def test_measured_profile_replaces_the_measured_precision_only() -> None:
    gemm = GemmModel(peak=300e12, best=1.0, units=100, k_half=16.0, bandwidth_Bps=2e12,
                     kernel_s=6e-6, small_tile=0.8, align=8)
    flash = {(c, d): (100.0, 110, 120, 130, 140, 150) for c in (False, True) for d in (64, 128)}
    bench = GpuBench(device="Some GPU", precision="bf16", units=100,
                     samples=[(4096, 4096, 4096, 0.5e-3), (1024, 1024, 1024, 1e-5),
                              (256, 256, 256, 5e-6)],
                     gemm=gemm, bandwidth_Bps=2.5e12, kernel_s=6e-6, norm_eff=0.4,
                     flash_fb=flash, software="torch x")
    base = GPUS["a100"]
    prof = check_profile(measured_profile(bench, base, name="lab GPU"))
    assert prof.name == "lab GPU"
    assert prof.peak_flops["bf16"] == 300e12 and prof.gemm_best["bf16"] == 1.0
    assert prof.peak_flops["tf32"] == base.peak_flops["tf32"]  # not measured: the base's
    assert prof.gemm_best["tf32"] == base.gemm_best["tf32"]
    assert (prof.sms, prof.hbm_Bps, prof.memory_eff, prof.kernel_s) == (100, 2.5e12, 1.0, 6e-6)
    assert prof.norm_eff == {"bf16": 0.4} and operator_model(prof, "bf16").norm_eff == 0.4
    assert operator_model(prof, "tf32").norm_eff == 1.0  # not measured at TF32
    assert prof.flash_fb == flash and prof.attention == "flash"
    # the roofline figure: the median rate of the products of at least 1 GFLOP
    assert prof.flops["bf16"] == pytest.approx(
        (2 * 4096**3 / 0.5e-3 + 2 * 1024**3 / 1e-5) / 2)
    opm = operator_model(prof, "bf16")
    assert (opm.gemm.peak, opm.gemm.k_half, opm.gemm.units) == (300e12, 16.0, 100)
    assert opm.gemm.bandwidth_Bps == 2.5e12
    assert "Some GPU" in prof.gemm_basis and "a100" not in prof.gemm_basis.lower().split(";")[0]
    # without a measured flash table, the base's is kept
    assert measured_profile(replace(bench, flash_fb={}), base).flash_fb == base.flash_fb


def test_a_measured_batch_norm_efficiency_prices_batch_norms_only(tmp_path: Path) -> None:
    slow = _write(tmp_path / "slow-bn.json",
                  {**gpu_profile_data(GPUS["h100"]), "norm_eff": {"bf16": 0.5}})
    base = operator_breakdown("resnet50", "h100", "bf16", 32)
    half = operator_breakdown("resnet50", str(slow), "bf16", 32)
    assert base.keys() == half.keys()
    norms = [k for k in base if k[0] == "native_batch_norm"]
    assert len(norms) >= 4
    for key, tot in base.items():
        other = half[key]
        if key in norms:  # twice the bytes' time; a call at the kernel floor stays there
            assert other.forward_s >= tot.forward_s and other.backward_s >= tot.backward_s
        else:
            assert (other.forward_s, other.backward_s) == (tot.forward_s, tot.backward_s), key
    src = estimate("resnet50", str(slow), "bf16", 8).source
    assert "at 0.5 of that bandwidth (the profile's norm_eff)" in src
    assert "norm_eff" not in estimate("resnet50", "h100", "bf16", 8).source
    big = max(norms, key=lambda k: base[k].forward_s)  # far above the floor: exactly twice
    assert half[big].forward_s == pytest.approx(2 * base[big].forward_s, rel=1e-9)
    assert half[big].backward_s == pytest.approx(2 * base[big].backward_s, rel=1e-9)


def test_base_for_names_the_shipped_profile_of_the_same_processor() -> None:
    assert base_for("NVIDIA H100 80GB HBM3") == "h100"
    assert base_for("NVIDIA H200") == "h200"
    assert base_for("NVIDIA A100-SXM4-40GB", 42.4e9) == "a100-40gb"
    assert base_for("NVIDIA A100-SXM4-80GB", 85e9) == "a100"
    assert base_for("Tesla V100-SXM2-16GB") == "v100"
    with pytest.raises(SchedoptError, match="--base"):
        base_for("cpu")


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d.update(sms=True), "sms"),
    (lambda d: d.update(kernel_s=-1e-6), "kernel_s"),
    (lambda d: d.update(kernel_s=5.0), "kernel_s"),
    (lambda d: d["peak_flops"].update(bf16=1e308), "peak_flops.bf16"),
    (lambda d: d["peak_flops"].update(bf16="1e15"), "peak_flops.bf16"),
    (lambda d: d["gemm_best"].update(bf16=1.5), "gemm_best.bf16"),
    (lambda d: d["gemm_best"].pop("tf32"), "gemm_best"),
    (lambda d: d["peak_flops"].update(fp64=1e12), "peak_flops.fp64"),
    (lambda d: d.update(hbm_Bps=0), "hbm_Bps"),
    (lambda d: d.update(attention="fast"), "attention"),
    (lambda d: d["flash_fb"].update({"causal-64": [1, 2, 3]}), "flash_fb.causal-64"),
    (lambda d: d["flash_fb"].update({"causal-32": [1, 2, 3, 4, 5, 6]}), "flash_fb.causal-32"),
    (lambda d: d.pop("sms"), "sms"),
    (lambda d: d.update(colour="green"), "colour"),
    (lambda d: d.update(name="x" * 201), "name"),
    (lambda d: d.update(gemm_k_half={"bf16": math.inf}), "gemm_k_half.bf16"),
    (lambda d: d.update(gemm_k_half=64), "gemm_k_half"),
    (lambda d: d.update(norm_eff={"bf16": 0}), "norm_eff.bf16"),
    (lambda d: d.update(norm_eff={"fp32": 3.0}), "norm_eff.fp32"),
    (lambda d: d.update(norm_eff={"bf16": 1e-300}), "norm_eff.bf16"),
    (lambda d: d["gemm_best"].update(bf16=1e-300), "gemm_best.bf16"),
    (lambda d: d["peak_flops"].update(bf16=1e-300), "peak_flops.bf16"),
    (lambda d: d.update(kernel_s=1e-300), "kernel_s"),
    (lambda d: d.update(name="a\nb"), "name"),
])
def test_bad_profile_files_are_one_line_errors_naming_the_field(
        tmp_path: Path, edit: object, field: str) -> None:
    data = gpu_profile_data(GPUS["h100"])
    edit(data)  # type: ignore[operator]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", "resnet50", "--gpu", str(path), "--dtype", "bf16",
                              "--batch", "2", "--out", str(out)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output
    assert lines[0].startswith("error: GPU profile") and field in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.parametrize("content", [b"\x00\x01binary\xff", b"{\"name\": NaN", b"[]", b"",
                                     b" " * (1 << 20) + b"{}"])
def test_unreadable_profile_files_are_one_line_errors(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(content)
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", "resnet50", "--gpu", str(path), "--dtype", "bf16",
                              "--batch", "2", "--out", str(out)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "GPU profile" in res.output and not out.exists()


def test_unknown_gpu_names_the_profile_files_too() -> None:
    with pytest.raises(SchedoptError, match="bench-gpu"):
        get_gpu("b200")
    with pytest.raises(SchedoptError, match="cannot read"):
        get_gpu("no/such/profile.json")


# ---------------------------------------------------------------------------- the bench
def test_bench_on_this_cpu_writes_a_profile_that_predicts_held_out_products(
        tmp_path: Path, one_thread: object) -> None:
    out = tmp_path / "cpu.json"
    res = runner.invoke(app, ["bench-gpu", "--device", "cpu", "--dtype", "fp32", "--base",
                              "v100", "--quick", "--repeats", "15", "--stream-mib", "16",
                              "--name", "this cpu", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    prof = load_gpu_profile(out)
    assert prof.name == "this cpu" and prof.sms == 1 == summary["units"]
    assert prof.peak_flops["fp32"] == summary["rate_flops"] > 0
    assert prof.gemm_k_half == {"fp32": summary["k_half"]}
    assert prof.hbm_Bps == summary["bandwidth_Bps"] > 0 and prof.memory_eff == 1.0
    assert 0 < prof.kernel_s == summary["kernel_s"] < 1e-3
    assert prof.norm_eff == {"fp32": summary["norm_eff"]} and 0 < summary["norm_eff"] <= 2
    assert summary["flash_measured"] is False and prof.flash_fb == GPUS["v100"].flash_fb
    assert [(p["m"], p["n"], p["k"]) for p in summary["products"]] == list(QUICK_SHAPES)
    assert summary["fit_error_mean"] < 0.4
    # the profile's operator model predicts products it was not fitted to
    gemm = operator_model(prof, "fp32").gemm
    held_out = bench_gpu("cpu", "fp32", quick=True, shapes=[(192, 320, 256), (512, 512, 128),
                                                (96, 96, 384)], repeats=15, stream_mib=16)
    for m, n, k, t in held_out.samples:
        ratio = gemm.seconds(1, m, n, k, 4) / t
        assert 0.4 < ratio < 2.5, (m, n, k, ratio)
    # and estimate reads it
    tr_out = tmp_path / "t.json"
    cfg = _write(tmp_path / "gpt2.json", GPT2)
    res = runner.invoke(app, ["estimate", str(cfg), "--gpu", str(out), "--dtype", "fp32",
                              "--batch", "1", "--seq", "64", "--out", str(tr_out)])
    assert res.exit_code == 0, res.output
    trace = json.loads(tr_out.read_text())
    assert trace["name"] == "gpt2-cpu-fp32-b1" and "this cpu, fp32 compute" in trace["source"]
    res = runner.invoke(app, ["estimate", str(cfg), "--gpu", str(out), "--dtype", "bf16",
                              "--batch", "1", "--seq", "64", "--out", str(tmp_path / "b.json")])
    assert res.exit_code == 2 and "has no bf16 figures" in res.output


@pytest.mark.parametrize(("args", "field"), [
    (["--device", "tpu"], "--device"),
    (["--device", "cuda:7"], "--device"),
    (["--dtype", "fp64", "--base", "v100"], "--dtype"),
    (["--repeats", "0", "--base", "v100"], "--repeats"),
    (["--repeats", "1001", "--base", "v100"], "--repeats"),
    (["--stream-mib", "0", "--base", "v100"], "--stream-mib"),
    (["--base", "b200"], "--gpu"),
    (["--base", "auto"], "--base"),
    (["--name", "", "--base", "v100"], "--name"),
    (["--name", "a\tb", "--base", "v100"], "--name"),
    ([], "GPU profile"),
])
def test_bad_bench_options_are_one_line_errors(tmp_path: Path, args: list[str],
                                               field: str) -> None:
    if field == "GPU profile":  # a --base file that is not a valid profile
        bad = {**gpu_profile_data(GPUS["v100"]), "sms": True}
        args = ["--base", str(_write(tmp_path / "bad.json", bad))]
    out = tmp_path / "p.json"
    argv = ["bench-gpu", "--quick", "--out", str(out), *args]
    if "--device" not in args:
        argv += ["--device", "cpu"]
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), lines
    assert not out.exists()


def test_an_output_that_cannot_be_written_is_refused_before_measuring(tmp_path: Path) -> None:
    # a thousand repeats of every product would take minutes: the path is checked first
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    res = runner.invoke(app, ["bench-gpu", "--device", "cpu", "--base", "v100", "--quick",
                              "--out", str(blocker / "p.json"), "--repeats", "1000"])
    assert res.exit_code == 2 and res.output.startswith("error: --out"), res.output
    assert len(res.output.strip().splitlines()) == 1


def test_attention_sweep_runs_the_named_backend_at_every_length() -> None:
    # the flash kernel needs a GPU; the math backend runs the same sweep on this CPU
    seqs = (16, 32, 64, 128, 256, 512)
    table = flash_table(torch, torch.device("cpu"), torch.float32, 2, seqs=seqs, tokens=512,
                        hidden=256, backend="MATH")
    assert set(table) == {(False, 64), (False, 128), (True, 64), (True, 128)}
    for rates in table.values():
        assert len(rates) == len(seqs) and all(math.isfinite(r) and r > 0 for r in rates)
    with pytest.raises(AttributeError):
        flash_table(torch, torch.device("cpu"), torch.float32, 1, seqs=seqs, backend="NOPE")


def test_info_describes_shipped_and_measured_profiles(tmp_path: Path) -> None:
    res = runner.invoke(app, ["info", "h100", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    g = GPUS["h100"]
    assert data["kind"] == "gpu-profile" and data["name"] == g.name
    assert data["memory_bandwidth_Bps"] == g.hbm_Bps * g.memory_eff
    assert data["units"] == g.sms and data["kernel_floor_s"] == g.kernel_s
    assert f"bf16 {g.peak_flops['bf16'] * g.gemm_best['bf16'] / 1e12:.4g} TFLOP/s" in (
        data["matrix_products"])
    mine = {**gpu_profile_data(g), "name": "lab", "norm_eff": {"bf16": 0.46}}
    res = runner.invoke(app, ["info", str(_write(tmp_path / "lab.json", mine)), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["name"] == "lab" and data["batch_norm"] == "bf16 at 0.46 of it"
    # a trace is still a trace; a broken profile file is a one-line error naming the field
    assert json.loads(runner.invoke(app, ["info", "resnet50-v100-b64", "--json"]).output)[
        "kind"] == "trace"
    res = runner.invoke(app, ["info", str(_write(tmp_path / "bad.json", {**mine, "sms": 0}))])
    assert res.exit_code == 2 and res.output.startswith("error: GPU profile.sms"), res.output
