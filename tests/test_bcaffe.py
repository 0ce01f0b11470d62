"""The B-Caffe GoogleNet log loader: block choice, layer grouping, totals, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schedopt.errors import SchedoptError
from schedopt.files import load_trace
from schedopt.measure.bcaffe import (
    GOOGLENET_LAYERS,
    bcaffe_comm_times,
    load_bcaffe_log,
    read_bcaffe_log,
)
from schedopt.measure.commfit import fit_alpha_beta

LOGDATA = Path(__file__).resolve().parents[2] / "shared" / "reference" / "mgwfbp-traces" / (
    "B-Caffe/logdata"
)
needs_reference = pytest.mark.skipif(
    not LOGDATA.is_dir(), reason="shared reference data (../shared/reference) not present"
)

#: reference/mgwfbp-traces/README.md, "Per-file totals" (µs): sum of per-layer backward,
#: sum of layer-wise comm (column 4), sum of merged comm (column 5, None for 4-column files).
README_TOTALS = {
    "tmpcomm.log": (201_532, 166_846, None),
    "tmp2comm.log": (200_329, 153_993, None),
    "tmp4comm.log": (206_783, 261_512, None),
    "tmp4ocomm.log": (201_959, 257_556, 176_717),
    "tmp8comm.log": (205_334, 310_738, 297_641),
    "tmp8ocomm.log": (202_303, 319_427, 277_154),
}

SHIPPED = {
    "googlenet-k80-10gbe-2n": "tmp2comm.log",
    "googlenet-k80-10gbe-4n": "tmp4comm.log",
    "googlenet-k80-10gbe-8n": "tmp8comm.log",
    "googlenet-k80-10gbe-4n-o": "tmp4ocomm.log",
    "googlenet-k80-10gbe-8n-o": "tmp8ocomm.log",
}


def _line(fields: list[float]) -> str:
    body = ", ".join(f"{x:g}" for x in fields)
    return f"I0214 23:25:29.141575 37187 distributed.cpp:112] [{body}]"


def _log(tmp_path: Path, blocks: list[list[list[float]]], name: str = "tmp3comm.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(_line(r) for b in blocks for r in b) + "\n")
    return p


#: Three layers: conv (w, b), fc without bias (w), fc (w, b).
ROWS = [
    [0, 100, 30.0, 5],
    [1, 4, 30.0, 2],
    [2, 50, 20.0, 4],
    [3, 200, 10.0, 8],
    [4, 8, 10.0, 1],
]


# ------------------------------------------------------------------------------------ synthetic
def test_measured_block_is_last_non_zero(tmp_path: Path) -> None:
    zeros = [[r[0], r[1], 0, 0] for r in ROWS]
    log = read_bcaffe_log(_log(tmp_path, [zeros, ROWS]))
    assert (log.block, log.blocks, log.nodes) == (1, 2, 3)
    assert log.size.tolist() == [100, 4, 50, 200, 8]
    assert log.bytes.tolist() == [400, 16, 200, 800, 32]
    assert log.merged_us is None


def test_trailing_partial_block_is_ignored(tmp_path: Path) -> None:
    log = read_bcaffe_log(_log(tmp_path, [ROWS, ROWS[:2]]))
    assert log.block == 0


def test_layers_group_weight_and_bias(tmp_path: Path) -> None:
    tr = load_bcaffe_log(_log(tmp_path, [ROWS]), name="t", forward_ratio=0.5)
    assert [la.name for la in tr.layers] == ["layer00", "layer01", "layer02"]
    assert [len(la.tensors) for la in tr.layers] == [2, 1, 2]
    assert tr.layers[0].tensors[0].name == "layer00.weight"
    assert tr.layers[1].tensors[0].name == "layer01.weight"
    assert tr.backward.tolist() == pytest.approx([30e-6, 20e-6, 10e-6])
    assert tr.forward.tolist() == pytest.approx([15e-6, 10e-6, 5e-6])
    assert tr.total_bytes == 4 * sum(r[1] for r in ROWS)
    assert all(t.dtype == "float32" for t in tr.tensor_list)
    assert "forward = 0.5 x backward" in tr.source


def test_equal_times_of_adjacent_layers_split_after_two_blobs(tmp_path: Path) -> None:
    rows = [[0, 10, 7.0, 1], [1, 2, 7.0, 1], [2, 10, 7.0, 1], [3, 2, 7.0, 1]]
    tr = load_bcaffe_log(_log(tmp_path, [rows]))
    assert [len(la.tensors) for la in tr.layers] == [2, 2]


def test_iteration_costs_follow_the_stated_formulas(tmp_path: Path) -> None:
    tr = load_bcaffe_log(
        _log(tmp_path, [ROWS]), batch_size=10, image_bytes=1000, h2d_Bps=1e6,
        io_per_image_s=1e-3, update_bytes_per_param=20, memory_Bps=1e9,
    )
    assert tr.h2d_s == pytest.approx(10 * 1000 / 1e6)
    assert tr.io_s == pytest.approx(10e-3)
    assert tr.update_s == pytest.approx(20 * 362 / 1e9)
    assert tr.batch_size == 10


def test_five_columns_and_comm_samples(tmp_path: Path) -> None:
    rows = [[*r, m] for r, m in zip(ROWS, [9, 0, 0, 12, 0], strict=True)]
    rows[1][3] = 0  # bias sent with its weight
    p = _log(tmp_path, [rows], name="tmp8ocomm.log")
    log = read_bcaffe_log(p)
    assert log.nodes == 8
    assert log.total_merged_us == 21
    s = bcaffe_comm_times(p)
    assert s.sizes.tolist() == [400, 200, 800, 32]
    assert s.ranks == 8
    m = bcaffe_comm_times(p, merged=True)
    assert m.sizes.tolist() == [400, 800]
    assert m.times.tolist() == pytest.approx([9e-6, 12e-6])


def test_merged_times_need_five_columns(tmp_path: Path) -> None:
    with pytest.raises(SchedoptError, match="merged"):
        bcaffe_comm_times(_log(tmp_path, [ROWS]), merged=True)


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (["I0214 distributed.cpp:112] [0, 10, 1.0, x]"], ":1"),  # non-numeric field
        ([_line([0, 10, 1, 1]), _line([1, 10, 1, 1, 1])], ":2"),  # width changes
        ([_line([0, 10, 1])], ":1"),  # three fields
        ([_line([0, -10, 1, 1])], ":1"),  # negative size
        (["hello"], ":1"),  # not a log line
        ([_line([0, 10, 0, 0])], "no complete block"),  # nothing measured
        ([_line([0, 10, 1, 1]), _line([2, 10, 1, 1])], "param ids"),  # a gap in the ids
    ],
)
def test_bad_logs(tmp_path: Path, lines: list[str], match: str) -> None:
    p = tmp_path / "tmpxcomm.log"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(SchedoptError, match=match):
        read_bcaffe_log(p)


def test_layer_names_must_match_layer_count(tmp_path: Path) -> None:
    with pytest.raises(SchedoptError, match="layer_names"):
        load_bcaffe_log(_log(tmp_path, [ROWS]), layer_names=["a", "b"])


# ------------------------------------------------------------------------------------ real logs
@needs_reference
@pytest.mark.parametrize("fname", sorted(README_TOTALS))
def test_totals_match_readme(fname: str) -> None:
    back, comm, merged = README_TOTALS[fname]
    log = read_bcaffe_log(LOGDATA / fname)
    assert len(log.size) == 128
    assert int(log.size.sum()) == 13_379_136
    assert round(log.total_backward_us) == back
    assert round(log.total_comm_us) == comm
    if merged is None:
        assert log.merged_us is None
    else:
        assert round(log.total_merged_us or 0) == merged
    tr = load_bcaffe_log(LOGDATA / fname)
    assert len(tr.layers) == 64
    assert tr.num_tensors == 128
    assert tr.total_bytes == 4 * 13_379_136
    assert round(float(tr.backward.sum()) * 1e6) == back
    assert float(tr.forward.sum()) == pytest.approx(0.5 * float(tr.backward.sum()))
    assert [la.name for la in tr.layers] == list(GOOGLENET_LAYERS)


@needs_reference
def test_two_and_four_node_logs_skip_the_zero_block() -> None:
    for fname in ("tmp2comm.log", "tmp4comm.log"):
        log = read_bcaffe_log(LOGDATA / fname)
        assert (log.block, log.blocks) == (1, 2)
        assert (log.compute_us > 0).all()


@needs_reference
def test_googlenet_layer_shapes() -> None:
    tr = load_bcaffe_log(LOGDATA / "tmp8comm.log")
    by_name = {la.name: la for la in tr.layers}
    assert by_name["conv1/7x7_s2"].tensors[0].numel == 64 * 3 * 7 * 7
    assert by_name["loss1/fc"].tensors[0].numel == 2048 * 1024
    assert by_name["loss3/classifier"].tensors[0].numel == 1024 * 1000


@needs_reference
def test_layerwise_comm_grows_with_size() -> None:
    s = bcaffe_comm_times(LOGDATA / "tmp8comm.log")
    assert s.ranks == 8
    fit = fit_alpha_beta(s)
    assert fit.beta_s_per_byte > 0
    assert len(s) == 65  # 64 weights and the one bias with its own time


@needs_reference
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_traces_equal_the_loader(name: str) -> None:
    shipped = load_trace(name)
    fresh = load_bcaffe_log(LOGDATA / SHIPPED[name], name=name)
    assert [la.name for la in shipped.layers] == [la.name for la in fresh.layers]
    assert np.allclose(shipped.backward, fresh.backward, rtol=1e-12, atol=0)
    assert np.allclose(shipped.forward, fresh.forward, rtol=1e-12, atol=0)
    assert shipped.ready_bytes.tolist() == fresh.ready_bytes.tolist()
    assert (shipped.io_s, shipped.h2d_s, shipped.update_s) == pytest.approx(
        (fresh.io_s, fresh.h2d_s, fresh.update_s)
    )
    assert "MEASURED" in shipped.source
