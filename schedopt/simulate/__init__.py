"""The one judge: the simulator of a plan on a trace and a cluster, and its oracle.

- :mod:`schedopt.simulate.simulator`: ``simulate(trace, cluster, plan) -> Schedule``, the
  earliest-start schedule of the iteration DAG and its long-run period (docs/model.md);
- :mod:`schedopt.simulate.dag`: the same DAG as a networkx graph, the simulator's independent
  oracle in tests;
- :mod:`schedopt.simulate.scenarios`: the same plan under scaled costs (``--perturb``, robust
  plans).

The simulator knows no policy and no solver.
"""
