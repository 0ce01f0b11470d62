"""Optional integrations with training frameworks (their packages are imported lazily).

:mod:`schedopt.integrations.torch` measures a PyTorch model's trace and wraps a model in
DistributedDataParallel with a plan's buckets.
"""
