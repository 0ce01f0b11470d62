"""Layer-wise traces of one training iteration on one GPU.

A :class:`Trace` lists the layers in forward order, each with its forward and backward time and
its gradient tensors. Readiness follows docs/model.md: every tensor of a layer is ready when that
layer's backward ends; the default gradient-ready order is reverse layer order and, inside a
layer, the reverse of the layer's tensor list (the order PyTorch DDP sees).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from schedopt.errors import SchedoptError
from schedopt.model.limits import MAX_BATCH, MAX_BYTES, MAX_TOTAL_BYTES, Int
from schedopt.model.limits import Seconds as Seconds

__all__ = ["DTYPE_BYTES", "SCHEMA_VERSION", "Layer", "Tensor", "Trace", "fingerprint",
           "median_trace"]

SCHEMA_VERSION = 1

#: Item size of every gradient dtype a trace may name.
DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8": 1,
    "int64": 8,
    "int32": 4,
    "int8": 1,
}

Dtype = Literal["float64", "float32", "float16", "bfloat16", "float8", "int64", "int32", "int8"]


#: Separates a tensor name from a piece index in plan members (``name#i``); refused in names.
PIECE_SEPARATOR = "#"


def fingerprint(model: BaseModel) -> str:
    """Return a short, stable hash of a model's content (16 hex digits)."""
    return hashlib.sha256(model.model_dump_json().encode()).hexdigest()[:16]


