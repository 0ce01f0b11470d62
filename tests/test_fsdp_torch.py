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
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("torch")

from schedopt.model.plan import Plan, Sharding

from .processes import finish

if TYPE_CHECKING:
    from schedopt.model.cluster import Cluster
    from schedopt.model.trace import Trace

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


def _run(tmp_path: Path, plan: Plan, model: str = "tiny") -> dict:
    plan_file, out_file = tmp_path / "plan.json", tmp_path / "out.json"
    plan_file.write_text(plan.model_dump_json())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(
        [sys.executable, str(WORKER), str(r), str(WORLD), str(tmp_path / "rendezvous"),
         str(plan_file), str(out_file), model],
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
    # the collectives move the units' bytes with every first dimension padded to a multiple of
    # the world size (head: weight [3, 8] and bias [3] gathered as [4, 8] and [4])
    _check_padded_collectives(plan, out["comms"])


def _cluster() -> Cluster:
    from schedopt.model.cluster import Cluster

    return Cluster.model_validate({
        "name": "w", "nodes": WORLD, "gpus_per_node": 1,
        "intra_link": {"bandwidth_Bps": 1e10}, "inter_link": {"bandwidth_Bps": 1e9}})


def _check_padded_collectives(plan: Plan, comms: list) -> None:
    from schedopt.model.sharded import shard_units
    from tests.fsdp_worker import tiny_trace

    assert plan.sharding is not None
    cluster = _cluster()
    trace = tiny_trace()
    padded = plan.model_copy(update={"sharding": plan.sharding.model_copy(
        update={"padding": "dim0"})})
    units = shard_units(trace, cluster, padded)
    gathered = [int(b) // 4 for b in units.param_bytes]
    reduced = [int(b) // 4 for b in units.grad_bytes]
    plain = shard_units(trace, cluster, plan)
    assert "head" in plan.sharding.units[-1] and gathered[-1] == 36
    assert [int(b) // 4 for b in plain.param_bytes][-1] == 27
    for step in (0, 1):
        ag = [n for s, kind, n, *_ in comms if s == step and kind == "ag"]
        rs = [n for s, kind, n, *_ in comms if s == step and kind == "rs"]
        assert set(ag) == set(gathered) and ag[:len(gathered)] == gathered
        assert rs == reduced[::-1]  # one reduce-scatter per unit, in backward order


def _simulated_collectives(trace: Trace, plan: Plan) -> dict[str, list[int]]:
    """The collectives schedopt's simulator serves in one steady step of ``plan``, in the
    order it serves them, as elements (padded; float32): forward and backward all-gathers and
    reduce-scatters apart (FSDP2 issues each kind in this order; across kinds only the issue
    order on the CPU is seen here)."""
    from schedopt.model.sharded import shard_units
    from schedopt.simulate.simulator import simulate

    cluster = _cluster()
    units = shard_units(trace, cluster, plan)
    sched = simulate(trace, cluster, plan, record=True)
    tasks = sorted((start, key) for key, (start, _) in sched.tasks.items()
                   if key[0] in ("ag", "rs") and key[1] == 1)
    out: dict[str, list[int]] = {"fwd": [], "bwd": [], "rs": []}
    for _, key in tasks:
        size = units.param_bytes if key[0] == "ag" else units.grad_bytes
        out[key[4] if key[0] == "ag" else "rs"].append(int(size[key[2]]) // 4)
    return out


def test_root_group_and_frozen_parameters_match_fsdp2(tmp_path: Path) -> None:
    """Real FSDP2 on embedding + 3 blocks + norm + head (block 0's first bias, block 1 and the
    norm frozen): the ``fsdp`` baseline's groups are FSDP2's, and the order and padded sizes of
    the all-gathers (forward, backward) and reduce-scatters FSDP2 issues are the simulator's."""
    from schedopt.policies import make_plan
    from tests.fsdp_worker import rooted_trace

    trace = rooted_trace()
    plan = make_plan(trace, _cluster(), "fsdp")
    sh = plan.sharding
    assert sh is not None and sh.root == ["emb", "norm", "head"]
    assert sh.units == [[f"blocks.{b}.fc1", f"blocks.{b}.fc2"] for b in range(3)]
    out = _run(tmp_path, plan, "rooted")
    groups = [sorted(t + f) for t, f in zip(sh.unit_tensors(trace), sh.unit_frozen(trace),
                                            strict=True)]
    assert sorted(sorted(g) for g in out["groups"]) == sorted(groups)
    for got, ref in zip(out["losses"], out["reference"], strict=True):
        assert got == pytest.approx(ref, rel=REL_TOL)
    want = _simulated_collectives(trace, plan)
    # padded elements: root 80 (emb) + 16 (frozen norm) + 32 + 4 (head [3, 8] and [3] as 4
    # rows); a block 280; reduced: block 0 less its frozen bias, block 1 none, the root
    # without the norm, last
    assert want == {"fwd": [132, 280, 280, 280], "bwd": [280, 280, 280],
                    "rs": [280, 264, 116]}
    for step in (0, 1):
        got: dict[str, list[int]] = {"fwd": [], "bwd": [], "rs": []}
        seq = [(kind, n) for s, kind, n, *_ in out["comms"] if s == step]
        for s, kind, n, _, phase in out["comms"]:
            if s == step:
                got[phase if kind == "ag" else "rs"].append(n)
        assert got == want, step
        # the root group: the step's first collective and its last
        assert seq[0] == ("ag", 132) and seq[-1] == ("rs", 116)


#: FSDP2 and a group of two dtypes: refused when both are trainable, accepted when the
#: float64 one is frozen (only trainable parameters must share a dtype)
MIXED = """
import json, os, sys
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
rank, init = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=2)


class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4).double()

    def forward(self, x):
        return self.b(self.a(x).double())


out = {}
for frozen in (False, True):
    model = Two()
    model.b.requires_grad_(not frozen)
    fully_shard(model)
    try:
        model(torch.randn(2, 4)).sum().backward()
        out[str(frozen)] = "ok"
    except Exception as exc:
        out[str(frozen)] = type(exc).__name__ + ": " + str(exc)
dist.barrier()
if rank == 0:
    print(json.dumps(out), flush=True)
sys.stderr.flush()
os._exit(0)  # no teardown: gloo may abort there ("terminate called without an active ...")
"""


def test_fsdp2_refuses_a_group_of_two_dtypes(tmp_path: Path) -> None:
    from schedopt.emit.fsdp import fsdp_config
    from schedopt.errors import SchedoptError
    from schedopt.model.trace import Trace
    from schedopt.policies import make_plan
    from tests.test_sharded_policies import _cluster

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", MIXED, str(r), str(tmp_path / "rdv")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in range(WORLD)]
    outs = finish(procs, TIMEOUT_S)
    assert all(code == 0 for code, _, _ in outs), outs[0][2][-2000:]
    got = json.loads(outs[0][1].strip().splitlines()[-1])
    assert "uniform original parameter dtype" in got["False"]
    assert got["True"] == "ok"
    # the policy and the emitter refuse such a group
    trace = Trace.model_validate({"name": "m", "batch_size": 1, "layers": [
        {"name": n, "forward_s": 1e-3, "backward_s": 1e-3, "tensors": [
            {"name": f"{n}.weight", "bytes": 16 * k, "dtype": d}]}
        for n, k, d in (("emb", 4, "float32"), ("h.0.fc", 4, "float32"),
                        ("h.1.fc", 8, "float64"), ("head", 4, "float64"))]})
    with pytest.raises(SchedoptError, match=r"fsdp\.root\[0\].*several dtypes"):
        make_plan(trace, _cluster(), "fsdp")
    with pytest.raises(SchedoptError, match=r"fsdp\.units\[1\].*several dtypes"):
        make_plan(trace, _cluster(), "fsdp:wrap=child")  # units emb, h, head: h mixes
    bad = Plan.model_validate({"policy": "hand", "sharding": {"mode": "full", "units": [
        ["emb", "h.0.fc", "h.1.fc"], ["head"]]}, "buckets": [["head.weight"], [
        "emb.weight", "h.0.fc.weight", "h.1.fc.weight"]]})
    with pytest.raises(SchedoptError, match="several dtypes"):
        fsdp_config(trace, bad)


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
