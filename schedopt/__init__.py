"""schedopt: optimal gradient-communication scheduling for data-parallel training."""

from schedopt.errors import SchedoptError as SchedoptError
from schedopt.model.cluster import Cluster as Cluster
from schedopt.model.cluster import ClusterFamily as ClusterFamily
from schedopt.model.cluster import Link as Link
from schedopt.model.plan import Plan as Plan
from schedopt.model.plan import Schedule as Schedule
from schedopt.model.trace import Trace as Trace
from schedopt.simulate.simulator import simulate as simulate

__version__ = "0.1.0"
