"""The operator method's memory passes (batch and layer norms, residual additions, max pooling)
and cuDNN's Winograd convolutions at fp32, each priced against a count made here from the
operator's shapes."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("torch")

import torch

from schedopt.measure.estimate import _operator_pricer, estimate
from schedopt.measure.operators import operator_model

aten = torch.ops.aten


def _meta(*shape: int, grad: bool = True, dtype: Any = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype).requires_grad_(grad)


def _price(gpu: str, dtype: str, func: Any, args: tuple, **model: Any) -> tuple[float, float]:
    """(forward, backward) seconds of one ATen call as the operator method prices it."""
    opm = operator_model(gpu, dtype)
    opm = replace(opm, **model) if model else opm
    out = func(*args)
    outs = out if isinstance(out, tuple) else (out,)
    nbytes = sum(t.nbytes for t in (*args, *outs) if isinstance(t, torch.Tensor))
    return _operator_pricer(opm)(func, args, {}, out, 0.0, float(nbytes))


def _log(model: str, gpu: str, dtype: str, batch: int, seq: int | None = None) -> list[tuple]:
    log: list[tuple] = []
    estimate(model, gpu, dtype, batch, seq, log=log)
    return log


def test_batch_norm_sweeps_its_input_three_times_forward_and_five_backward() -> None:
    opm = operator_model("v100", "fp32")
    rows = [r for r in _log("resnet50", "v100", "fp32", 4) if r[0] == "native_batch_norm"]
    assert len(rows) == 53
    for _, _, shape, _, _, fwd, bwd in rows:
        x = 4.0 * math.prod(shape)  # float32 activation of the output's shape
        assert fwd == pytest.approx(opm.memory_s(3 * x))
        assert bwd == pytest.approx(opm.memory_s(5 * x))
    big = max(rows, key=lambda r: math.prod(r[2]))
    x = 4.0 * math.prod(big[2])
    assert big[5] > 1.4 * x * 2 / opm.gemm.bandwidth_Bps  # more than input + output once


def test_layer_norm_backward_sweeps_five_times_forward_twice() -> None:
    opm = operator_model("a100", "bf16")
    rows = [r for r in _log("bert-base", "a100", "bf16", 2, 128) if r[0] == "native_layer_norm"]
    assert len(rows) == 25  # the embeddings' and two per encoder layer
    for _, _, shape, _, _, fwd, bwd in rows:
        x = 2.0 * math.prod(shape)
        assert fwd == pytest.approx(opm.memory_s(2 * x))
        assert bwd == pytest.approx(opm.memory_s(5 * x))
    x = _meta(64, 1024)
    plain = _price("a100", "fp32", aten.native_layer_norm.default, (x, [1024], None, None, 1e-5))
    assert plain[1] == pytest.approx(operator_model("a100", "fp32").memory_s(3 * x.nbytes))


def test_a_residual_addition_costs_the_gradient_sum_of_its_fork() -> None:
    opm = operator_model("h100", "bf16")
    a, b = _meta(8, 256, 56, 56, dtype=torch.bfloat16), _meta(8, 256, 56, 56, dtype=torch.bfloat16)
    fwd, bwd = _price("h100", "bf16", aten.add.Tensor, (a, b))
    assert fwd == pytest.approx(opm.memory_s(3 * a.nbytes))
    assert bwd == pytest.approx(opm.memory_s(3 * a.nbytes))  # read two gradients, write one
    # one operand without a gradient: the gradient passes through, no kernel
    assert _price("h100", "bf16", aten.add.Tensor, (a, _meta(8, 256, 56, 56, grad=False,
                                                               dtype=torch.bfloat16)))[1] == 0.0
    # a broadcast operand (a bias): the output gradient is reduced, read once
    bias = _meta(256, 1, 1, dtype=torch.bfloat16)
    assert _price("h100", "bf16", aten.add.Tensor, (a, bias))[1] == pytest.approx(
        opm.memory_s(a.nbytes))
    rows = [r for r in _log("resnet50", "h100", "bf16", 2) if r[0] == "add"]
    assert len(rows) == 16 and all(r[6] == pytest.approx(r[5]) for r in rows)


@pytest.mark.parametrize(("kernel", "stride", "windows"), [(3, 2, 4), (2, 2, 1), (3, 1, 9)])
def test_max_pool_backward_reads_the_index_of_every_window_over_each_input(
        kernel: int, stride: int, windows: int) -> None:
    opm = operator_model("a100", "tf32")
    x = _meta(4, 64, 112, 112)
    y, idx = aten.max_pool2d_with_indices.default(x, [kernel], [stride], [1 if kernel == 3 else 0])
    fwd, bwd = _price("a100", "tf32", aten.max_pool2d_with_indices.default,
                      (x, [kernel], [stride], [1 if kernel == 3 else 0]))
    assert fwd == pytest.approx(opm.memory_s(x.nbytes + y.nbytes + idx.nbytes))
    assert bwd == pytest.approx(opm.memory_s(x.numel() * windows * 8 + x.nbytes + y.nbytes))


def test_max_pool_without_a_stride_strides_by_its_kernel() -> None:
    x = _meta(2, 8, 32, 32)
    assert _price("a100", "tf32", aten.max_pool2d_with_indices.default, (x, [2])) == _price(
        "a100", "tf32", aten.max_pool2d_with_indices.default, (x, [2, 2], [2, 2]))


def _conv_args(n: int, c_in: int, c_out: int, hw: int, stride: int) -> tuple:
    x, w = _meta(n, c_in, hw, hw), _meta(c_out, c_in, 3, 3)
    return (x, w, None, [stride, stride], [1, 1], [1, 1], False, [0, 0], 1)


def _winograd_by_hand(gpu: str, n: int, c_in: int, c_out: int, hw: int) -> tuple[float, ...]:
    """F(4x4, 3x3) over float32 tensors, counted here: tiles, transforms and 36 products."""
    opm = operator_model(gpu, "fp32")
    g, mem = opm.gemm, opm.memory_s
    tiles = n * math.ceil(hw / 4) ** 2
    x, y, w = 4.0 * n * c_in * hw * hw, 4.0 * n * c_out * hw * hw, 4.0 * c_out * c_in * 9
    fwd = mem(x * 52 / 16) + g.seconds(36, tiles, c_out, c_in, 4) + mem(y * 52 / 16)
    dgrad = mem(y * 52 / 16) + g.seconds(36, tiles, c_in, c_out, 4) + mem(x * 52 / 16)
    wgrad = mem(x * 52 / 16) + mem(y * 52 / 16) + g.seconds(36, c_out, c_in, tiles, 4) + mem(
        w * 45 / 9)
    return fwd, dgrad, wgrad


def test_fp32_3x3_stride_1_convolutions_take_the_cheaper_of_gemm_and_winograd() -> None:
    args = _conv_args(32, 256, 256, 14, 1)
    conv = aten.convolution.default
    direct = _price("v100", "fp32", conv, args, winograd=False)
    wgrad_direct = _price("v100", "fp32", conv, (args[0].detach(), *args[1:]), winograd=False)[1]
    fwd, dgrad, wgrad = _winograd_by_hand("v100", 32, 256, 256, 14)
    got = _price("v100", "fp32", conv, args)
    assert got[0] == pytest.approx(min(direct[0], fwd))
    assert got[1] == pytest.approx(min(direct[1] - wgrad_direct, dgrad) + min(wgrad_direct, wgrad))
    assert got[0] < 0.8 * direct[0] and got[1] < 0.8 * direct[1]
    # a layer too small for the transforms to pay keeps its implicit GEMM
    tiny = _conv_args(1, 8, 8, 4, 1)
    assert _price("v100", "fp32", conv, tiny) == _price("v100", "fp32", conv, tiny,
                                                        winograd=False)


@pytest.mark.parametrize(("gpu", "dtype", "stride"), [("v100", "fp32", 2), ("a100", "tf32", 1),
                                                      ("h100", "bf16", 1)])
def test_no_winograd_for_strided_or_tensor_core_convolutions(gpu: str, dtype: str,
                                                             stride: int) -> None:
    item = {"bf16": torch.bfloat16}.get(dtype, torch.float32)
    x, w = _meta(32, 256, 14, 14, dtype=item), _meta(256, 256, 3, 3, dtype=item)
    args = (x, w, None, [stride, stride], [1, 1], [1, 1], False, [0, 0], 1)
    assert _price(gpu, dtype, aten.convolution.default, args) == _price(
        gpu, dtype, aten.convolution.default, args, winograd=False)


def test_winograd_moves_only_the_three_by_three_stride_one_layers_of_resnet50() -> None:
    with_w = {la.name: la for la in estimate("resnet50", "v100", "fp32", 8).layers}
    opm = operator_model("v100", "fp32")
    import schedopt.measure.estimate as est

    real = est.operator_model
    try:
        est.operator_model = lambda *a, **k: replace(real(*a, **k), winograd=False)  # type: ignore
        without = {la.name: la for la in estimate("resnet50", "v100", "fp32", 8).layers}
    finally:
        est.operator_model = real
    assert opm.winograd
    moved = {n for n in with_w if (with_w[n].forward_s, with_w[n].backward_s)
             != (without[n].forward_s, without[n].backward_s)}
    # conv2 of every bottleneck is 3 x 3; the first of layers 2-4 has stride 2
    assert moved == {f"layer{i}.{j}.conv2" for i, blocks in ((1, 3), (2, 4), (3, 6), (4, 3))
                     for j in range(blocks) if i == 1 or j > 0}
    assert all(with_w[n].forward_s < without[n].forward_s for n in moved)
