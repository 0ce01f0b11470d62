"""Load the layer-wise GoogleNet logs of B-Caffe (the platform of MG-WFBP, Shi et al.).

Each log line is a glog line whose bracket holds ``[param_id, size, compute_us, comm_us]`` or,
in the five-column files, ``[param_id, size, compute_us, comm_us, merged_us]``:

- ``param_id``: index of the learnable blob in forward order (weight, then bias, of each layer);
- ``size``: number of float32 elements of the blob (Caffe's aligned count);
- ``compute_us``: backward time of the owning layer in microseconds (weight and bias carry the
  same value);
- ``comm_us``: measured all-reduce time of the blob's gradient in microseconds (layer-wise, no
  merging; 0 where the blob was sent together with its layer's weight);
- ``merged_us``: all-reduce time after merging (0 for blobs merged into a neighbour).

A file may hold several blocks of rows (the 2-, 4- and 8-node files print one before timing,
all zeros in some files, and one after). The measured block is the last complete block whose
compute times are not all zero. The format is described in
``reference/mgwfbp-traces/README.md`` of the project's shared data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedopt.errors import SchedoptError
from schedopt.measure.comm_tables import CommSamples
from schedopt.model.trace import Layer, Tensor, Trace

__all__ = [
    "BCAFFE_DEFAULTS",
    "GOOGLENET_LAYERS",
    "BCaffeLog",
    "bcaffe_comm_times",
    "load_bcaffe_log",
    "read_bcaffe_log",
]

_ROW = re.compile(r"\]\s*\[([^\]]*)\]\s*$")

#: Layers with learnable blobs of BVLC GoogLeNet (with the two auxiliary classifiers), in the
#: order of its Caffe prototxt (``models/bvlc_googlenet/train_val.prototxt``): 64 layers, 128 blobs.
GOOGLENET_LAYERS: tuple[str, ...] = (
    "conv1/7x7_s2",
    "conv2/3x3_reduce",
    "conv2/3x3",
    *(f"inception_3{b}/{c}" for b in "ab"
      for c in ("1x1", "3x3_reduce", "3x3", "5x5_reduce", "5x5", "pool_proj")),
    *(f"inception_4a/{c}" for c in ("1x1", "3x3_reduce", "3x3", "5x5_reduce", "5x5", "pool_proj")),
    "loss1/conv",
    "loss1/fc",
    "loss1/classifier",
    *(f"inception_4{b}/{c}" for b in "bcd"
      for c in ("1x1", "3x3_reduce", "3x3", "5x5_reduce", "5x5", "pool_proj")),
    "loss2/conv",
    "loss2/fc",
    "loss2/classifier",
    *(f"inception_{b}/{c}" for b in ("4e", "5a", "5b")
      for c in ("1x1", "3x3_reduce", "3x3", "5x5_reduce", "5x5", "pool_proj")),
    "loss3/classifier",
)

#: Elements of the 128 GoogLeNet blobs in the B-Caffe logs (Caffe's aligned counts).
GOOGLENET_ALIGNED_PARAMS = 13_379_136

#: Estimates for what the logs do not measure (GoogleNet, batch 64 per K80 GPU). Every figure is
#: written into the trace's ``source`` by :func:`load_bcaffe_log`.
BCAFFE_DEFAULTS: dict[str, float] = {
    # backward takes about twice the forward FLOPs, so forward = backward / 2
    "forward_ratio": 0.5,
    # per-GPU batch of the B-Caffe simulation script (['GoogleNet', 64])
    "batch_size": 64,
    # float32 input of one 3x224x224 image
    "image_bytes": 3 * 224 * 224 * 4,
    # PCIe Gen3 x16 achieved bandwidth (reference/FACTS.md link table: 10-12 GB/s)
    "h2d_Bps": 10e9,
    # assumed cost of Caffe's data layer per image: read one pre-decoded 256x256x3 LMDB record,
    # crop and subtract the mean, in one prefetch thread
    "io_per_image_s": 0.25e-3,
    # SGD with momentum in float32 moves 20 bytes per parameter (read w, g, m; write w, m)
    "update_bytes_per_param": 20,
    # assumed achieved memory bandwidth of one K80 GPU (GK210: 240 GB/s peak, about 70%)
    "memory_Bps": 170e9,
}


@dataclass(frozen=True)
class BCaffeLog:
    """The measured block of one B-Caffe log.

    Attributes
    ----------
    path
        The log file.
    param_id, size
        Blob index and element count (int arrays, 128 rows for GoogleNet).
    compute_us
        Backward time of the owning layer, per blob (µs).
    comm_us
        Measured layer-wise all-reduce time per blob (µs).
    merged_us
        All-reduce time after merging (µs), or None for four-column files.
    block, blocks
        Index of the measured block and number of blocks in the file.
    nodes
        Node count written in the file name (``tmp8comm.log`` -> 8), or None.
    """

    path: Path
    param_id: np.ndarray
    size: np.ndarray
    compute_us: np.ndarray
    comm_us: np.ndarray
    merged_us: np.ndarray | None
    block: int
    blocks: int
    nodes: int | None

    @property
    def bytes(self) -> np.ndarray:
        """Gradient bytes of every blob (``4 * size``, float32)."""
        return 4 * self.size

    def layer_slices(self) -> list[slice]:
        """Blob ranges of the layers: consecutive blobs with equal compute time, at most two
        (weight and bias) per layer."""
        out: list[slice] = []
        start = 0
        for i in range(1, len(self.size) + 1):
            if (
                i == len(self.size)
                or self.compute_us[i] != self.compute_us[start]
                or i - start == 2
            ):
                out.append(slice(start, i))
                start = i
        return out

    @property
    def layer_backward_us(self) -> np.ndarray:
        """Backward time of every layer (µs), de-duplicated."""
        return np.array([self.compute_us[s.start] for s in self.layer_slices()])

    @property
    def total_backward_us(self) -> float:
        """Sum of the per-layer backward times (µs)."""
        return float(self.layer_backward_us.sum())

    @property
    def total_comm_us(self) -> float:
        """Sum of the layer-wise all-reduce times (µs)."""
        return float(self.comm_us.sum())

    @property
    def total_merged_us(self) -> float | None:
        """Sum of the merged all-reduce times (µs), or None."""
        return None if self.merged_us is None else float(self.merged_us.sum())


def _nodes_from_name(path: Path) -> int | None:
    m = re.search(r"(\d+)o?comm$", path.stem)
    return int(m.group(1)) if m else None


def read_bcaffe_log(path: str | Path) -> BCaffeLog:
    """Parse a B-Caffe ``tmp*comm.log`` and return its measured block.

    Raises
    ------
    SchedoptError
        Unreadable file, a malformed row (names file and line), rows of mixed width, or no block
        with measured compute times.
    """
    p = Path(path)
    try:
        lines = p.read_text(errors="replace").splitlines()
    except OSError as exc:
        raise SchedoptError(f"cannot read file: {exc.strerror or exc}", "file", str(p)) from None
    rows: list[list[float]] = []
    width = 0
    for lineno, line in enumerate(lines, 1):
        m = _ROW.search(line)
        if m is None:
            if line.strip():
                raise SchedoptError("not a B-Caffe overhead line", f"{p}:{lineno}", line.strip())
            continue
        try:
            row = [float(x) for x in m.group(1).split(",")]
        except ValueError:
            raise SchedoptError("non-numeric field", f"{p}:{lineno}", m.group(1)) from None
        if len(row) not in (4, 5) or (width and len(row) != width):
            raise SchedoptError(
                f"expected {width or '4 or 5'} fields", f"{p}:{lineno}", m.group(1)
            )
        if row[0] != int(row[0]) or row[1] <= 0 or row[1] != int(row[1]) or min(row[2:]) < 0:
            raise SchedoptError("bad id, size or time", f"{p}:{lineno}", m.group(1))
        width = len(row)
        rows.append(row)
    if not rows:
        raise SchedoptError("no B-Caffe overhead lines", "file", str(p))
    starts = [i for i, r in enumerate(rows) if r[0] == 0] or [0]
    if starts[0] != 0:
        starts.insert(0, 0)
    blocks = [rows[a:b] for a, b in zip(starts, [*starts[1:], len(rows)], strict=True)]
    full = max(len(b) for b in blocks)
    chosen = None
    for k in range(len(blocks) - 1, -1, -1):
        blk = blocks[k]
        if len(blk) == full and any(r[2] > 0 for r in blk):
            chosen = k
            break
    if chosen is None:
        raise SchedoptError("no complete block with measured compute times", "file", str(p))
    arr = np.array(blocks[chosen], dtype=float)
    if list(arr[:, 0].astype(int)) != list(range(len(arr))):
        raise SchedoptError("param ids of the measured block are not 0, 1, 2, ...", "file", str(p))
    return BCaffeLog(
        path=p,
        param_id=arr[:, 0].astype(np.int64),
        size=arr[:, 1].astype(np.int64),
        compute_us=arr[:, 2].copy(),
        comm_us=arr[:, 3].copy(),
        merged_us=arr[:, 4].copy() if width == 5 else None,
        block=chosen,
        blocks=len(blocks),
        nodes=_nodes_from_name(p),
    )


def bcaffe_comm_times(path: str | Path, *, merged: bool = False) -> CommSamples:
    """Measured per-blob all-reduce times of a B-Caffe log, as fit-ready samples.

    Parameters
    ----------
    path
        A ``tmp*comm.log`` file.
    merged
        Use the merged times (column 5) instead of the layer-wise ones.

    Returns
    -------
    CommSamples
        Bytes and seconds of the blobs with a non-zero time (a zero marks a blob sent together
        with another), format ``bcaffe-layerwise`` or ``bcaffe-merged``, ranks = the node count
        of the file name. For merged times the size is that of the blob carrying the time, not of
        the merged group.
    """
    log = read_bcaffe_log(path)
    col = log.comm_us
    if merged:
        if log.merged_us is None:
            raise SchedoptError("the log has no merged-time column", "file", str(path))
        col = log.merged_us
    keep = col > 0
    return CommSamples(
        sizes=log.bytes[keep].astype(np.int64),
        times=col[keep] * 1e-6,
        format="bcaffe-merged" if merged else "bcaffe-layerwise",
        ranks=log.nodes,
        source=str(path),
    )


def load_bcaffe_log(
    path: str | Path,
    *,
    name: str | None = None,
    forward_ratio: float = BCAFFE_DEFAULTS["forward_ratio"],
    batch_size: int = int(BCAFFE_DEFAULTS["batch_size"]),
    io_per_image_s: float = BCAFFE_DEFAULTS["io_per_image_s"],
    image_bytes: int = int(BCAFFE_DEFAULTS["image_bytes"]),
    h2d_Bps: float = BCAFFE_DEFAULTS["h2d_Bps"],
    update_bytes_per_param: float = BCAFFE_DEFAULTS["update_bytes_per_param"],
    memory_Bps: float = BCAFFE_DEFAULTS["memory_Bps"],
    layer_names: Sequence[str] | None = None,
    source: str = "",
) -> Trace:
    """Build a :class:`~schedopt.model.trace.Trace` from a B-Caffe log's measured block.

    Layers are in forward order; the weight and bias of a layer become one layer with two
    float32 tensors (``bytes = 4 * size``); the layer's backward time is its de-duplicated compute
    value. What the log does not measure is estimated, and the estimate is stated in ``source``:

    - forward = ``forward_ratio`` × backward (default 1/2: backward takes about twice the
      forward FLOPs);
    - h2d = ``batch_size × image_bytes / h2d_Bps``;
    - io = ``batch_size × io_per_image_s``;
    - update = ``update_bytes_per_param × params / memory_Bps``.

    Parameters
    ----------
    path
        A ``tmp*comm.log`` file.
    name
        Trace name (default: ``bcaffe-`` and the file stem).
    layer_names
        Names of the layers in forward order; default: BVLC GoogLeNet's names when the log has its
        64 layers and 13,379,136 elements, else ``layer00``, ``layer01``, ...
    source
        Text put in front of the generated description.
    """
    log = read_bcaffe_log(path)
    slices = log.layer_slices()
    total_params = int(log.size.sum())
    layers = _measured_layers(log, layer_names, forward_ratio)
    h2d = batch_size * image_bytes / h2d_Bps
    io = batch_size * io_per_image_s
    update = update_bytes_per_param * total_params / memory_Bps
    desc = (
        f"B-Caffe layer-wise log {log.path.name} (block {log.block + 1} of {log.blocks}; "
        f"{len(log.size)} blobs, {len(slices)} layers, {total_params:,} float32 elements in "
        f"Caffe's aligned counts): backward per layer measured (sum {log.total_backward_us:,.0f}"
        f" us). Estimated: forward = {forward_ratio:g} x backward (backward takes about twice the"
        f" forward FLOPs); h2d = {batch_size} x {image_bytes:,} B (float32 3x224x224 image) /"
        f" {h2d_Bps / 1e9:g} GB/s (PCIe Gen3 x16, reference/FACTS.md) = {h2d * 1e3:.2f} ms;"
        f" io = {batch_size} x {io_per_image_s * 1e3:g} ms per image (assumed: Caffe data layer"
        f" reading pre-decoded LMDB records) = {io * 1e3:.2f} ms;"
        f" update = {update_bytes_per_param:g} B/param (SGD momentum, float32) x"
        f" {total_params:,} / {memory_Bps / 1e9:g} GB/s"
        f" (assumed achieved K80 memory bandwidth, about 70% of 240 GB/s) = {update * 1e3:.2f} ms"
    )
    return Trace.model_validate({
        "name": name or f"bcaffe-{log.path.stem}",
        "batch_size": batch_size,
        "source": f"{source}; {desc}" if source else desc,
        "io_s": io,
        "h2d_s": h2d,
        "update_s": update,
        "layers": layers,
    })


def _measured_layers(log: BCaffeLog, layer_names: Sequence[str] | None,
                     forward_ratio: float) -> list[Layer]:
    """The log's layers in forward order: measured backward, forward = ratio x backward, the
    weight and bias of a layer as two float32 tensors (names as :func:`load_bcaffe_log` says)."""
    slices = log.layer_slices()
    if layer_names is None:
        if (len(slices) == len(GOOGLENET_LAYERS)
                and int(log.size.sum()) == GOOGLENET_ALIGNED_PARAMS):
            layer_names = GOOGLENET_LAYERS
        else:
            layer_names = [f"layer{i:02d}" for i in range(len(slices))]
    if len(layer_names) != len(slices):
        raise SchedoptError(f"needs {len(slices)} names", "layer_names", len(layer_names))
    layers = []
    for lname, s in zip(layer_names, slices, strict=True):
        back = float(log.compute_us[s.start]) * 1e-6
        blobs = range(s.start, s.stop)
        suffix = ("weight", "bias") if len(blobs) == 2 else ("weight",)
        tensors = [Tensor(name=f"{lname}.{suf}", bytes=int(4 * log.size[i]), dtype="float32")
                   for suf, i in zip(suffix, blobs, strict=True)]
        layers.append(Layer(name=lname, forward_s=forward_ratio * back, backward_s=back,
                            tensors=tensors))
    return layers
