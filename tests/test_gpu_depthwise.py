"""``benchmarks/gpu_depthwise.py``: the prepared GPU run that times depthwise convolutions beside
the estimator's price, checked on the CPU (its figures say nothing of a GPU)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("torch")

from schedopt.measure.estimate import estimate
from tests.scripts import load_script

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    return load_script("benchmarks/gpu_depthwise.py", "schedopt_gpu_depthwise")


def test_layers_are_the_models_depthwise_convolutions() -> None:
    gd = _script()
    layers = gd.depthwise_layers("mobilenet_v2", 2, 224)
    assert layers[0] == (2, 32, 112, 112, 3, 1)  # the first block's, after the stem
    assert all(k == 3 for *_, k, _ in layers) and {s for *_, s in layers} == {1, 2}
    assert len(layers) == len(set(layers)) < 17  # distinct shapes of its 17 depthwise layers
    b0 = gd.depthwise_layers("efficientnet_b0", 2, 224)
    assert {k for *_, k, _ in b0} == {3, 5}


def test_the_price_is_the_estimators() -> None:
    """The script's price of MobileNetV2's first depthwise layer is what the estimator charges
    that layer in a trace (forward and backward), for the same profile and layout."""
    gd = _script()
    log: list = []
    estimate("mobilenet_v2", "v100", "fp32", 8, memory_format="nchw", log=log)
    rec = next(r for r in log if r[0] == "convolution" and r[2] == (8, 32, 112, 112)
               and r[3] == 2 * 8 * 32 * 112 * 112 * 9)
    assert gd._priced("v100", "fp32", "nchw", (8, 32, 112, 112, 3, 1)) == pytest.approx(
        rec[5] + rec[6])


def test_smoke_run_writes_both_layouts_of_every_layer(tmp_path: Path) -> None:
    gd = _script()
    assert gd.main(["--smoke", "--out", str(tmp_path), "--model", "mobilenet_v3_small"]) == 0
    data = json.loads((tmp_path / "depthwise-mobilenet_v3_small-fp32.json").read_text())
    layers = gd.depthwise_layers("mobilenet_v3_small", 2, 64)
    assert data["smoke"] is True and len(data["rows"]) == 2 * len(layers)
    assert {r["layout"] for r in data["rows"]} == {"nchw", "channels_last"}
    assert all(r["measured_s"] > 0 and r["priced_s"] > 0 for r in data["rows"])
    assert [tuple(r["shape"]) for r in data["rows"][::2]] == layers
