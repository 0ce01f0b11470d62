"""Baseline policies: one module per framework, each ``(trace, cluster, **knobs) -> Plan``.

Use :func:`make_plan` with a spec such as ``"ddp:bucket_cap_mb=50"``; :data:`POLICIES` maps every
name to its function, :data:`SHARDED_POLICIES` the sharded baselines (fsdp, zero3,
megatron-distopt). The knob ``prefetch`` (0 or 1, default 1) is accepted by every policy.
"""

from __future__ import annotations

from schedopt.policies.registry import POLICIES as POLICIES
from schedopt.policies.registry import SHARDED_POLICIES as SHARDED_POLICIES
from schedopt.policies.registry import make_plan as make_plan
from schedopt.policies.registry import parse_spec as parse_spec
from schedopt.policies.registry import sharded_specs as sharded_specs
