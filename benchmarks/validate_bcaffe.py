"""Accuracy of the communication model against the measured B-Caffe GoogleNet logs.

Run: ``python benchmarks/validate_bcaffe.py [LOGDIR]`` (default: the B-Caffe ``logdata`` folder
of ``../shared/reference/mgwfbp-traces`` next to the repository). Prints a table (instance,
model, figure) in three parts:

1. every layer-wise all-reduce (column 4 of the logs) against the alpha-beta models;
2. every merged all-reduce group (column 5) against the same models, and the time merging saved;
3. the communication left after the backward under wait-free backpropagation, replayed with the
   measured times, against the simulator's prediction (the logs hold no iteration time).

The figures are discussed in docs/validation.md; tests/test_validation.py pins them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bcaffe_study import validate_bcaffe

DEFAULT_LOGDIR = (
    Path(__file__).resolve().parents[1].parent
    / "shared" / "reference" / "mgwfbp-traces" / "B-Caffe" / "logdata"
)

SECTION_LABEL = {"layer-wise": "col 4", "merged": "col 5"}


def main(argv: list[str]) -> int:
    logdir = Path(argv[1]) if len(argv) > 1 else DEFAULT_LOGDIR
    if not logdir.is_dir():
        print(f"B-Caffe logs not found: {logdir}", file=sys.stderr)
        return 2
    report = validate_bcaffe(logdir)
    rows: list[tuple[str, str, str]] = []
    for section in ("layer-wise", "merged"):
        for c in report.comparisons:
            if c.section == section:
                rows.append((f"{c.instance} {SECTION_LABEL[section]}, {c.subset}", c.model,
                             c.stats.describe()))
        for s in report.scalars:
            if s.section == section:
                figure = f"{s.quantity} {s.value_s * 1e3:.1f} ms"
                if s.model != "measured":
                    figure += f" ({100 * s.error:+.1f}% vs measured)"
                rows.append((f"{s.instance} {SECTION_LABEL[section]}", s.model, figure))
    for inst, section, carrier, n_groups, cuts in report.groupings:
        rows.append((f"{inst} {SECTION_LABEL[section]}", f"carrier={carrier}",
                     f"{n_groups} messages; group boundaries inside a layer: {cuts}"))
    for inst, subset, alpha, beta in report.fits:
        nodes = int(inst.split("(")[1].rstrip("n)"))
        busbw = 2 * (nodes - 1) / nodes / beta / 1e9 if beta > 0 else float("inf")
        rows.append((f"{inst} col 4, {subset}", "fit",
                     f"alpha {alpha * 1e6:.0f} us, beta {beta * 1e12:.0f} us/MB"
                     f" (ring bus bandwidth {busbw:.2f} GB/s)"))
    for s in report.scalars:
        if s.section == "exposed":
            figure = f"{s.quantity} {s.value_s * 1e3:.2f} ms"
            if s.model != "measured":
                figure += f" ({100 * s.error:+.1f}% vs replay)"
            rows.append((s.instance, s.model, figure))
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    print(f"{'instance':<{width[0]}}  {'model':<{width[1]}}  figure")
    for r in rows:
        print(f"{r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}")
    print()
    print("models:")
    for key, text in report.models.items():
        print(f"  {key:<9} {text}")
    print("errors: APE = |predicted - measured| / measured; total = signed error of the sums;")
    print("        measured in exposed rows = the WFBP schedule replayed with the measured times")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
