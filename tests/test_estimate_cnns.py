"""torchvision's VGG and ResNet families, built by the estimator without torchvision: the shapes
that torchvision publishes, grouped convolutions priced per group, and the CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.measure.cnns import RESNETS, VGGS
from schedopt.measure.estimate import TraceSpec, estimate, estimate_trace

pytestmark = pytest.mark.torch

#: torchvision's own figures per model (``torchvision.models`` weights metadata, ImageNet
#: 224x224): parameters, parameter tensors, and GFLOPS (multiply-adds of one image, in 1e9).
TORCHVISION = {
    "resnet18": (11_689_512, 62, 1.81),
    "resnet34": (21_797_672, 110, 3.66),
    "resnet50": (25_557_032, 161, 4.09),
    "resnet101": (44_549_160, 314, 7.80),
    "resnet152": (60_192_808, 467, 11.51),
    "resnext50_32x4d": (25_028_904, 161, 4.23),
    "resnext101_32x8d": (88_791_336, 314, 16.41),
    "wide_resnet50_2": (68_883_240, 161, 11.40),
    "wide_resnet101_2": (126_886_696, 314, 22.75),
    "vgg11": (132_863_336, 22, 7.61),
    "vgg11_bn": (132_868_840, 38, 7.61),
    "vgg13": (133_047_848, 26, 11.31),
    "vgg13_bn": (133_053_736, 46, 11.31),
    "vgg16": (138_357_544, 32, 15.47),
    "vgg16_bn": (138_365_992, 58, 15.47),
    "vgg19": (143_667_240, 38, 19.63),
    "vgg19_bn": (143_678_248, 70, 19.63),
}


def test_every_resnet_and_vgg_of_torchvision_is_listed() -> None:
    assert set(RESNETS) | set(VGGS) | {f"{v}_bn" for v in VGGS} == set(TORCHVISION)


@pytest.mark.parametrize("model", sorted(TORCHVISION))
def test_shapes_and_multiply_adds_are_torchvisions(model: str) -> None:
    params, tensors, gmacs = TORCHVISION[model]
    log: list = []
    trace = estimate_trace(TraceSpec(name=model, model=model, gpu="v100", precision="fp32",
                                     batch=1, method="operator"), log=log)
    assert trace.num_tensors == tensors
    assert sum(t.bytes for la in trace.layers for t in la.tensors) == 4 * params
    flops = Counter()
    for rec in log:
        flops[rec[0]] += rec[3]
    # convolutions and the classifier: 2 FLOPs per multiply-add
    macs = (flops["convolution"] + flops["addmm"]) / 2
    assert macs == pytest.approx(gmacs * 1e9, rel=0.005)


def test_grouped_convolutions_cost_their_groups_not_a_dense_layer() -> None:
    """ResNeXt-50 32x4d has ResNet-50's parameter count within 3% but 32 groups in every 3x3
    convolution: each of those costs the per-group products (a dense 3x3 of the same width
    would cost 32 times the multiply-adds)."""
    log: list = []
    estimate_trace(TraceSpec(name="x", model="resnext50_32x4d", gpu="v100", precision="fp32",
                             batch=1, method="operator"), log=log)
    convs = [rec for rec in log if rec[0] == "convolution"]
    # layer1's first block: conv2 is 3x3, 128 -> 128 channels in 32 groups, on 56x56
    grouped = 2 * 56 * 56 * 128 * (128 // 32) * 9
    assert grouped in [rec[3] for rec in convs]
    assert 32 * grouped not in [rec[3] for rec in convs]


def test_deeper_and_wider_cost_more_time() -> None:
    step = {m: sum(la.forward_s + la.backward_s for la in estimate(m, "v100", "fp32", 8).layers)
            for m in ("resnet18", "resnet50", "resnet101", "wide_resnet50_2")}
    assert step["resnet18"] < step["resnet50"] < step["resnet101"]
    assert step["resnet50"] < step["wide_resnet50_2"]


def test_cli_estimates_a_resnext(tmp_path: Path) -> None:
    out = tmp_path / "rx.json"
    res = CliRunner().invoke(app, ["estimate", "resnext101_32x8d", "--gpu", "v100", "--dtype",
                                   "fp32", "--batch", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["name"] == "resnext101_32x8d-v100-fp32-b4"
    names = [t["name"] for la in data["layers"] for t in la["tensors"]]
    assert len(names) == 314 and "layer3.22.conv2.weight" in names
