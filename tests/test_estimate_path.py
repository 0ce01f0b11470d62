"""The attention path of an estimate: ``--attention auto|flash|eager``.

``auto`` must price what the estimator priced before the choice existed (the fused flash kernel
at bf16/fp16 on a profile with flash figures, eager matmul + softmax otherwise; the roofline
method: the profile's ``attention``), so that the shipped traces stay byte-identical. ``eager``
keeps an ``s x s`` score tensor per head that ``flash`` never materialises, and under autocast
its softmax runs on float32 casts (torch's autocast float32 list). ``flash`` where the profile has
no fused kernel is a one-line error naming ``--attention``; the CLI exits 2 and writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError
from schedopt.files import load_trace

pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedopt.measure.estimate import (
    ATTENTIONS,
    OperatorTotal,
    attention_path,
    config_spec,
    estimate,
    operator_breakdown,
)
from schedopt.measure.gpus import GPUS
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
SEQ = 128  # not the hidden size (256): only the scores end in s x s
#: a small BERT (4 heads of 64): BERT-large's attention operators, quick to trace
SMALL = config_spec({"model_type": "bert", "hidden_size": 256, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "intermediate_size": 1024,
                     "vocab_size": 1024}, "small-bert")
Key = tuple[str, str, tuple[int, ...]]


def _ops(precision: str, attention: str, autocast: bool = False) -> dict[Key, OperatorTotal]:
    return operator_breakdown(SMALL, "a100", precision, 2, SEQ, autocast=autocast,
                              attention=attention)


def _scores(ops: dict[Key, OperatorTotal]) -> dict[Key, OperatorTotal]:
    """Operators whose output has ``s x s`` trailing dimensions (the attention scores)."""
    return {k: t for k, t in ops.items() if k[2][-2:] == (SEQ, SEQ)}


def _generate() -> ModuleType:
    return load_script("instances/generate.py", "schedopt_generate_path")


def test_eager_fp16_has_a_score_tensor_and_flash_has_none() -> None:
    eager, flash = _ops("fp16", "eager"), _ops("fp16", "flash")
    assert ("_softmax", "float16", (2, 4, SEQ, SEQ)) in eager
    assert not any(k[0].startswith("_scaled_dot_product") for k in eager)
    assert _scores(flash) == {}
    assert sum(t.count for k, t in flash.items()
               if k[0] == "_scaled_dot_product_flash_attention") == 2  # one per layer
    # the same products outside attention, and eager attention costs more than the fused kernel
    linear = lambda ops: {k: t.flops for k, t in ops.items() if k[0] in ("addmm", "mm")}  # noqa: E731
    assert linear(eager) == linear(flash)
    total = lambda ops: sum(t.forward_s + t.backward_s for t in ops.values())  # noqa: E731
    assert total(eager) > total(flash)


def test_eager_under_autocast_runs_the_softmax_on_float32_casts() -> None:
    ops = _ops("fp16", "eager", autocast=True)
    scores = _scores(ops)
    assert ("_softmax", "float32", (2, 4, SEQ, SEQ)) in scores
    assert ("_softmax", "float16", (2, 4, SEQ, SEQ)) not in scores
    # the fp16 scores cast up for the softmax, the probabilities cast down for the second bmm
    assert ("autocast cast", "float32", (2, 4, SEQ, SEQ)) in scores
    assert ("autocast cast", "float16", (8, SEQ, SEQ)) in scores
    assert scores[("_softmax", "float32", (2, 4, SEQ, SEQ))].count == 2


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_auto_is_the_choice_made_before_the_option(gpu: str) -> None:
    g = GPUS[gpu]
    for precision in g.peak_flops:
        before = ("flash" if g.attention == "flash" and precision in ("bf16", "fp16")
                  and g.flash_fb else "eager")
        assert attention_path("auto", gpu, precision) == before, precision
        assert attention_path("auto", gpu, precision, "roofline") == g.attention, precision


@pytest.mark.parametrize(("gpu", "precision", "path"),
                         [("a100", "bf16", "flash"), ("a100", "tf32", "eager"),
                          ("v100", "fp16", "eager")])
def test_auto_prices_the_same_trace_as_its_path(gpu: str, precision: str, path: str) -> None:
    auto = estimate(SMALL, gpu, precision, 2, SEQ)
    chosen = estimate(SMALL, gpu, precision, 2, SEQ, attention=path)
    assert auto.layers == chosen.layers
    assert chosen.name == f"{auto.name}-{path}"
    assert "chosen" not in auto.source
    assert f"attention={path} chosen (auto: {path})" in chosen.source


def test_the_source_names_the_path_priced() -> None:
    eager = estimate(SMALL, "h100", "bf16", 2, SEQ, attention="eager").source
    flash = estimate(SMALL, "h100", "bf16", 2, SEQ, attention="flash").source
    assert "attention: eager matmul + softmax kernels" in eager
    assert "attention=eager chosen (auto: flash)" in eager
    assert "fused flash kernel" not in eager
    assert "attention: fused flash kernel (SDPA) at the FlashAttention-2" in flash
    amp = estimate(SMALL, "a100", "fp16", 2, SEQ, autocast=True, attention="eager").source
    assert "softmax on float32 casts" in amp
    roof = estimate(SMALL, "a100", "bf16", 2, SEQ, method="roofline", attention="eager").source
    assert "attention: eager matmul + softmax kernels; attention=eager chosen" in roof


@pytest.mark.parametrize("name", ["bert-base-v100-fp16", "gpt2-124m-a100-bf16"])
def test_shipped_text_traces_are_unchanged(name: str) -> None:
    gen = _generate()
    spec = next(ts for ts in gen.ESTIMATED if ts.name == name)
    assert spec.attention == "auto"
    assert gen.estimate_trace(spec).model_dump() == load_trace(name).model_dump()


@pytest.mark.parametrize(("gpu", "dtype", "value"),
                         [("a100", "tf32", "flash"), ("a100", "fp32", "flash"),
                          ("v100", "fp16", "flash"), ("k80", "fp32", "flash")])
def test_flash_without_the_kernel_is_an_error(gpu: str, dtype: str, value: str) -> None:
    with pytest.raises(SchedoptError, match=r"^--attention: no fused flash-attention kernel"):
        estimate(SMALL, gpu, dtype, 2, SEQ, attention=value)


@pytest.mark.parametrize(("args", "value", "words"), [
    (["bert-base", "--gpu", "a100", "--dtype", "bf16", "--seq", "128"], "sdpa",
     "unknown attention"),
    (["bert-base", "--gpu", "a100", "--dtype", "tf32", "--seq", "128"], "flash",
     "no fused flash-attention kernel on A100"),
    (["bert-base", "--gpu", "v100", "--dtype", "fp16", "--seq", "128"], "flash",
     "no fused flash-attention kernel on Tesla V100"),
    (["resnet50", "--gpu", "a100", "--dtype", "bf16"], "eager", "applies to text models only"),
])
def test_cli_bad_attention_exits_2_and_writes_nothing(tmp_path: Path, args: list[str],
                                                       value: str, words: str) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", *args, "--batch", "2", "--attention", value,
                              "--out", str(out)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error: --attention:") and words in lines[0], res.output
    assert f"(got {value!r})" in lines[0]
    assert not out.exists()


def test_cli_eager_writes_a_trace_saying_so(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", "bert-base", "--gpu", "a100", "--dtype", "fp16",
                              "--batch", "2", "--seq", "128", "--autocast", "--attention",
                              "eager", "--out", str(out)])
    assert res.exit_code == 0, res.output
    tr = load_trace(str(out))
    assert tr.name == "bert-base-a100-fp16-autocast-b2-eager"
    assert "attention=eager chosen (auto: flash)" in tr.source
    assert ATTENTIONS == ("auto", "flash", "eager")
