"""A sharded plan applied with real FSDP2 on CPU (gloo, 2 processes): the parameter groups FSDP
builds are the plan's units, and training matches unsharded training.

Each case runs tests/fsdp_worker.py as two processes (file rendezvous, OMP_NUM_THREADS=1, a
timeout); a process that hangs or dies fails the test with one line. Losses are compared with a
relative tolerance of 1e-5 (float32; sharded and unsharded runs sum gradients in another order).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from schedopt.model.plan import Plan, Sharding

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "fsdp_worker.py"
WORLD = 2
TIMEOUT_S = 180
REL_TOL = 1e-5

pytestmark = pytest.mark.torch

#: layer names of fsdp_worker.Tiny (leaf modules owning parameters, forward order)
LAYERS = ["inp", *[f"blocks.{b}.fc{i}" for b in range(4) for i in (1, 2)], "head"]


def _plan(units: list[list[str]], **kw: object) -> Plan:
    plan_kw = {k: kw.pop(k) for k in ("accumulate", "comm_dtype") if k in kw}
    tensors = [[f"{name}.{p}" for name in unit for p in ("weight", "bias")] for unit in units]
    return Plan.model_validate({"policy": "hand", "buckets": tensors[::-1],
                                "sharding": Sharding.model_validate({"units": units, **kw}),
                                **plan_kw})


CASES = {
    # units cutting blocks, whole blocks, a lone head; prefetch 2 ahead both ways
    "full-mixed-units": _plan([["inp", "blocks.0.fc1"], ["blocks.0.fc2", "blocks.1.fc1",
                                                         "blocks.1.fc2"],
                               LAYERS[5:9], ["head"]],
                              mode="full", forward_prefetch=2, backward_prefetch=2,
                              comm_dtype="float32"),
    # one unit per block, parameters kept gathered, two micro-batches per step
    "grad-op-accumulate": _plan([["inp"], *[[f"blocks.{b}.fc1", f"blocks.{b}.fc2"]
                                            for b in range(4)], ["head"]],
                                mode="grad-op", accumulate=2),
}


def _run(tmp_path: Path, plan: Plan) -> dict:
    plan_file, out_file = tmp_path / "plan.json", tmp_path / "out.json"
    plan_file.write_text(plan.model_dump_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(
        [sys.executable, str(WORKER), str(r), str(WORLD), str(tmp_path / "rendezvous"),
         str(plan_file), str(out_file)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(WORLD)]
    errors = []
    for r, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"rank {r} hung for {TIMEOUT_S} s (killed)")
        if proc.returncode != 0:
            last = (err.strip().splitlines() or ["no output"])[-1]
            errors.append(f"rank {r} exited {proc.returncode}: {last}")
    if errors:
        pytest.fail("; ".join(errors))
    return json.loads(out_file.read_text())


@pytest.mark.parametrize("case", list(CASES))
def test_fsdp_groups_are_the_units_and_training_matches(tmp_path: Path, case: str) -> None:
    plan = CASES[case]
    out = _run(tmp_path, plan)
    assert plan.sharding is not None
    units = [sorted(f"{n}.{p}" for n in unit for p in ("weight", "bias"))
             for unit in plan.sharding.units]
    assert [sorted(g) for g in out["groups"]] == units
    assert out["snippet_groups"] == out["groups"]
    want = "torch.float32" if plan.comm_dtype == "float32" else "None"
    assert out["reduce_dtypes"] == [want]
    # step 0: the same initial weights; step 1: after one optimizer step
    for got, ref in zip(out["losses"], out["reference"], strict=True):
        assert got == pytest.approx(ref, rel=REL_TOL)
    assert out["losses"][1] < out["losses"][0]  # the step did train


def test_applying_without_a_process_group_is_one_error() -> None:
    import torch

    from schedopt.emit.fsdp_torch import apply_sharded_plan, train_step
    from schedopt.errors import SchedoptError
    from tests.fsdp_worker import Tiny, tiny_trace

    plan = CASES["grad-op-accumulate"]
    with pytest.raises(SchedoptError, match="process_group"):
        apply_sharded_plan(Tiny(), tiny_trace(), plan)
    opt = torch.optim.SGD(Tiny().parameters(), lr=0.1)
    with pytest.raises(SchedoptError, match="accumulates 2 micro-batches"):
        train_step(Tiny(), [None], lambda m, b: None, opt, plan)
