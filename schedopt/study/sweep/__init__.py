"""Sweeps: many traces x clusters x policies x optimizer settings, resumable, locally or on Ray.

>>> from schedopt.study.sweep import load_spec, run_sweep
>>> spec = load_spec("benchmarks/sweeps/paper.yaml")
>>> summary = run_sweep(spec, "results.sqlite")  # doctest: +SKIP

See docs/research.md.
"""

from schedopt.study.sweep.run import SweepSummary as SweepSummary
from schedopt.study.sweep.run import run_sweep as run_sweep
from schedopt.study.sweep.spec import Row as Row
from schedopt.study.sweep.spec import SweepSpec as SweepSpec
from schedopt.study.sweep.spec import expand_rows as expand_rows
from schedopt.study.sweep.spec import load_spec as load_spec
from schedopt.study.sweep.spec import parse_spec_text as parse_spec_text
from schedopt.study.sweep.store import Store as Store
from schedopt.study.sweep.worker import run_row as run_row

__all__ = [
    "Row",
    "Store",
    "SweepSpec",
    "SweepSummary",
    "expand_rows",
    "load_spec",
    "parse_spec_text",
    "run_row",
    "run_sweep",
]
