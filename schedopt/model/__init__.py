"""What the stages talk about: traces, clusters, plans and schedules, and their limits.

- :mod:`schedopt.model.trace`: ``Trace``, ``Layer``, ``Tensor`` (a model's layer-wise costs);
- :mod:`schedopt.model.cluster`: ``Cluster``, ``ClusterFamily``, links and collective costs;
- :mod:`schedopt.model.plan`: ``Plan`` (buckets, order, modes) and ``Schedule``;
- :mod:`schedopt.model.sharded`: sharded plans (units, all-gathers, reduce-scatters, memory);
- :mod:`schedopt.model.contention`: compute and communication slowing each other down;
- :mod:`schedopt.model.limits`: the bounds and strict checks every input goes through.
"""
