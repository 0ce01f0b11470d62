"""``info``, ``list`` and ``schema``: the shipped instances and the document kinds."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from schedopt.cli.common import (
    JsonOpt,
    console,
    print_json,
    user_errors,
)
from schedopt.cli.output import CsvOpt, check_formats, print_csv
from schedopt.errors import SchedoptError

if TYPE_CHECKING:
    pass


def info(
    ref: Annotated[str, typer.Argument(help="A trace, cluster or GPU profile: file or shipped"
                                       " name.")],
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """Describe a trace, a cluster or a GPU profile (`estimate --gpu`)."""
    from schedopt.files import load_trace_or_cluster
    from schedopt.measure.gpus import find_profile, profile_summary
    from schedopt.model.trace import Trace
    from schedopt.report import tables as report
    with user_errors():
        check_formats(as_json, as_csv)
        gpu = find_profile(ref)
        obj = load_trace_or_cluster(ref) if gpu is None else None
    if gpu is not None:
        data: dict[str, Any] = profile_summary(gpu)
    elif isinstance(obj, Trace):
        data = {
            "kind": "trace", "name": obj.name, "batch_size": obj.batch_size,
            "layers": len(obj.layers), "tensors": obj.num_tensors,
            "gradient_bytes": obj.total_bytes, "forward_s": float(obj.forward.sum()),
            "backward_s": float(obj.backward.sum()), "io_s": obj.io_s, "h2d_s": obj.h2d_s,
            "update_s": obj.update_s, "fingerprint": obj.fingerprint(), "source": obj.source,
        }
    else:
        assert obj is not None
        alpha, beta = obj.alpha_beta()
        data = {
            "kind": "cluster", "name": obj.name, "nodes": obj.nodes,
            "gpus_per_node": obj.gpus_per_node, "world_size": obj.world_size,
            "collective": obj.collective, "alpha_s": alpha, "beta_s_per_byte": beta,
            "stages": [s.__dict__ for s in obj.comm_stages()],
            "launch_overhead_s": obj.launch_overhead_s, "hook_overhead_s": obj.hook_overhead_s,
            "bucket_compute_s": obj.bucket_compute_s,
            "fingerprint": obj.fingerprint(), "source": obj.source,
        }
    if as_json:
        print_json(data)
        return
    if as_csv:  # one row; a cluster's stages (a list of objects) are in --json only
        print_csv(data)
        return
    console.print(report.info_table(data))


def list_cmd(
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="Show each instance's source.")
    ] = False,
) -> None:
    """List the shipped instances (name, kind, size; sources with --long) and the policies."""
    from schedopt.files import list_instances
    from schedopt.policies import POLICIES, SHARDED_POLICIES
    from schedopt.report import tables as report
    with user_errors():
        check_formats(as_json, as_csv)
        rows = list_instances()
    if as_json:
        print_json({"instances": rows, "policies": list(POLICIES),
                    "sharded_policies": list(SHARDED_POLICIES)})
        return
    if as_csv:  # one row per shipped instance (the policies: `schedopt list --json`)
        print_csv(rows)
        return
    console.print(report.list_table(rows, long))
    console.print("policies: " + ", ".join(POLICIES))
    console.print("sharded (compare --sharding): " + ", ".join(SHARDED_POLICIES))
    if not long:
        console.print("`schedopt list --long` adds each instance's source; `schedopt info NAME`"
                      " describes one.")


def schema(
    kind: Annotated[
        str, typer.Argument(help="trace | cluster | cluster-family | plan | measurements |"
                                 " gpu-profile")],
) -> None:
    """Print the JSON Schema of a document kind (measurements: of one CSV row)."""
    from schedopt.measure.gpus import profile_schema
    from schedopt.measure.measurements import MeasurementRow
    from schedopt.model.cluster import Cluster, ClusterFamily
    from schedopt.model.plan import Plan
    from schedopt.model.trace import Trace

    models: dict[str, Callable[[], dict[str, Any]]] = {
        "trace": Trace.model_json_schema,
        "cluster": Cluster.model_json_schema,
        "cluster-family": ClusterFamily.model_json_schema,
        "plan": Plan.model_json_schema,
        "measurements": MeasurementRow.model_json_schema,
        "gpu-profile": profile_schema,
    }
    with user_errors():
        if kind not in models:
            raise SchedoptError(f"unknown kind (known: {', '.join(models)})", "kind", kind)
    print_json(models[kind]())


