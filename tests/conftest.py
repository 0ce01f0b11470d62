"""Shared fixtures: a hand-computable instance and paths to shared reference data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from schedopt.model.cluster import Cluster
from schedopt.model.trace import Trace

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference"

# Property tests draw the same examples on every run (reproducible CI); set
# HYPOTHESIS_PROFILE=explore to search with fresh random examples instead.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture
def tiny_trace() -> Trace:
    """Three layers with round numbers (ms, MB) that a person can schedule on paper."""
    return Trace.model_validate({
        "name": "tiny", "batch_size": 32, "source": "hand-made",
        "layers": [
            {"name": "a", "forward_s": 0.001, "backward_s": 0.002,
             "tensors": [{"name": "a.w", "bytes": 4_000_000}, {"name": "a.b", "bytes": 4000}]},
            {"name": "b", "forward_s": 0.002, "backward_s": 0.004, "tensors": []},
            {"name": "c", "forward_s": 0.001, "backward_s": 0.002,
             "tensors": [{"name": "c.w", "bytes": 8_000_000}]},
        ],
    })


@pytest.fixture
def fitted_cluster() -> Cluster:
    """Four ranks whose whole all-reduce costs 1 ms + 1 ms/MB."""
    return Cluster.model_validate({
        "name": "fit", "nodes": 4, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9},
        "allreduce": {"alpha_s": 1e-3, "beta_s_per_byte": 1e-9},
    })


@pytest.fixture
def reference_dir() -> Path:
    """The shared reference data; skips the test where it is absent."""
    if not REFERENCE.is_dir():
        pytest.skip("../shared/reference is not present")
    return REFERENCE