class Tensor(BaseModel):
    """One gradient tensor, or one frozen parameter (:attr:`Layer.frozen`).

    Attributes
    ----------
    name
        Unique name (e.g. ``conv1.weight``). A name repeated in a later layer is a tied weight and
        belongs to the earliest layer in forward order.
    bytes
        Size of the gradient in bytes.
    dtype
        Gradient dtype; ``numel = bytes / itemsize``.
    rows
        Optional leading dimension (``shape[0]``) of the parameter; it divides ``numel``.
        Partitioning policies (ByteScheduler) cut along it when known. Left out of the
        serialised form when unset, so traces without it keep their hashes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Unique tensor name.")
    bytes: Int = Field(gt=0, le=MAX_BYTES, description="Gradient size in bytes.")
    dtype: Dtype = Field("float32", description="Gradient dtype (default float32).")
    rows: Int | None = Field(
        default=None, gt=0, description="Leading dimension (shape[0]), if known."
    )

    @model_validator(mode="after")
    def _check_rows(self) -> Tensor:
        if self.rows is not None and self.numel % self.rows:
            raise ValueError(f"rows {self.rows} does not divide the {self.numel} elements")
        return self

    @model_serializer(mode="wrap")
    def _drop_unset_rows(self, handler: Any) -> Any:
        data = handler(self)
        if self.rows is None and isinstance(data, dict):
            data.pop("rows", None)
        return data

    @property
    def numel(self) -> int:
        """Number of elements."""
        return self.bytes // DTYPE_BYTES[self.dtype]


class Layer(BaseModel):
    """One layer: its forward and backward time on one GPU, its gradient tensors and its frozen
    parameters.

    ``frozen`` lists parameters with ``requires_grad=False`` (name, bytes, dtype, rows as for a
    tensor; names distinct from every gradient tensor's): sharded plans all-gather them with
    their unit and never reduce-scatter them (torch 2.13 ``_fsdp_param_group.py``,
    ``FSDPParamGroup.post_backward``: only parameters with a gradient are reduced); all-reduce
    plans ignore them (DDP's reducer skips them). Left out of the serialised form when empty,
    so traces without it keep their hashes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Layer name.")
    forward_s: Seconds = Field(description="Forward time in seconds (one GPU, per-GPU batch).")
    backward_s: Seconds = Field(description="Backward time in seconds.")
    tensors: list[Tensor] = Field(default_factory=list, description="Gradient tensors.")
    frozen: list[Tensor] = Field(
        default_factory=list, description="Parameters without gradients (requires_grad=False):"
        " all-gathered by sharded plans, never reduced; ignored by all-reduce plans.")
    host_forward_s: Seconds = Field(
        default=0.0, description="Host time to launch the layer's forward (CPU time of the "
        "launching thread; 0: never host-bound).")
    host_backward_s: Seconds = Field(
        default=0.0,
        description="Host time to launch the layer's backward (0: never host-bound).")

    @model_serializer(mode="wrap")
    def _drop_zero_host(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):  # added later: left out at 0 so traces keep their hashes
            for key in ("host_forward_s", "host_backward_s"):
                if data.get(key) == 0.0:
                    data.pop(key)
            if data.get("frozen") == []:
                data.pop("frozen")  # likewise, left out when empty
        return data


def _check_tensors(tensors: list[Tensor], where: str, seen: dict[str, Tensor],
                   other: dict[str, Tensor]) -> int:
    """Check one layer's list of tensors (``where``: its field) against the tensors of the same
    kind seen so far (``seen``, updated; a repeated name is a tied weight and must be equal) and
    of the other kind (``other``: a name is a gradient tensor or frozen, not both); return the
    bytes of the tensors seen for the first time.

    Raises
    ------
    SchedoptError
        A name listed twice in the layer, a tied tensor that differs, a name of the other kind,
        a name holding the piece separator, bytes not a multiple of the item size.
    """
    in_layer: set[str] = set()
    total = 0
    for j, t in enumerate(tensors):
        field = f"{where}[{j}]"
        if t.name in in_layer:
            raise SchedoptError("tensor is listed twice in one layer", f"{field}.name", t.name)
        in_layer.add(t.name)
        if t.name in other:
            raise SchedoptError("a parameter is either a gradient tensor or frozen, not both",
                                f"{field}.name", t.name)
        first = seen.get(t.name)
        if first is None:
            seen[t.name] = t
            total += t.bytes
        elif first != t:
            raise SchedoptError(f"tied tensor {t.name!r} differs from its first occurrence",
                                field, t.bytes)
        if PIECE_SEPARATOR in t.name:
            raise SchedoptError(f"tensor name holds {PIECE_SEPARATOR!r}, which plans use for "
                                "pieces (name#i); rename the tensor", f"{field}.name", t.name)
        if t.bytes % DTYPE_BYTES[t.dtype]:
            raise SchedoptError(f"bytes is not a multiple of the {t.dtype} item size",
                                f"{field}.bytes", t.bytes)
    return total


class Trace(BaseModel):
    """A layer-wise trace of one model at one per-GPU batch size.

    Attributes
    ----------
    layers
        Layers in forward order.
    io_s, h2d_s, update_s
        Iteration-level costs: read and decode a batch, copy it to the GPU, optimizer step for all
        parameters (a bucket's share is proportional to its bytes).
    host_update_s
        Host time of the optimizer step (launching its kernels); the step cannot start on the
        device before it ends (docs/model.md, "Host side"). Default 0.
    grad_ready_order
        Optional explicit gradient-ready order (tensor names); it may only refine the order among
        tensors of equal ready time.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Int = Field(SCHEMA_VERSION, description="Format version (1).")
    name: str = Field(min_length=1, description="Instance name.")
    batch_size: Int = Field(gt=0, le=MAX_BATCH, description="Per-GPU batch size.")
    source: str = Field("", description="Where the numbers come from.")
    io_s: Seconds = Field(0.0, description="Read and decode one batch (CPU).")
    h2d_s: Seconds = Field(0.0, description="Copy one batch to the GPU (PCIe).")
    update_s: Seconds = Field(0.0, description="Optimizer step for all parameters.")
    host_update_s: Seconds = Field(0.0, description="Host time of the optimizer step.")
    layers: list[Layer] = Field(min_length=1, description="Layers in forward order.")
    grad_ready_order: list[str] | None = Field(
        None, description="Optional gradient-ready order of tensor names."
    )
    retimed_from: str | None = Field(
        None, description="Fingerprint of the trace this one re-times (same layers and tensors,"
        " other times: `calibrate --fit compute_scale`); plans made for it bind to this one."
    )

    @model_serializer(mode="wrap")
    def _drop_zero_host(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("host_update_s") == 0.0:
            data.pop("host_update_s")  # added later: left out at 0 (hashes unchanged)
        if isinstance(data, dict) and data.get("retimed_from", 0) is None:
            data.pop("retimed_from")  # likewise, left out when absent
        return data

    @model_validator(mode="after")
    def _check(self) -> Trace:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {self.schema_version}")
        seen: dict[str, Tensor] = {}
        frozen: dict[str, Tensor] = {}
        total = 0
        for i, layer in enumerate(self.layers):
            total += _check_tensors(layer.tensors, f"layers[{i}].tensors", seen, frozen)
            total += _check_tensors(layer.frozen, f"layers[{i}].frozen", frozen, seen)
        if not seen:
            raise SchedoptError("the trace has no gradient tensors", "layers", len(self.layers))
        if total > MAX_TOTAL_BYTES:
            raise SchedoptError(f"the parameters total more than 2^53 bytes ({total:,})",
                                "layers", len(self.layers))
        if self.grad_ready_order is not None:
            self._check_ready_order()
        return self

    def _check_ready_order(self) -> None:
        order = self.grad_ready_order or []
        names = {t.name for t in self.tensor_list}
        if len(order) != len(names) or set(order) != names:
            missing = sorted(names - set(order))[:1] or sorted(set(order) - names)[:1]
            raise SchedoptError(
                "must list every tensor exactly once", "grad_ready_order", missing[0] if missing
                else len(order)
            )
        layer_of = {t.name: self.tensor_layer_by_name[t.name] for t in self.tensor_list}
        prev = math.inf
        for i, name in enumerate(order):
            lay = layer_of[name]
            if lay > prev:
                raise SchedoptError(
                    "contradicts the layer ready times (a tensor of a later layer after an"
                    " earlier one)",
                    f"grad_ready_order[{i}]",
                    name,
                )
            prev = lay

    # ------------------------------------------------------------------ derived views
    def _earliest(self, field: str) -> dict[str, tuple[int, Tensor]]:
        """Every tensor of ``field`` (``tensors`` or ``frozen``) by name, once: its earliest
        layer in forward order and the tensor."""
        out: dict[str, tuple[int, Tensor]] = {}
        for i, layer in enumerate(self.layers):
            for t in getattr(layer, field):
                out.setdefault(t.name, (i, t))
        return out

    @cached_property
    def tensor_list(self) -> list[Tensor]:
        """Unique tensors in forward order (tied weights once, at their earliest layer)."""
        return [t for _, t in self._earliest("tensors").values()]

    @cached_property
    def tensor_layer_by_name(self) -> dict[str, int]:
        """Owning layer (earliest in forward order) of every tensor."""
        return {name: i for name, (i, _) in self._earliest("tensors").items()}

    @cached_property
    def frozen_list(self) -> list[Tensor]:
        """Unique frozen parameters in forward order (tied ones once, at their earliest
        layer)."""
        return [t for _, t in self._earliest("frozen").values()]

    @cached_property
    def frozen_layer_by_name(self) -> dict[str, int]:
        """Owning layer (earliest in forward order) of every frozen parameter."""
        return {name: i for name, (i, _) in self._earliest("frozen").items()}

    @cached_property
    def ready_order(self) -> list[Tensor]:
        """Tensors in gradient-ready order."""
        if self.grad_ready_order is not None:
            by_name = {t.name: t for t in self.tensor_list}
            return [by_name[n] for n in self.grad_ready_order]
        out: list[Tensor] = []
        owner = self.tensor_layer_by_name
        for i in range(len(self.layers) - 1, -1, -1):
            out.extend(t for t in reversed(self.layers[i].tensors) if owner[t.name] == i)
        return out

    @cached_property
    def ready_index(self) -> dict[str, int]:
        """Position of every tensor in the gradient-ready order."""
        return {t.name: k for k, t in enumerate(self.ready_order)}

    @cached_property
    def ready_layer(self) -> np.ndarray:
        """Owning layer index of every tensor, in gradient-ready order (int array)."""
        owner = self.tensor_layer_by_name
        return np.array([owner[t.name] for t in self.ready_order], dtype=np.int64)

    @cached_property
    def ready_bytes(self) -> np.ndarray:
        """Bytes of every tensor, in gradient-ready order (int array)."""
        return np.array([t.bytes for t in self.ready_order], dtype=np.int64)

    @cached_property
    def forward(self) -> np.ndarray:
        """Forward times of the layers (float array)."""
        return np.array([la.forward_s for la in self.layers], dtype=float)

    @cached_property
    def backward(self) -> np.ndarray:
        """Backward times of the layers (float array)."""
        return np.array([la.backward_s for la in self.layers], dtype=float)

    @cached_property
    def host_forward(self) -> np.ndarray:
        """Host launch times of the layers' forwards (float array)."""
        return np.array([la.host_forward_s for la in self.layers], dtype=float)

    @cached_property
    def host_backward(self) -> np.ndarray:
        """Host launch times of the layers' backwards (float array)."""
        return np.array([la.host_backward_s for la in self.layers], dtype=float)

    @property
    def has_host(self) -> bool:
        """Whether any host time is given (docs/model.md, "Host side")."""
        return bool(self.host_update_s or self.host_forward.any() or self.host_backward.any())

    @property
    def num_tensors(self) -> int:
        """Number of unique gradient tensors."""
        return len(self.tensor_list)

    @property
    def total_bytes(self) -> int:
        """Total gradient bytes."""
        return int(self.ready_bytes.sum())

    @property
    def compute_s(self) -> float:
        """Sum of forward and backward times."""
        return float(self.forward.sum() + self.backward.sum())

    @cached_property
    def _fingerprint(self) -> str:
        return fingerprint(self)

    def fingerprint(self) -> str:
        """Stable content hash (plans are bound to it)."""
        return self._fingerprint

    def scaled(self, *, compute: float = 1.0, name: str | None = None,
               update: bool = False) -> Trace:
        """Return a copy with every forward and backward time (and ``update_s`` when
        ``update``) multiplied by ``compute``."""
        data = self.model_dump()
        for la in data["layers"]:
            la["forward_s"] *= compute
            la["backward_s"] *= compute
        if update:
            data["update_s"] *= compute
        data["name"] = name or self.name
        return Trace.model_validate(data)


def median_trace(traces: Sequence[Trace], *, source: str) -> Trace:
    """One trace from several measurements of the same model: per-layer medians.

    Parameters
    ----------
    traces
        Traces of one model (the same layers with the same tensors, in the same order), e.g.
        one per rank of a profile taken on several co-running ranks, or one per round.
    source
        The merged trace's ``source``.

    Returns
    -------
    Trace
        The first trace with every layer's ``forward_s`` and ``backward_s``, and ``io_s``,
        ``h2d_s`` and ``update_s``, replaced by their medians over ``traces``.

    Raises
    ------
    SchedoptError
        No trace, or traces of different models (layers or tensors differ).
    """
    if not traces:
        raise SchedoptError("no trace to merge", "traces", 0)
    first = traces[0]

    def shape(t: Trace) -> list[tuple[str, list[tuple[str, int]], list[tuple[str, int]]]]:
        return [(lay.name, [(x.name, x.bytes) for x in lay.tensors],
                 [(x.name, x.bytes) for x in lay.frozen]) for lay in t.layers]

    for t in traces[1:]:
        if shape(t) != shape(first):
            raise SchedoptError("the traces describe different models (layers or tensors "
                                "differ)", "traces", t.name)
    data = first.model_dump(mode="json", exclude_none=True)
    for k, layer in enumerate(data["layers"]):
        layer["forward_s"] = statistics.median(t.layers[k].forward_s for t in traces)
        layer["backward_s"] = statistics.median(t.layers[k].backward_s for t in traces)
    for key in ("io_s", "h2d_s", "update_s"):
        data[key] = statistics.median(getattr(t, key) for t in traces)
    data["source"] = source
    return Trace.model_validate(data)
