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

from schedopt.measure.estimate import (
    GemmModel,
    config_spec,
    estimate,
    fit_gemm,
    operator_model,
)

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
     (["resnet50", "--seq", "128"], "--seq"), (["mobilenet_v2"], "MODEL"),
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
    assert acc.compute_s == pytest.approx(4 * base.compute_s, rel=1e-3)


def test_shipped_trace_by_roofline_matches_the_shipped_file() -> None:
    tr = estimate("resnet50", "v100", "fp32", 64, method="roofline", name="resnet50-v100-b64")
    assert tr.model_dump() == load_trace("resnet50-v100-b64").model_dump()


def _time_matmul(m: int, n: int, k: int) -> float:
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    best = float("inf")
    for _ in range(5):
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
