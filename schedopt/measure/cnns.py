"""torchvision's image classifiers, built without torchvision: AlexNet, the VGG family (with
and without batch norm), the ResNet family (ResNet, ResNeXt, Wide ResNet) and the
depthwise-convolution networks (MobileNet V2 and V3, EfficientNet B0-B7), in the layout of
``torchvision/models/alexnet.py``, ``vgg.py``, ``resnet.py``, ``mobilenetv2.py``,
``mobilenetv3.py`` and ``efficientnet.py`` (module and parameter names as there), for the compute
estimator (:mod:`schedopt.measure.estimate`). torch is imported lazily: it is optional.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

__all__ = ["EFFICIENTNETS", "MOBILENETS", "RESNETS", "VGGS", "cnn_builders"]


def _plain_cnns() -> tuple[type, type]:
    """torchvision's AlexNet and VGG classes (torch imported lazily: it is optional)."""
    import torch
    from torch import nn

    class AlexNet(nn.Module):
        """torchvision's AlexNet (one-GPU variant): 61,100,840 parameters."""

        def __init__(self, num_classes: int = 1000) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2),
                nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
                nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            )
            self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
            self.classifier = nn.Sequential(
                nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
                nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
                nn.Linear(4096, num_classes),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    class VGG(nn.Module):
        """torchvision's VGG: the convolutions of ``cfg`` (channels, "M" a max pool), each
        followed by a batch norm when ``batch_norm`` (VGG-16 without: 138,357,544
        parameters)."""

        def __init__(self, cfg: tuple[int | str, ...], batch_norm: bool = False,
                     num_classes: int = 1000) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            cin = 3
            for v in cfg:
                if v == "M":
                    layers.append(nn.MaxPool2d(2, 2))
                    continue
                layers.append(nn.Conv2d(cin, int(v), 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(int(v)))
                layers.append(nn.ReLU(inplace=True))
                cin = int(v)
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
            self.classifier = nn.Sequential(
                nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(0.5),
                nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5),
                nn.Linear(4096, num_classes),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    return AlexNet, VGG


def _blocks() -> tuple[Any, Any]:
    """torchvision's BasicBlock and Bottleneck (``torchvision/models/resnet.py``); torch imported
    lazily."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        """torchvision's BasicBlock: two 3x3 convolutions, the first with the stride."""

        expansion = 1

        def __init__(self, cin: int, planes: int, stride: int = 1,
                     downsample: nn.Module | None = None, groups: int = 1,
                     base_width: int = 64) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            identity = self.downsample(x) if self.downsample is not None else x
            return self.relu(out + identity)

    class Bottleneck(nn.Module):
        """torchvision's Bottleneck (ResNet v1.5: the stride sits on the 3x3 convolution, which
        has ``groups`` groups of ``width_per_group`` channels per 64 planes)."""

        expansion = 4

        def __init__(self, cin: int, planes: int, stride: int = 1,
                     downsample: nn.Module | None = None, groups: int = 1,
                     base_width: int = 64) -> None:
            super().__init__()
            width = int(planes * (base_width / 64.0)) * groups
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups,
                                   bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            identity = self.downsample(x) if self.downsample is not None else x
            return self.relu(out + identity)

    return BasicBlock, Bottleneck


def _resnet() -> type:
    """torchvision's ResNet class (``torchvision/models/resnet.py``): basic blocks (ResNet-18/34)
    or bottlenecks with ``groups`` and ``width_per_group`` (ResNet-50/101/152, ResNeXt, Wide
    ResNet); torch imported lazily."""
    import torch
    from torch import nn

    basic_block, bottleneck = _blocks()

    class ResNet(nn.Module):
        """torchvision's ResNet: ``depths`` blocks per stage (ResNet-50: [3, 4, 6, 3]) of
        bottlenecks, or of basic blocks when ``basic``."""

        def __init__(self, depths: list[int], num_classes: int = 1000, *, basic: bool = False,
                     groups: int = 1, width_per_group: int = 64) -> None:
            super().__init__()
            self.block = basic_block if basic else bottleneck
            self.groups, self.base_width = groups, width_per_group
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._make(64, depths[0], 1)
            self.layer2 = self._make(128, depths[1], 2)
            self.layer3 = self._make(256, depths[2], 2)
            self.layer4 = self._make(512, depths[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * self.block.expansion, num_classes)

        def _make(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
            out = planes * self.block.expansion
            down = None
            if stride != 1 or self.inplanes != out:
                down = nn.Sequential(
                    nn.Conv2d(self.inplanes, out, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(out),
                )
            g, w = self.groups, self.base_width
            layers = [self.block(self.inplanes, planes, stride, down, groups=g, base_width=w)]
            self.inplanes = out
            layers += [self.block(out, planes, groups=g, base_width=w) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet


#: torchvision's VGG configurations (``torchvision/models/vgg.py``: A, B, D, E): output channels
#: of each 3x3 convolution, "M" a 2x2 max pool; each also with batch norm (``vgg16_bn``).
VGGS: dict[str, tuple[int | str, ...]] = {
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg13": (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512,
              "M"),
    "vgg19": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512,
              512, 512, 512, "M"),
}

#: The torchvision ResNet family built here (``torchvision/models/resnet.py``): name -> blocks
#: per stage and the builder's keywords (basic blocks, groups, width per group).
RESNETS: dict[str, tuple[list[int], dict[str, Any]]] = {
    "resnet18": ([2, 2, 2, 2], {"basic": True}),
    "resnet34": ([3, 4, 6, 3], {"basic": True}),
    "resnet50": ([3, 4, 6, 3], {}),
    "resnet101": ([3, 4, 23, 3], {}),
    "resnet152": ([3, 8, 36, 3], {}),
    "resnext50_32x4d": ([3, 4, 6, 3], {"groups": 32, "width_per_group": 4}),
    "resnext101_32x8d": ([3, 4, 23, 3], {"groups": 32, "width_per_group": 8}),
    "wide_resnet50_2": ([3, 4, 6, 3], {"width_per_group": 128}),
    "wide_resnet101_2": ([3, 4, 23, 3], {"width_per_group": 128}),
}


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's ``_utils._make_divisible``: ``v`` rounded to a multiple of ``divisor``, at
    least ``divisor`` and never more than 10% below ``v``."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


#: torchvision's MobileNets (``mobilenetv2.py``: t, c, n, s per stage; ``mobilenetv3.py``: in,
#: kernel, expanded, out, squeeze-and-excitation, activation, stride per block; then the last
#: channels of the classifier).
MOBILENETS: dict[str, Any] = {
    "mobilenet_v2": ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                     (6, 160, 3, 2), (6, 320, 1, 1)),
    "mobilenet_v3_large": ((
        (16, 3, 16, 16, False, "RE", 1), (16, 3, 64, 24, False, "RE", 2),
        (24, 3, 72, 24, False, "RE", 1), (24, 5, 72, 40, True, "RE", 2),
        (40, 5, 120, 40, True, "RE", 1), (40, 5, 120, 40, True, "RE", 1),
        (40, 3, 240, 80, False, "HS", 2), (80, 3, 200, 80, False, "HS", 1),
        (80, 3, 184, 80, False, "HS", 1), (80, 3, 184, 80, False, "HS", 1),
        (80, 3, 480, 112, True, "HS", 1), (112, 3, 672, 112, True, "HS", 1),
        (112, 5, 672, 160, True, "HS", 2), (160, 5, 960, 160, True, "HS", 1),
        (160, 5, 960, 160, True, "HS", 1)), 1280),
    "mobilenet_v3_small": ((
        (16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2),
        (24, 3, 88, 24, False, "RE", 1), (24, 5, 96, 40, True, "HS", 2),
        (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
        (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1),
        (48, 5, 288, 96, True, "HS", 2), (96, 5, 576, 96, True, "HS", 1),
        (96, 5, 576, 96, True, "HS", 1)), 1024),
}

#: torchvision's EfficientNet B0-B7 (``efficientnet.py``): width and depth multipliers and the
#: classifier's dropout; every one shares B0's stages (:data:`EFFICIENTNET_STAGES`).
EFFICIENTNETS: dict[str, tuple[float, float, float]] = {
    "efficientnet_b0": (1.0, 1.0, 0.2), "efficientnet_b1": (1.0, 1.1, 0.2),
    "efficientnet_b2": (1.1, 1.2, 0.3), "efficientnet_b3": (1.2, 1.4, 0.3),
    "efficientnet_b4": (1.4, 1.8, 0.4), "efficientnet_b5": (1.6, 2.2, 0.4),
    "efficientnet_b6": (1.8, 2.6, 0.5), "efficientnet_b7": (2.0, 3.1, 0.5),
}

#: EfficientNet-B0's MBConv stages: expansion, kernel, stride, input and output channels, blocks.
EFFICIENTNET_STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
                       (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
                       (6, 3, 1, 192, 320, 1))


def _depthwise_parts() -> tuple[Callable[..., Any], type]:
    """torchvision's ``Conv2dNormActivation`` (a function building the same ``Sequential``) and
    ``SqueezeExcitation`` (``torchvision/ops/misc.py``); torch imported lazily."""
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
                act: Callable[..., nn.Module] | None = nn.ReLU) -> nn.Sequential:
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act(inplace=True) if act is not nn.Sigmoid else act())
        return nn.Sequential(*layers)

    class SqueezeExcitation(nn.Module):
        """Channel attention: pooled, two 1x1 convolutions with biases, the input scaled."""

        def __init__(self, cin: int, squeeze: int, act: Callable[..., nn.Module] = nn.ReLU,
                     scale: Callable[..., nn.Module] = nn.Sigmoid) -> None:
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(cin, squeeze, 1)
            self.fc2 = nn.Conv2d(squeeze, cin, 1)
            self.activation = act()
            self.scale_activation = scale()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
            return s * x

    return conv_bn, SqueezeExcitation


def _mobilenets() -> tuple[type, type]:
    """torchvision's MobileNetV2 and MobileNetV3 classes; torch imported lazily."""
    import torch
    from torch import nn

    conv_bn, se_block = _depthwise_parts()

    class InvertedResidual(nn.Module):
        """One inverted residual: a 1x1 expansion (unless ``expand`` is 1), a depthwise
        ``k`` x ``k`` convolution with the stride, optional squeeze-and-excitation, a 1x1
        projection without activation; the input added when the shapes allow."""

        def __init__(self, cin: int, k: int, expanded: int, cout: int, se: bool,
                     act: Callable[..., nn.Module], stride: int, v2: bool) -> None:
            super().__init__()
            self.use_res_connect = stride == 1 and cin == cout
            layers: list[nn.Module] = []
            if expanded != cin:
                layers.append(conv_bn(cin, expanded, 1, act=act))
            layers.append(conv_bn(expanded, expanded, k, stride, groups=expanded, act=act))
            if se:
                layers.append(se_block(expanded, _make_divisible(expanded // 4), nn.ReLU,
                                       nn.Hardsigmoid))
            if v2:  # MobileNetV2 keeps the projection's convolution and norm unwrapped
                layers += [nn.Conv2d(expanded, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            else:
                layers.append(conv_bn(expanded, cout, 1, act=None))
            self.key = "conv" if v2 else "block"  # torchvision's attribute name
            self.add_module(self.key, nn.Sequential(*layers))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.get_submodule(self.key)(x)
            return x + out if self.use_res_connect else out

    class MobileNetV2(nn.Module):
        """torchvision's MobileNetV2 (width 1.0): 3,504,872 parameters."""

        def __init__(self, num_classes: int = 1000) -> None:
            super().__init__()
            layers: list[nn.Module] = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)]
            cin = 32
            for t, c, n, s in MOBILENETS["mobilenet_v2"]:
                for i in range(n):
                    layers.append(InvertedResidual(cin, 3, cin * t, c, False, nn.ReLU6,
                                                   s if i == 0 else 1, True))
                    cin = c
            layers.append(conv_bn(cin, 1280, 1, act=nn.ReLU6))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    class MobileNetV3(nn.Module):
        """torchvision's MobileNetV3 of ``blocks`` (large: 5,483,032 parameters)."""

        def __init__(self, blocks: tuple[tuple[Any, ...], ...], last: int,
                     num_classes: int = 1000) -> None:
            super().__init__()
            acts = {"RE": nn.ReLU, "HS": nn.Hardswish}
            layers: list[nn.Module] = [conv_bn(3, blocks[0][0], 3, 2, act=nn.Hardswish)]
            for cin, k, expanded, cout, se, act, stride in blocks:
                layers.append(InvertedResidual(cin, k, expanded, cout, se, acts[act], stride,
                                               False))
            layers.append(conv_bn(blocks[-1][3], 6 * blocks[-1][3], 1, act=nn.Hardswish))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(
                nn.Linear(6 * blocks[-1][3], last), nn.Hardswish(inplace=True),
                nn.Dropout(0.2, inplace=True), nn.Linear(last, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2, MobileNetV3


def _efficientnet() -> type:
    """torchvision's EfficientNet class (B0-B7); torch imported lazily."""
    import torch
    from torch import nn

    conv_bn, se_block = _depthwise_parts()

    class MBConv(nn.Module):
        """torchvision's MBConv: expansion, depthwise convolution, squeeze-and-excitation on a
        quarter of the input channels, projection; with a residual, stochastic depth (a
        per-sample mask in training) at ``sd_prob``."""

        def __init__(self, t: int, k: int, stride: int, cin: int, cout: int,
                     sd_prob: float) -> None:
            super().__init__()
            self.use_res_connect = stride == 1 and cin == cout
            expanded = _make_divisible(cin * t)
            layers: list[nn.Module] = []
            if expanded != cin:
                layers.append(conv_bn(cin, expanded, 1, act=nn.SiLU))
            layers += [conv_bn(expanded, expanded, k, stride, groups=expanded, act=nn.SiLU),
                       se_block(expanded, max(1, cin // 4), nn.SiLU, nn.Sigmoid),
                       conv_bn(expanded, cout, 1, act=None)]
            self.block = nn.Sequential(*layers)
            self.sd_prob = sd_prob

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.block(x)
            if not self.use_res_connect:
                return out
            if self.training and self.sd_prob > 0:  # torchvision.ops.stochastic_depth, "row"
                keep = 1.0 - self.sd_prob
                noise = torch.empty([x.shape[0], 1, 1, 1], dtype=x.dtype, device=x.device)
                out = out * noise.bernoulli_(keep).div_(keep)
            return out + x

    class EfficientNet(nn.Module):
        """torchvision's EfficientNet at ``width`` and ``depth`` (B0: 5,288,548 parameters),
        stochastic depth rising to 0.2 over the blocks."""

        def __init__(self, width: float, depth: float, dropout: float,
                     num_classes: int = 1000) -> None:
            super().__init__()
            stages = [(t, k, s, _make_divisible(cin * width), _make_divisible(cout * width),
                       math.ceil(n * depth))
                      for t, k, s, cin, cout, n in EFFICIENTNET_STAGES]
            total = sum(st[-1] for st in stages)
            layers: list[nn.Module] = [conv_bn(3, stages[0][3], 3, 2, act=nn.SiLU)]
            done = 0
            for t, k, s, cin, cout, n in stages:
                blocks: list[nn.Module] = []
                for i in range(n):
                    blocks.append(MBConv(t, k, s if i == 0 else 1, cin if i == 0 else cout,
                                         cout, 0.2 * done / total))
                    done += 1
                layers.append(nn.Sequential(*blocks))
            last = stages[-1][4]
            layers.append(conv_bn(last, 4 * last, 1, act=nn.SiLU))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True),
                                            nn.Linear(4 * last, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    return EfficientNet


def cnn_builders() -> dict[str, Callable[[], Any]]:
    """Builders of the torchvision-layout CNNs, by torchvision's names (torch imported lazily: it
    is optional)."""
    alexnet, vgg = _plain_cnns()
    resnet = _resnet()
    mods: dict[str, Callable[[], Any]] = {"alexnet": alexnet}
    for key, cfg in VGGS.items():
        mods[key] = functools.partial(vgg, cfg)
        mods[f"{key}_bn"] = functools.partial(vgg, cfg, batch_norm=True)
    for key, (depths, kw) in RESNETS.items():
        mods[key] = functools.partial(resnet, depths, **kw)
    mobilenet_v2, mobilenet_v3 = _mobilenets()
    mods["mobilenet_v2"] = mobilenet_v2
    for key in ("mobilenet_v3_large", "mobilenet_v3_small"):
        mods[key] = functools.partial(mobilenet_v3, *MOBILENETS[key])
    efficientnet = _efficientnet()
    for key, (width, depth, dropout) in EFFICIENTNETS.items():
        mods[key] = functools.partial(efficientnet, width, depth, dropout)
    return mods
