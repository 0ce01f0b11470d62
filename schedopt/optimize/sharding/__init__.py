"""Sharded data parallel (FSDP, ZeRO-3): units, prefetch depths and streams under a memory cap.

:func:`solve_sharded` is what :func:`~schedopt.optimize.solve` runs when
``SolveOptions.sharding`` is set; :func:`step_time` the closed-form step it judges plans by;
:func:`step_bound` its lower bound (docs/formulation.md).
"""

from schedopt.optimize.sharding.bound import step_bound as step_bound
from schedopt.optimize.sharding.evaluate import Config as Config
from schedopt.optimize.sharding.evaluate import ShardedInstance as ShardedInstance
from schedopt.optimize.sharding.evaluate import build_sharded as build_sharded
from schedopt.optimize.sharding.evaluate import step_time as step_time
from schedopt.optimize.sharding.solve import solve_sharded as solve_sharded

__all__ = ["Config", "ShardedInstance", "build_sharded", "solve_sharded", "step_bound",
           "step_time"]
