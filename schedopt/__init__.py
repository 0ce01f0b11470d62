"""schedopt: optimal gradient-communication scheduling for data-parallel training."""

from .cluster import Cluster as Cluster
from .cluster import ClusterFamily as ClusterFamily
from .cluster import Link as Link
from .errors import SchedoptError as SchedoptError
from .plan import Plan as Plan
from .plan import Schedule as Schedule
from .simulate import simulate as simulate
from .trace import Trace as Trace

__version__ = "0.1.0"
