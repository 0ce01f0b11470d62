"""What the operator method charges as the GPU runs it: in-place kernels (``relu_``) read and
write their tensor, views are free, and dropout is CUDA's one fused kernel (input, output and
a boolean mask), not the meta device's decomposition into a random mask, its scaling and a
product. The roofline method stays as the shipped traces were made."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from schedopt.measure.estimate import operator_breakdown


def _by_name(model: str, precision: str, batch: int, seq: int | None = None,
             **kw: object) -> dict[str, list]:
    out: dict[str, list] = {}
    for (name, dtype, shape), total in operator_breakdown(model, "a100", precision, batch, seq,
                                                          **kw).items():
        out.setdefault(name, []).append((dtype, shape, total))
    return out


def test_in_place_activations_are_charged_for_their_traffic() -> None:
    """ResNet-50's 49 in-place ReLUs are kernels: each reads and writes its activation (twice its
    bytes), where they used to be free."""
    ops = _by_name("resnet50", "tf32", 8)
    relus = ops["relu_"]
    assert sum(t.count for _, _, t in relus) == 49
    for dtype, shape, t in relus:
        numel = 1
        for d in shape:
            numel *= d
        assert dtype == "float32"
        assert t.nbytes == pytest.approx(2 * 4 * numel * t.count)
        assert t.forward_s > 0 and t.backward_s > 0
    assert "view" not in ops and "t" not in ops  # views stay free


def test_dropout_is_one_fused_kernel() -> None:
    """BERT's dropouts are priced as ``native_dropout``: input and output in the compute dtype
    and a one-byte mask; no ``bernoulli_`` or ``div_`` of a float mask."""
    ops = _by_name("bert", "fp16", 4, 128, attention="eager")
    assert "bernoulli_" not in ops and "div_" not in ops
    drops = ops["native_dropout"]
    for dtype, shape, t in drops:
        numel = 1
        for d in shape:
            numel *= d
        assert dtype == "float16"
        assert t.nbytes == pytest.approx((2 + 2 + 1) * numel * t.count)


def test_the_roofline_method_keeps_the_shipped_accounting() -> None:
    """The roofline method still leaves in-place kernels out and decomposes dropout as before:
    its per-layer times do not see the ReLUs (the shipped traces are reproduced byte for byte by
    tests/test_instances.py)."""
    roof = _by_name("resnet50", "bf16", 8, method="roofline")
    assert "relu_" not in roof and "add_" not in roof
    assert "relu_" in _by_name("resnet50", "bf16", 8)
    drop = _by_name("bert", "bf16", 4, 128, method="roofline")
    assert "native_dropout" not in drop and "mul" in drop
