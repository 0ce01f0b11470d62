"""What the command line prints: tables, units and hints (the commands in cli.py stay thin).

Every function here turns results into rich tables or lines of text; none computes a result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = [
    "SolveProgress",
    "compare_hint",
    "compare_table",
    "fmt_bytes",
    "fmt_gap",
    "fmt_time",
    "info_table",
    "list_table",
    "short_spec",
    "split_policy_specs",
    "tune_lines",
    "tune_table",
]

#: Relative difference under which two iteration times count as a tie in ``compare``.
TIE = 0.005


def fmt_time(seconds: float) -> str:
    """A time with the unit that keeps 1 to 3 integer digits: ``240.000 us``, ``1.250 s``."""
    if not math.isfinite(seconds):
        return str(seconds)
    a = abs(seconds)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if a >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return "0 s" if a == 0 else f"{seconds / 1e-9:.3f} ns"


def fmt_bytes(n: float) -> str:
    """A byte count in binary units: ``97.5 MiB (102,228,128 B)``."""
    if n < 1024:
        return f"{n:,.0f} B"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n:,.0f} B)"
    raise AssertionError("unreachable")  # pragma: no cover


def fmt_gap(gap: float) -> str:
    """A relative gap as a percentage that is never shown as 0 unless it is 0."""
    pct = gap * 100
    if pct == 0:
        return "0%"
    if pct < 0.001:
        return f"{pct:.1e}%"
    return f"{pct:.3f}%"


def _fmt_beta(beta: float) -> str:
    if beta <= 0:
        return "0 s/B"
    return f"{beta:.4g} s/B ({1.0 / beta / 1e9:.3g} GB/s)"


def short_spec(spec: str, limit: int = 100) -> str:
    """A policy spec cut to ``limit`` characters, saying how much was left out."""
    if len(spec) <= limit:
        return spec
    return f"{spec[:limit]}... ({len(spec):,} characters; the full spec is in the files)"


def split_policy_specs(values: Sequence[str] | None) -> list[str] | None:
    """Split ``-p`` values given as comma lists into specs.

    ``-p ddp,mgwfbp`` is two specs; a comma followed by ``key=value`` continues the knobs of
    the spec before it (``-p ddp:bucket_cap_mb=50,first_bucket_mb=1,mgwfbp`` is two specs).
    Commas inside brackets never split.
    """
    if values is None:
        return None
    out: list[str] = []
    for value in values:
        specs: list[str] = []
        for part in _split_top(value):
            name = part.split("=", 1)[0]
            if specs and "=" in part and ":" not in name:
                specs[-1] += "," + part
            else:
                specs.append(part)
        out.extend(s.strip() for s in specs if s.strip())
    return out


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def compare_table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    """The table of ``schedopt compare``, fastest first."""
    best = min(r["iteration_time_s"] for r in rows)
    table = Table(title=title, caption=(
        "scaling eff.: throughput / (GPUs x the same policy's throughput on one GPU); "
        "exposed: communication not hidden behind compute, per iteration"))
    cols: tuple[str, ...] = ("policy", "ms/iter", "vs best", "samples/s", "scaling eff.",
                             "exposed ms", "buckets")
    memory = any("peak_memory_bytes" in r for r in rows)  # sharded plans: their peak
    cols += ("peak MiB",) if memory else ()
    for col in cols:
        if col == "policy":
            table.add_column(col, overflow="fold", min_width=10)
        else:
            table.add_column(col, justify="right", no_wrap=True)
    for r in sorted(rows, key=lambda r: r["iteration_time_s"]):
        table.add_row(
            r["label"],
            f"{r['iteration_time_s'] * 1e3:.3f}",
            f"{r['iteration_time_s'] / best:.3f}x",
            f"{r['throughput_samples_s']:,.1f}",
            f"{r['scaling_efficiency'] * 100:.1f}%",
            f"{r['breakdown']['exposed_comm_s'] * 1e3:.3f}",
            str(len(r["plan"]["buckets"])),
            *([f"{r['peak_memory_bytes'] / 2**20:,.1f}" if "peak_memory_bytes" in r else "-"]
              if memory else []),
        )
    return table


def compare_hint(rows: Sequence[dict[str, Any]], trace: str, cluster: str,
                 nodes: int | None) -> str:
    """What to do after ``compare``: the ties, and the commands that search further."""
    best = min(r["iteration_time_s"] for r in rows)
    ties = [r["label"] for r in rows if r["iteration_time_s"] <= best * (1 + TIE)]
    where = f"{trace} {cluster}" + (f" --nodes {nodes}" if nodes is not None else "")
    lead = (f"{len(ties)} policies are within {TIE:.1%} of the best ({', '.join(ties)}). "
            if len(ties) > 1 else f"{ties[0]} is the fastest. ")
    return (lead + f"\nNext: `schedopt optimize {where}` finds the best plan and proves how good "
            f"it is; `schedopt tune {where}` finds the best setting of each framework's knob.")


def _info_value(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key == "beta_s_per_byte":
        return _fmt_beta(float(value))
    if key == "gradient_bytes":
        return fmt_bytes(float(value))
    if key.endswith("_Bps") and isinstance(value, int | float):
        return f"{float(value) / 1e9:,.4g} GB/s"
    if key.endswith("_s") and isinstance(value, int | float):
        return fmt_time(float(value))
    if key == "stages":
        if not value:
            return "none (one rank)"
        return "\n".join(
            f"{s['name']} on {' + '.join(s['resources'])}: {fmt_time(s['alpha_s'])} + "
            f"{_fmt_beta(s['beta_s_per_byte'])} x bytes" for s in value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


_INFO_LABELS = {"alpha_s": "alpha (per bucket)", "beta_s_per_byte": "beta (per byte)",
                "forward_s": "forward (sum)", "backward_s": "backward (sum)",
                "stages": "stages (per bucket)",
                "launch_overhead_s": "launch (host, per call)",
                "hook_overhead_s": "hook (host, per tensor)",
                "bucket_compute_s": "compute stream (per bucket)",
                "memory_bandwidth_Bps": "memory bandwidth"}


def info_table(data: dict[str, Any]) -> Table:
    """``schedopt info`` as a two-column table with units."""
    table = Table(title=f"{data['kind']} {data['name']}", show_header=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        if key in ("kind", "name"):
            continue
        label = _INFO_LABELS.get(key, key.removesuffix("_s").replace("_", " "))
        table.add_row(label, _info_value(key, value))
    return table


def list_table(rows: Sequence[dict[str, Any]], long: bool) -> Table:
    """``schedopt list``: name, kind and size; with ``long``, each instance's whole source."""
    table = Table(title="shipped instances", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("size", no_wrap=not long)
    if long:
        table.add_column("source", overflow="fold")
    for r in rows:
        kind = "family" if r["kind"] == "cluster-family" else r["kind"]
        size = r["size"].replace(" (family; fits for [])", "").replace("(family; ", "(")
        table.add_row(r["name"], kind, size, *([r["source"]] if long else []))
    return table


def tune_table(results: Sequence[dict[str, Any]], title: str,
               optimum: dict[str, Any] | None) -> Table:
    """``schedopt tune``: per framework, its defaults, its best knob setting and the optimum."""
    table = Table(title=title)
    for col in ("framework", "default ms", "best ms", "gain", "optimum ms", "left"):
        table.add_column(col, justify="left" if col == "framework" else "right", no_wrap=True)
    for r in results:
        opt = r["optimum_time_s"]
        left = "" if opt is None else f"{(r['best_time_s'] / opt - 1) * 100:.2f}%"
        if opt is not None and not r["in_class"]:
            left += " *"
        table.add_row(
            r["framework"], f"{r['default_time_s'] * 1e3:.3f}", f"{r['best_time_s'] * 1e3:.3f}",
            f"{(1 - r['best_time_s'] / r['default_time_s']) * 100:.2f}%",
            "" if opt is None else f"{opt * 1e3:.3f}", left)
    if optimum is not None:
        table.caption = (
            f"optimum: `schedopt optimize` with its default options ({optimum['status']}, "
            f"method {optimum['method']}, gap {fmt_gap(optimum['gap'])}); gain: best vs "
            "default; left: best vs optimum, what the knob leaves on the table (*: the best "
            "setting lies outside the optimizer's class and may beat it)")
    return table


def tune_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """One line per framework: the knob, its default and the best setting found."""
    out = []
    for r in results:
        default = "unset" if r["default"] is None else f"{r['default']:,.6g} {r['unit']}"
        flat = ""
        lo_hi = r.get("tied_range")
        if lo_hi is not None and lo_hi[0] != lo_hi[1]:
            flat = (f" (flat within 0.1% from {lo_hi[0]:,.6g} to {lo_hi[1]:,.6g} {r['unit']}; "
                    "the default's side is recommended)")
        out.append(f"{r['framework']}: {r['knob']} (default {default}); best "
                   f"{short_spec(r['best_spec'])}{flat}")
    return out


class SolveProgress:
    """Progress of a solve on stderr: elapsed time, best plan, bound and gap.

    A callable for :func:`schedopt.optimize.solve`'s ``progress`` hook and a context manager.
    Nothing is shown for solves shorter than ``after_s`` seconds, nor when ``enabled`` is false
    (``--json``, or stderr not a terminal); the line is removed when the solve ends.

    Parameters
    ----------
    enabled
        Whether to show anything.
    after_s
        Seconds of solving before the line appears.
    """

    def __init__(self, enabled: bool, after_s: float = 2.0) -> None:
        self.enabled = enabled
        self.after_s = after_s
        self._live: Live | None = None

    def __call__(self, elapsed_s: float, best_s: float | None, bound_s: float | None) -> None:
        if not self.enabled or elapsed_s < self.after_s:
            return
        line = self.line(elapsed_s, best_s, bound_s)
        if self._live is None:
            self._live = Live(line, console=Console(stderr=True), transient=True,
                              auto_refresh=False)
            self._live.start()
        self._live.update(line, refresh=True)

    @staticmethod
    def line(elapsed_s: float, best_s: float | None, bound_s: float | None) -> Text:
        """The progress line: ``solving 12.3 s  best 185.642 ms  bound 185.600 ms  gap 0.02%``."""
        parts = [f"solving {elapsed_s:.1f} s"]
        if best_s is not None:
            parts.append(f"best {best_s * 1e3:.3f} ms")
        if bound_s is not None:
            parts.append(f"bound {bound_s * 1e3:.3f} ms")
        if best_s and bound_s is not None:
            parts.append(f"gap {fmt_gap(max(0.0, 1.0 - bound_s / best_s))}")
        return Text("  ".join(parts))

    def __enter__(self) -> SolveProgress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
