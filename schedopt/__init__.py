"""schedopt: optimal gradient-communication scheduling for data-parallel training.

The Python API (:mod:`schedopt.api`, docs/api.md)::

    import schedopt
    trace = schedopt.load_trace("resnet50-k80-b32")
    cluster = schedopt.load_cluster("k80-4x4-10gbe")
    plan = schedopt.make_plan(trace, cluster, "ddp")
    schedopt.simulate(trace, cluster, plan).iteration_time_s

The stages are subpackages named after the pipeline: ``model``, ``simulate``, ``policies``,
``optimize``, ``emit``, ``measure``, ``study``, ``report`` and ``cli`` (docs/architecture.md).
Nothing heavy is imported here: each function loads its stage when called.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING, Any

# The stages named like API functions load first (their __init__ modules are light), so that
# importing one of their modules later cannot rebind ``schedopt.simulate`` and friends.
for _stage in ("simulate", "optimize", "emit"):
    _importlib.import_module(f"schedopt.{_stage}")

from schedopt.api import calibrate as calibrate  # noqa: E402
from schedopt.api import emit as emit  # noqa: E402
from schedopt.api import load_cluster as load_cluster  # noqa: E402
from schedopt.api import load_plan as load_plan  # noqa: E402
from schedopt.api import load_trace as load_trace  # noqa: E402
from schedopt.api import make_plan as make_plan  # noqa: E402
from schedopt.api import optimize as optimize  # noqa: E402
from schedopt.api import simulate as simulate  # noqa: E402
from schedopt.api import validate as validate  # noqa: E402
from schedopt.errors import SchedoptError as SchedoptError  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    from schedopt.model.cluster import Cluster as Cluster
    from schedopt.model.cluster import ClusterFamily as ClusterFamily
    from schedopt.model.cluster import Link as Link
    from schedopt.model.plan import Plan as Plan
    from schedopt.model.plan import Schedule as Schedule
    from schedopt.model.trace import Trace as Trace

__version__ = "0.1.0"

#: The model's types, loaded on first use.
_TYPES = {"Cluster": "schedopt.model.cluster", "ClusterFamily": "schedopt.model.cluster",
          "Link": "schedopt.model.cluster", "Plan": "schedopt.model.plan",
          "Schedule": "schedopt.model.plan", "Trace": "schedopt.model.trace"}


def __getattr__(name: str) -> Any:
    if name in _TYPES:
        return getattr(_importlib.import_module(_TYPES[name]), name)
    raise AttributeError(f"module 'schedopt' has no attribute {name!r}")


__all__ = ["Cluster", "ClusterFamily", "Link", "Plan", "SchedoptError", "Schedule", "Trace",
           "__version__", "calibrate", "emit", "load_cluster", "load_plan", "load_trace",
           "make_plan", "optimize", "simulate", "validate"]
