"""``profile``, ``bench-comm``, ``bench-ddp`` and ``bench-gpu``: measurements on this machine
(torch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from schedopt.cli.common import (
    JsonOpt,
    ThreadsOpt,
    TimeoutOpt,
    print_json,
    rel_to,
    user_errors,
)
from schedopt.cli.output import choice, progress
from schedopt.errors import SchedoptError

#: Most timed or untimed calls, iterations or repeats a benchmark option asks for.
MAX_REPEATS = 100_000
#: ``--backend`` of the commands that launch ranks.
BACKENDS = ("gloo", "nccl")
#: Most alternating rounds of ``bench-ddp``.
MAX_ROUNDS = 1_000
#: ``--launcher`` of ``bench-ddp``.
LAUNCHERS = ("auto", "local", "env")

if TYPE_CHECKING:
    from schedopt.measure.bench_comm import CommBench
    from schedopt.measure.bench_ddp import DdpRow
    from schedopt.measure.gpu_bench import GpuBench
    from schedopt.measure.gpus import GPU
    from schedopt.measure.launch import AnyLaunch
    from schedopt.model.trace import Trace


def profile_cmd(
    factory: Annotated[
        str, typer.Argument(help="MODULE:FACTORY, a callable returning a torch.nn.Module.")
    ],
    input_shape: Annotated[
        str, typer.Option("--input-shape", help="Shape of one input batch, e.g. 32,3,224,224.")
    ],
    name: Annotated[str, typer.Option("--name", help="Trace name.")],
    out: Annotated[Path, typer.Option("--out", help="Trace JSON to write.")],
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="Per-GPU batch (default: first dim).")
    ] = None,
    input_dtype: Annotated[
        str, typer.Option("--input-dtype", help="float32, or int64 for token ids in [0, 100).")
    ] = "float32",
    device: Annotated[
        str | None, typer.Option("--device", help="cpu, cuda, cuda:1 (default: the model's).")
    ] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Measured iterations.")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", help="Discarded iterations.")] = 2,
    procs: Annotated[
        int, typer.Option("--procs", help="Ranks computing at once, as in training (1: this "
                          "process alone; N >= 2: N local ranks, the median over them).")
    ] = 1,
    backend: Annotated[
        str, typer.Option("--backend", help="With --procs N: gloo (CPU) | nccl (a GPU each).",
                          **choice(*BACKENDS))
    ] = "gloo",
    threads: Annotated[
        int, typer.Option("--threads", help="With --procs N: OMP_NUM_THREADS of every rank.")
    ] = 1,
    timeout: Annotated[
        float, typer.Option("--timeout", help="With --procs N: seconds before a hung run stops.")
    ] = 600.0,
    grad_copy: Annotated[
        bool, typer.Option("--grad-copy", help="Time DDP's copy of every gradient into its "
                           "bucket as part of the backward; autograd's gradient is kept "
                           "(see --grad-view).")
    ] = False,
    grad_view: Annotated[
        bool, typer.Option("--grad-view", help="As --grad-copy, then make the copy the "
                           "gradient, as DDP's gradient_as_bucket_view (bench-ddp's default).")
    ] = False,
) -> None:
    """Measure a PyTorch model's layer-wise trace (needs torch)."""
    import warnings

    from schedopt.files import output_files
    from schedopt.measure.launch import MAX_PROCS, Launch
    from schedopt.measure.profile import ProfileWarning, check_profile_options, start_warnings
    from schedopt.model.limits import check_int_option

    with user_errors(), output_files({"--out": out}) as files:
        need_torch("profile")
        check_profile_options(name, batch_size, repeats, warmup)
        check_int_option(procs, "--procs", 1, MAX_PROCS)
        Launch(max(procs, 2), backend, threads, timeout).check()  # the options of --procs N
        notes = start_warnings(warmup)  # said with the result: an error stays one line
        with warnings.catch_warnings(record=True) as caught, \
                progress(f"profile {factory}: {warmup} warm-up + {repeats} measured"
                         f" iterations{f' on {procs} ranks' if procs > 1 else ''}"):
            warnings.simplefilter("always", ProfileWarning)
            if procs == 1:
                tr = _profile_here(factory, input_shape, input_dtype, name, batch_size, repeats,
                                   warmup, device, (grad_copy, grad_view))
            else:
                tr = _profile_ranks(factory, input_shape, input_dtype, name, batch_size,
                                    repeats, warmup, device, (procs, backend, threads, timeout),
                                    (grad_copy, grad_view))
        for note in notes:
            typer.echo(f"warning: {note}", err=True)
        for w in caught:
            if issubclass(w.category, ProfileWarning):
                typer.echo(f"warning: {w.message}", err=True)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        files.write_json(out, tr.model_dump(mode="json", exclude_none=True))
    typer.echo(f"wrote {out}: {len(tr.layers)} layers, {tr.num_tensors} tensors, "
               f"{tr.total_bytes / 2**20:.1f} MiB, compute {tr.compute_s * 1e3:.3f} ms")


