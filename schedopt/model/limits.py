"""One validation layer for every input: strict numbers, finite limits, bounded work.

The same rules hold for traces, clusters, plans, policy knobs, command-line options and fit-comm
files:

- a number field takes a JSON number, never ``true``/``false`` or a string; an integer field
  takes an integer, never a decimal number (``2.0`` and ``1e30`` are refused, not rounded);
- every number lies within limits that keep the figures derived from it finite (a sum of times,
  a byte total in int64, a transfer time ``bytes / bandwidth``);
- the work one input asks for (pieces of a partition, groups, ranks) is bounded, with a clear
  refusal past the bound;
- a result that is NaN, infinite or zero where a positive time is due is an error naming the
  input that produced it.

The limits are generous: about a million times what real models and clusters reach.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from schedopt.errors import SchedoptError

__all__ = [
    "MAX_BANDWIDTH_BPS",
    "MAX_BATCH",
    "MAX_BYTES",
    "MAX_COUNT",
    "MAX_DEPTH",
    "MAX_GPUS_PER_NODE",
    "MAX_KNOB",
    "MAX_NODES",
    "MAX_PIECES",
    "MAX_SECONDS",
    "MAX_TOTAL_BYTES",
    "MIN_BANDWIDTH_BPS",
    "Bandwidth",
    "Bool",
    "Int",
    "Number",
    "Seconds",
    "check_depth",
    "check_finite_result",
    "check_float_option",
    "check_int_option",
    "check_knobs",
    "check_pieces",
    "strict_bool",
    "strict_int",
    "strict_number",
]

#: Largest time of one task or one iteration-level cost (seconds; about 11.6 days).
MAX_SECONDS = 1e6
#: Largest tensor (bytes; 1 PiB).
MAX_BYTES = 2**50
#: Largest gradient total of a trace (bytes; 8 PiB, exact in float64 and far from int64's end).
MAX_TOTAL_BYTES = 2**53
#: Link bandwidth bounds (bytes per second).
MIN_BANDWIDTH_BPS = 1.0
MAX_BANDWIDTH_BPS = 1e15
#: Largest per-GPU batch.
MAX_BATCH = 2**31
#: Cluster size bounds.
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 4096
#: Largest count of anything a user names (servers, NICs, repeats of a measurement).
MAX_COUNT = 1_000_000
#: Largest number of members (tensors or tensor pieces) a plan may have.
MAX_PIECES = 2_000_000
#: Largest magnitude of a numeric policy knob.
MAX_KNOB = 1e12


# ---------------------------------------------------------------------------- strict scalars
def strict_number(value: Any) -> Any:
    """Accept an int or a float (numpy scalars too); refuse booleans and text."""
    if isinstance(value, bool | np.bool_):
        raise ValueError("must be a number, not true/false")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value


def strict_int(value: Any) -> Any:
    """Accept an integer (numpy integers too); refuse booleans, decimal numbers and text."""
    if isinstance(value, bool | np.bool_):
        raise ValueError("must be an integer, not true/false")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        raise ValueError("must be an integer, not a decimal number")
    if not isinstance(value, int):
        raise ValueError("must be an integer")
    return value


def strict_bool(value: Any) -> Any:
    """Accept ``true`` or ``false`` only (no 0/1, no ``"no"``)."""
    if isinstance(value, np.bool_):
        return bool(value)
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


#: An integer field (strict).
Int = Annotated[int, BeforeValidator(strict_int)]
#: A finite number field (strict).
Number = Annotated[float, BeforeValidator(strict_number), Field(allow_inf_nan=False)]
#: A time in seconds, 0 to :data:`MAX_SECONDS`.
Seconds = Annotated[
    float, BeforeValidator(strict_number), Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)
]
#: A bandwidth in bytes per second.
Bandwidth = Annotated[
    float,
    BeforeValidator(strict_number),
    Field(ge=MIN_BANDWIDTH_BPS, le=MAX_BANDWIDTH_BPS, allow_inf_nan=False),
]
#: A boolean field (strict).
Bool = Annotated[bool, BeforeValidator(strict_bool)]


#: Deepest nesting of lists and objects in a free-form field (plan knobs).
MAX_DEPTH = 32


def check_depth(value: Any, field: str | None = None, limit: int = MAX_DEPTH) -> Any:
    """Refuse lists and objects nested more than ``limit`` deep (iteratively: no recursion).

    Raises :class:`SchedoptError` naming ``field``, or a ``ValueError`` without one (inside a
    pydantic validator, which names the field itself).
    """
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else (
            node if isinstance(node, list | tuple) else ())
        for child in children:
            if isinstance(child, dict | list | tuple):
                if depth + 1 > limit:
                    if field is None:
                        raise ValueError(f"nested more than {limit} deep")
                    raise SchedoptError(f"nested more than {limit} deep", field, "...")
                stack.append((child, depth + 1))
    return value


# ---------------------------------------------------------------------------- results
def check_finite_result(value: float, field: str, cause: str, *, positive: bool = False) -> float:
    """Refuse a NaN or infinite result (and a zero one where ``positive``).

    Parameters
    ----------
    value
        The computed figure.
    field
        Its name (``iteration_time_s``).
    cause
        The inputs that produced it, named for the user (``trace 'x' on cluster 'y'``).
    positive
        Also refuse a result that is not strictly positive.
    """
    if not math.isfinite(value):
        raise SchedoptError(f"is not finite for {cause}: check the sizes, times and links",
                            field, value)
    if positive and value <= 0:
        raise SchedoptError(f"is zero for {cause}: every time of the trace is zero", field, value)
    return value


# ---------------------------------------------------------------------------- CLI options
def check_int_option(value: int | None, option: str, low: int, high: int) -> int | None:
    """Refuse an integer option outside ``[low, high]`` (None passes)."""
    if value is not None and not low <= value <= high:
        raise SchedoptError(f"must be between {low:,} and {high:,}", option, value)
    return value


def check_float_option(value: float, option: str, low: float, high: float) -> float:
    """Refuse a number option that is not finite or lies outside ``(low, high]``."""
    if not (math.isfinite(value) and low < value <= high):
        above = f"above {low:g} and " if math.isfinite(low) else ""
        raise SchedoptError(f"must be a finite number {above}at most {high:g}", option, value)
    return value


# ---------------------------------------------------------------------------- knobs
def _knob_adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint, config=ConfigDict(strict=True))


def _finite_numbers(value: Any, field: str) -> None:
    """Every number inside ``value`` is finite and at most :data:`MAX_KNOB` in magnitude."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        if not math.isfinite(value) or abs(value) > MAX_KNOB:
            raise SchedoptError(f"must be a finite number of magnitude at most {MAX_KNOB:g}",
                                field, value)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _finite_numbers(item, f"{field}[{i}]")


