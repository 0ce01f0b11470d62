"""``estimate --memory-format``: cuDNN's NCHW <-> NHWC transposes around tensor-core convolutions,
priced against an independent count over the model's convolutions, and the bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.errors import SchedoptError

pytest.importorskip("torch")

from schedopt.measure.cnns import cnn_builders
from schedopt.measure.estimate import estimate
from schedopt.measure.operators import operator_model

runner = CliRunner()


def _convs(batch: int) -> list[tuple[bool, int, int, int, bool]]:
    """Per convolution of ResNet-50 at ``batch`` (float32 activations, 224 x 224): whether it
    is a pointwise product, its input, weight and output bytes, and whether its input needs a
    gradient (every convolution but the stem's)."""
    import torch

    model = cnn_builders()["resnet50"]()
    rows: list[tuple[bool, int, int, int, bool]] = []

    def hook(mod: torch.nn.Conv2d, inp: tuple, out: torch.Tensor) -> None:
        pointwise = (mod.kernel_size == (1, 1) and mod.stride == (1, 1)
                     and mod.padding == (0, 0) and mod.groups == 1)
        rows.append((pointwise, inp[0].nbytes, mod.weight.nbytes, out.nbytes, bool(rows)))

    for mod in model.modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(hook)
    with torch.device("meta"):
        model.to("meta")(torch.zeros(batch, 3, 224, 224, device="meta"))
    return rows


def _step(trace: object) -> float:
    return sum(la.forward_s + la.backward_s for la in trace.layers)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("gpu", "dtype"), [("a100-40gb", "tf32"), ("h100", "bf16")])
def test_nchw_adds_the_transposes_of_every_non_pointwise_convolution(gpu: str, dtype: str) -> None:
    batch = 4
    nhwc = estimate("resnet50", gpu, dtype, batch)
    nchw = estimate("resnet50", gpu, dtype, batch, memory_format="nchw")
    opm = operator_model(gpu, dtype)
    item = 2 if dtype == "bf16" else 4  # bf16 weights and activations; tf32 reads float32

    def t(nbytes: float) -> float:
        return opm.memory_s(2.0 * nbytes * item / 4)

    expected = 0.0
    convs = _convs(batch)
    assert len(convs) == 53 and sum(not c[0] for c in convs) == 20
    for pointwise, x, w, y, data_grad in convs:
        if pointwise:
            continue
        expected += t(x) + t(w) + t(y)  # forward: input and weight in, output back
        expected += t(y) + t(x) + t(w)  # weight gradient: output gradient and input in, back
        if data_grad:
            expected += t(y) + t(w) + t(x)  # data gradient: output gradient and weight in, back
    assert _step(nchw) - _step(nhwc) == pytest.approx(expected, rel=1e-4)
    assert expected > 0.05 * _step(nhwc)
    assert nchw.name.endswith("-nchw") and "NCHW activations: cuDNN's layout" in nchw.source


def test_pointwise_convolutions_and_other_layers_keep_their_times() -> None:
    nhwc = {la.name: la for la in estimate("resnet50", "a100", "tf32", 8).layers}
    nchw = {la.name: la for la in estimate("resnet50", "a100", "tf32", 8,
                                           memory_format="nchw").layers}
    for name in ("layer1.0.conv1", "layer1.0.conv3", "layer3.2.conv1", "fc", "layer2.0.bn2"):
        assert nchw[name].forward_s == nhwc[name].forward_s
        assert nchw[name].backward_s == nhwc[name].backward_s
    for name in ("conv1", "layer1.0.conv2", "layer2.0.downsample.0", "layer4.2.conv2"):
        assert nchw[name].forward_s > nhwc[name].forward_s
        assert nchw[name].backward_s > nhwc[name].backward_s


def test_fp32_convolutions_read_nchw_without_transposes() -> None:
    nhwc = estimate("resnet50", "v100", "fp32", 8)
    nchw = estimate("resnet50", "v100", "fp32", 8, memory_format="nchw")
    assert [la.model_dump() for la in nchw.layers] == [la.model_dump() for la in nhwc.layers]
    assert "fp32 convolutions read NCHW, no layout transposes" in nchw.source


def test_the_default_layout_is_channels_last() -> None:
    default = estimate("resnet50", "a100", "bf16", 8)
    explicit = estimate("resnet50", "a100", "bf16", 8, memory_format="channels_last")
    assert default.model_dump() == explicit.model_dump()
    assert "NCHW" not in default.source


@pytest.mark.parametrize(("args", "message"), [
    (["resnet50", "--memory-format", "nhwc"], "--memory-format"),
    (["resnet50", "--memory-format", "nchw", "--method", "roofline"], "operator only"),
    (["gpt2", "--memory-format", "nchw"], "image models only"),
])
def test_cli_refuses_a_bad_layout(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", *args, "--gpu", "a100", "--dtype", "tf32",
                              "--batch", "2", "--out", str(out)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in res.output
    assert not out.exists()


def test_cli_writes_an_nchw_trace(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = runner.invoke(app, ["estimate", "resnet50", "--gpu", "a100-40gb", "--dtype", "tf32",
                              "--batch", "2", "--memory-format", "nchw", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "resnet50-a100-40gb-tf32-b2-nchw" in res.output and out.exists()


def test_library_errors_name_the_field() -> None:
    with pytest.raises(SchedoptError, match="memory-format"):
        estimate("resnet50", "a100", "tf32", 2, memory_format="NCHW")
