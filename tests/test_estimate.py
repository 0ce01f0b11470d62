"""``schedopt estimate`` and :mod:`schedopt.measure.estimate`: shapes, configurations, bad input,
scaling, and the GEMM model fitted to this machine's CPU."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.files import load_trace

pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedopt.measure.estimate import config_spec, estimate
from schedopt.measure.operators import GemmModel, fit_gemm, operator_model

runner = CliRunner()
GPT2 = {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 1024,
        "n_positions": 256, "architectures": ["GPT2LMHeadModel"]}
LLAMA = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": 1024, "max_position_embeddings": 512, "rope_theta": 10000.0}
BERT = {"model_type": "bert", "hidden_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1024}


def _config(tmp_path: Path, data: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _run(*args: str) -> object:
    return runner.invoke(app, ["estimate", *args])


@pytest.mark.parametrize("data", [GPT2, LLAMA, BERT], ids=["gpt2", "llama", "bert"])
def test_cli_writes_a_trace_from_a_config(tmp_path: Path, data: dict) -> None:
    cfg, out = _config(tmp_path, data), tmp_path / "t.json"
    res = _run(str(cfg), "--gpu", "a100", "--dtype", "bf16", "--batch", "4", "--seq", "128",
               "--out", str(out), "--json")
    assert res.exit_code == 0, res.output
    tr = load_trace(str(out))
    assert tr.batch_size == 4 and tr.source.startswith("ESTIMATE (not measured)")
    assert all(la.forward_s > 0 and la.backward_s > 0 for la in tr.layers)
    assert {t.dtype for t in tr.tensor_list} == {"bfloat16"}
    assert json.loads(res.stdout)["layers"] == len(tr.layers)


def test_llama_config_has_its_module_names(tmp_path: Path) -> None:
    tr = estimate(str(_config(tmp_path, LLAMA)), "h100", "bf16", 2, 64)
    names = [la.name for la in tr.layers]
    assert names[0] == "model.embed_tokens" and names[-1] == "lm_head"
    assert "model.layers.1.mlp.down_proj" in names


@pytest.mark.parametrize(
    ("change", "field"),
    [({"n_embd": 0}, "n_embd"), ({"n_layer": True}, "n_layer"), ({"n_head": 2**40}, "n_head"),
     ({"n_embd": "128"}, "n_embd"), ({"model_type": "t5"}, "model_type")],
)
def test_bad_config_values_are_one_line_errors(tmp_path: Path, change: dict, field: str) -> None:
    cfg, out = _config(tmp_path, {**GPT2, **change}), tmp_path / "t.json"
    res = _run(str(cfg), "--gpu", "a100", "--dtype", "bf16", "--batch", "2", "--out", str(out))
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: ") and field in res.stderr
    assert not out.exists()


def test_missing_required_key(tmp_path: Path) -> None:
    data = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    with pytest.raises(SchedoptError, match="intermediate_size"):
        config_spec(data)


@pytest.mark.parametrize(
    ("args", "field"),
    [(["gpt2", "--gpu", "x100"], "--gpu"), (["gpt2", "--dtype", "fp8"], "--dtype"),
     (["gpt2", "--batch", "0"], "--batch"), (["gpt2", "--seq", "4096"], "--seq"),
     (["resnet50", "--seq", "128"], "--seq"), (["densenet121"], "MODEL"),
     (["gpt2", "--image-size", "224"], "--image-size"),
     (["efficientnet_b0", "--image-size", "31"], "--image-size"),
     (["efficientnet_b0", "--image-size", "99999"], "--image-size"),
     (["resnet50", "--image-size", "4096", "--batch", "4096"], "--batch"),
     (["v100-only", "--gpu", "v100", "--dtype", "tf32"], "--dtype"),
     (["gpt2", "--batch", "100000", "--seq", "1024"], "--batch")],
)
def test_bad_options(tmp_path: Path, args: list[str], field: str) -> None:
    out = tmp_path / "t.json"
    base = {"--gpu": "a100", "--dtype": "bf16", "--batch": "2"}
    model = "gpt2" if args[0] == "v100-only" else args[0]
    opts = dict(zip(args[1::2], args[2::2], strict=True))
    flat = [x for k, v in {**base, **opts}.items() for x in (k, v)]
    res = _run(model, *flat, "--out", str(out))
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and field in res.stderr
    assert not out.exists()


def test_doubling_batch_doubles_large_gemms() -> None:
    g = operator_model("h100", "bf16").gemm
    one, two = g.seconds(1, 8192, 4096, 4096, 2), g.seconds(1, 16384, 4096, 4096, 2)
    assert 1.9 < two / one < 2.1
    small = g.seconds(1, 16, 16, 16, 2)
    assert small == g.kernel_s  # launch-bound


def test_recompute_adds_a_forward_and_fp32_is_slower(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path, {**GPT2, "n_embd": 512, "n_head": 8}))
    base = estimate(cfg, "a100", "bf16", 8, 256)
    again = estimate(cfg, "a100", "bf16", 8, 256, recompute=True)
    fwd = sum(la.forward_s for la in base.layers)
    extra = sum(la.backward_s for la in again.layers) - sum(la.backward_s for la in base.layers)
    assert extra == pytest.approx(fwd, rel=1e-3)
    fp32 = estimate(cfg, "a100", "fp32", 8, 256)
    assert fp32.compute_s > 2 * base.compute_s
    acc = estimate(cfg, "a100", "bf16", 8, 256, accumulate=4)
    # micro-batches 2..4 add their gradients into the accumulated ones: per tensor one
    # memory-bound kernel over 3 x its bytes (read both, write the sum)
    opm = operator_model("a100", "bf16")
    add = sum(opm.memory_s(3 * t.bytes) for la in base.layers for t in la.tensors)
    assert add > 0
    assert acc.compute_s == pytest.approx(4 * base.compute_s + 3 * add, rel=1e-3)
    last = {la.name: la.backward_s for la in acc.layers}
    for la in base.layers[1:]:  # the last micro-batch's adds are in each layer's backward
        own = sum(opm.memory_s(3 * t.bytes) for t in la.tensors)
        assert last[la.name] == pytest.approx(la.backward_s + own, rel=1e-4)


def test_roofline_accumulation_is_k_micro_batches() -> None:
    base = estimate("gpt2", "a100", "bf16", 2, 128, method="roofline")
    acc = estimate("gpt2", "a100", "bf16", 2, 128, method="roofline", accumulate=3)
    assert acc.compute_s == pytest.approx(3 * base.compute_s, rel=1e-6)


def test_shipped_trace_by_roofline_matches_the_shipped_file() -> None:
    tr = estimate("resnet50", "v100", "fp32", 64, method="roofline", name="resnet50-v100-b64")
    assert tr.model_dump() == load_trace("resnet50-v100-b64").model_dump()


def _time_matmul(m: int, n: int, k: int) -> float:
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    best = float("inf")
    for _ in range(15):  # the best of many: a busy machine slows some calls, not the fastest
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return best


def test_gemm_model_fitted_on_this_cpu_predicts_held_out_shapes() -> None:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fit_shapes = [(64, 64, 64), (256, 256, 256), (128, 512, 128), (512, 128, 256),
                      (32, 256, 512), (384, 384, 64)]
        held_out = [(192, 320, 256), (512, 512, 128), (96, 96, 384)]
        samples = [(m, n, k, _time_matmul(m, n, k)) for m, n, k in fit_shapes]
        model = fit_gemm(samples)
        assert isinstance(model, GemmModel) and model.peak > 0
        for m, n, k in held_out:
            ratio = model.seconds(1, m, n, k, 4) / _time_matmul(m, n, k)
            assert 0.4 < ratio < 2.5, (m, n, k, ratio)
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------- autocast
def test_autocast_gradients_are_float32_and_twice_the_bytes(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path, GPT2))
    pure = estimate(cfg, "h100", "bf16", 4, 128)
    amp = estimate(cfg, "h100", "bf16", 4, 128, autocast=True)
    n_params = pure.total_bytes // 2
    assert amp.total_bytes == 4 * n_params and pure.total_bytes == 2 * n_params
    assert {t.dtype for t in amp.tensor_list} == {"float32"}
    assert [t.name for t in amp.tensor_list] == [t.name for t in pure.tensor_list]
    assert "bf16 autocast" in amp.source and "autocast_mode.h" in amp.source
    assert amp.name.endswith("-bf16-autocast-b4")
    # the optimizer state is float32 either way: the same update bytes
    assert amp.update_s == pure.update_s


def test_autocast_conv_layer_is_the_bf16_one_plus_its_weight_cast() -> None:
    # a GEMM-heavy layer: ResNet-50's 3x3 512 -> 512 convolution; its input arrives in bf16
    # (from batch norm on a bf16 convolution's output), so autocast adds only the weight cast
    layer = "layer4.0.conv2"
    trs = {(p, ac): estimate("resnet50", "h100", p, 64, autocast=ac)
           for p, ac in (("bf16", False), ("bf16", True), ("tf32", False))}
    fwd = {k: {la.name: la.forward_s for la in tr.layers}[layer] for k, tr in trs.items()}
    cast = operator_model("h100", "bf16").memory_s(512 * 512 * 9 * (4 + 2))
    assert fwd[("bf16", True)] == pytest.approx(fwd[("bf16", False)] + cast, rel=0.02)
    assert abs(fwd[("tf32", False)] / fwd[("bf16", True)] - 1) > 0.2  # not the fp32 one
    # the first convolution also casts the float32 images
    first = {k: tr.layers[0].forward_s for k, tr in trs.items()}
    assert first[("bf16", True)] > first[("bf16", False)]


def test_autocast_total_compute_lies_between_bf16_and_fp32(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path, {**GPT2, "n_embd": 512, "n_head": 8}))
    bf16 = estimate(cfg, "a100", "bf16", 8, 256).compute_s
    amp = estimate(cfg, "a100", "bf16", 8, 256, autocast=True).compute_s
    fp32 = estimate(cfg, "a100", "fp32", 8, 256).compute_s
    assert bf16 < amp < fp32
    for method in ("operator", "roofline"):
        tr = estimate("resnet50", "a100", "bf16", 32, method=method, autocast=True)
        assert {t.dtype for t in tr.tensor_list} == {"float32"}


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_autocast_needs_a_16_bit_dtype(tmp_path: Path, dtype: str) -> None:
    out = tmp_path / "t.json"
    res = _run("gpt2", "--gpu", "a100", "--dtype", dtype, "--batch", "2", "--autocast",
               "--out", str(out))
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: ")
    assert "--autocast" in res.stderr
    assert not out.exists()
    with pytest.raises(SchedoptError, match="--autocast"):
        estimate("gpt2", "a100", dtype, 2, 128, autocast=True)


def test_autocast_estimate_is_deterministic(tmp_path: Path) -> None:
    cfg = _config(tmp_path, LLAMA)
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    for out in (one, two):
        res = _run(str(cfg), "--gpu", "h200", "--dtype", "bf16", "--autocast", "--batch", "2",
                   "--seq", "64", "--out", str(out))
        assert res.exit_code == 0, res.output
    assert one.read_bytes() == two.read_bytes()
    assert load_trace(str(one)).fingerprint() == load_trace(str(two)).fingerprint()
    assert {t.dtype for t in load_trace(str(one)).tensor_list} == {"float32"}


def test_autocast_lists_cover_the_installed_torch_registrations() -> None:
    import torch

    from schedopt.measure.estimate import AUTOCAST_FP32, AUTOCAST_LOWER

    assert not AUTOCAST_LOWER & AUTOCAST_FP32
    # torch's promote list (widest input dtype, what type promotion gives) and the banned op
    other = {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
             "index_put", "tensordot", "scatter_add", "binary_cross_entropy"}
    has = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if has is None:
        pytest.skip("this torch does not expose its dispatch registrations")
    registered = {op.removeprefix("aten::").split(".")[0]
                  for op in torch._C._dispatch_get_all_op_names()
                  if op.startswith("aten::") and has(op, "AutocastCUDA")}
    assert registered, "no AutocastCUDA kernels"
    assert registered <= AUTOCAST_LOWER | AUTOCAST_FP32 | other, sorted(
        registered - AUTOCAST_LOWER - AUTOCAST_FP32 - other)
