"""The command line with sharded plans: simulate prints the peak, compare --sharding, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedopt.cli.app import app

runner = CliRunner()
TRACE, CLUSTER = "bert-large-a100-bf16", "dgx-a100"


def _json(*args: str) -> object:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_simulate_prints_the_peak_of_a_sharded_plan() -> None:
    out = _json("simulate", TRACE, CLUSTER, "-p", "fsdp")
    assert isinstance(out, dict)
    assert out["plan"]["sharding"]["mode"] == "full"
    assert out["peak_memory_bytes"] > 0 and out["shard_bytes"] > 0
    table = runner.invoke(app, ["simulate", TRACE, CLUSTER, "-p", "fsdp"], terminal_width=100)
    assert table.exit_code == 0, table.output
    mib = f"{out['peak_memory_bytes'] / 2**20:.1f} MiB"
    assert "peak memory" in table.output and mib in table.output
    # all-reduce plans keep their output
    ddp = _json("simulate", TRACE, CLUSTER, "-p", "ddp")
    assert isinstance(ddp, dict) and "peak_memory_bytes" not in ddp


def test_simulate_reads_a_sharded_plan_file(tmp_path: Path) -> None:
    out = _json("simulate", TRACE, CLUSTER, "-p", "zero3")
    assert isinstance(out, dict)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(out["plan"]))
    again = _json("simulate", TRACE, CLUSTER, "--plan", str(path))
    assert isinstance(again, dict)
    assert again["iteration_time_s"] == out["iteration_time_s"]
    assert again["peak_memory_bytes"] == out["peak_memory_bytes"]


@pytest.mark.parametrize(("mode", "labels"), [
    ("full", ["fsdp", "zero3"]),
    ("grad-op", ["fsdp:reshard_after_forward=false", "megatron-distopt"]),
])
def test_compare_sharding_lists_the_sharded_baselines(mode: str, labels: list[str]) -> None:
    rows = _json("compare", TRACE, CLUSTER, "--sharding", mode)
    assert isinstance(rows, list)
    assert sorted(r["label"] for r in rows) == labels
    assert all(r["plan"]["sharding"]["mode"] == mode for r in rows)
    both = _json("compare", TRACE, CLUSTER, "--sharding", mode, "-p", "ddp")
    assert isinstance(both, list) and [r["label"] for r in both] == ["ddp", *labels]


def test_compare_without_sharding_is_unchanged() -> None:
    result = runner.invoke(app, ["compare", TRACE, CLUSTER, "-p", "ddp,horovod"],
                           terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "peak" not in result.output and "fsdp" not in result.output


@pytest.mark.parametrize(("plan", "field"), [
    ({"accumulate": 0}, "accumulate"),  # at least one micro-batch
    ({"comm_dtype": "float7"}, "comm_dtype"),  # unknown dtype
    ({"collective": "ps"}, "collective"),  # a parameter server has no all-gather
    ({"sharding": {"mode": "full", "units": [["nope"]]}}, "plan.sharding.units"),
])
def test_bad_plan_fields_are_one_line_errors(tmp_path: Path, plan: dict, field: str) -> None:
    base = _json("simulate", TRACE, CLUSTER, "-p", "fsdp")
    assert isinstance(base, dict)
    data = {**base["plan"], "trace_hash": None, "cluster_hash": None, **plan}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert field in _error("simulate", TRACE, CLUSTER, "--plan", str(path))


def test_bad_sharding_option() -> None:
    assert "--sharding" in _error("compare", TRACE, CLUSTER, "--sharding", "zero")


def test_list_names_the_sharded_baselines() -> None:
    out = _json("list")
    assert isinstance(out, dict)
    assert out["sharded_policies"] == ["fsdp", "zero3", "megatron-distopt"]
    assert not set(out["sharded_policies"]) & set(out["policies"])


def test_gantt_legend_names_sharded_tasks_only_when_drawn(tmp_path: Path) -> None:
    """A sharded plan's all-gathers and reduce-scatters get colours and legend entries of their
    own; an all-reduce plan's legend does not list them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from schedopt.files import load_cluster, load_trace
    from schedopt.policies import make_plan
    from schedopt.report import charts
    from schedopt.simulate.simulator import simulate

    tr, cl = load_trace("gpt2-124m-a100-bf16"), load_cluster("dgx-a100-4n")
    legends = {}
    for policy in ("fsdp", "ddp"):
        sched = simulate(tr, cl, make_plan(tr, cl, policy), record=True)
        captured: list = []
        real = plt.Axes.legend

        def spy(self, handles, labels, _out=captured, _real=real, **kw):  # type: ignore[no-untyped-def]
            _out.append((list(labels), [h.get_facecolor() for h in handles]))
            return _real(self, handles, labels, **kw)

        plt.Axes.legend = spy  # type: ignore[method-assign]
        try:
            charts.gantt_chart(sched, tmp_path / f"{policy}.png", iterations=1)
        finally:
            plt.Axes.legend = real  # type: ignore[method-assign]
        legends[policy] = captured[0]
    labels, colours = legends["fsdp"]
    assert {"ag", "rs"} <= set(labels)
    assert len(set(map(tuple, colours))) == len(labels)  # every kind its own colour
    assert not {"ag", "rs"} & set(legends["ddp"][0])
