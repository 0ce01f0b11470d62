"""How the operator model's attention scales with the sequence length.

At a fixed number of tokens, going from sequence 128 to 512 must leave the linear products
unchanged and multiply the per-token attention work by 4 (the score matrix has ``s`` columns per
token): FLOPs of the score products and, on the eager path, bytes of the ``s x s`` memory-bound
kernels; the flash path keeps no ``s x s`` tensor at all. So a fully padded batch never costs less
per token at 512 than at 128, which is why the published pytorch:21.11 phase-2 BERT rows (LDDL
length binning, less per token than phase 1) are upper-bound rows in
benchmarks/estimate_validation.py and not a defect of the model.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedopt.measure.estimate import OperatorTotal, config_spec, estimate, operator_breakdown
from schedopt.measure.gpus import GPUS
from schedopt.measure.operators import operator_model
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[1]
#: a small BERT (4 heads of 64): the same operators as BERT-large, quick to trace
SMALL = config_spec({"model_type": "bert", "hidden_size": 256, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "intermediate_size": 1024,
                     "vocab_size": 1024}, "small-bert")
TOKENS = 2048
Key = tuple[str, str, tuple[int, ...]]


def _ops(precision: str, seq: int, autocast: bool = False) -> dict[Key, OperatorTotal]:
    return operator_breakdown(SMALL, "a100", precision, TOKENS // seq, seq, autocast=autocast)


def _sum(ops: dict[Key, OperatorTotal], keep: object, what: str) -> float:
    return sum(getattr(t, what) for k, t in ops.items() if keep(k))  # type: ignore[operator]


def _scores(seq: int) -> object:
    return lambda k: len(k[2]) == 4 and k[2][-2:] == (seq, seq)


def test_eager_tf32_attention_work_per_token_grows_as_the_sequence() -> None:
    short, long = _ops("tf32", 128), _ops("tf32", 512)
    # TF32 takes the eager path: float32 softmax over [batch, heads, s, s], no fused kernel
    assert ("_softmax", "float32", (TOKENS // 512, 4, 512, 512)) in long
    assert not any(k[0].startswith("_scaled_dot_product") for k in long)
    # the token-wise products (the pooler's, one row per sample, aside)
    linear = lambda k: k[0] in ("addmm", "mm") and k[2][0] == TOKENS  # noqa: E731
    assert _sum(long, linear, "flops") == _sum(short, linear, "flops")
    bmm = lambda k: k[0] == "bmm"  # noqa: E731
    assert _sum(long, bmm, "flops") == pytest.approx(4 * _sum(short, bmm, "flops"))
    # softmax, scaling and dropout over the scores: 4x the bytes per token, nothing else
    s_long, s_short = _sum(long, _scores(512), "nbytes"), _sum(short, _scores(128), "nbytes")
    assert s_short > 0 and s_long == pytest.approx(4 * s_short)
    assert {k[0] for k in long if _scores(512)(k)} == {"mul", "_softmax", "native_dropout"}


def test_flash_attention_keeps_no_score_matrix() -> None:
    short, long = _ops("fp16", 128, autocast=True), _ops("fp16", 512, autocast=True)
    assert not any(_scores(512)(k) for k in long) and not any(_scores(128)(k) for k in short)
    flash = lambda k: k[0] == "_scaled_dot_product_flash_attention"  # noqa: E731
    assert _sum(long, flash, "flops") == pytest.approx(4 * _sum(short, flash, "flops"))
    assert _sum(long, flash, "nbytes") == _sum(short, flash, "nbytes")  # q, k, v, o, lse only


@pytest.mark.parametrize(("precision", "autocast"), [("tf32", False), ("fp16", True)])
def test_full_padding_never_costs_less_per_token_at_a_longer_sequence(
        precision: str, autocast: bool) -> None:
    per_token = []
    for seq in (128, 256, 512):
        tr = estimate("bert-large", "a100", precision, 8192 // seq, seq, autocast=autocast)
        per_token.append(sum(la.forward_s + la.backward_s for la in tr.layers) / 8192)
    assert per_token[0] < per_token[1] < per_token[2]


def test_breakdown_sums_to_the_trace() -> None:
    log: list[tuple] = []
    tr = estimate(SMALL, "a100", "fp16", 4, 512, autocast=True, log=log)
    ops = operator_breakdown(SMALL, "a100", "fp16", 4, 512, autocast=True)
    total = sum(t.forward_s + t.backward_s for t in ops.values())
    assert total == pytest.approx(sum(la.forward_s + la.backward_s for la in tr.layers),
                                  rel=1e-5)
    assert sum(t.count for t in ops.values()) == len(log)
    assert any(k[0] == "autocast cast" for k in ops)
    first = next(iter(ops.values()))
    assert all(first.forward_s + first.backward_s >= t.forward_s + t.backward_s
               for t in ops.values())


def test_a100_40gb_is_the_a100_with_slower_memory() -> None:
    big, small = GPUS["a100"], GPUS["a100-40gb"]
    assert (small.peak_flops, small.gemm_best, small.sms) == (big.peak_flops, big.gemm_best,
                                                              big.sms)
    assert small.hbm_Bps == 1555e9
    nbytes = 1e9
    ratio = (operator_model("a100-40gb", "tf32").memory_s(nbytes)
             / operator_model("a100", "tf32").memory_s(nbytes))
    assert ratio == pytest.approx(2039 / 1555)


def _validation() -> ModuleType:
    return load_script("benchmarks/estimate_validation.py", "schedopt_estimate_validation")


def test_binned_rows_ran_less_per_token_than_full_padding_allows() -> None:
    """The published binned phase-2 rows take less time per token than phase 1 of the same
    GPU and precision, which full padding cannot give (the test above): they are upper-bound
    rows. The unbinned rows, padded to their sequence, do take more per token at 512."""
    val = _validation()
    per_token = {(r[2], r[3], r[5], r[0] in val.BINNED): 1 / (r[6] * r[5])
                 for r in val.PUBLISHED if r[1] == "bert-large"}
    assert len(val.BINNED) == 2
    for (gpu, prec, seq, binned), t in per_token.items():
        if seq == 512:
            assert (t < per_token[(gpu, prec, 128, False)]) == binned
