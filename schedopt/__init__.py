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
from typing import TYPE_CHECKING

from schedopt.api import Stage as _Stage
from schedopt.api import calibrate as calibrate
from schedopt.api import load_cluster as load_cluster
from schedopt.api import load_plan as load_plan
from schedopt.api import load_trace as load_trace
from schedopt.api import make_plan as make_plan
from schedopt.api import validate as validate
from schedopt.errors import SchedoptError as SchedoptError
from schedopt.lazy import lazy_names as _lazy_names

# ``simulate``, ``optimize`` and ``emit`` are stage packages and API functions at once: the
# packages (light: their names load on first use) are callable, ``schedopt.simulate(trace,
# cluster, plan)`` running :func:`schedopt.api.simulate`, and their modules import as usual.
for _name in ("simulate", "optimize", "emit"):
    _importlib.import_module(f"schedopt.{_name}").__class__ = _Stage

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


__getattr__ = _lazy_names("schedopt", _TYPES)


__all__ = ["Cluster", "ClusterFamily", "Link", "Plan", "SchedoptError", "Schedule", "Trace",
           "__version__", "calibrate", "emit", "load_cluster", "load_plan", "load_trace",
           "make_plan", "optimize", "simulate", "validate"]
