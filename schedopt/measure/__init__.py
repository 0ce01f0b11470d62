"""From real runs to the model: measuring, importing and fitting.

- :mod:`~schedopt.measure.profile`, :mod:`~schedopt.measure.profile_ranks`: a PyTorch model's
  trace (``profile``); :mod:`~schedopt.measure.launch` starts local ranks;
- :mod:`~schedopt.measure.bench_comm`, :mod:`~schedopt.measure.bench_ddp`: all-reduce
  micro-benchmarks and real DistributedDataParallel runs (``bench-comm``, ``bench-ddp``);
- :mod:`~schedopt.measure.comm_tables`: the one reader of measured collective tables;
  :mod:`~schedopt.measure.commfit`: fitted cost curves (``fit-comm``);
- :mod:`~schedopt.measure.bcaffe`: B-Caffe logs as traces;
- :mod:`~schedopt.measure.measurements`: the measurements CSV;
  :mod:`~schedopt.measure.calibrate`: ``calibrate`` and ``validate``.

torch is imported only by the functions that run it.
"""
