"""Plan members ``name#i``: one parser, and tensor names that cannot clash with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedopt.errors import SchedoptError
from schedopt.files import load_cluster, load_trace
from schedopt.model.plan import Member, parse_member, piece_name
from schedopt.model.trace import Trace
from schedopt.optimize import SolveOptions, solve
from schedopt.optimize.instance import build_instance


@pytest.mark.parametrize(
    ("member", "partition", "expected"),
    [
        ("conv1.weight", None, Member("conv1.weight", None)),  # a whole tensor
        ("conv1.weight#3", None, Member("conv1.weight", 3)),  # piece 3
        ("conv1.weight#3", {"conv1.weight": [4, 4, 4, 4]}, Member("conv1.weight", 3)),
        ("conv1.weight#3", {"other": [4]}, Member("conv1.weight#3", None)),  # not partitioned
        ("w#x", None, Member("w#x", None)),  # not an index
        ("w#", None, Member("w#", None)),  # no index
    ],
)
def test_parse_member(member: str, partition: dict | None, expected: Member) -> None:
    assert parse_member(member, partition) == expected


def test_piece_name_round_trips() -> None:
    assert parse_member(piece_name("layer.0.bias", 12)) == Member("layer.0.bias", 12)


def test_a_tensor_name_with_the_separator_is_refused(tiny_trace: Trace, tmp_path: Path
                                                     ) -> None:
    data = tiny_trace.model_dump()
    data["layers"][2]["tensors"][0]["name"] = "w#1"
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SchedoptError) as err:
        load_trace(path)
    msg = str(err.value)
    assert "w#1" in msg and "layers[2].tensors[0].name" in msg


def test_optimized_pieces_map_back_to_the_units(tiny_trace: Trace) -> None:
    """The optimizer's partitioned plan, parsed again, gives back its own segments."""
    cluster = load_cluster("k80-4x4-10gbe")
    opts = SolveOptions(next_forward="per-layer", reorder=True, partition_bytes=1_000_000,
                        time_limit_s=2.0)
    res = solve(tiny_trace, cluster, opts)
    inst = build_instance(tiny_trace, cluster, opts, merge=False)
    segs, reason = inst.segments_of_plan(res.plan)
    assert reason == "" and segs
    assert inst.to_plan(segs).buckets == res.plan.buckets
    assert any(parse_member(m, res.plan.partition).piece is not None
               for b in res.plan.buckets for m in b) == bool(res.plan.partition)
