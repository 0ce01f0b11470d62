"""Plan -> framework configs: PyTorch DDP, Horovod, DeepSpeed, Megatron-Core, plan JSON.

Every emitter is ``emit_X(plan, trace, cluster=None) -> Emitted``; :data:`EMITTERS` maps the
target names to them and :func:`emit` dispatches by name. docs/emit.md says, per target, what
is exact and what is approximated.
"""

from __future__ import annotations

from collections.abc import Callable

from ..cluster import Cluster
from ..errors import SchedoptError
from ..plan import Plan
from ..trace import Trace
from .common import Emitted as Emitted
from .ddp import ddp_caps as ddp_caps
from .ddp import emit_ddp as emit_ddp
from .deepspeed import emit_deepspeed as emit_deepspeed
from .horovod import emit_horovod as emit_horovod
from .megatron import emit_megatron as emit_megatron
from .plan_json import emit_json as emit_json

EmitFn = Callable[..., Emitted]

#: Every emitter by target name.
EMITTERS: dict[str, EmitFn] = {
    "ddp": emit_ddp,
    "horovod": emit_horovod,
    "deepspeed": emit_deepspeed,
    "megatron": emit_megatron,
    "json": emit_json,
}


def emit(target: str, plan: Plan, trace: Trace, cluster: Cluster | None = None) -> Emitted:
    """Emit ``plan`` for ``target`` (one of :data:`EMITTERS`).

    Raises
    ------
    SchedoptError
        Unknown target, or a plan that does not fit the trace or cluster.
    """
    if target not in EMITTERS:
        raise SchedoptError(f"unknown target (known: {', '.join(EMITTERS)})", "target", target)
    return EMITTERS[target](plan, trace, cluster)


__all__ = [
    "EMITTERS",
    "Emitted",
    "ddp_caps",
    "emit",
    "emit_ddp",
    "emit_deepspeed",
    "emit_horovod",
    "emit_json",
    "emit_megatron",
]
