"""The ``optimize`` command's sharded options, checked (one-line errors naming the option)."""

from __future__ import annotations

from typing import Any

from schedopt.errors import SchedoptError
from schedopt.model.limits import check_int_option
from schedopt.model.plan import MAX_ACCUMULATE

__all__ = ["MAX_CAP_BYTES", "sharded_labels", "sharded_options"]

#: Largest memory cap accepted (bytes).
MAX_CAP_BYTES = 2**62


def sharded_options(sharding: str | None, memory_cap: int | None,
                    accumulate: int) -> dict[str, Any]:
    """``SolveOptions`` fields of ``--sharding``, ``--memory-cap`` and ``--accumulate``.

    Raises
    ------
    SchedoptError
        An unknown mode, a cap or accumulation outside its range, or either without
        ``--sharding``.
    """
    if sharding is not None and sharding not in ("full", "grad-op"):
        raise SchedoptError("must be full or grad-op", "--sharding", sharding)
    check_int_option(memory_cap, "--memory-cap", 1, MAX_CAP_BYTES)
    check_int_option(accumulate, "--accumulate", 1, MAX_ACCUMULATE)
    if sharding is None and memory_cap is not None:
        raise SchedoptError("needs --sharding (all-reduce plans keep every parameter)",
                            "--memory-cap", memory_cap)
    if sharding is None and accumulate != 1:
        raise SchedoptError("accumulation is searched with --sharding only", "--accumulate",
                            accumulate)
    if sharding is None:
        return {}
    return {"sharding": sharding, "memory_cap_bytes": memory_cap, "accumulate": accumulate}


def sharded_labels(res: Any) -> tuple[str, str] | None:
    """``optimize``'s table title and status tail for a sharded result (None otherwise):
    the mode, cap and accumulation; the units, prefetch depths and streams."""
    plan = res.plan
    sh = plan.sharding
    if sh is None:
        return None
    cap = plan.knobs.get("memory_cap_bytes")
    title = (f"sharding {sh.mode}" + (f", cap {cap:,} B" if cap is not None else "")
             + (f", accumulate {plan.accumulate}" if plan.accumulate > 1 else ""))
    tail = (f"units {len(sh.units)}  prefetch {sh.forward_prefetch}/{sh.backward_prefetch}  "
            f"streams {sh.streams}")
    return title, tail
