"""torchvision's image classifiers, built without torchvision: AlexNet, the VGG family (with
and without batch norm) and the ResNet family (ResNet, ResNeXt, Wide ResNet), in the layout of
``torchvision/models/alexnet.py``, ``vgg.py`` and ``resnet.py`` (module and parameter names as
there), for the compute estimator (:mod:`schedopt.measure.estimate`). torch is imported lazily:
it is optional.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["RESNETS", "VGGS", "cnn_builders"]


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
    return mods
