"""Big instances: every command on a 200,000-tensor trace, its time and peak memory.

Run: ``python benchmarks/bench_big.py`` (all commands, about 20 minutes on 2 cores) or
``python benchmarks/bench_big.py --only info simulate`` (named rows). Options: ``--tensors N``
(default 200,000), ``--timeout S`` per command (default 600), ``--keep DIR`` to keep the inputs.

Each command runs as its own process (``python -m schedopt ...``, ``OMP_NUM_THREADS=1``); its
wall time and peak resident memory (``ru_maxrss`` of that child, from ``os.wait4``) are printed
in a table: instance, command, seconds, peak MiB, exit status. A command past the timeout is
killed and reported as ``timeout``. The trace is ``instances/generate.py``'s seeded synthetic
generator at ``N / 2`` layers (a weight and a bias per layer), the cluster 8 nodes x 8 GPUs,
hierarchical, on 100 Gb/s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "instances"))

from generate import synthetic_trace  # noqa: E402

CLUSTER = {
    "name": "8x8-hier", "nodes": 8, "gpus_per_node": 8, "collective": "hierarchical",
    "intra_link": {"name": "nvlink", "bandwidth_Bps": 1.5e11, "latency_s": 2e-6},
    "inter_link": {"name": "ib-100g", "bandwidth_Bps": 1.25e10, "latency_s": 5e-6},
}

#: (row name, command line after ``schedopt``; T, C and OUT are replaced by paths)
COMMANDS: list[tuple[str, list[str]]] = [
    ("info", ["info", "T", "--json"]),
    ("list", ["list", "--json"]),
    ("simulate", ["simulate", "T", "C", "-p", "ddp", "--json"]),
    ("simulate-bytescheduler", ["simulate", "T", "C", "-p", "bytescheduler", "--json"]),
    ("simulate-charts", ["simulate", "T", "C", "-p", "ddp", "--gantt", "OUT/g.png",
                         "--chrome-trace", "OUT/t.json"]),
    ("compare", ["compare", "T", "C", "--json"]),
    ("scale", ["scale", "T", "C", "--nodes", "1,2,8", "--json"]),
    ("emit", ["emit", "T", "C", "-t", "ddp", "-p", "ddp", "--out", "OUT/emit"]),
    ("optimize", ["optimize", "T", "C", "--json", "--out", "OUT/o.json"]),
    ("optimize-per-layer-reorder", ["optimize", "T", "C", "--next-forward", "per-layer",
                                    "--reorder", "--time-limit", "30", "--json"]),
]


def run_one(argv: list[str], timeout: float, env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``python -m schedopt argv``: (seconds, peak MiB, exit status or ``timeout``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "schedopt", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    deadline = t0 + timeout
    status = None
    while status is None:
        pid, code, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status = str(os.waitstatus_to_exitcode(code))
            break
        if time.perf_counter() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            _, code, usage = os.wait4(proc.pid, 0)
            status = "timeout"
            break
        time.sleep(0.05)
    proc.returncode = 0  # reaped above
    seconds = time.perf_counter() - t0
    return seconds, usage.ru_maxrss / 1024.0, status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=200_000)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--only", nargs="*", help="row names to run (default: all)")
    ap.add_argument("--keep", type=Path, help="keep the inputs and outputs in this folder")
    args = ap.parse_args()
    rows = [r for r in COMMANDS if not args.only or r[0] in args.only]
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_big."))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "instances" / "traces").mkdir(parents=True, exist_ok=True)
    (folder / "instances" / "clusters").mkdir(parents=True, exist_ok=True)
    trace = synthetic_trace(n_layers=args.tensors // 2)
    t_path = folder / "instances" / "traces" / f"{trace.name}.json"
    t_path.write_text(trace.model_dump_json())
    c_path = folder / "instances" / "clusters" / "8x8-hier.json"
    c_path.write_text(json.dumps(CLUSTER))
    out = folder / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "SCHEDOPT_INSTANCES": str(folder / "instances")}
    print(f"{'instance':<16} {'command':<28} {'seconds':>9} {'peak MiB':>9} {'exit':>8}")
    for name, template in rows:
        argv = [str(t_path) if a == "T" else str(c_path) if a == "C" else
                a.replace("OUT", str(out)) for a in template]
        seconds, mib, status = run_one(argv, args.timeout, env)
        print(f"{trace.name:<16} {name:<28} {seconds:9.1f} {mib:9.0f} {status:>8}", flush=True)


if __name__ == "__main__":
    main()
