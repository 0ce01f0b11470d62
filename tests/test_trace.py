"""Trace helpers: merging several measurements of one model."""

from __future__ import annotations

import pytest

from schedopt.errors import SchedoptError
from schedopt.model.trace import Trace, median_trace


def test_median_trace_takes_medians_per_layer() -> None:
    def one(f0: float, b0: float, upd: float) -> Trace:
        return Trace.model_validate({
            "name": "m", "batch_size": 4, "update_s": upd, "layers": [
                {"name": "a", "forward_s": f0, "backward_s": b0,
                 "tensors": [{"name": "a.w", "bytes": 64}]},
                {"name": "b", "forward_s": 2 * f0, "backward_s": 3 * b0,
                 "tensors": [{"name": "b.w", "bytes": 32}]}]})

    merged = median_trace([one(1.0, 5.0, 0.1), one(3.0, 1.0, 0.3), one(2.0, 2.0, 0.2)],
                          source="three rounds")
    assert [lay.forward_s for lay in merged.layers] == [2.0, 4.0]
    assert [lay.backward_s for lay in merged.layers] == [2.0, 6.0]
    assert merged.update_s == pytest.approx(0.2)
    assert merged.source == "three rounds"
    other = Trace.model_validate({**one(1.0, 1.0, 0.0).model_dump(), "layers": [
        {"name": "a", "forward_s": 1.0, "backward_s": 1.0,
         "tensors": [{"name": "a.w", "bytes": 128}]}]})
    with pytest.raises(SchedoptError, match="different models"):
        median_trace([one(1.0, 1.0, 0.0), other], source="x")
