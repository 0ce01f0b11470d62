"""Policy registry and ``NAME:key=value,...`` spec parsing."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.limits import check_knob_work, check_knobs, strict_int
from schedopt.model.plan import MAX_ACCUMULATE, Plan
from schedopt.model.trace import DTYPE_BYTES, Trace
from schedopt.policies.bytescheduler import bytescheduler
from schedopt.policies.caffe_mpi import caffe_mpi
from schedopt.policies.cntk import cntk
from schedopt.policies.ddp import ddp
from schedopt.policies.deepspeed import check_accumulate, deepspeed
from schedopt.policies.fsdp import fsdp
from schedopt.policies.horovod import horovod
from schedopt.policies.megatron import megatron
from schedopt.policies.megatron_distopt import megatron_distopt
from schedopt.policies.mgwfbp import mgwfbp
from schedopt.policies.mxnet import mxnet
from schedopt.policies.sync_easgd import sync_easgd
from schedopt.policies.tensorflow import tensorflow
from schedopt.policies.zero3 import zero3

__all__ = ["POLICIES", "SHARDED_POLICIES", "check_spec", "make_plan", "parse_spec",
           "sharded_specs"]

PolicyFn = Callable[..., Plan]

#: Every policy by name, in the order ``compare`` shows them.
POLICIES: dict[str, PolicyFn] = {
    "cntk": cntk,
    "sync-easgd": sync_easgd,
    "caffe-mpi": caffe_mpi,
    "mxnet": mxnet,
    "tensorflow": tensorflow,
    "ddp": ddp,
    "horovod": horovod,
    "mgwfbp": mgwfbp,
    "bytescheduler": bytescheduler,
    "deepspeed": deepspeed,
    "megatron": megatron,
}

#: Sharded baselines (plans with ``sharding``), apart from :data:`POLICIES` so that the
#: all-reduce comparisons (``compare``, ``optimize``'s baselines) stay as they were;
#: ``compare --sharding`` lists them.
SHARDED_POLICIES: dict[str, PolicyFn] = {
    "fsdp": fsdp,
    "zero3": zero3,
    "megatron-distopt": megatron_distopt,
}

#: The sharded baselines ``compare --sharding MODE`` lists, per mode.
SHARDED_SPECS: dict[str, list[str]] = {
    "full": ["fsdp", "zero3"],
    "grad-op": ["fsdp:reshard_after_forward=false", "megatron-distopt"],
}


def sharded_specs(mode: str) -> list[str]:
    """The sharded baselines of ``mode`` (``full`` or ``grad-op``) as policy specs.

    Raises
    ------
    SchedoptError
        For another mode.
    """
    if mode not in SHARDED_SPECS:
        raise SchedoptError(f"must be one of {', '.join(SHARDED_SPECS)}", "--sharding", mode)
    return list(SHARDED_SPECS[mode])


#: Knobs every policy accepts, applied to the plan it returns: ``prefetch`` (I/O prefetch
#: depth, 0 or 1) and ``accumulate`` (micro-batches per step, gradients reduced after the last:
#: DDP ``no_sync``, Horovod ``backward_passes_per_step``, DeepSpeed
#: ``gradient_accumulation_steps``, FSDP2 ``set_requires_gradient_sync``).
COMMON_KNOBS: dict[str, int] = {"prefetch": 1, "accumulate": 1}


#: Policies whose framework does not wait for the last micro-batch under some knobs: a check of
#: the plan and ``accumulate`` that refuses those.
ACCUMULATE_RULES: dict[str, Callable[[Plan, int], None]] = {"deepspeed": check_accumulate}


def _lookup(name: str) -> PolicyFn:
    fn = POLICIES.get(name) or SHARDED_POLICIES.get(name)
    if fn is None:
        known = ", ".join([*POLICIES, *SHARDED_POLICIES])
        raise SchedoptError(f"unknown policy (known: {known})", "policy", name)
    return fn


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise SchedoptError("knob value nested too deeply", "policy", text[:40]) from None
    except ValueError:  # not JSON (or an integer of more than 4,300 digits): text
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        return text


def _split_knobs(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


#: Knobs a spec may write by a framework's environment variable: the variable -> the knob
#: (in the variable's unit: ``HOROVOD_FUSION_THRESHOLD`` bytes, ``HOROVOD_CYCLE_TIME`` ms).
ENV_KNOBS: dict[str, dict[str, str]] = {
    "horovod": {"HOROVOD_FUSION_THRESHOLD": "fusion_threshold_bytes",
                "HOROVOD_CYCLE_TIME": "cycle_time_ms"},
}


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``NAME:key=value,...`` into the name and its knobs.

    Values are read as JSON where they parse (``50``, ``2.5``, ``[1,25]``, ``true``), else as text.
    """
    name, _, rest = spec.partition(":")
    name = name.strip()
    _lookup(name)
    knobs: dict[str, Any] = {}
    for item in _split_knobs(rest):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SchedoptError("knobs are written key=value", "policy", spec)
        key = ENV_KNOBS.get(name, {}).get(key.strip(), key.strip())
        if key in knobs:
            raise SchedoptError("knob given twice", f"{name}.knob", key)
        knobs[key] = _parse_value(value.strip())
    return name, knobs


