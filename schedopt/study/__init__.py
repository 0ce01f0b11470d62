"""Questions asked of many simulations: framework knobs, optimizer targets, sweeps.

- :mod:`schedopt.study.tune`: the best value of each framework's own knob (``tune``);
- :mod:`schedopt.study.targets`: the plans a framework can execute (``optimize --target``);
- :mod:`schedopt.study.sweep`: many traces x clusters x policies x settings into SQLite,
  locally or on Ray (``sweep run``, ``sweep report``).
"""