def _type_name(hint: Any) -> str:
    if isinstance(hint, type):
        return {"int": "an integer", "float": "a number", "bool": "true or false",
                "str": "text"}.get(hint.__name__, hint.__name__)
    text = str(hint).replace("typing.", "").replace("collections.abc.", "")
    return text.replace("NoneType", "None").replace(" | None", " or null")


def check_knobs(policy: str, fn: Callable[..., Any], knobs: Mapping[str, Any]) -> None:
    """Check every knob value against the type the policy function declares for it.

    A bool is refused where a number goes (and a number where a bool goes), a decimal number
    where an integer goes, a non-finite or huge number anywhere.

    Raises
    ------
    SchedoptError
        Naming ``policy.knob`` and the value.
    """
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):  # pragma: no cover - unresolvable annotations
        hints = {}
    for key, value in knobs.items():
        field = f"{policy}.{key}"
        check_depth(value, field)
        _finite_numbers(value, field)
        hint = hints.get(key)
        if hint is None:
            continue
        if isinstance(value, list) and hint is not Any:  # JSON lists for Sequence hints
            value = list(value)
        try:
            _knob_adapter(hint).validate_python(value)
        except ValidationError:
            raise SchedoptError(f"must be {_type_name(hint)}", field, value) from None
        except Exception:  # pragma: no cover - a hint pydantic cannot check
            continue


def check_pieces(what: str, count: int, field: str, value: Any) -> None:
    """Refuse an input that asks for more than :data:`MAX_PIECES` pieces of work."""
    if count > MAX_PIECES:
        raise SchedoptError(
            f"would make {count:,} {what} (at most {MAX_PIECES:,}); use a larger value",
            field, value)


def check_knob_work(policy: str, knobs: Mapping[str, Any], tensors: list[tuple[int, int]]) -> None:
    """Refuse knobs that ask for unbounded work on a trace.

    Parameters
    ----------
    policy, knobs
        The policy name and its (type-checked) knobs.
    tensors
        ``(bytes, item size)`` of every tensor of the trace.
    """
    groups = knobs.get("groups")
    if policy == "horovod" and isinstance(groups, int) and groups > len(tensors):
        raise SchedoptError(f"must be at most the number of tensors ({len(tensors):,})",
                            f"{policy}.groups", groups)
    if policy != "bytescheduler":
        return
    unit_bytes = knobs.get("partition_bytes")
    if isinstance(unit_bytes, int) and unit_bytes > 0:
        count = sum(-(-b // max(unit_bytes - unit_bytes % size, size)) for b, size in tensors)
        check_pieces("pieces", count, f"{policy}.partition_bytes", unit_bytes)
        return
    unit = knobs.get("partition_params")
    if isinstance(unit, int) and unit > 0:
        count = sum(-(-(b // size) // unit) for b, size in tensors)
        check_pieces("pieces", count, f"{policy}.partition_params", unit)