def _profile_here(factory: str, input_shape: str, input_dtype: str, name: str,
                  batch_size: int | None, repeats: int, warmup: int, device: str | None,
                  grads: tuple[bool, bool]) -> Trace:
    """``profile`` in this process; ``grads``: ``--grad-copy``, ``--grad-view``."""
    from schedopt.measure.profile import build_model, profile_model, random_batch

    model = build_model(factory)
    batch = random_batch(input_shape, input_dtype)
    return profile_model(model, batch, name=name, batch_size=batch_size or batch.shape[0],
                         repeats=repeats, warmup=warmup, device=device, grad_copy=grads[0],
                         grad_view=grads[1])


def _profile_ranks(factory: str, input_shape: str, input_dtype: str, name: str,
                   batch_size: int | None, repeats: int, warmup: int, device: str | None,
                   launch: tuple[int, str, int, float], grads: tuple[bool, bool]) -> Trace:
    """``profile --procs N``: N co-running local ranks; ``grads`` as :func:`_profile_here`."""
    from schedopt.measure.launch import Launch
    from schedopt.measure.profile import random_batch
    from schedopt.measure.profile_ranks import profile_ranks

    if device is not None:
        raise SchedoptError("with --procs N the backend places the ranks (gloo: CPU, nccl: a "
                            "GPU each); leave --device out", "--device", device)
    spec = Launch(*launch).check()
    batch = batch_size or random_batch(input_shape, input_dtype).shape[0]
    return profile_ranks(factory, input_shape, input_dtype, name=name, batch_size=batch,
                         repeats=repeats, warmup=warmup, spec=spec, grad_copy=grads[0],
                         grad_view=grads[1])



#: ``--procs`` of the commands that run under a launcher too (``--launcher env``).
RankProcsOpt = Annotated[
    int | None, typer.Option("--procs", help="Local processes (ranks; default 2; bench-ddp"
                             " also 1: DDP alone, no communication). Under a launcher its"
                             " WORLD_SIZE counts the ranks.")
]
#: ``--launcher`` of ``bench-comm`` and ``bench-ddp``.
LauncherOpt = Annotated[
    str, typer.Option("--launcher", help="local: start --procs local ranks. env: this"
                      " process is one rank a launcher started (torchrun, one node or"
                      " several: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT);"
                      " rank 0 writes --out. auto: env when WORLD_SIZE is set, else local.",
                      **choice(*LAUNCHERS))
]


