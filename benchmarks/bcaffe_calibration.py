"""Calibrate the in-training all-reduce on one node count's B-Caffe log; predict the others.

Run: ``python benchmarks/bcaffe_calibration.py [LOGDIR]`` (default: the B-Caffe ``logdata`` folder
of ``../shared/reference/mgwfbp-traces`` next to the repository). About 5 s.

For each node count N0 in 2, 4, 8, the layer-wise all-reduce times of ``tmp{N0}comm.log``
(column 4, one message per layer, messages of 64 KB or more) calibrate three physical parameters
of a ring over one K80 per node (``k80-4x4-10gbe`` resized to N0 x 1): the inter-node bandwidth,
the latency per ring step and the per-collective overhead (``collective_overhead_s``), by
bounded least squares on relative error with the cluster's own cost function. The calibrated
cluster is then resized to the other node counts N and predicts, for ``tmp{N}comm.log``:

- every per-layer message (mean and median relative error, messages >= 64 KB);
- the total communication of all messages (signed error of the sum);
- the iteration time of wait-free backpropagation (``caffe-mpi``, one bucket per layer), whose
  measured reference replays the logged message times behind the logged backward: sum f +
  max(sum b, end of the last message), forward = backward / 2 as in the shipped traces, no I/O.
  The logs hold no iteration time; only the communication differs between the two.

Rows with N = N0 are in-sample (what the three parameters can fit). For comparison, the same
figures for the OSU fit of N (``bcaffe-osu-Nn``: one line), the piecewise OSU curve of N
(``fit-comm`` segments) and the 10GbE link preset. ``--markdown`` prints the table of
docs/validation.md. Last, the piecewise-linear fits of the three OSU curves (``fit-comm``):
protocol switches, median relative error in-sample and held out (fit on every other size).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from bcaffe_study import error_stats, group_samples, wfbp_replay
from scipy.optimize import least_squares

from schedopt.files import load_cluster
from schedopt.measure.bcaffe import load_bcaffe_log, read_bcaffe_log
from schedopt.measure.comm_tables import parse_comm_file
from schedopt.measure.commfit import fit_piecewise
from schedopt.model.cluster import Cluster
from schedopt.policies import make_plan
from schedopt.simulate.simulator import simulate

DEFAULT_LOGDIR = (Path(__file__).resolve().parents[1].parent / "shared" / "reference"
                  / "mgwfbp-traces" / "B-Caffe" / "logdata")
NODES = (2, 4, 8)
BIG = 65536


def prior(nodes: int) -> Cluster:
    """The 10GbE link preset as a ring of ``nodes`` K80s, one per node."""
    return load_cluster("k80-4x4-10gbe").with_size(nodes, 1)


def with_params(cluster: Cluster, x: np.ndarray) -> Cluster:
    """``x`` = (log bandwidth / 1 GB/s, latency per step in 10 us, overhead in 100 us)."""
    data = cluster.model_dump()
    data["inter_link"] = {**data["inter_link"], "bandwidth_Bps": 1e9 * math.exp(x[0]),
                          "latency_s": 1e-5 * x[1]}
    data["collective_overhead_s"] = 1e-4 * x[2]
    return Cluster.model_validate(data)


def times(cluster: Cluster, sizes: np.ndarray) -> np.ndarray:
    (stage,) = cluster.comm_stages()
    return stage.times(sizes.astype(float))


def calibrate_messages(nodes: int, sizes: np.ndarray, measured: np.ndarray) -> Cluster:
    """Bounded least squares on relative error, from three starts."""
    base = prior(nodes)

    def res(x: np.ndarray) -> np.ndarray:
        return times(with_params(base, x), sizes) / measured - 1.0

    best = None
    for x0 in ([0.1, 3.5, 0.0], [-1.0, 1.0, 2.0], [1.0, 10.0, 5.0]):
        r = least_squares(res, x0, bounds=([-5.0, 0.0, 0.0], [3.0, 1e3, 1e3]), method="trf")
        if best is None or r.cost < best.cost:
            best = r
    assert best is not None
    return with_params(base, best.x)


class Curve:
    """A fitted cost curve (piecewise OSU) as a cluster-like object."""

    def __init__(self, nodes: int, logdir: Path) -> None:
        fit = fit_piecewise(parse_comm_file(logdir / f"allreduce{nodes}.log"))
        data = load_cluster(f"bcaffe-osu-{nodes}n").model_dump()
        data["allreduce"] = fit.model_dump()
        self.cluster = Cluster.model_validate(data)


def figures(cluster: Cluster, logdir: Path, nodes: int) -> dict[str, float]:
    """Per-message, total-communication and iteration-time errors on ``tmp{nodes}comm.log``."""
    path = logdir / f"tmp{nodes}comm.log"
    log = read_bcaffe_log(path)
    groups, smp = group_samples(log)
    pred = times(cluster, smp.sizes)
    big = smp.sizes >= BIG
    st = error_stats(pred[big], smp.times[big])
    total = float(pred.sum() / smp.times.sum() - 1.0)
    trace = load_bcaffe_log(path)
    trace = type(trace).model_validate({**trace.model_dump(), "io_s": 0.0, "h2d_s": 0.0,
                                        "update_s": 0.0})
    fwd = float(trace.forward.sum())
    meas = wfbp_replay(log, groups, smp.times)
    measured_iter = fwd + max(meas.backward_s, meas.last_end_s)
    sim = simulate(trace, cluster, make_plan(trace, cluster, "caffe-mpi")).iteration_time_s
    return {"mape": st.mape, "median": st.median_ape, "total": total,
            "iter": sim / measured_iter - 1.0, "iter_ms": measured_iter * 1e3}


def osu_curves(logdir: Path) -> list[tuple[str, str, str]]:
    """Piecewise fits of the three OSU logs: switches, in-sample and held-out median error."""
    from schedopt.measure.comm_tables import CommSamples
    from schedopt.measure.commfit import fit_alpha_beta, relative_errors

    out = []
    for n in NODES:
        smp = parse_comm_file(logdir / f"allreduce{n}.log")
        fit = fit_piecewise(smp)
        assert fit.segments is not None
        k = len(fit.segments)
        med = float(np.median(relative_errors(smp, fit)))
        order = np.argsort(smp.sizes, kind="stable")
        held: list[np.ndarray] = []
        for half in (0, 1):  # fit on every other size, predict the rest
            sel = order[np.arange(order.size) % 2 == half]
            rest = order[np.arange(order.size) % 2 != half]
            f = fit_piecewise(CommSamples(smp.sizes[sel], smp.times[sel], "osu", n), segments=k)
            held.append(relative_errors(CommSamples(smp.sizes[rest], smp.times[rest], "osu", n),
                                        f))
        line = fit_alpha_beta(smp)
        out.append((f"allreduce{n}.log ({smp.sizes.size} sizes)",
                    f"{k} segments, switches at {[s.min_bytes for s in fit.segments[1:]]} B",
                    f"median |error| {100 * med:.2f}% in-sample, "
                    f"{100 * float(np.median(np.concatenate(held))):.2f}% held out "
                    f"(every other size); one line >= 64 KB: "
                    f"{100 * float(np.median(relative_errors(smp, line))):.2f}%"))
    return out


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    logdir = Path(args[0]) if args else DEFAULT_LOGDIR
    if not logdir.is_dir():
        print(f"B-Caffe logs not found: {logdir}", file=sys.stderr)
        return 2
    fitted: dict[int, Cluster] = {}
    for n0 in NODES:
        _, smp = group_samples(read_bcaffe_log(logdir / f"tmp{n0}comm.log"))
        big = smp.sizes >= BIG
        fitted[n0] = calibrate_messages(n0, smp.sizes[big], smp.times[big])
    rows: list[tuple[str, str, dict[str, float]]] = []
    for n in NODES:
        for n0 in NODES:
            cl = fitted[n0].with_size(n, 1)
            kind = "in-sample" if n0 == n else "predicted"
            rows.append((f"tmp{n}comm ({n} nodes)", f"calibrated on {n0} nodes ({kind})",
                         figures(cl, logdir, n)))
        rows.append((f"tmp{n}comm ({n} nodes)", "OSU fit, one line", figures(
            load_cluster(f"bcaffe-osu-{n}n"), logdir, n)))
        rows.append((f"tmp{n}comm ({n} nodes)", "OSU curve, piecewise", figures(
            Curve(n, logdir).cluster, logdir, n)))
        rows.append((f"tmp{n}comm ({n} nodes)", "10GbE link preset", figures(prior(n), logdir,
                                                                             n)))
    if "--markdown" in argv:
        print("| log | model | per-layer MAPE / median (>= 64 KB) | total comm | iteration |")
        print("| --- | --- | --- | --- | --- |")
        for inst, model, f in rows:
            print(f"| {inst} | {model} | {100 * f['mape']:.1f}% / {100 * f['median']:.1f}% | "
                  f"{100 * f['total']:+.1f}% | {100 * f['iter']:+.1f}% |")
    else:
        width = [max(len(r[i]) for r in rows) for i in range(2)]
        print(f"{'instance':<{width[0]}}  {'model':<{width[1]}}  figure")
        for inst, model, f in rows:
            print(f"{inst:<{width[0]}}  {model:<{width[1]}}  per-layer MAPE {100 * f['mape']:.1f}%"
                  f" median {100 * f['median']:.1f}%; total comm {100 * f['total']:+.1f}%; "
                  f"iteration {100 * f['iter']:+.1f}% (replay {f['iter_ms']:.1f} ms)")
    print()
    for row in osu_curves(logdir):
        print("  ".join(row))
    print()
    for n0, cl in fitted.items():
        assert cl.inter_link is not None
        print(f"calibrated on {n0} nodes: bandwidth {cl.inter_link.bandwidth_Bps / 1e9:.3f} GB/s,"
              f" latency {cl.inter_link.latency_s * 1e6:.1f} us per step, overhead "
              f"{cl.collective_overhead_s * 1e6:.0f} us per all-reduce")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
