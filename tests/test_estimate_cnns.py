"""torchvision's VGG, ResNet, MobileNet and EfficientNet families, built by the estimator without
torchvision: the shapes that torchvision publishes, grouped convolutions priced per group,
depthwise convolutions priced by their traffic, image sizes, and the CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")

from typer.testing import CliRunner

from schedopt.cli.app import app
from schedopt.measure.cnns import EFFICIENTNETS, MOBILENETS, RESNETS, VGGS
from schedopt.measure.estimate import TraceSpec, estimate, estimate_trace
from schedopt.measure.operators import operator_model

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

#: The same figures of the depthwise-convolution networks, at the image side torchvision's
#: weights metadata states them for (its GFLOPS are rounded to three decimals).
TORCHVISION_DEPTHWISE = {
    "mobilenet_v2": (3_504_872, 158, 0.301, 224),
    "mobilenet_v3_large": (5_483_032, 174, 0.217, 224),
    "mobilenet_v3_small": (2_542_856, 142, 0.057, 224),
    "efficientnet_b0": (5_288_548, 213, 0.386, 224),
    "efficientnet_b1": (7_794_184, 301, 0.687, 240),
    "efficientnet_b2": (9_109_994, 301, 1.088, 288),
    "efficientnet_b3": (12_233_232, 340, 1.827, 300),
    "efficientnet_b4": (19_341_616, 418, 4.394, 380),
    "efficientnet_b5": (30_389_784, 506, 10.266, 456),
    "efficientnet_b6": (43_040_704, 584, 19.068, 528),
    "efficientnet_b7": (66_347_960, 711, 37.746, 600),
}


def test_every_resnet_and_vgg_of_torchvision_is_listed() -> None:
    assert set(RESNETS) | set(VGGS) | {f"{v}_bn" for v in VGGS} == set(TORCHVISION)
    assert set(MOBILENETS) | set(EFFICIENTNETS) == set(TORCHVISION_DEPTHWISE)


@pytest.mark.parametrize("model", sorted([*TORCHVISION, *TORCHVISION_DEPTHWISE]))
def test_shapes_and_multiply_adds_are_torchvisions(model: str) -> None:
    params, tensors, gmacs, side = TORCHVISION_DEPTHWISE.get(model, (*TORCHVISION.get(model, ()),
                                                                     224))
    log: list = []
    trace = estimate_trace(TraceSpec(name=model, model=model, gpu="v100", precision="fp32",
                                     batch=1, method="operator", image=side), log=log)
    assert trace.num_tensors == tensors
    assert sum(t.bytes for la in trace.layers for t in la.tensors) == 4 * params
    flops = Counter()
    for rec in log:
        flops[rec[0]] += rec[3]
    # convolutions and the classifier: 2 FLOPs per multiply-add
    macs = (flops["convolution"] + flops["addmm"]) / 2
    assert macs == pytest.approx(gmacs * 1e9, rel=0.005, abs=0.0005e9)


def test_depthwise_convolutions_cost_their_traffic_not_a_batched_product() -> None:
    """A depthwise convolution (one input channel per group) streams its input, weight and
    output once per pass; priced as a batched product of 1-column GEMMs it was 4-16 times the
    published steps of EfficientNet (docs/validation.md). MobileNetV2's first depthwise
    convolution: 32 channels of 112 x 112."""
    log: list = []
    estimate_trace(TraceSpec(name="m", model="mobilenet_v2", gpu="v100", precision="fp32",
                             batch=8, method="operator"), log=log)
    opm = operator_model("v100", "fp32")
    plane = 4 * 8 * 32 * 112 * 112
    first = [rec for rec in log if rec[0] == "convolution" and rec[2] == (8, 32, 112, 112)]
    dw = [rec for rec in first if rec[3] == 2 * 8 * 32 * 112 * 112 * 9]
    assert len(dw) == 1
    traffic = opm.memory_s(2 * plane + 4 * 32 * 9)
    assert dw[0][5] == pytest.approx(traffic)
    assert dw[0][6] == pytest.approx(2 * traffic)  # data and weight gradients


def test_efficientnet_steps_are_below_resnet50s_as_published() -> None:
    """EfficientNet-B0 trains faster per image than ResNet-50 on a V100 in fp32 (DLE's tables:
    655 against about 400 images/s) though its depthwise layers dominate its operator count."""
    step = {m: sum(la.forward_s + la.backward_s for la in
                   estimate(m, "v100", "fp32", 64, memory_format="nchw").layers)
            for m in ("efficientnet_b0", "resnet50", "mobilenet_v2")}
    assert step["efficientnet_b0"] < step["resnet50"]
    assert step["mobilenet_v2"] < step["resnet50"]


def test_image_size_scales_the_input_and_names_the_trace() -> None:
    small = estimate("efficientnet_b4", "a100", "tf32", 32)
    large = estimate("efficientnet_b4", "a100", "tf32", 32, image_size=380)
    assert small.name == "efficientnet_b4-a100-tf32-b32"
    assert large.name == "efficientnet_b4-a100-tf32-b32-i380"
    assert large.h2d_s / small.h2d_s == pytest.approx((380 / 224) ** 2, rel=1e-2)
    fwd = [sum(la.forward_s for la in t.layers) for t in (small, large)]
    assert fwd[1] > 2 * fwd[0]
    assert "380x380" in large.source and "224x224" not in large.source


def test_autocast_casts_the_biases_of_convolutions() -> None:
    """Under autocast every convolution runs in 16 bits, the squeeze-and-excitation's 1 x 1
    convolutions with biases too (``conv2d`` refuses a float32 bias on a float16 input)."""
    log: list = []
    estimate("efficientnet_b0", "a100", "fp16", 4, autocast=True, log=log)
    dtypes = {rec[1] for rec in log if rec[0] == "convolution"}
    assert dtypes == {"float16"}


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