def bench_comm_cmd(
    out: Annotated[Path, typer.Option("--out", help="Output file (nccl-tests layout).")],
    backend: Annotated[str, typer.Option("--backend", help="gloo | nccl", **choice(*BACKENDS))
                       ] = "gloo",
    procs: RankProcsOpt = None,
    launcher: LauncherOpt = "auto",
    sizes: Annotated[
        str, typer.Option("--sizes", help="MIN:MAX message bytes (K, M, G suffixes).")
    ] = "4K:64M",
    iters: Annotated[int, typer.Option("--iters", help="Timed calls per size.")] = 10,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed calls per size.")] = 3,
    overlap_repeats: Annotated[
        int, typer.Option("--overlap-repeats", help="Overlap-slowdown repeats (0: skip).")
    ] = 5,
    overlap_bytes: Annotated[
        int | None, typer.Option("--overlap-bytes", help="All-reduce size under the compute"
                                 " loop (default 25 MiB).")
    ] = None,
    pattern: Annotated[
        str, typer.Option("--pattern", help="isolated: every timed call alone after a barrier"
                          " (the median call); queued: launched back to back (the mean, as"
                          " nccl-tests).", **choice("isolated", "queued"))
    ] = "isolated",
    launch_calls: Annotated[
        int, typer.Option("--launch-calls", help="Asynchronous 4-byte calls timed for the host"
                          " launch cost per call (0: skip).")
    ] = 200,
    threads: ThreadsOpt = 1,
    timeout: TimeoutOpt = 600.0,
) -> None:
    """Measure all-reduce latency over message sizes, the contention between compute and
    communication and the host cost of launching one call, on local ranks or as the ranks of
    torchrun (--launcher env; needs torch); `fit-comm` reads the output."""
    from schedopt.files import output_files
    from schedopt.measure.bench_comm import (
        MAX_MESSAGE_BYTES,
        bench_comm,
        format_nccl_tests,
        parse_sizes,
    )
    from schedopt.measure.launch import EnvLaunch, joined
    from schedopt.model.limits import check_int_option

    with user_errors():
        need_torch("bench-comm")
        spec = _rank_launch(launcher, procs, backend, threads, timeout)
    writes = not isinstance(spec, EnvLaunch) or spec.writes  # under a launcher: rank 0 alone
    with user_errors(), output_files({"--out": out if writes else None}) as files:
        lo, hi = parse_sizes(sizes)
        check_int_option(iters, "--iters", 1, MAX_REPEATS)
        check_int_option(warmup, "--warmup", 0, MAX_REPEATS)
        check_int_option(overlap_repeats, "--overlap-repeats", 0, MAX_REPEATS)
        check_int_option(overlap_bytes, "--overlap-bytes", 4, MAX_MESSAGE_BYTES)
        check_int_option(launch_calls, "--launch-calls", 0, MAX_REPEATS)
        _note_auto(launcher, spec, "bench-comm")
        with progress(f"bench-comm: all-reduces of {lo:,} to {hi:,} B on {spec.procs} "
                      f"{backend} ranks", enabled=writes), joined(spec) as spec:
            res = bench_comm(spec, min_bytes=lo, max_bytes=hi, iters=iters, warmup=warmup,
                             overlap_bytes=overlap_bytes, overlap_repeats=overlap_repeats,
                             pattern=pattern, launch_calls=launch_calls)
        if writes:
            files.write_text(out, format_nccl_tests(res))
    if writes:
        _echo_comm(res, out)


def bench_gpu_cmd(
    out: Annotated[Path, typer.Option("--out", help="GPU profile JSON to write (`estimate --gpu"
                                      " FILE` reads it).")],
    device: Annotated[str, typer.Option("--device", help="torch device: cuda, cuda:N or cpu.")]
    = "cuda",
    dtype: Annotated[str, typer.Option("--dtype", help="Compute precision: bf16, fp16, tf32,"
                                       " fp32.")] = "bf16",
    base: Annotated[str, typer.Option("--base", help="Profile (shipped name or file) of the"
                                      " figures not measured; auto: the shipped profile of the"
                                      " same GPU.")] = "auto",
    name: Annotated[str | None, typer.Option("--name", help="Profile name.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A few small products and a small batch"
                                        " norm (seconds on a CPU thread), no attention sweep.")]
    = False,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed calls per product, copy and"
                                         " attention step (the fastest counts).")] = 10,
    stream_mib: Annotated[int, typer.Option("--stream-mib", help="Size of the streaming copy"
                                            " (MiB).")] = 256,
    as_json: JsonOpt = False,
) -> None:
    """Measure a GPU (or this CPU) for the compute estimator: matrix products, a streaming copy,
    the kernel floor, a batch norm and flash attention, fitted into a GPU profile (needs torch;
    docs/estimate.md)."""
    from schedopt.files import output_files
    from schedopt.measure.gpu_bench import (
        base_for,
        bench_gpu,
        check_bench_options,
        device_info,
        measured_profile,
    )
    from schedopt.measure.gpus import check_profile, get_gpu, gpu_profile_data

    with user_errors(), output_files({"--out": out}) as files:
        need_torch("bench-gpu")
        check_bench_options(repeats, stream_mib)
        if name is not None and not (0 < len(name) <= 200 and name.isprintable()):
            raise SchedoptError("must be 1 to 200 printable characters", "--name", name)
        basis = get_gpu(base_for(*device_info(device)) if base == "auto" else base)
        with progress(f"bench-gpu: {dtype} on {device}"):
            res = bench_gpu(device, dtype, quick=quick, repeats=repeats, stream_mib=stream_mib)
        prof = check_profile(measured_profile(res, basis, name))
        files.write_json(out, gpu_profile_data(prof))
    _echo_gpu(res, prof, out, as_json)


