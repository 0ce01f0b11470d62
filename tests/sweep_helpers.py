"""Small sweep specs and helpers shared by the sweep tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: Fields that depend on the clock or the machine, not on the row's content.
VOLATILE = ("wall_s", "finished_at", "solve_time_s", "host")

#: Cheap rows on small instances: two traces, a family at two sizes and a fixed cluster,
#: three policies, the exact DP and a deterministic CP-SAT setting (one worker, a
#: deterministic limit, no LNS, a wall-clock limit far above what it needs).
SMALL: dict[str, Any] = {
    "traces": ["alexnet-k80-b128", "vgg16-k80-b32"],
    "clusters": [{"cluster": "10gbe-k80-family", "nodes": [2, 4]}, "k80-4x4-10gbe"],
    "policies": ["ddp", "ddp:bucket_cap_mb=5", "horovod", "mgwfbp"],
    "optimize": [
        {},
        {"next_forward": "per-layer", "reorder": True, "method": "cp-sat", "lns": False,
         "time_limit_s": 60, "workers": 1, "seed": 0,
         "cp_sat": {"max_deterministic_time": 0.3}},
    ],
}


def write_spec(path: Path, spec: dict[str, Any]) -> Path:
    """Write ``spec`` as JSON and return its path."""
    path.write_text(json.dumps(spec))
    return path


def stable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without their volatile fields, ordered by key."""
    return sorted(({k: v for k, v in r.items() if k not in VOLATILE} for r in rows),
                  key=lambda r: r["key"])


def env() -> dict[str, str]:
    """Environment of subprocesses: one thread, Agg, no colour."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "NO_COLOR": "1",
            "PYTHONPATH": str(REPO)}


def schedopt(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m schedopt ARGS`` in a subprocess."""
    return subprocess.run([sys.executable, "-m", "schedopt", *args], capture_output=True,
                          text=True, timeout=timeout, env=env(), cwd=REPO)
