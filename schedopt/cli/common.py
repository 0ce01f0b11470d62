"""What every command shares: argument types, loading, errors, JSON output."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from schedopt.cli.output import WideConsole, choice
from schedopt.errors import SchedoptError

if TYPE_CHECKING:
    from schedopt.model.cluster import Cluster
    from schedopt.model.plan import Plan, Schedule
    from schedopt.model.trace import Trace

console = WideConsole()
_state = {"debug": False}
log = logging.getLogger("schedopt")

TraceArg = Annotated[str, typer.Argument(help="Trace: a JSON file or a shipped name.")]
ClusterArg = Annotated[str, typer.Argument(help="Cluster: a JSON file or a shipped name.")]
NodesOpt = Annotated[
    int | None, typer.Option("--nodes", help="Derive the cluster of N nodes (families, resizing).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
PolicyOpt = Annotated[
    str | None, typer.Option("--policy", "-p", help="Policy spec NAME[:key=value,...].")
]
PlanOpt = Annotated[
    Path | None, typer.Option("--plan", help="A plan JSON (from `optimize --out`).")
]
PerturbOpt = Annotated[
    str | None, typer.Option("--perturb", metavar="PCT",
                             help="Also simulate the plan with alpha, beta and compute scaled by"
                             " +-PCT% (the corners and the nominal; docs/robust.md).")
]
VaryOpt = Annotated[
    str, typer.Option("--vary", help="What --perturb / --robust scale: some of"
                      " alpha,beta,compute.")
]
PerLinkOpt = Annotated[
    bool, typer.Option("--per-link", help="Scale alpha and beta of each link separately.")
]
WorkLimitOpt = Annotated[
    float | None,
    typer.Option("--work-limit", help="Deterministic work limit in seconds (the time limit"
                 " becomes a safety stop); default: 70% of the time limit."),
]
WorkersOpt = Annotated[
    int, typer.Option("--workers", help="CP-SAT workers (1 is deterministic).")
]
ShardingOpt = Annotated[
    str | None, typer.Option("--sharding", help="full | grad-op: search sharded plans"
                             " (units, prefetch depths) instead of all-reduce buckets.",
                             **choice("full", "grad-op"))
]
MemoryCapOpt = Annotated[
    str | None, typer.Option("--memory-cap", metavar="SIZE",
                             help="With --sharding: largest peak of unsharded parameters and"
                             " gradients per rank: bytes, or with a unit (40GiB, 512MB; KB, MB,"
                             " GB in 1000s, KiB, MiB, GiB in 1024s).")
]
AccumulateOpt = Annotated[
    int, typer.Option("--accumulate", help="With --sharding: micro-batches per step.")
]
RobustOpt = Annotated[
    str | None, typer.Option("--robust", metavar="PCT",
                             help="Minimise the worst case over alpha, beta and compute scaled"
                             " by +-PCT% (docs/robust.md).")
]
RobustClustersOpt = Annotated[
    list[str] | None, typer.Option("--robust-clusters", metavar="CLUSTERS",
                                   help="Minimise the worst case over these clusters too"
                                   " (comma-separated or repeated).")
]
ThreadsOpt = Annotated[
    int, typer.Option("--threads", help="OMP_NUM_THREADS and torch threads of every rank.")
]
TimeoutOpt = Annotated[
    float, typer.Option("--timeout", help="Seconds before a hung run is stopped.")
]

def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn bad input into one line on stderr and exit status 2 (tracebacks with --debug);
    Ctrl-C into the line ``error: interrupted`` and exit status 130."""
    try:
        yield
    except SchedoptError as exc:
        if _state["debug"]:
            raise
        _fail(str(exc))
    except KeyboardInterrupt:
        if _state["debug"]:
            raise
        typer.echo("error: interrupted", err=True)
        raise typer.Exit(130) from None


def parse_counts(text: str, option: str) -> list[int]:
    """Parse comma-separated node counts (1 to MAX_NODES, at most 64 of them)."""
    from schedopt.model.limits import MAX_NODES
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SchedoptError("must be comma-separated integers", option, text) from None
    if not counts or len(counts) > 64 or min(counts) < 1 or max(counts) > MAX_NODES:
        raise SchedoptError(f"must be 1 to 64 integers between 1 and {MAX_NODES:,}", option,
                            text)
    return counts


def load_pair(trace: str, cluster: str, nodes: int | None) -> tuple[Trace, Cluster]:
    """Load a trace and a cluster from names or paths."""
    from schedopt.files import load_cluster, load_trace
    tr, cl = load_trace(trace), load_cluster(cluster, nodes)
    log.info("trace %s: %d layers, %d tensors; cluster %s: %d GPUs, %s", tr.name,
             len(tr.layers), tr.num_tensors, cl.name, cl.world_size, cl.collective)
    return tr, cl


def load_with_plan(trace: str, cluster: str, nodes: int | None, policy: str | None,
                   plan_file: Path | None) -> tuple[Trace, Cluster, Plan]:
    """Load a trace, a cluster and the plan given by exactly one of a policy spec or a file."""
    from schedopt.files import load_plan
    from schedopt.policies import make_plan
    if (policy is None) == (plan_file is None):
        raise SchedoptError("give exactly one of --policy and --plan", "options",
                            "both" if policy else "neither")
    tr, cl = load_pair(trace, cluster, nodes)
    if plan_file is not None:
        plan = load_plan(plan_file)
        plan.check_stage_orders(cl)
    else:
        plan = make_plan(tr, cl, policy or "")
    return tr, cl, plan


def result_dict(plan: Plan, sched: Schedule, **extra: Any) -> dict[str, Any]:
    """The JSON object ``simulate --json`` prints for one plan."""
    return {
        "policy": plan.policy,
        "knobs": plan.knobs,
        "iteration_time_s": sched.iteration_time_s,
        "first_iteration_s": sched.first_iteration_s,
        "throughput_samples_s": sched.throughput_samples_s,
        "breakdown": sched.breakdown.as_dict(),
        **_memory(sched),
        **extra,
        "plan": plan.model_dump(mode="json"),
    }


def _memory(sched: Schedule) -> dict[str, float]:
    """A sharded plan's memory figures (nothing for all-reduce plans)."""
    if sched.peak_memory_bytes is None:
        return {}
    return {"peak_memory_bytes": sched.peak_memory_bytes,
            "shard_bytes": sched.shard_bytes or 0.0}


def print_json(data: Any) -> None:
    """Print strict JSON to stdout (a NaN or infinite number is an error)."""
    from schedopt.files import json_text
    sys.stdout.write(json_text(data, indent=None))


def wrote(*paths: Path | None) -> None:
    """Say which files a command wrote (after its table; nothing under --json)."""
    for path in paths:
        if path is not None:
            typer.echo(f"wrote {path}")


_FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_figure_path(path: Path | None, option: str) -> None:
    """Refuse a figure path whose format matplotlib would not write."""
    if path is not None and path.suffix.lower() not in _FIGURE_SUFFIXES:
        raise SchedoptError(f"must end in {', '.join(_FIGURE_SUFFIXES)}", option, str(path))



def shipped_sample(file: Path) -> Path:
    """A file that does not exist but names a shipped sample (``osu_allreduce8.log``)."""
    from schedopt.files import instances_dir

    sample = instances_dir() / "samples" / file.name
    return sample if not file.exists() and file.parent == Path() and sample.is_file() else file


def rel_to(path: Path, base: Path) -> str:

    return os.path.relpath(path.resolve(), base.resolve())