def _echo_gpu(res: GpuBench, prof: GPU, out: Path, as_json: bool) -> None:
    """Print ``bench-gpu``'s products, its fitted figures and the file written."""
    fit = res.fit_errors()
    summary = {"profile": str(out), "name": prof.name, "device": res.device,
               "precision": res.precision, "units": res.units,
               "rate_flops": res.gemm.peak, "k_half": res.gemm.k_half,
               "bandwidth_Bps": res.bandwidth_Bps, "kernel_s": res.kernel_s,
               "norm_eff": res.norm_eff,
               "flash_measured": bool(res.flash_fb),
               "fit_error_mean": res.fit_error_mean(),
               "products": [{"m": m, "n": n, "k": k, "seconds": t, "fitted_over_measured": 1 + e}
                            for (m, n, k, t), e in zip(res.samples, fit, strict=True)]}
    if as_json:
        print_json(summary)
        return
    typer.echo(f"{'m':>7} {'n':>7} {'k':>7} {'ms':>10} {'TFLOP/s':>9} {'fitted/measured':>16}")
    for (m, n, k, t), e in zip(res.samples, fit, strict=True):
        typer.echo(f"{m:>7} {n:>7} {k:>7} {t * 1e3:>10.4f} {2 * m * n * k / t / 1e12:>9.3f}"
                   f" {1 + e:>16.2f}")
    typer.echo(f"{res.device}, {res.precision}, {res.units} units: rate"
               f" {res.gemm.peak / 1e12:.4g} TFLOP/s, k_half {res.gemm.k_half:g}, mean"
               f" |fitted/measured - 1| {summary['fit_error_mean']:.1%}; copy"
               f" {res.bandwidth_Bps / 1e9:.4g} GB/s; kernel floor {res.kernel_s * 1e6:.3g} us;"
               f" batch norm at {res.norm_eff:.2f} of the copy's bandwidth;"
               f" flash attention {'measured' if res.flash_fb else 'not measured'}")
    typer.echo(f"wrote {out} ({prof.name}); use it with `schedopt estimate MODEL --gpu {out}`")


def _echo_comm(res: CommBench, out: Path) -> None:
    """Print ``bench-comm``'s figures and the file written."""
    for n, t in zip(res.sizes, res.times, strict=True):
        typer.echo(f"{n:>12,} B  {t * 1e3:10.3f} ms")
    if res.overlap_slowdown is not None:
        typer.echo(f"overlap slowdown {res.overlap_slowdown:.3f} (compute under all-reduces of"
                   f" {res.overlap_bytes:,} B)")
    if res.comm_slowdown is not None:
        typer.echo(f"communication slowdown {res.comm_slowdown:.3f} (all-reduces of"
                   f" {res.overlap_bytes:,} B under the compute loop)")
    if res.launch_overhead_s is not None:
        typer.echo(f"launch cost {res.launch_overhead_s * 1e6:.1f} us per call (host, median of"
                   f" {res.launch_calls} asynchronous calls)")
    typer.echo(f"wrote {out} ({res.launch.backend}, {_ran_on(res.launch)}, "
               f"OMP_NUM_THREADS={res.launch.threads}, calls {res.pattern})")


