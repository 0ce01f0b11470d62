"""The Ray executor in local mode gives the same rows as the local process pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedopt.study.sweep import Store, SweepSpec, run_sweep

from .sweep_helpers import SMALL, stable

ray = pytest.importorskip("ray", reason="the Ray executor needs the ray extra")


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with two CPUs, shut down afterwards."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_and_local_give_identical_rows(tmp_path: Path, local_ray: None) -> None:
    spec = SweepSpec.model_validate(SMALL)
    s_ray = run_sweep(spec, tmp_path / "ray.sqlite", executor="ray", progress=False)
    assert ray.is_initialized()  # a Ray it did not start is left running
    s_loc = run_sweep(spec, tmp_path / "local.sqlite", executor="local", workers=2,
                      progress=False)
    assert (s_ray.done, s_ray.failed) == (s_loc.done, s_loc.failed) == (36, 0)
    with Store(tmp_path / "ray.sqlite") as a, Store(tmp_path / "local.sqlite") as b:
        rows_ray, rows_loc = a.rows(), b.rows()
    assert stable(rows_ray) == stable(rows_loc)
    # a rerun on Ray runs nothing
    again = run_sweep(spec, tmp_path / "ray.sqlite", executor="ray", progress=False)
    assert (again.skipped, again.done) == (36, 0)


def test_ray_stores_failed_rows(tmp_path: Path, local_ray: None) -> None:
    spec = SweepSpec.model_validate({**SMALL, "traces": ["alexnet-k80-b128"],
                                     "clusters": ["k80-4x4-10gbe"],
                                     "policies": ["ddp:nosuch_knob=1", "ddp"], "optimize": []})
    s = run_sweep(spec, tmp_path / "r.sqlite", executor="ray", progress=False)
    assert (s.done, s.failed) == (1, 1)
    with Store(tmp_path / "r.sqlite") as st:
        errors = [r["error"] for r in st.rows() if r["error"]]
    assert len(errors) == 1 and "nosuch_knob" in errors[0]