def _common(name: str, common: dict[str, Any]) -> dict[str, int]:
    """The checked common knobs: ``prefetch`` 0 or 1, ``accumulate`` 1 to MAX_ACCUMULATE."""
    bounds = {"prefetch": (0, 1), "accumulate": (1, MAX_ACCUMULATE)}
    out: dict[str, int] = {}
    for key, value in common.items():
        try:
            number = strict_int(value)
        except ValueError:
            number = None
        lo, hi = bounds[key]
        if number is None or not lo <= number <= hi:
            raise SchedoptError(f"must be an integer from {lo} to {hi}", f"{name}.{key}", value)
        out[key] = number
    return out


def check_spec(spec: str, **extra: Any) -> tuple[str, dict[str, Any], dict[str, int]]:
    """Check what of a policy spec needs no trace: the name, the knob names and their types.

    Parameters
    ----------
    spec
        ``NAME[:key=value,...]``.
    **extra
        Knobs added by the caller (not type-checked).

    Returns
    -------
    tuple
        The policy name, its knobs (the common knobs taken out) and the common knobs
        (``prefetch``, ``accumulate``).

    Raises
    ------
    SchedoptError
        Unknown policy or knob, or a knob value of the wrong type or out of range.
    """
    name, knobs = parse_spec(spec)
    knobs.update(extra)
    fn = _lookup(name)
    common = {k: knobs.pop(k, v) for k, v in COMMON_KNOBS.items()}
    params = inspect.signature(fn).parameters
    for key in knobs:
        if key not in params or key in ("trace", "cluster"):
            allowed = [p for p in params if p not in ("trace", "cluster")] + list(COMMON_KNOBS)
            raise SchedoptError(
                f"unknown knob for {name} (knobs: {', '.join(allowed)})", f"{name}.knob", key
            )
    common_values = _common(name, common)
    check_knobs(name, fn, {k: v for k, v in knobs.items() if k not in extra})
    return name, knobs, common_values


def make_plan(trace: Trace, cluster: Cluster, spec: str, **extra: Any) -> Plan:
    """Build the plan of policy ``spec`` (``NAME[:key=value,...]``) for ``trace`` on ``cluster``.

    Raises
    ------
    SchedoptError
        Unknown policy or knob, or a knob value the policy rejects.
    """
    name, knobs, common = check_spec(spec, **extra)
    fn = _lookup(name)
    if name in ("horovod", "bytescheduler"):
        check_knob_work(name, knobs, [(t.bytes, DTYPE_BYTES[t.dtype])
                                      for t in trace.tensor_list])
    try:
        plan = fn(trace, cluster, **knobs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SchedoptError):
            raise
        raise SchedoptError(str(exc), f"{name}.knobs", knobs) from exc
    if name in ACCUMULATE_RULES:
        ACCUMULATE_RULES[name](plan, common["accumulate"])
    if common["accumulate"] != 1:  # stated in the plan's knobs as the spec gave it
        plan = plan.model_copy(update={"knobs": {**plan.knobs,
                                                 "accumulate": common["accumulate"]}})
    return plan.model_copy(update=common)