def bench_ddp_cmd(
    factory: Annotated[
        str, typer.Argument(help="MODULE:FACTORY, a callable returning a torch.nn.Module.")
    ],
    input_shape: Annotated[
        str, typer.Option("--input-shape", help="Shape of one input batch per rank.")
    ],
    trace: Annotated[str, typer.Option("--trace", help="The model's trace (`profile`): a file"
                                       " or a shipped name.")],
    cluster: Annotated[str, typer.Option("--cluster", help="Cluster of the rows: a file or a"
                                         " shipped name.")],
    out: Annotated[Path, typer.Option("--out", help="Measurements CSV to write.")],
    policies: Annotated[
        list[str] | None, typer.Option("--policy", "-p", help="ddp[:knobs], cntk or sync-easgd"
                                       " (repeatable).")
    ] = None,
    plans: Annotated[
        list[Path] | None, typer.Option("--plan", help="Plan JSON (repeatable).")
    ] = None,
    input_dtype: Annotated[
        str, typer.Option("--input-dtype", help="float32, or int64 for token ids.")
    ] = "float32",
    procs: RankProcsOpt = None,
    launcher: LauncherOpt = "auto",
    backend: Annotated[str, typer.Option("--backend", help="gloo | nccl", **choice(*BACKENDS))
                       ] = "gloo",
    iters: Annotated[int, typer.Option("--iters", help="Timed iterations per run.")] = 20,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed iterations (>= 2).")] = 5,
    rounds: Annotated[
        int, typer.Option("--rounds", help="Run the configurations alternately this often.")
    ] = 1,
    bucket_view: Annotated[
        bool, typer.Option("--bucket-view/--no-bucket-view",
                           help="gradient_as_bucket_view for every row.")
    ] = True,
    threads: ThreadsOpt = 1,
    timeout: TimeoutOpt = 600.0,
) -> None:
    """Run real DistributedDataParallel per policy or plan on local ranks, or as the ranks of
    torchrun (--launcher env); write measurements rows (needs torch)."""
    from schedopt.files import output_files
    from schedopt.measure.bench_ddp import bench_ddp, ddp_configs, rows_csv
    from schedopt.measure.launch import EnvLaunch, joined

    with user_errors():
        need_torch("bench-ddp")
        spec = _rank_launch(launcher, procs, backend, threads, timeout, least=1)
    writes = not isinstance(spec, EnvLaunch) or spec.writes  # under a launcher: rank 0 alone
    with user_errors(), output_files({"--out": out if writes else None}) as files:
        tr, cl = _ddp_instance(trace, cluster, spec, iters, warmup, rounds)
        trace_path, cluster_path = instance_path(trace, "trace"), instance_path(cluster,
                                                                                "cluster")
        configs = ddp_configs(tr, cl, policies or [], plans or [], out.parent)
        _note_auto(launcher, spec, "bench-ddp")
        with progress(f"bench-ddp: {len(configs)} configurations x {rounds} rounds on "
                      f"{spec.procs} {backend} ranks", enabled=writes), joined(spec) as spec:
            rows = bench_ddp(configs, spec, factory=factory, input_shape=input_shape,
                             input_dtype=input_dtype, trace_path=trace_path, iters=iters,
                             warmup=warmup, rounds=rounds, bucket_view=bucket_view)
        if writes:
            files.write_text(out, rows_csv(rows, trace_ref=_ref(trace, trace_path, out),
                                           cluster_ref=_ref(cluster, cluster_path, out),
                                           spec=spec, iters=iters, warmup=warmup))
    if writes:
        _echo_ddp_rows(rows, out, spec)


