"""Every emitter by target name, and :func:`emit`, which dispatches by name."""

from __future__ import annotations

from collections.abc import Callable

from schedopt.emit.common import Emitted
from schedopt.emit.ddp import emit_ddp
from schedopt.emit.deepspeed import emit_deepspeed
from schedopt.emit.fsdp import emit_fsdp
from schedopt.emit.horovod import emit_horovod
from schedopt.emit.megatron import emit_megatron
from schedopt.emit.plan_json import emit_json
from schedopt.errors import SchedoptError
from schedopt.model.cluster import Cluster
from schedopt.model.plan import Plan
from schedopt.model.trace import Trace

EmitFn = Callable[..., Emitted]

#: Targets that can express a sharded plan.
SHARDED_TARGETS = ("fsdp", "deepspeed", "json")
#: Targets that need a sharded plan.
SHARDED_ONLY_TARGETS = ("fsdp",)

#: Every emitter by target name.
EMITTERS: dict[str, EmitFn] = {
    "ddp": emit_ddp,
    "horovod": emit_horovod,
    "deepspeed": emit_deepspeed,
    "fsdp": emit_fsdp,
    "megatron": emit_megatron,
    "json": emit_json,
}


def emit(trace: Trace, cluster: Cluster | None, plan: Plan, target: str) -> Emitted:
    """Emit ``plan`` for ``target`` (one of :data:`EMITTERS`).

    Raises
    ------
    SchedoptError
        Unknown target, or a plan that does not fit the trace or cluster.
    """
    if target not in EMITTERS:
        raise SchedoptError(f"unknown target (known: {', '.join(EMITTERS)})", "target", target)
    if plan.sharding is not None and target not in SHARDED_TARGETS:
        raise SchedoptError(f"a sharded plan needs one of {', '.join(SHARDED_TARGETS)}",
                            "target", target)
    return EMITTERS[target](trace, cluster, plan)


__all__ = ["EMITTERS", "SHARDED_ONLY_TARGETS", "SHARDED_TARGETS", "EmitFn", "emit"]
