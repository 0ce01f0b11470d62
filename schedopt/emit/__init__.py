"""Plan -> framework configs: PyTorch DDP, FSDP2, Horovod, DeepSpeed, Megatron-Core, plan JSON.

Every emitter is ``emit_X(trace, cluster, plan) -> Emitted`` (``cluster`` may be None);
:data:`~schedopt.emit.registry.EMITTERS` maps the target names to them and :func:`emit`
dispatches by name (:mod:`schedopt.emit.registry`). docs/emit.md says, per target, what is exact
and what is approximated. Sharded plans go to ``fsdp``, ``deepspeed`` (ZeRO stage 3) and
``json`` only (``SHARDED_TARGETS``); ``fsdp`` needs one. :mod:`schedopt.emit.ddp_torch` and
:mod:`schedopt.emit.fsdp_torch` apply a plan to a PyTorch model. The names below load on first
use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedopt.lazy import lazy_names

if TYPE_CHECKING:  # pragma: no cover
    from schedopt.emit.common import Emitted as Emitted
    from schedopt.emit.ddp import ddp_caps as ddp_caps
    from schedopt.emit.ddp import emit_ddp as emit_ddp
    from schedopt.emit.deepspeed import emit_deepspeed as emit_deepspeed
    from schedopt.emit.fsdp import emit_fsdp as emit_fsdp
    from schedopt.emit.horovod import emit_horovod as emit_horovod
    from schedopt.emit.megatron import emit_megatron as emit_megatron
    from schedopt.emit.plan_json import emit_json as emit_json
    from schedopt.emit.registry import EMITTERS as EMITTERS
    from schedopt.emit.registry import SHARDED_ONLY_TARGETS as SHARDED_ONLY_TARGETS
    from schedopt.emit.registry import SHARDED_TARGETS as SHARDED_TARGETS
    from schedopt.emit.registry import emit as emit

_EXPORTS = {name: f"schedopt.emit.{module}" for name, module in (
    ("Emitted", "common"), ("ddp_caps", "ddp"), ("emit_ddp", "ddp"),
    ("emit_deepspeed", "deepspeed"), ("emit_fsdp", "fsdp"), ("emit_horovod", "horovod"),
    ("emit_megatron", "megatron"), ("emit_json", "plan_json"), ("EMITTERS", "registry"),
    ("SHARDED_ONLY_TARGETS", "registry"), ("SHARDED_TARGETS", "registry"),
    ("emit", "registry"))}

__getattr__ = lazy_names(__name__, _EXPORTS)


__all__ = sorted(_EXPORTS)