def _ddp_instance(trace: str, cluster: str, spec: AnyLaunch, iters: int, warmup: int,
                  rounds: int) -> tuple[Any, Any]:
    """The checked counts of ``bench-ddp`` and its trace and cluster, whose ranks must be the
    launch's."""
    from schedopt.files import load_cluster, load_trace
    from schedopt.measure.launch import EnvLaunch
    from schedopt.model.limits import check_int_option

    check_int_option(iters, "--iters", 2, MAX_REPEATS)
    check_int_option(warmup, "--warmup", 2, MAX_REPEATS)
    check_int_option(rounds, "--rounds", 1, MAX_ROUNDS)
    tr, cl = load_trace(trace), load_cluster(cluster)
    if cl.world_size != spec.procs:
        ranks = "WORLD_SIZE" if isinstance(spec, EnvLaunch) else "--procs"
        raise SchedoptError(f"the cluster has {cl.world_size} ranks, {ranks} {spec.procs}",
                            "cluster", str(cluster))
    return tr, cl


def _rank_launch(launcher: str, procs: int | None, backend: str, threads: int, timeout: float,
                 least: int = 2) -> AnyLaunch:
    """How ``bench-comm`` or ``bench-ddp`` runs its ranks: ``--launcher auto`` is ``env`` when
    ``WORLD_SIZE`` is set (:func:`_note_auto` says so), ``local`` otherwise; ``least`` local
    ranks at the fewest.

    Raises
    ------
    SchedoptError
        A bad option, a launcher variable that is missing or malformed, or ``--procs`` other
        than the launcher's ``WORLD_SIZE``.
    """
    import os

    from schedopt.measure.launch import Launch, env_launch

    if launcher == "local" or (launcher == "auto" and "WORLD_SIZE" not in os.environ):
        return Launch(2 if procs is None else procs, backend, threads, timeout, least).check()
    spec = env_launch(os.environ, backend, threads, timeout)
    if procs is not None and procs != spec.world_size:
        raise SchedoptError(f"the launcher started WORLD_SIZE={spec.world_size} ranks; leave "
                            "--procs out under --launcher env", "--procs", procs)
    return spec


def _note_auto(launcher: str, spec: AnyLaunch, command: str) -> None:
    """Say on rank 0's stderr that ``--launcher auto`` found a launcher's ranks."""
    from schedopt.measure.launch import EnvLaunch

    if launcher == "auto" and isinstance(spec, EnvLaunch) and spec.writes:
        typer.echo(f"note: WORLD_SIZE is set: {command} runs as one of the {spec.world_size} "
                   "ranks a launcher started (--launcher env; --launcher local starts local "
                   "ranks)", err=True)


def _echo_ddp_rows(rows: list[DdpRow], out: Path, spec: AnyLaunch) -> None:
    """Print ``bench-ddp``'s rows and the file written."""
    for r in rows:
        mark = "ok" if r.buckets_ok else "MISMATCH"
        typer.echo(f"{r.config.label}: {r.median_s * 1e3:.3f} ms (std {r.std_s * 1e3:.3f} ms, "
                   f"{len(r.times)} samples)  buckets {mark}: {r.note}")
    typer.echo(f"wrote {out}: {len(rows)} rows ({spec.backend}, {_ran_on(spec)}, "
               f"OMP_NUM_THREADS={spec.threads})")


def _ran_on(spec: AnyLaunch) -> str:
    """``2 processes`` (local ranks), or ``4 ranks on 2 nodes (launcher env)``."""
    from schedopt.measure.launch import EnvLaunch

    return spec.describe() if isinstance(spec, EnvLaunch) else f"{spec.procs} processes"




def need_torch(command: str) -> None:
    """Refuse a command that measures with PyTorch when torch is not installed, naming the
    extra that installs it (torch itself is not imported here: that is the ranks' work)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise SchedoptError(f"{command} needs PyTorch: pip install 'schedopt[torch]'")


def instance_path(ref: str, kind: str) -> Path:
    """The file of a trace or cluster given as a path or a shipped name."""
    from schedopt.files import _resolve

    return _resolve(ref, kind)


def _ref(given: str, path: Path, out: Path) -> str:
    """How the measurements CSV names a trace or cluster: a shipped name as given, a file
    relative to the CSV's folder."""
    return given if not Path(given).exists() else rel_to(path, out.parent)
